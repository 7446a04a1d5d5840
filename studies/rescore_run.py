"""Issue 58: two-stage search measured on a finished run's own split (a photo run of protocol
`cifar10`, say: 1,000 queries against 54,000 database items).

The run's query and database parts are encoded once with their embeddings (`RunDirectory.encode(...,
embeddings=True)`, what `lbhash encode --embeddings` writes; kept in OUT so that a second call
only measures), the database indexed with them as `lbhash index build` keeps them, and each
query searched with its own embedding. The measures are studies/rescore_table.py's: mAP@1000,
mAP@all (that top 1000, then Hamming order), recall@10 against the exact float cosine top 10
of the same embeddings, float16 and int8 storage, for Hamming order and factors 1, 4, 16, 64.

Usage: python studies/rescore_run.py RUN_DIR OUT [--queries N]   (N: the first N queries; default all)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lbhash.index import CodeIndex
from rescore_table import measure, print_table


def encoded(run_dir: Path, part: str, out: Path) -> dict:
    """The part's codes, labels and embeddings, encoded once (float32 embeddings, as the file holds them)."""
    path = out / f"{part}.npz"
    if not path.exists():
        from lbhash.runs import RunDirectory

        RunDirectory(run_dir).encode(part=part, embeddings=True, out=path)
    with np.load(path) as f:
        return {k: f[k] for k in ("codes", "labels", "embeddings")}


def class_mode_share(db: dict) -> float:
    """The share of the database items whose code is their class's most common one."""
    most = [np.unique(db["codes"][db["labels"] == c], axis=0, return_counts=True)[1].max()
            for c in np.unique(db["labels"])]
    return float(sum(most) / len(db["codes"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--queries", type=int, default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    q, db = encoded(args.run_dir, "query", args.out), encoded(args.run_dir, "database", args.out)
    n = args.queries or len(q["codes"])
    q_codes, x_q, y_q = q["codes"][:n], q["embeddings"][:n], q["labels"][:n]
    x_db, y_db = db["embeddings"], db["labels"]
    bits = db["codes"].shape[1] * 8  # packed codes of whole bytes, as an index holds them

    def index_of(emb):
        index = CodeIndex(bits)
        index.add(db["codes"], embeddings=emb)
        return index

    scale = np.abs(x_db).max(axis=0) / 127
    scale[scale == 0] = 1
    index, index8 = index_of(x_db), index_of(np.round(x_db / scale).clip(-127, 127) * scale)
    unit = x_db / np.linalg.norm(x_db, axis=1, keepdims=True)
    qu = x_q / np.linalg.norm(x_q, axis=1, keepdims=True)
    float_top10 = np.argsort(-(qu @ unit.T), axis=1, kind="stable")[:, :10]
    print(f"{args.run_dir.name}: {n} queries, {len(y_db)} database items, {x_db.shape[1]}-dimensional embeddings; "
          f"share of the database items with their class's most common code: {class_mode_share(db):.3f}", flush=True)
    rows = measure(index, index8, q_codes, x_q, y_q, y_db, float_top10)
    print_table(rows, qu, unit, y_db, y_q, x_db.shape[1])


if __name__ == "__main__":
    main()
