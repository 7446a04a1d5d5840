"""How near photos in no index come to an index's photos by their perceptual hashes (issue 86): the least
distance of any of a photo's hashes to any of an indexed item's (lbhash.instance.perceptual_distances), as it is and
under every named edit, beside the threshold the index's mark lets pass. 20 training JPEGs of each class
from each START on (studies/copies_table.py's `absent_photos`), none of them indexed.

    python studies/perceptual_near.py ../shared/data/cifar10-jpg.tar.gz IDX OUT --absent 4800 4900

Prints, per edit, the least distance and how many photos lie within the threshold, then each photo within
it with the indexed item it comes near (a real duplicate of an indexed photo is a true mark: look at them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    from PIL import Image

    from copies_table import absent_photos
    from lbhash.data.edits import EDITS, edited
    from lbhash.data.perceptual import perceptual_codes
    from lbhash.index import CodeIndex
    from lbhash.instance import HASH_BITS, MARK_KEY, perceptual_distances

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball")
    parser.add_argument("index", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--absent", type=int, nargs="+", required=True)
    args = parser.parse_args()
    index = CodeIndex.load(args.index)
    record = index.metadata[MARK_KEY]
    bits, cut = record["perceptual_bits"], int(record["perceptual_threshold"] * HASH_BITS)
    ids = index.ids()
    items = index.get_instance_codes(ids)
    photos = []
    for start in args.absent:
        folder = args.out / f"absent-{start}"
        if not folder.exists():
            absent_photos(args.tarball, folder, start)
        photos += sorted(folder.glob("*.jpg"))
    images = [np.asarray(Image.open(p).convert("RGB")) for p in photos]
    near = []
    for name in ("none", *EDITS):
        hashes = perceptual_codes([im if name == "none" else edited(im, name) for im in images])
        codes = np.hstack([np.zeros((len(hashes), items.shape[1] - bits // 8), np.uint8), hashes])
        d = perceptual_distances(codes, items, bits)
        best = d.min(axis=1)
        near += [(name, photos[i].name, int(ids[d[i].argmin()]), int(best[i])) for i in np.nonzero(best <= cut)[0]]
        print(f"{name}: least {best.min()} bits; within {cut}: {int((best <= cut).sum())} of {len(best)}")
    for name, photo, item, dist in near:
        print(f"{name}: {photo} comes within {dist} bits of item {item}")


if __name__ == "__main__":
    main()
