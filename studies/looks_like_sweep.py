"""`looks_like` chosen for a run's default index (docs/results/copies.md, "Frozen Lite0 with the hidden
layer"): recall@1 / class P@10 of edited copies of its photos at fixed values, with float rows (the blend)
and by the two codes alone, and class P@10 of photos in no index as they are (ordinary queries: their first
10 hits of their own class, by the photos' class names), beside the Hamming order's.

    python studies/copies_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 0 --seed 0 --mark-only
    python studies/looks_like_sweep.py OUT --seed 0 --absent OUT/absent-4700   # (mark_rules.py makes that folder)

OUT/run and OUT/idx as copies_table.py leaves them; `--seed`: the copies' (copies_table.py's).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from copies_table import measured_cells

BLEND = (0.9, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)
CODES = (0.8, 0.85, 0.9, 0.95, 0.97)


def main() -> None:
    from PIL import Image

    from lbhash.index import CodeIndex, blended_search
    from lbhash.indexes import index_inputs
    from lbhash.indexes.instance_codes import index_transform
    from lbhash.serving.copies_evaluation import make_copies, measure
    from lbhash.serving.searcher import QueryEncoder, ranked_queries

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--absent", type=Path, default=None, help="a folder of CLASS-N.jpg photos in no index")
    args = parser.parse_args()
    index = CodeIndex.load(args.out / "idx")
    encoder = index_inputs.query_encoder(args.out / "run")
    copies = make_copies(index, encoder, args.items, args.seed)
    floor = measure(index, copies, "hamming")
    ordinary = None
    if args.absent is not None:
        names = json.loads((args.out / "run" / "data.json").read_text())["class_names"]
        files = sorted(args.absent.glob("*.jpg"))
        want = [names.index(p.name.rsplit("-", 1)[0]) for p in files]
        codes, emb = QueryEncoder(encoder, index.bits).embeddings([np.asarray(Image.open(p).convert("RGB")) for p in files])
        ids = index.ids()
        label_of = dict(zip(ids.tolist(), index.labels_of(ids)))

        def ordinary(found_ids) -> str:
            return f"{np.mean([[want[r] in label_of.get(int(h), ()) for h in row] for r, row in enumerate(found_ids)]):.3f}"

        transform = index_transform(index)
        queries = {floats: ranked_queries(codes, emb, floats, transform) for floats in (True, False)}
    print("| order | looks_like | " + " | ".join(floor) + " | worst | P@10 below Hamming's | photos in no index |\n"
          "|---|---|" + "---|" * (len(floor) + 3))
    print("| hamming | - | " + " | ".join(f"- / {m['class_p@10']:.3f}" for m in floor.values()) + " | | | "
          + (ordinary(index.search(codes, 10).ids) if ordinary else "") + " |")
    for order, values in (("blend", BLEND), ("codes", CODES)):
        for looks_like in values:
            plain = ordinary(blended_search(index, queries[order == "blend"], 10, None, looks_like=looks_like).ids) \
                if ordinary else ""
            print(f"| {order} | {looks_like} | {measured_cells(index, copies, floor, order, looks_like)} | {plain} |",
                  flush=True)


if __name__ == "__main__":
    main()
