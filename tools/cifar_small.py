"""Cut a small CIFAR-10 image array from the JPEG tarball: the first N training and M test
images of each class (members in name order), as an `image-array:` file with `is_test`.

    python tools/cifar_small.py ../shared/data/cifar10-jpg.tar.gz cifar-small.npz --train 100 --test 20

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


def photo_folder(tarball: str, out, classes=("airplane", "cat", "ship", "truck"), per_class: int = 40) -> int:
    """Write OUT/<class>/NNNN.jpg, the first `per_class` training JPEGs of each of `classes` as
    they are in the tarball (bytes copied, not re-encoded): a folder of one's own photos, a
    class-folder tree without a test part (the README's own-folder recipe). Returns the count."""
    from pathlib import Path

    out, left = Path(out), {c: per_class for c in classes}
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")
            if (member.isfile() and member.name.endswith(".jpg") and len(parts) >= 3 and parts[-3] == "train"
                    and left.get(parts[-2], 0) > 0):
                left[parts[-2]] -= 1
                (out / parts[-2]).mkdir(parents=True, exist_ok=True)
                (out / parts[-2] / parts[-1]).write_bytes(tar.extractfile(member).read())
                if not any(left.values()):
                    break
    if any(left.values()):
        raise SystemExit(f"{tarball}: too few training images of {', '.join(c for c, n in left.items() if n)}")
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
