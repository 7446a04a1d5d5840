"""The first hits that `lbhash evaluate-copies` counts in `false_marks_absent`, named: each copy of the evaluation's
sample searched in the index with the sample's originals taken out, and every marked first hit printed as the
copy's photo, the hit and their recorded sources (to look at: a real duplicate in the data is a true mark).

    python studies/false_marks.py IDX RUN --seed S [--order codes] [--edits jpeg,flip,...]

IDX, RUN, --seed and --items as given to `lbhash evaluate-copies IDX --run RUN`: the same copies.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def evaluation_sample(description: str, **more) -> tuple:
    """(args, index, copies, the index without the copies' originals) of `lbhash evaluate-copies IDX --run RUN
    --seed S --items N`'s sample, from the command line (`more`: further options, name -> argparse keywords)."""
    from lbhash.data.edits import EDITS
    from lbhash.index import CodeIndex
    from lbhash.indexes import index_inputs
    from lbhash.serving.copies_evaluation import make_copies, without_originals

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("index", type=Path)
    parser.add_argument("run", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--items", type=int, default=200)
    for name, keywords in more.items():
        parser.add_argument(name, **keywords)
    args = parser.parse_args()
    index = CodeIndex.load(args.index)
    edits = tuple(args.edits.split(",")) if "edits" in vars(args) else tuple(EDITS)
    copies = make_copies(index, index_inputs.query_encoder(args.run), args.items, args.seed, edits)
    return args, index, copies, without_originals(args.index, copies.ids)


def main() -> None:
    from lbhash.data.edits import EDITS
    from lbhash.indexes.origins import read_sources
    from lbhash.serving.copies_evaluation import ranked

    args, index, copies, absent = evaluation_sample(
        __doc__.splitlines()[0], **{"--order": {"default": "codes", "help": "the evaluation's order: codes or blend"},
                                    "--edits": {"default": ",".join(EDITS)}})
    sources = read_sources(index)
    for edit, queries in copies.queries.items():
        ids, marks = ranked(absent, queries, args.order, 1)[:2]
        for j in np.nonzero(marks[:, 0])[0]:
            photo, hit = int(copies.ids[j]), int(ids[j, 0])
            print(f"{edit}: the copy of {photo} ({sources.source(photo)}) marks {hit} ({sources.source(hit)})")


if __name__ == "__main__":
    main()
