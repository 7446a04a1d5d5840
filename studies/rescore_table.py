"""Issue 58: two-stage search measured on the MobileNet v1 feature file of CIFAR-10.

A CSQ 64-bit hash head (HashEncoder, in memory) is fitted on the train split's features; the
database is the train split (50,000), the queries `--queries` test items (an equal number per
class). The index keeps the features as embeddings (float16 unit rows, as `lbhash index build`
keeps a feature run's input features). For Hamming order and for factors 1, 4, 16, 64:

- mAP@1000: the ranking a search returns with k = 1000 (ids are database positions; Hamming
  order ties by id, as evaluation ties by index);
- mAP@all: that top 1000, then every other item in Hamming order;
- recall@10: the share of the exact float32 cosine top 10 (the same features, the whole database)
  found in the top 10 of a search with k = 10;
- int8 (a per-dimension scale, max |x| / 127) beside float16: recall@10 at each factor when the
  embeddings are first quantised to int8 (then stored and scored as the index does).

Usage: python studies/rescore_table.py FEATURES.npz [--queries 200] [--epochs 30] [--lbhash]
Prints a markdown table (docs/results/search-benchmarks.md, "Re-scoring by stored embeddings: the factor").
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _ranking import average_precision  # beside this script
from lbhash.index import CodeIndex, Queries, blended_search

FACTORS = (1, 4, 16, 64)


def hamming_order(index: CodeIndex, q_code: np.ndarray, n: int) -> np.ndarray:
    return index.search(q_code[None], n).ids[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("features")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lbhash", action="store_true", help="CSQ_D (the paper's objective) instead of CSQ")
    args = parser.parse_args()
    data = np.load(args.features)
    x = (data["feat"].astype(np.float32) - float(data["zero_point"])) * float(data["scale"])
    y, test = data["labels"].astype(np.int64), data["is_test"].astype(bool)
    x_db, y_db = x[~test], y[~test]
    rng = np.random.default_rng(0)
    per = args.queries // 10
    pick = np.concatenate([rng.choice(np.flatnonzero(test & (y == c)), per, replace=False) for c in range(10)])
    x_q, y_q = x[pick], y[pick]

    from lbhash import HashEncoder

    start = time.time()
    enc = HashEncoder(method="csq", bits=64, lbhash=args.lbhash, epochs=args.epochs, seed=0,
                      progress=False).fit(x_db, y_db)
    print(f"fitted CSQ{'_D' if args.lbhash else ''} 64 bits in {time.time() - start:.0f} s")
    db_codes, q_codes = enc.encode(x_db), enc.encode(x_q)

    def index_of(emb):
        index = CodeIndex(64)
        index.add(db_codes, embeddings=emb)
        return index

    index = index_of(x_db)
    scale = np.abs(x_db).max(axis=0) / 127
    scale[scale == 0] = 1
    index8 = index_of(np.round(x_db / scale).clip(-127, 127) * scale)

    unit = x_db / np.linalg.norm(x_db, axis=1, keepdims=True)
    qu = x_q / np.linalg.norm(x_q, axis=1, keepdims=True)
    float_top10 = np.argsort(-(qu @ unit.T), axis=1, kind="stable")[:, :10]

    rows = measure(index, index8, q_codes, x_q, y_q, y_db, float_top10)
    print_table(rows, qu, unit, y_db, y_q, x_db.shape[1])


def measure(index, index8, q_codes, x_q, y_q, y_db, float_top10) -> list[tuple]:
    """One row per order: Hamming only, then each factor."""
    n = len(y_db)
    rows = []
    for factor in (None, *FACTORS):
        ap1000, apall, rec, rec8 = [], [], [], []
        t0 = time.time()
        for q in range(len(x_q)):
            full = hamming_order(index, q_codes[q], n)
            if factor is None:
                top1000, top10, top10_8 = full[:1000], full[:10], full[:10]
            else:
                one = Queries(q_codes[q:q + 1], x_q[q:q + 1])
                top1000 = blended_search(index, one, 1000, factor=factor).ids[0]
                top10 = blended_search(index, one, 10, factor=factor).ids[0]
                top10_8 = blended_search(index8, one, 10, factor=factor).ids[0]
            rest = full[~np.isin(full, top1000)]
            ranking = np.concatenate([top1000, rest])
            ap1000.append(average_precision(y_db[top1000] == y_q[q]))
            apall.append(average_precision(y_db[ranking] == y_q[q]))
            rec.append(len(set(top10.tolist()) & set(float_top10[q].tolist())) / 10)
            rec8.append(len(set(top10_8.tolist()) & set(float_top10[q].tolist())) / 10)
        name = "Hamming only" if factor is None else str(factor)
        rows.append((name, np.mean(ap1000), np.mean(apall), np.mean(rec), np.mean(rec8), time.time() - t0))
        print(rows[-1], flush=True)
    return rows


def print_table(rows, qu, unit, y_db, y_q, d: int) -> None:
    # the ceiling: float cosine search over the same features
    cos_rank = np.argsort(-(qu @ unit.T), axis=1, kind="stable")
    fl1000 = np.mean([average_precision(y_db[cos_rank[q, :1000]] == y_q[q]) for q in range(len(y_q))])
    flall = np.mean([average_precision(y_db[cos_rank[q]] == y_q[q]) for q in range(len(y_q))])
    print()
    print("| factor | mAP@1000 | mAP@all | recall@10 vs float (float16) | recall@10 (int8) | s for all queries |")
    print("|---|---|---|---|---|---|")
    for name, a, b, r, r8, s in rows:
        print(f"| {name} | {a:.4f} | {b:.4f} | {r:.3f} | {r8:.3f} | {s:.0f} |")
    print(f"| float cosine (ceiling) | {fl1000:.4f} | {flall:.4f} | 1.000 | - | - |")
    print(f"\nbytes per item: code 8, float16 embedding {2 * d}, int8 embedding {d} (+ {4 * d} bytes of scales per index)")


if __name__ == "__main__":
    main()
