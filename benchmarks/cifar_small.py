"""Cut a small CIFAR-10 image array from the JPEG tarball: the first N training and M test
images of each class (members in name order), as an `image-array:` file with `is_test`.

    python benchmarks/cifar_small.py ../shared/data/cifar10-jpg.tar.gz cifar-small.npz --train 100 --test 20

Needs only numpy and Pillow; takes about a second.
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile

import numpy as np
from PIL import Image

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def cifar_small(tarball: str, train: int, test: int) -> dict[str, np.ndarray]:
    """images (n, 32, 32, 3) uint8, labels (n,) class ids, is_test (n,), class_names."""
    wanted = {"train": train, "test": test}
    picked: dict[tuple[str, int], list[str]] = {}
    with tarfile.open(tarball) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile() and m.name.endswith(".jpg")}
        for name in sorted(members):
            parts = name.split("/")
            part, cls = parts[-3], parts[-2]
            if part in wanted and cls in CLASSES:
                picked.setdefault((part, CLASSES.index(cls)), []).append(name)
        images, labels, is_test = [], [], []
        for part in ("train", "test"):
            for c in range(len(CLASSES)):
                names = picked.get((part, c), [])[:wanted[part]]
                if len(names) < wanted[part]:
                    raise SystemExit(f"{tarball}: only {len(names)} {part} images of class {CLASSES[c]}")
                for name in names:
                    with Image.open(io.BytesIO(tar.extractfile(members[name]).read())) as im:
                        images.append(np.asarray(im.convert("RGB")))
                labels += [c] * len(names)
                is_test += [part == "test"] * len(names)
    return {"images": np.stack(images), "labels": np.array(labels, np.uint8), "is_test": np.array(is_test),
            "class_names": np.array(CLASSES)}


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
