"""Speed of the evaluation engine at NUS-WIDE scale, against a straightforward reference.

Builds random codes (193,734 database x 2,100 queries, 64 bits, 21 multi-hot labels) and, in
the same run, times:
- lbhash's mean_average_precision at R = 5000 (best of 3, kernels already compiled);
- a per-query reference: float matmul distances + full stable argsort per query, AP@R
  (the DeepHash-benchmark convention, with a stable sort so that the values can agree);
- lbhash's precision_recall_curve, and the full evaluate_codes;
and checks that both mAP values agree. Peak memory is measured in a child process that only
loads the codes and evaluates them.

    python benchmarks/bench_evaluate.py [--queries N] [--db N]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
from _smoke import parse_args  # beside this script


def make_data(n_query: int, n_db: int, bits: int, n_labels: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = n_query + n_db
    codes = rng.choice(np.array([-1, 1], dtype=np.int8), size=(n, bits))
    # 1-3 labels per item, with skewed label frequencies as in NUS-WIDE
    freq = 1.0 / np.arange(1, n_labels + 1)
    freq /= freq.sum()
    labels = np.zeros((n, n_labels), dtype=np.uint8)
    count = rng.integers(1, 4, size=n)
    for k in range(1, 4):
        rows = np.flatnonzero(count >= k)
        labels[rows, rng.choice(n_labels, size=len(rows), p=freq)] = 1
    return codes[:n_query], codes[n_query:], labels[:n_query], labels[n_query:]


def reference_map(q, db, ql, dbl, topk: int) -> float:
    """Per query: float distances by matmul, full stable argsort, AP over the top R."""
    qf, dbf = q.astype(np.float32), db.astype(np.float32)
    qlf, dblf = ql.astype(np.float32), dbl.astype(np.float32)
    bits = q.shape[1]
    aps = []
    for i in range(len(q)):
        dist = 0.5 * (bits - dbf @ qf[i])
        order = np.argsort(dist, kind="stable")[:topk]
        rel = (dblf[order] @ qlf[i]) > 0
        hits = np.cumsum(rel)
        n_rel = hits[-1]
        if n_rel == 0:
            aps.append(0.0)
            continue
        ranks = np.flatnonzero(rel) + 1.0
        aps.append(float(np.sum(hits[rel] / ranks) / n_rel))
    return float(np.mean(aps))


def best_of(fn, repeat: int = 3):
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def child(path: str, topk: int) -> None:
    """Load the codes, compile on a tiny input, then report the memory of a full evaluation."""
    from lbhash.evaluate import mean_average_precision, precision_recall_curve

    data = np.load(path)
    q, db, ql, dbl = (data[k] for k in ("q", "db", "ql", "dbl"))
    bits = int(data["bits"])
    mean_average_precision(q[:2], db[:50], ql[:2], dbl[:50], topk=10, bits=bits)
    precision_recall_curve(q[:2], db[:50], ql[:2], dbl[:50], bits=bits)
    before = _rss_mb()
    mean_average_precision(q, db, ql, dbl, topk=topk, bits=bits)
    precision_recall_curve(q, db, ql, dbl, bits=bits)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{peak:.0f} {peak - before:.0f}")


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2100)
    parser.add_argument("--db", type=int, default=193734)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--labels", type=int, default=21)
    parser.add_argument("--topk", type=int, default=5000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parse_args(parser, queries=20, db=2000, topk=100)
    if args.child:
        child(args.child, args.topk)
        return

    from lbhash.codes import pack
    from lbhash.evaluate import evaluate_codes, mean_average_precision, precision_recall_curve
    from lbhash.cpus import num_threads

    q, db, ql, dbl = make_data(args.queries, args.db, args.bits, args.labels)
    qp, dbp = pack(q), pack(db)
    print(f"data: {len(q)} queries x {len(db)} database items, {args.bits} bits, "
          f"{args.labels} multi-hot labels ({dbl.sum(1).mean():.2f} per item), R = {args.topk}; "
          f"{num_threads()} threads")

    t0 = time.perf_counter()
    mean_average_precision(qp[:2], dbp[:50], ql[:2], dbl[:50], topk=10, bits=args.bits)
    print(f"first call (kernel compile or cache load): {time.perf_counter() - t0:.2f} s")

    t_ours, ours = best_of(lambda: mean_average_precision(qp, dbp, ql, dbl, topk=args.topk, bits=args.bits))
    t_avg, ours_avg = best_of(lambda: mean_average_precision(qp, dbp, ql, dbl, topk=args.topk,
                                                             tie_averaged=True, bits=args.bits))
    t_pr, _ = best_of(lambda: precision_recall_curve(qp, dbp, ql, dbl, bits=args.bits))
    t_all, _ = best_of(lambda: evaluate_codes(qp, dbp, ql, dbl, bits=args.bits, topk=args.topk), 1)
    t0 = time.perf_counter()
    ref = reference_map(q, db, ql, dbl, args.topk)
    t_ref = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "codes.npz")
        np.savez(path, q=qp, db=dbp, ql=ql, dbl=dbl, bits=args.bits)
        out = subprocess.run([sys.executable, __file__, "--child", path, "--topk", str(args.topk)],
                             check=True, capture_output=True, text=True).stdout.split()
    peak, growth = float(out[0]), float(out[1])

    agree = abs(ours - ref) <= 1e-9
    print(f"mAP@{args.topk}: lbhash {ours:.10f}  reference {ref:.10f}  "
          f"{'agree' if agree else 'DISAGREE'} (|diff| = {abs(ours - ref):.1e})")
    print(f"mAP@{args.topk} tie-averaged: {ours_avg:.10f}")
    print(f"time  lbhash mAP@R          {t_ours:8.3f} s")
    print(f"time  reference mAP@R       {t_ref:8.3f} s")
    print(f"speed-up                    {t_ref / t_ours:8.1f} x")
    print(f"time  lbhash tie-avg mAP@R  {t_avg:8.3f} s")
    print(f"time  lbhash P-R curve      {t_pr:8.3f} s")
    print(f"time  lbhash all metrics    {t_all:8.3f} s  (evaluate_codes: mAP both ways, P@K, P-R, P@H<=2, kNN, lower bound)")
    print(f"peak memory (mAP + P-R in a fresh process): {peak:.0f} MB RSS, "
          f"{growth:.0f} MB above the loaded inputs")
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
