"""Write a frozen pretrained backbone's pooled features of an image data set as a feature file
(`feat`, `labels`, `is_test`), for the experiments that take feature files only (the float kNN
reference and the closed-form baselines of `lbhash reproduce baselines`).

    python studies/pretrained_features.py cifar10:../shared/data/cifar10-jpg.tar.gz lite0-160.npz \\
        --backbone efficientnet_lite0 --image-size 160

The features come from lbhash's feature cache (lbhash.data.feature_cache), the same entry that
`lbhash train --freeze-backbone` on that data, backbone and size reads and writes: computed
once, here or by a training run, they are the same numbers.
"""

from __future__ import annotations

import argparse
import logging
import os

import numpy as np

from lbhash.data import InputOptions, load_data
from lbhash.data.base import ForwardPass
from lbhash.data.feature_cache import backbone_features
from lbhash.models import backbone_defaults, create_backbone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--backbone", default="efficientnet_lite0")
    parser.add_argument("--pretrained", default="imagenet")
    parser.add_argument("--image-size", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dataset = load_data(args.data)
    size, preset = backbone_defaults(args.backbone)
    backbone = create_backbone(args.backbone, pretrained=args.pretrained).eval()
    options = InputOptions(args.image_size or size, preset, 0, True)
    feat = backbone_features(dataset, backbone, None, options, ForwardPass(progress=True))
    labels = dataset.labels.argmax(1).astype(np.uint8) if not dataset.multi_label else dataset.labels
    is_test = dataset.is_test if dataset.is_test is not None else np.zeros(len(dataset), bool)
    tmp = f"{args.out}.tmp.npz"
    np.savez(tmp, feat=feat, labels=labels, is_test=is_test)
    os.replace(tmp, args.out)
    print(f"{args.out}: {feat.shape[0]} x {feat.shape[1]} features ({args.backbone}, {options.image_size} px)")


if __name__ == "__main__":
    main()
