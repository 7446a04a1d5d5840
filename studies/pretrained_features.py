"""Write a frozen pretrained backbone's pooled features of an image data set as a feature file
(`feat`, `labels`, `is_test`), for the experiments that take feature files only (the float kNN
reference and the closed-form baselines of `lbhash reproduce baselines`).

    python studies/pretrained_features.py cifar10:../shared/data/cifar10-jpg.tar.gz lite0-160.npz \\
        --backbone efficientnet_lite0 --image-size 160

The features come from lbhash's feature cache (lbhash.data.feature_cache), the same entry that
`lbhash train --freeze-backbone` on that data, backbone and size reads and writes: computed
once, here or by a training run, they are the same numbers (at the run's precision: `--precision bf16`
where the run's line says "bf16", as `backbone_precision: auto` picks on CPUs with AVX512-BF16 or AMX).

`--split RUN/split.npz` writes a run's training and validation items alone, the validation items as
the test part: with `lbhash train --data features:OUT --protocol given --validation 0 --normalize none`
a feature run then scores the run's validation split (docs/methods.md, "DSDH and DBDH as their papers
train them", its footnote 4); `--hidden none` gives it the frozen image head's one Linear layer.
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
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--split", help="a run's split.npz: its training and validation items only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dataset = load_data(args.data)
    size, preset = backbone_defaults(args.backbone)
    backbone = create_backbone(args.backbone, pretrained=args.pretrained).eval()
    options = InputOptions(args.image_size or size, preset, 0, True)
    idx, is_test = None, dataset.is_test if dataset.is_test is not None else np.zeros(len(dataset), bool)
    if args.split:
        split = np.load(args.split)
        if not len(split["validation"]):
            parser.error(f"{args.split}: the run held out no validation items")
        idx = np.concatenate([split["train"], split["validation"]])
        is_test = np.arange(len(idx)) >= len(split["train"])
    feat = backbone_features(dataset, backbone, idx, options, ForwardPass(progress=True),
                             bf16=args.precision == "bf16")
    labels = dataset.labels if idx is None else dataset.labels[idx]
    labels = labels.argmax(1).astype(np.uint8) if not dataset.multi_label else labels
    tmp = f"{args.out}.tmp.npz"
    np.savez(tmp, feat=feat, labels=labels, is_test=is_test)
    os.replace(tmp, args.out)
    print(f"{args.out}: {feat.shape[0]} x {feat.shape[1]} features ({args.backbone}, {options.image_size} px)")


if __name__ == "__main__":
    main()
