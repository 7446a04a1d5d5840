"""Issue 88: the share of pHash in a folder pair's similarity (lbhash.indexes.folder_copies.LOOK_WEIGHT),
swept on one folder of studies/folder_duplicates.py (500 CIFAR-10 JPEGs and 50 planted copies): the photos
embedded, hashed and coded once (`folder_photos`), then for each weight the folder's index and its groups
as `lbhash duplicates FOLDER` finds them (`index_groups`, the folder's own threshold), scored against the
planted pairs.

    python studies/folder_look_weight.py ../shared/data/cifar10-jpg.tar.gz OUT --start 3000 --seed 5 --weights 0,0.1,0.2,0.3,0.4,0.5

OUT/photos is made as folder_duplicates.py makes it (the same photos and copies for the same --start and
--seed). Prints a markdown row per weight.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from folder_duplicates import make_folder, scored  # noqa: E402


def main() -> None:
    from lbhash.indexes.duplicates import index_groups
    from lbhash.indexes.folder_copies import folder_photos, looks_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball")
    parser.add_argument("out", type=Path)
    parser.add_argument("--start", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--weights", default="0,0.1,0.2,0.3,0.4,0.5")
    args = parser.parse_args()
    planted = make_folder(args.tarball, args.out / "photos", args.start, args.seed)
    photos = folder_photos(args.out / "photos")
    sources = [str(Path(s).resolve()) for s in photos.sources]
    print("| w | planted pairs found | pairs reported | of them true | threshold | missed |\n|---|---|---|---|---|---|")
    for weight in (float(w) for w in args.weights.split(",")):
        index = looks_index(photos, args.out / "photos", weight)
        found = index_groups(index, str(args.out / "photos"), by_margin=True)
        where = {int(i): sources[row] for row, i in enumerate(index.ids())}
        reported = {frozenset((where[a], where[b])) for g in found.groups for a, b, _ in g["pairs"]}
        hit, count, _ = scored(reported, planted)
        missed = sorted(e for c, (o, e) in planted.items() if frozenset((c, o)) not in reported)
        print(f"| {weight} | {hit} of {len(planted)} | {count} | {hit / max(count, 1):.3f} | {found.threshold:.3f} | "
              f"{', '.join(missed)} |", flush=True)


if __name__ == "__main__":
    main()
