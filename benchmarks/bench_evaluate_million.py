"""Evaluation at a million items: mAP at R = all for 10,000 queries against 1,000,000 database
codes (64 bits, 100 classes), the stable tie rule, against a straightforward reference on a
subset of the queries measured in the same run.

The codes are clustered like learned ones (each class has a center; items flip a few of its
bits), so distances tie as they do in practice. Peak memory is that of a child process that
only builds the codes and evaluates them.

    python benchmarks/bench_evaluate_million.py [--queries 10000] [--db 1000000] [--check 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

import numpy as np
from _smoke import parse_args  # beside this script


def make_data(n_query: int, n_db: int, bits: int = 64, classes: int = 100, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = n_query + n_db
    centers = rng.integers(0, 2, size=(classes, bits), dtype=np.uint8)
    labels = rng.integers(0, classes, size=n)
    flips = rng.random((n, bits)) < 0.12
    bits01 = centers[labels] ^ flips
    packed = np.packbits(bits01, axis=1, bitorder="little")
    return packed[:n_query], packed[n_query:], labels[:n_query], labels[n_query:]


def reference_ap_all(q, db, ql, dbl) -> np.ndarray:
    """Per query: popcount distances, a full stable argsort, AP over the whole database."""
    words_db = db.view("<u8")[:, 0]
    aps = []
    for i in range(len(q)):
        dist = np.bitwise_count(words_db ^ q[i].view("<u8")[0])
        rel = dbl[np.argsort(dist, kind="stable")] == ql[i]
        hits = np.cumsum(rel)
        ranks = np.flatnonzero(rel) + 1.0
        aps.append(float(np.sum(hits[rel] / ranks) / hits[-1]) if hits[-1] else 0.0)
    return np.array(aps)


def popcount_pass(q: np.ndarray, db: np.ndarray) -> float:
    """The limit: every (query, item) distance computed and summed, nothing else, over the same
    query ranges and threads as the evaluation. Returns the seconds it took."""
    from numba import njit

    from lbhash.evaluate._inputs import for_query_ranges
    from lbhash.ranking import popcount64

    @njit(nogil=True)
    def sums(q_words, db_words, out):
        for i in range(q_words.shape[0]):
            a = q_words[i]
            total = 0
            for j in range(db_words.shape[0]):
                total += popcount64(a ^ db_words[j])
            out[i] = total

    q_words, db_words = q.view("<u8")[:, 0].copy(), db.view("<u8")[:, 0].copy()
    out = np.empty(len(q_words), np.int64)
    sums(q_words[:1], db_words[:10], out[:1])  # compile
    start = time.perf_counter()
    for_query_ranges(len(q_words), lambda a, b: sums(q_words[a:b], db_words, out[a:b]))
    seconds = time.perf_counter() - start
    assert out.min() >= 0  # the sums are read, so the pass cannot be skipped
    return seconds


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def child(n_query: int, n_db: int) -> None:
    """Build and evaluate only, then report the peak resident memory."""
    from lbhash.evaluate import mean_average_precision

    q, db, ql, dbl = make_data(n_query, n_db)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mean_average_precision(q, db, ql, dbl, bits=64)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{peak / 1024:.0f} {(peak - loaded) / 1024:.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--db", type=int, default=1_000_000)
    p.add_argument("--check", type=int, default=30, help="queries checked against the reference")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(p, queries=20, db=5000, check=3)
    if args.child:
        child(args.queries, args.db)
        return
    from lbhash.evaluate import average_precision, mean_average_precision
    from lbhash.cpus import num_threads

    q, db, ql, dbl = make_data(args.queries, args.db)
    print(f"load average at start: {load_average()}")
    print(f"data: {args.queries} queries x {args.db} database codes, 64 bits, 100 classes, R = all; "
          f"{num_threads()} threads")
    start = time.perf_counter()
    mean_average_precision(q[:8], db, ql[:8], dbl, bits=64)  # compiles or loads the kernels
    print(f"first call (kernels): {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    value = mean_average_precision(q, db, ql, dbl, bits=64)
    seconds = time.perf_counter() - start
    print(f"mAP@all (ties by index) {value:.10f} in {seconds:.1f} s "
          f"({1e3 * seconds / args.queries:.2f} ms per query, {args.queries * args.db / seconds / 1e9:.2f} G pairs/s)")
    limit = popcount_pass(q, db)
    pairs = args.queries * args.db
    print(f"popcount-only pass over the same pairs (the limit): {limit:.1f} s ({pairs / limit / 1e9:.2f} G pairs/s); "
          f"mAP@all takes {seconds / limit:.2f}x it")
    start = time.perf_counter()
    topk = mean_average_precision(q, db, ql, dbl, bits=64, topk=5000)
    top_seconds = time.perf_counter() - start
    print(f"mAP@5000 {topk:.10f} in {top_seconds:.1f} s: R = all costs {seconds / top_seconds:.2f}x R = 5000")
    start = time.perf_counter()
    ref = reference_ap_all(q[:args.check], db, ql[:args.check], dbl)
    ref_seconds = time.perf_counter() - start
    ours = average_precision(q[:args.check], db, ql[:args.check], dbl, bits=64)
    diff = float(np.abs(ours - ref).max())
    print(f"reference on {args.check} queries: {ref_seconds:.1f} s ({1e3 * ref_seconds / args.check:.0f} ms per "
          f"query); max |AP difference| {diff:.1e} ({'exactly equal' if diff == 0 else 'equal to rounding'})")
    out = subprocess.run([sys.executable, __file__, "--child", "--queries", str(args.queries), "--db",
                          str(args.db)], capture_output=True, text=True, check=True).stdout.split()
    print(f"peak memory of a process that builds and evaluates: {out[0]} MB RSS ({out[1]} MB above the codes)")
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
