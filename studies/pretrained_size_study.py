"""Which input size for the frozen EfficientNet-Lite0 on CIFAR-10, chosen on training images only.

    python studies/pretrained_size_study.py ../shared/data/cifar10-jpg.tar.gz --sizes 128,160,224

From the training split of the tarball: the first 100 images of each class train, the next 50
of each class are the queries (a validation split: no test image is read). For each size it
extracts the pooled features (images/s), trains CSQ at 64 bits for 30 epochs on them (seeds
0 and 1, protocol given) and prints the validation mAP@all. Takes 3-6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lbhash.data import InputOptions, load_data
from lbhash.data.feature_cache import backbone_features
from lbhash.models import create_backbone
from lbhash.runs import RunDirectory
from lbhash.train import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from cifar_small import cifar_small  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball")
    parser.add_argument("--sizes", default="128,160,224")
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args()
    logging.getLogger("lbhash").setLevel(logging.WARNING)
    arrays = cifar_small(args.tarball, 150, 0)  # training images only
    rank = np.concatenate([np.arange(150)] * 10)  # position of each image inside its class
    arrays["is_test"] = rank >= 100
    backbone = create_backbone("efficientnet_lite0", pretrained="imagenet").eval()
    with tempfile.TemporaryDirectory() as folder:
        images = Path(folder) / "train-split.npz"
        np.savez(images, **arrays)
        dataset = load_data(f"image-array:{images}")
        for size in map(int, args.sizes.split(",")):
            start = time.perf_counter()
            feat = backbone_features(dataset, backbone, None, InputOptions(size, "imagenet", 0, True))
            rate = len(feat) / (time.perf_counter() - start)
            features = Path(folder) / f"f{size}.npz"
            np.savez(features, feat=feat, labels=arrays["labels"], is_test=arrays["is_test"])
            maps = []
            for seed in map(int, args.seeds.split(",")):
                cfg = TrainConfig(data=f"features:{features}", protocol="given", method="csq", bits=64, epochs=30, validation=0.0,
                                  seed=seed, progress=False)
                maps.append(RunDirectory(Path(folder) / f"run-{size}-{seed}").train(cfg)["map"])
            print(f"{size:3d} px: validation mAP@all {100 * np.mean(maps):.1f} "
                  f"({', '.join(f'{100 * m:.1f}' for m in maps)}), extraction {rate:.1f} images/s", flush=True)


if __name__ == "__main__":
    main()
