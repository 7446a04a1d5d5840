"""Cut a small CIFAR-10 image array from the JPEG tarball: the first N training and M test
images of each class (members in name order), as an `image-array:` file with `is_test`; the tarball
is read once, as a stream.

    python tools/cifar_small.py ../shared/data/cifar10-jpg.tar.gz cifar-small.npz --train 100 --test 20

Needs only numpy and Pillow; about 4 s (one pass over the 60,000 members).
"""

from __future__ import annotations

import argparse
import heapq
import io
import os
import tarfile

import numpy as np
from PIL import Image

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def first_jpegs(tarball: str, quotas: dict[tuple[str, str], int]) -> dict[tuple[str, str], list[tuple[str, bytes]]]:
    """The first quotas[(part, class)] JPEGs of each (part, class) in member-name order, as (name, bytes),
    from one pass over the tarball (a gzip stream read once: no member list, no seek back)."""
    kept: dict[tuple[str, str], list[_Kept]] = {key: [] for key in quotas}  # heaps: the largest kept name on top
    with tarfile.open(tarball, "r|*") as tar:
        for member in tar:
            parts = member.name.split("/")
            if not (member.isfile() and member.name.endswith(".jpg") and len(parts) >= 3):
                continue
            key = (parts[-3], parts[-2])
            heap = kept.get(key)
            if heap is None or (len(heap) == quotas[key] and member.name > heap[0].name):
                continue
            item = _Kept(member.name, tar.extractfile(member).read())
            if len(heap) < quotas[key]:
                heapq.heappush(heap, item)
            else:
                heapq.heapreplace(heap, item)
    return {key: sorted((item.name, item.data) for item in heap) for key, heap in kept.items()}


class _Kept:
    """A member kept by `first_jpegs`, ordered by name in reverse, so that heapq's smallest is the
    largest name."""
    __slots__ = ("name", "data")

    def __init__(self, name: str, data: bytes):
        self.name, self.data = name, data

    def __lt__(self, other: "_Kept") -> bool:
        return self.name > other.name


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
