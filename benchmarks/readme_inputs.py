"""Write the input files the README's commands name, from the shared data: the same files
`tests/test_readme.py` runs the README on.

- `features.npz`: the first 250 training and the first 50 test rows of each class of the CIFAR-10
  MobileNet features (3,000 rows; uint8 `feat` with its `scale` and `zero_point`, `labels`,
  `is_test`);
- `queries.npy`: the raw uint8 rows of the first test item of classes 0-4 in it;
- `scene.npz`: a copy of the scene multi-label set;
- `cifar-small.npz`: the first 100 training and 20 test JPEGs of each class of the CIFAR-10
  tarball as an image array (benchmarks/cifar_small.py);
- `photos/`: a folder of one's own photos, a class-folder tree without a test part: the first
  40 training JPEGs of airplane, cat, ship and truck (`photos/cat/0000.jpg`, ...).

Usage: python benchmarks/readme_inputs.py SHARED_DATA_DIR [OUT_DIR]   (OUT_DIR: the current one)
About 2 s on 2 cores.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cifar_small import cifar_small, photo_folder  # noqa: E402  (beside this script)

FILES = ("cifar10-mobilenetv1-features.npz", "scene-multilabel.npz", "cifar10-jpg.tar.gz")


def make_inputs(folder: Path, shared: Path) -> None:
    """Write the four files and the photos folder into `folder` from the files of `shared` (FILES)."""
    missing = [name for name in FILES if not (shared / name).is_file()]
    if missing:
        print(f"error: {shared}: no {', '.join(missing)} (the shared data folder, see docs/data.md)", file=sys.stderr)
        raise SystemExit(2)
    folder.mkdir(parents=True, exist_ok=True)
    with np.load(shared / FILES[0]) as f:
        labels, is_test = f["labels"], f["is_test"]
        rows = np.concatenate([np.flatnonzero((labels == c) & (is_test == part))[:count]
                               for part, count in ((False, 250), (True, 50)) for c in range(10)])
        feat = f["feat"][rows]
        np.savez(folder / "features.npz", feat=feat, labels=labels[rows], is_test=is_test[rows],
                 scale=f["scale"], zero_point=f["zero_point"])
    kept_test, kept_labels = is_test[rows], labels[rows]
    first_test = [np.flatnonzero(kept_test & (kept_labels == c))[0] for c in range(5)]
    np.save(folder / "queries.npy", feat[first_test])
    shutil.copyfile(shared / FILES[1], folder / "scene.npz")
    np.savez(folder / "cifar-small.npz", **cifar_small(str(shared / FILES[2]), 100, 20))
    photo_folder(str(shared / FILES[2]), folder / "photos")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[-2])
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(".")
    make_inputs(out, Path(sys.argv[1]))
    print(f"wrote features.npz, queries.npy, scene.npz, cifar-small.npz and photos/ into {out}")
