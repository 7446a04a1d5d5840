"""The same-picture mark's measures and calibration rules on a validation run (docs/results/copies.md, "The mark
by margin"): the index's 200 calibration photos under every edit (their originals: marks that are right) and
200 photos in no index, as they are and under every edit (their best other item: marks that are false, but
for a real duplicate, named with `--duplicate`), scored as lbhash.indexes.instance_learning scores them (the
centred cosine; its margin over the 2nd best of the 40 candidates nearest by instance code).

    python studies/copies_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 0 --seed 0 --mark-only
    python studies/mark_rules.py ../shared/data/cifar10-jpg.tar.gz OUT --duplicate truck-4704.jpg

`--absent A` (4700): 20 training JPEGs of each class from A on (no study here uses them); `--trim`: the
queries as they are, less their one-colour margins (lbhash.data.edits.trimmed), and the larger of the two
scores of each, the index as it is. Prints, for each measure, query and rule (the share of calibration
copies' other items let pass, the margin beyond), the threshold, the share of calibration copies' originals
it passes and the false marks on the photos in no index.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from copies_table import absent_photos


def scores(embed, transform, images, rows, inst, floats):
    """(cosine to the original, best other; margin to the original, best other) of each photo of `images`."""
    from lbhash.indexes import instance_learning as il

    emb = embed(images)
    found = il._own_and_nearest(transform.apply(emb), il.cosine_rows(transform, emb), rows, transform, inst, floats)
    return found[2], found[3], found[4], found[5]


def main() -> None:
    from PIL import Image

    from lbhash.data.edits import EDITS, edited, trimmed
    from lbhash.index import CodeIndex
    from lbhash.indexes import index_inputs
    from lbhash.indexes.instance_codes import index_transform

    parser = argparse.ArgumentParser()
    parser.add_argument("tarball")
    parser.add_argument("out", type=Path)
    parser.add_argument("--absent", type=int, default=4700)
    parser.add_argument("--duplicate", action="append", default=[], help="a photo in no index whose duplicate is")
    parser.add_argument("--trim", action="store_true")
    args = parser.parse_args()
    run, idx, folder = args.out / "run", args.out / "idx", args.out / f"absent-{args.absent}"
    if not folder.exists():
        absent_photos(args.tarball, folder, args.absent)
    index = CodeIndex.load(idx)
    transform, ids = index_transform(index, str(idx)), index.ids()
    inst, floats = index.get_instance_codes(ids), np.asarray(index.get_embeddings(ids), np.float64)
    embed = index_inputs.photo_embedder(run)
    photos = index_inputs.run_photos(run, index_inputs.run_data(run))
    held = np.asarray(index.metadata["same_picture"]["held"])
    rows = np.searchsorted(ids, held)
    names = sorted(folder.glob("*.jpg"))
    true = np.array([p.name in args.duplicate for p in names])
    absent = [np.asarray(Image.open(p).convert("RGB")) for p in names]
    nowhere = np.full(len(absent), len(ids))  # (no original in the index)
    own, other = {}, {}  # per query form, per edit: scores()
    for form, change in (("as is", lambda i: i), ("trimmed", trimmed))[:2 if args.trim else 1]:
        own[form] = {e: scores(embed, transform, [change(edited(photos.image(int(i)), e)) for i in held], rows, inst,
                               floats) for e in EDITS}
        other[form] = {e: scores(embed, transform, [change(a if e == "none" else edited(a, e)) for a in absent],
                                 nowhere, inst, floats) for e in ("none", *EDITS)}
    if args.trim:  # (a mark by the larger score of the query as it is and trimmed)
        own["larger"], other["larger"] = ({e: tuple(np.maximum(a, b) for a, b in zip(d["as is"][e], d["trimmed"][e]))
                                           for e in d["as is"]} for d in (own, other))
    print(f"| measure | query | let pass | beyond | threshold | originals marked | {' | '.join(EDITS)} | false marks, "
          f"{len(absent)} photos in no index x {len(other['as is'])} |\n|---|---|---|---|---|---|"
          + "---|" * len(EDITS) + "---|")
    for measure, at in (("cosine", 0), ("margin", 2)):
        for form in own:
            nearest = np.sort(np.concatenate([v[at + 1] for v in own[form].values()]))[::-1]
            false = np.stack([v[at + 1] for v in other[form].values()])[:, ~true]
            for rate, allowed in (("0.1%", int(0.001 * len(nearest))), ("0", 0)):
                for beyond in (0.0, 0.02, 0.05, 0.08):
                    cut = nearest[allowed] + beyond
                    per = [float(np.mean(v[at] >= cut)) for v in own[form].values()]
                    print(f"| {measure} | {form} | {rate} | {beyond} | {cut:.3f} | {np.mean(per):.3f} | "
                          + " | ".join(f"{p:.3f}" for p in per) + f" | {int((false >= cut).sum())} |")


if __name__ == "__main__":
    main()
