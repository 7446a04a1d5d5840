"""What a query costs the flat scan alone and in a batch that shares its pass over the codes.

    python benchmarks/bench_scan_batch.py                    # 1,000,000 random codes of 32, 64, 128 bits
    python benchmarks/bench_scan_batch.py --n 100000 --bits 64 --batch 8

A flat index's exact top-k (`FlatEngine.ranked_knn`, on the calling thread only, as the
service's batch threads run it): --queries searched one at a time, then the same queries in
calls of --batch (up to 32 share each pass: `lbhash.ranking.nearest_rows_chunk`). Prints per
width the best of --repeats rounds of CPU time per query for each, and their ratio, measured in
the same run. The answers of the two are checked equal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lbhash.index._engines import FlatEngine, Rows, search_on_this_thread  # noqa: E402
from _smoke import parse_args  # beside this script


def cpu_per_query(engine: FlatEngine, rows: Rows, queries: np.ndarray, k: int, batch: int, repeats: int):
    """(the best round's CPU seconds per query, the answers' distances and ids) searching `batch`
    queries per call."""
    best, answers = float("inf"), None
    for _ in range(repeats):
        start, found = time.process_time(), []
        for a in range(0, len(queries), batch):
            found.append(engine.ranked_knn(rows, queries[a:a + batch], k, None))
        best = min(best, (time.process_time() - start) / len(queries))
        answers = tuple(np.concatenate(part) for part in zip(*found))
    return best, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="codes in the index")
    parser.add_argument("--bits", default="32,64,128", help="comma-separated code widths (multiples of 8)")
    parser.add_argument("--queries", type=int, default=320)
    parser.add_argument("--batch", type=int, default=32, help="queries per call in the batched rounds")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, n=5000, bits="64", queries=16, batch=8, repeats=1)
    search_on_this_thread()
    rng = np.random.default_rng(args.seed)
    print(f"{args.n:,} random codes, top-{args.k}, {args.queries} queries, one thread, best of {args.repeats} rounds")
    for bits in (int(b) for b in args.bits.split(",")):
        codes = rng.integers(0, 256, (args.n, bits // 8), dtype=np.uint8)
        queries = rng.integers(0, 256, (args.queries, bits // 8), dtype=np.uint8)
        engine, rows = FlatEngine(bits, {}), Rows(np.arange(args.n, dtype=np.int64), codes)
        engine.ranked_knn(rows, queries[:2], args.k, None)  # load the compiled scan
        alone, answers_alone = cpu_per_query(engine, rows, queries, args.k, 1, args.repeats)
        shared, answers_shared = cpu_per_query(engine, rows, queries, args.k, args.batch, args.repeats)
        if not all(np.array_equal(a, b) for a, b in zip(answers_alone, answers_shared)):
            sys.exit(f"{bits} bits: the batched answers differ from the one-at-a-time answers")
        print(f"{bits}-bit: one at a time {alone * 1e3:.3f} ms CPU per query, in calls of {args.batch} "
              f"{shared * 1e3:.3f} ms; alone/batched = {alone / shared:.2f}")


if __name__ == "__main__":
    main()
