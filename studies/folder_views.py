"""Exploration for issue 88 (not adopted): `lbhash duplicates FOLDER` with each photo's embedding averaged with
views of it, the same for every photo of the folder (each is both an item and a query): its grayscale view at
weight 0.5 or 1 (`gray`, `gray1`), the blurred and grayscale views (`blurgray`), the grayscale photo alone
(`grayonly`), or none (`none`: the command as it is); the learned code's copies per photo given or left at
lbhash.indexes.folder_copies.COPIES. Scored as studies/folder_duplicates.py scores the command.

    python studies/folder_views.py ../shared/data/cifar10-jpg.tar.gz OUT 3000 5 gray [COPIES]   # validation
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from folder_duplicates import make_folder, scored  # noqa: E402
from lbhash.data.edits import grayscale  # noqa: E402
from lbhash.data.views import blurred  # noqa: E402
from lbhash.indexes import folder_copies, index_inputs  # noqa: E402
from lbhash.indexes.duplicates import find_duplicates  # noqa: E402
from lbhash.instance import unit_vectors  # noqa: E402

VARIANTS = {"none": (), "grayonly": (), "gray": ((grayscale, 0.5),), "gray1": ((grayscale, 1.0),),
            "blurgray": ((blurred, 0.5), (grayscale, 0.5))}


def main() -> None:
    tarball, out, start, seed, variant = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if len(sys.argv) > 6:
        folder_copies.COPIES = int(sys.argv[6])
    planted = make_folder(tarball, out / "photos", start, seed)
    views, only_gray, plain = VARIANTS[variant], variant == "grayonly", index_inputs.backbone_embedder

    def with_views(name, size):  # (the folder's photos reach it already trimmed of one-colour margins)
        backbone = plain(name, size)

        def embed(images):
            images = [grayscale(np.asarray(i)) for i in images] if only_gray else images
            total = unit_vectors(np.asarray(backbone(images), np.float64))
            for view, weight in views:
                total += weight * unit_vectors(np.asarray(backbone([view(np.asarray(i)) for i in images]), np.float64))
            return (total / (1 + sum(w for _, w in views))).astype(np.float32)
        return embed

    index_inputs.backbone_embedder = with_views
    started = time.perf_counter()
    found = find_duplicates(out / "photos").to_dict()
    seconds = time.perf_counter() - started
    by_id = {i: str(Path(s).resolve()) for g in found["groups"] for i, s in zip(g["items"], g["sources"])}
    reported = {frozenset((by_id[a], by_id[b])) for g in found["groups"] for a, b, _ in g["pairs"]}
    hit, count, false = scored(reported, planted)
    missed = sorted(e for c, (o, e) in planted.items() if frozenset((c, o)) not in reported)
    print(f"{variant}, {folder_copies.COPIES} copies: {hit} of {len(planted)} found, {count} reported, "
          f"{hit / max(count, 1):.3f} true, threshold {found['threshold']:.3f}, {seconds:.0f} s; missed {missed}; "
          f"not planted {[tuple(Path(x).name for x in p) for p in false]}")


if __name__ == "__main__":
    main()
