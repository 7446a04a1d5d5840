"""Cut a small CIFAR-10 image array from the JPEG tarball: the first N training and M test
images of each class (members in name order), as an `image-array:` file with `is_test`; the tarball
is read once, by lbhash's reader.

    python tools/cifar_small.py ../shared/data/cifar10-jpg.tar.gz cifar-small.npz --train 100 --test 20

Needs lbhash (its tarball reader), numpy and Pillow; about 2 s.
"""

from __future__ import annotations

import argparse
import io
import os

import numpy as np
from PIL import Image

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def first_jpegs(tarball: str, quotas: dict[tuple[str, str], int]) -> dict[tuple[str, str], list[tuple[str, bytes]]]:
    """The first quotas[(part, class)] JPEGs of each (part, class) in member-name order, as (name, bytes),
    from one pass of lbhash's tarball reader (lbhash.data.image_sources.open_tarball)."""
    from pathlib import Path

    from lbhash.data.image_sources import open_tarball

    def key(name: str) -> tuple[str, str] | None:
        parts = name.split("/")
        return (parts[-3], parts[-2]) if name.endswith(".jpg") and len(parts) >= 3 else None

    source = open_tarball(Path(tarball), keep=lambda name: key(name) in quotas)
    found: dict[tuple[str, str], list[tuple[str, int]]] = {k: [] for k in quotas}
    for i, raw in enumerate(source.names):
        name = raw.decode("utf-8", "surrogateescape")
        found[key(name)].append((name, i))
    return {k: [(name, source.read(i)) for name, i in sorted(members)[:quotas[k]]] for k, members in found.items()}


def cifar_small(tarball: str, train: int, test: int, found=None) -> dict[str, np.ndarray]:
    """images (n, 32, 32, 3) uint8, labels (n,) class ids, is_test (n,), class_names; `found`: what
    `first_jpegs` returned for at least these counts (else it is read here)."""
    wanted = {"train": train, "test": test}
    if found is None:
        found = first_jpegs(tarball, {(part, c): n for part, n in wanted.items() for c in CLASSES})
    images, labels, is_test = [], [], []
    for part in ("train", "test"):
        for c, cls in enumerate(CLASSES):
            picked = found.get((part, cls), [])[:wanted[part]]
            if len(picked) < wanted[part]:
                raise SystemExit(f"{tarball}: only {len(picked)} {part} images of class {cls}")
            for _, data in picked:
                with Image.open(io.BytesIO(data)) as im:
                    images.append(np.asarray(im.convert("RGB")))
            labels += [c] * len(picked)
            is_test += [part == "test"] * len(picked)
    return {"images": np.stack(images), "labels": np.array(labels, np.uint8), "is_test": np.array(is_test),
            "class_names": np.array(CLASSES)}


PHOTO_CLASSES = ("airplane", "cat", "ship", "truck")


def photo_folder(tarball: str, out, classes=PHOTO_CLASSES, per_class: int = 40, found=None) -> int:
    """Write OUT/<class>/NNNN.jpg, the first `per_class` training JPEGs of each of `classes` (bytes
    copied, not re-encoded): a folder of one's own photos, a class-folder tree without a test part
    (the README's own-folder recipe). Returns the count. `found`: as `cifar_small` takes it."""
    from pathlib import Path

    if found is None:
        found = first_jpegs(tarball, {("train", c): per_class for c in classes})
    out = Path(out)
    for cls in classes:
        picked = found.get(("train", cls), [])[:per_class]
        if len(picked) < per_class:
            raise SystemExit(f"{tarball}: too few training images of {cls}")
        (out / cls).mkdir(parents=True, exist_ok=True)
        for name, data in picked:
            (out / cls / name.split("/")[-1]).write_bytes(data)
    return per_class * len(classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball")
    parser.add_argument("out")
    parser.add_argument("--train", type=int, default=100, help="training images per class")
    parser.add_argument("--test", type=int, default=20, help="test images per class")
    args = parser.parse_args()
    arrays = cifar_small(args.tarball, args.train, args.test)
    tmp = f"{args.out}.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(arrays['images'])} images ({int(arrays['is_test'].sum())} test)")


if __name__ == "__main__":
    main()
