"""Issue 86: the second perceptual hash turned to face one way, and frames trimmed until nothing more comes off
(docs/results/copies.md, "A mirrored copy's hash, and frames trimmed twice"). On 200 photos of a folder (a
run's validation photos), the share of copies under each named edit whose two hashes (the least distance of
the pair: lbhash.instance.perceptual_distances' rule) come within 7 bits of their photo's, and how near the
nearest other photo of the folder comes to those 200, for: pHash and the trimmed pHash as before (`once`: one
trim), both turned (`both facing`), the second turned (`second facing`), and the second turned of the photo
trimmed again (`second facing, trimmed again`: lbhash.data.perceptual.perceptual_codes today).

    python studies/facing_hash.py FOLDER [--seed 0]

About a minute on 2 cores for a folder of 1,500 CIFAR-10 photos.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    from PIL import Image

    from lbhash.data.edits import EDITS, edited, trimmed
    from lbhash.data.perceptual import phash_bits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    paths = sorted(p for p in args.folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    images = [np.asarray(Image.open(p).convert("RGB")) for p in paths]
    sample = np.random.default_rng(args.seed).choice(len(images), 200, replace=False)
    variants = {  # (first hash facing, second hash facing, trimmed again)
        "once": (False, False, False), "both facing": (True, True, False),
        "second facing": (False, True, False), "second facing, trimmed again": (False, True, True)}
    for name, (first, second, again) in variants.items():
        def hashes(img):
            return np.stack([phash_bits(img, first), phash_bits(trimmed(img, again=again), second)])

        own = np.stack([hashes(img) for img in images])
        near = np.minimum(*((own[sample, None, k] != own[None, :, k]).sum(-1) for k in (0, 1)))
        near[np.arange(len(sample)), sample] = 999
        cells = [f"nearest other {near.min()} bits"]
        for edit in EDITS:
            copies = np.stack([hashes(edited(images[i], edit)) for i in sample])
            d = np.minimum(*((copies[:, k] != own[sample, k]).sum(-1) for k in (0, 1)))
            cells.append(f"{edit} {np.mean(d <= 7):.3f}")
        print(f"{name}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
