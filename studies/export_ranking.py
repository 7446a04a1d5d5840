"""How far an image run's export (ONNX Runtime, float32) ranks from the run itself (docs/export.md, "The
ranking"): on the run's test items and five edits of every fifth one, the embeddings, the class and
instance bits and the blended top k (what `/search/image` ranks by) of the run's torch encoder as
trained, of the same weights in float32 (a run trained with a bf16 backbone), and of the export.

    python studies/export_ranking.py RUN IDX [IDX ...] [--k 10 100] [--data SPEC]

RUN holds an export (`lbhash export RUN`); each IDX is an index of RUN that keeps instance codes (one
with float rows, one built `--no-embeddings`, say). Prints one block per torch reference.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lbhash.codes import pack, to_signs
from lbhash.data import load_data
from lbhash.data.edits import edited
from lbhash.encoders.exported import ExportedEncoder
from lbhash.index.blend import Queries, blended_search
from lbhash.index.rescore import RESCORE_FACTOR
from lbhash.instance import LOOKS_LIKE
from lbhash.runs.encoder import RunEncoder
from lbhash.indexes.index_dir import open_index
from lbhash.indexes.instance_codes import index_transform

EDITS = ("jpeg", "flip", "crop", "colour", "resize")


def ranked(index, u, e, k):
    """The default ranking of queries with real outputs `u` and embeddings `e` (as Searcher.blended_search)."""
    t = index_transform(index)
    floats = index.embedding_dim is not None
    queries = Queries(pack(to_signs(u)), e if floats else None, t.apply(e), t.mean if floats else None)
    return blended_search(index, queries, k, None, RESCORE_FACTOR, LOOKS_LIKE)


def compare(name, u, e, u_exp, e_exp, indexes, ks):
    d = np.abs(e - e_exp)
    print(f"== torch {name} vs ONNX: max |embedding difference| {d.max():.2e} (values up to {np.abs(e).max():.2f}), "
          f"max |u difference| {np.abs(u - u_exp).max():.2e}")
    cr, ce = pack(to_signs(u)), pack(to_signs(u_exp))
    print(f"   class codes: {int((cr != ce).any(1).sum())} of {len(cr)} queries differ, {int(np.unpackbits(cr ^ ce).sum())} bits")
    for path, index in indexes.items():
        t = index_transform(index)
        ir, ie = t.apply(e), t.apply(e_exp)
        proj = np.abs((e / np.linalg.norm(e, axis=1, keepdims=True) - t.mean) @ t.projection)
        print(f"   [{path}] instance bits differing {int(np.unpackbits(ir ^ ie).sum())} of {ir.size * 8}; smallest "
              f"|projection| {proj.min():.1e}")
        for k in ks:
            a, b = ranked(index, u, e, k), ranked(index, u_exp, e_exp, k)
            same = (a.ids == b.ids).all(1)
            swaps = [abs(dict(zip(a.ids[q], a.scores[q]))[a.ids[q][p]] - dict(zip(a.ids[q], a.scores[q])).get(
                b.ids[q][p], np.inf)) for q in np.flatnonzero(~same) for p in np.flatnonzero(a.ids[q] != b.ids[q])]
            print(f"   [{path}] k={k}: identical ids and order {same.sum()}/{len(same)}, same sets "
                  f"{sum(set(x) == set(y) for x, y in zip(a.ids, b.ids))}, same first {(a.ids[:, 0] == b.ids[:, 0]).sum()}, "
                  f"same marks {(a.same == b.same).all(1).sum()}, max |score difference| "
                  f"{np.abs(a.scores - b.scores).max():.2e}, largest run-score gap of a traded place "
                  f"{max(swaps) if swaps else 0:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("indexes", nargs="+")
    parser.add_argument("--k", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--data", help="the run's data where its config's path does not reach it from here")
    args = parser.parse_args()
    run, exported = RunEncoder.load(args.run), ExportedEncoder.load(args.run)
    data = load_data(args.data or run.config_.dataset.data, labels_required=False)
    test = [data.image(int(i)) for i in np.flatnonzero(data.is_test)]
    queries = test + [edited(img, name) for name in EDITS for img in test[::5]]
    print(f"{len(queries)} queries: {len(test)} test items, {len(EDITS)} edits of {len(test[::5])} of them")
    start = time.perf_counter()
    u_exp, e_exp = exported.outputs(queries)
    print(f"export: {time.perf_counter() - start:.1f} s")
    indexes = {path: open_index(path, "faiss", None) for path in args.indexes}
    references = [("as trained" + (" (bf16 backbone)" if run.model_.bf16_backbone else ""), None)]
    if run.model_.bf16_backbone:
        references.append(("float32 (the same weights)", False))
    for name, bf16 in references:
        if bf16 is not None:
            run.model_.bf16_backbone = bf16
        start = time.perf_counter()
        u, e = run.outputs(queries)
        print(f"torch {name}: {time.perf_counter() - start:.1f} s")
        compare(name, u, e, u_exp, e_exp, indexes, args.k)


if __name__ == "__main__":
    main()
