"""Issue 88's user, again: a folder of CIFAR-10 JPEGs with edited copies of some, trained, indexed and
searched for its copies with `lbhash duplicates`, at the calibrated mark and at lower thresholds.

    python studies/duplicate_groups.py ../shared/data/cifar10-jpg.tar.gz OUT [--start 3000 --per-class 50 --copies 10]

OUT/photos: --per-class training JPEGs of each class from --start, and --copies edited copies of a seeded
sample of them (crop, colour, jpeg30 in turn, PNG, beside their original); the README's own-folder recipe
(frozen efficientnet_lite0, 160 px, CSQ 64 bits, all-train, 30 epochs) into OUT/run, `lbhash index build`
into OUT/idx, then `lbhash duplicates OUT/idx` at each threshold. A group is right when it holds exactly
a copy and its original. About 4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from duplicates_table import lbhash, training_jpegs  # noqa: E402
from lbhash.data.edits import edited  # noqa: E402

KINDS = ("crop", "colour", "jpeg30")


def make_folder(tarball: str, out: Path, start: int, per_class: int, copies: int, seed: int) -> dict[str, str]:
    """The photos and copies; {copy's path: its original's path}."""
    files = []
    with tarfile.open(tarball) as tar:
        for cls, found in training_jpegs(tar).items():
            (out / cls).mkdir(parents=True, exist_ok=True)
            for m in found[start:start + per_class]:
                path = out / cls / Path(m.name).name
                path.write_bytes(tar.extractfile(m).read())
                files.append(path)
    pairs = {}
    for k, i in enumerate(np.random.default_rng(seed).choice(len(files), copies, replace=False)):
        original, kind = files[i], KINDS[k % len(KINDS)]
        copy = original.with_name(f"{original.stem}-copy-{kind}.png")
        Image.fromarray(edited(np.asarray(Image.open(original).convert("RGB")), kind)).save(copy)
        pairs[str(copy.resolve())] = str(original.resolve())
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tarball")
    parser.add_argument("out", type=Path)
    parser.add_argument("--start", type=int, default=3000)
    parser.add_argument("--per-class", type=int, default=50)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--thresholds", default="mark,0.5,0.4")
    args = parser.parse_args()
    pairs = make_folder(args.tarball, args.out / "photos", args.start, args.per_class, args.copies, args.seed)
    lbhash("train", "--data", f"images:{args.out / 'photos'}", "--protocol", "all-train", "--backbone", "efficientnet_lite0",
           "--pretrained", "imagenet", "--freeze-backbone", "--image-size", "160", "--method", "csq", "--bits", "64",
           "--epochs", "30", "--no-progress", "--out", str(args.out / "run"))
    lbhash("index", "build", str(args.out / "run"), "--out", str(args.out / "idx"))
    print("| threshold | groups | right (a copy and its original) | copies found | other groups |")
    print("|---|---|---|---|---|")
    for threshold in args.thresholds.split(","):
        extra = [] if threshold == "mark" else ["--threshold", threshold]
        found = json.loads(lbhash("duplicates", str(args.out / "idx"), "--json", "--no-progress", *extra, capture=True))
        right = [g for g in found["groups"] if len(g["items"]) == 2 and
                 any(pairs.get(a) == b or pairs.get(b) == a for a, b in [g["sources"]])]
        copies = sum(any(s in pairs for s in g["sources"]) and any(pairs.get(s) in g["sources"] for s in g["sources"])
                     for g in found["groups"])
        shown = f"{found['threshold']:.3f} (the mark)" if threshold == "mark" else threshold
        print(f"| {shown} | {len(found['groups'])} | {len(right)} | {copies} of {len(pairs)} | "
              f"{len(found['groups']) - len(right)} |", flush=True)


if __name__ == "__main__":
    main()
