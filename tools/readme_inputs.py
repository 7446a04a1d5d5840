"""Write the input files the README's commands name, from the shared data: the same files
`tests/test_readme.py` runs the README on.

- `features.npz`: the first 250 training and the first 50 test rows of each class of the CIFAR-10
  MobileNet features (3,000 rows; uint8 `feat` with its `scale` and `zero_point`, `labels`,
  `is_test`, and the class names as `label_names`);
- `queries.npy`: the raw uint8 rows of the first test item of classes 0-4 in it;
- `scene.npz`: a copy of the scene multi-label set;
- `cifar-small.npz`: the first 100 training and 20 test JPEGs of each class of the CIFAR-10
  tarball as an image array (tools/cifar_small.py);
- `photos/`: a folder of one's own photos, a class-folder tree without a test part: the first
  40 training JPEGs of airplane, cat, ship and truck (`photos/cat/0000.jpg`, ...).

Usage: python tools/readme_inputs.py OUT_DIR [--shared SHARED_DATA_DIR]

It runs from any directory and writes the four files and `photos/` into OUT_DIR only (made if
missing).
SHARED_DATA_DIR defaults to $LBHASH_SHARED_DATA, else to ../shared/data beside this checkout
(found from this script's place, not the current directory). About 3 s (one pass of lbhash's tarball reader).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cifar_small import CLASSES, cifar_small, first_jpegs, photo_folder  # noqa: E402  (beside this script)

FILES = ("cifar10-mobilenetv1-features.npz", "scene-multilabel.npz", "cifar10-jpg.tar.gz")
WRITTEN = ("features.npz", "queries.npy", "scene.npz", "cifar-small.npz", "photos/")


def default_shared() -> Path:
    """$LBHASH_SHARED_DATA, else ../shared/data beside the checkout this script is in."""
    return Path(os.environ.get("LBHASH_SHARED_DATA", HERE.parent.parent / "shared" / "data"))


def make_inputs(folder: Path, shared: Path) -> None:
    """Write the four files and the photos folder (WRITTEN) into `folder` from the files of
    `shared` (FILES)."""
    missing = [name for name in FILES if not (shared / name).is_file()]
    if missing:
        print(f"error: {shared}: no {', '.join(missing)} (the shared data folder, see docs/data.md; "
              "--shared or $LBHASH_SHARED_DATA names it)", file=sys.stderr)
        raise SystemExit(2)
    folder.mkdir(parents=True, exist_ok=True)
    with np.load(shared / FILES[0]) as f:
        labels, is_test = f["labels"], f["is_test"]
        rows = np.concatenate([np.flatnonzero((labels == c) & (is_test == part))[:count]
                               for part, count in ((False, 250), (True, 50)) for c in range(10)])
        feat = f["feat"][rows]
        np.savez(folder / "features.npz", feat=feat, labels=labels[rows], is_test=is_test[rows],
                 scale=f["scale"], zero_point=f["zero_point"], label_names=np.array(CLASSES))
    kept_test, kept_labels = is_test[rows], labels[rows]
    first_test = [np.flatnonzero(kept_test & (kept_labels == c))[0] for c in range(5)]
    np.save(folder / "queries.npy", feat[first_test])
    shutil.copyfile(shared / FILES[1], folder / "scene.npz")
    tarball = str(shared / FILES[2])
    # one pass over the tarball: the photos' 40 of a class are among its first 100 training JPEGs
    found = first_jpegs(tarball, {(part, c): n for part, n in (("train", 100), ("test", 20)) for c in CLASSES})
    np.savez(folder / "cifar-small.npz", **cifar_small(tarball, 100, 20, found))
    photo_folder(tarball, folder / "photos", found=found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write the files into")
    parser.add_argument("--shared", type=Path, default=None,
                        help="the shared data folder [default: $LBHASH_SHARED_DATA, else ../shared/data beside "
                             "this checkout]")
    args = parser.parse_args(argv)
    make_inputs(args.out, args.shared if args.shared is not None else default_shared())
    print(f"wrote {', '.join(WRITTEN)} into {args.out}")


if __name__ == "__main__":
    main()
