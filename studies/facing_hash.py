"""Issue 86: the perceptual hashes turned to face one way, and compared any hash against any
(docs/results/copies.md, "A mirrored copy's hash"). On 200 photos of a folder (a run's validation photos),
the share of copies under each named edit whose hashes come within 5 / 7 bits of their photo's, and how near
the nearest other photo of the folder comes to those 200, for these pairs of hashes (pHash of the photo, pHash
of the photo trimmed: lbhash.data.edits.trimmed) compared hash by hash or any against any:

- `before`: neither turned, hash by hash;
- `second facing`: the trimmed one turned, hash by hash;
- `second facing, trimmed again`: the same, the photo trimmed until nothing more comes off (explored);
- `both facing`: both turned, hash by hash;
- `both facing, any against any` (explored);
- `second facing, any against any`: lbhash.data.perceptual.perceptual_codes and perceptual_distances today.

    python studies/facing_hash.py FOLDER [--seed 0]

About three minutes on 2 cores for a folder of 1,500 CIFAR-10 photos.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def trimmed_again(img: np.ndarray) -> np.ndarray:
    """The photo trimmed (lbhash.data.edits.trimmed) until nothing more comes off, each axis keeping what it had
    where a trim would leave less than MIN_CONTENT of the photo's side."""
    from lbhash.data.edits import MIN_CONTENT, _frame_rows

    h, w = img.shape[:2]
    top = left = 0
    bottom, right = h, w
    while True:
        x = img[top:bottom, left:right].astype(np.int16)
        cut_top, cut_bottom = _frame_rows(x), _frame_rows(x[::-1])
        cut_left, cut_right = _frame_rows(x.transpose(1, 0, 2)), _frame_rows(x.transpose(1, 0, 2)[::-1])
        if bottom - top - cut_top - cut_bottom < MIN_CONTENT * h:
            cut_top = cut_bottom = 0
        if right - left - cut_left - cut_right < MIN_CONTENT * w:
            cut_left = cut_right = 0
        if not cut_top + cut_bottom + cut_left + cut_right:
            return img[top:bottom, left:right]
        top, bottom, left, right = top + cut_top, bottom - cut_bottom, left + cut_left, right - cut_right


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
    variants = {  # (first hash facing, second hash facing, the trim, any against any)
        "before": (False, False, trimmed, False), "second facing": (False, True, trimmed, False),
        "second facing, trimmed again": (False, True, trimmed_again, False),
        "both facing": (True, True, trimmed, False), "both facing, any against any": (True, True, trimmed, True),
        "second facing, any against any": (False, True, trimmed, True)}
    for name, (first, second, trim, cross) in variants.items():
        def hashes(img):
            return np.stack([phash_bits(img, first), phash_bits(trim(img), second)])

        pairs = ((0, 0), (1, 1), (0, 1), (1, 0)) if cross else ((0, 0), (1, 1))

        def distances(a, b):  # (n, 2, 64) against (m, 2, 64): (n, m)
            return np.min([(a[:, None, i] != b[None, :, j]).sum(-1) for i, j in pairs], axis=0)

        own = np.stack([hashes(img) for img in images])
        near = distances(own[sample], own)
        near[np.arange(len(sample)), sample] = 999
        cells = [f"nearest other {near.min()} bits"]
        for edit in EDITS:
            copies = np.stack([hashes(edited(images[i], edit)) for i in sample])
            d = np.array([distances(copies[k:k + 1], own[i:i + 1])[0, 0] for k, i in enumerate(sample)])
            cells.append(f"{edit} {np.mean(d <= 5):.3f} / {np.mean(d <= 7):.3f}")
        print(f"{name}: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
