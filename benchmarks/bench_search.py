"""Search speed and quality of lbhash.index against raw FAISS and a numpy reference.

    python benchmarks/bench_search.py                      # 1,000,000 x 64-bit codes, 1,000 queries
    python benchmarks/bench_search.py --n 100000 --data clustered
    python benchmarks/bench_search.py --run RUN_DIR        # also: a trained run's codes, replicated

For each data set (uniform random codes; clustered codes like learned ones: 1,000 centers,
3-6 random flips each; optionally a run's database codes replicated with 1-3 flips), it
reports: exact `flat` top-k against raw FAISS IndexBinaryFlat on the same batch (timing
ratio) and against a numpy popcount reference (identical results required); ivf and
multihash queries per second and tie-aware recall@k; range search at radius 2 and 8;
single-query latency (one thread); save and load times; index size on disk. Timings are the
best of --repeat runs, measured in this process; the machine load is printed first and last.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lbhash.index import CodeIndex  # noqa: E402
from lbhash.index.storage import directory_bytes  # noqa: E402
from _smoke import parse_args  # beside this script


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} cores)"


def best_time(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def flip_bits(rng, codes: np.ndarray, low: int, high: int) -> np.ndarray:
    """Flip between low and high (inclusive) distinct random bits of every code."""
    bits = codes.shape[1] * 8
    out = codes.copy()
    for start in range(0, len(codes), 100_000):
        part = out[start:start + 100_000]
        m = len(part)
        order = np.argsort(rng.random((m, bits), dtype=np.float32), axis=1)[:, :high]
        count = rng.integers(low, high + 1, m)
        keep = np.arange(high)[None, :] < count[:, None]
        rows = np.repeat(np.arange(m), keep.sum(1))
        cols = order[keep]
        np.bitwise_xor.at(part, (rows, cols // 8), (1 << (cols % 8)).astype(np.uint8))
    return out


def datasets(args, rng):
    width = args.bits // 8
    if "random" in args.data:
        yield "random", rng.integers(0, 256, (args.n, width), np.uint8), rng.integers(0, 256, (args.nq, width), np.uint8)
    if "clustered" in args.data:
        centers = rng.integers(0, 256, (1000, width), np.uint8)
        db = flip_bits(rng, centers[rng.integers(0, 1000, args.n)], 3, 6)
        queries = flip_bits(rng, centers[rng.integers(0, 1000, args.nq)], 3, 6)
        yield "clustered", db, queries
    if args.run:
        codes = np.load(Path(args.run) / "codes.npz")["db_codes"]
        if codes.shape[1] != width:
            sys.exit(f"--run has {codes.shape[1] * 8}-bit codes; pass --bits {codes.shape[1] * 8}")
        base = codes[rng.integers(0, len(codes), args.n)]
        yield "run", flip_bits(rng, base, 1, 3), flip_bits(rng, codes[rng.integers(0, len(codes), args.nq)], 1, 3)


def numpy_top_k(db: np.ndarray, queries: np.ndarray, k: int):
    """Reference: popcount of XOR on 64-bit words, then a stable sort by (distance, position)."""
    pad = (-db.shape[1]) % 8
    words = np.ascontiguousarray(np.pad(db, ((0, 0), (0, pad)))).view(np.uint64)
    qwords = np.ascontiguousarray(np.pad(queries, ((0, 0), (0, pad)))).view(np.uint64)
    dist = np.empty((len(queries), k), np.int32)
    ids = np.empty((len(queries), k), np.int64)
    for q in range(len(queries)):
        d = np.bitwise_count(words ^ qwords[q]).sum(axis=1, dtype=np.int32)
        order = np.argsort(d, kind="stable")[:k]
        dist[q], ids[q] = d[order], order
    return dist, ids


def tie_aware_recall(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    return float(((found[:, :k] <= exact[:, k - 1:k]) & (found[:, :k] >= 0)).sum() / (len(exact) * k))


def latency_ms(index, queries, count: int):
    times = []
    for q in queries[:count]:
        start = time.perf_counter()
        index.search(q[None], 10)
        times.append((time.perf_counter() - start) * 1000)
    return np.percentile(times, 50), np.percentile(times, 99)


def bench(name, db, queries, args, tmp: Path):
    k, n = args.k, len(db)
    ids = np.arange(n)
    print(f"\n== {name}: {n:,} x {args.bits}-bit codes, {len(queries):,} queries, top-{k}")
    raw = faiss.IndexBinaryFlat(args.bits)
    raw.add(db)
    flat = CodeIndex(args.bits)
    flat.add(db, ids=ids)
    raw_times, flat_times = [], []
    for _ in range(args.repeat):  # interleaved pairs, so that a changing load hits both alike
        t, (d_raw, i_raw) = best_time(lambda: raw.search(queries, k), 1)
        raw_times.append(t)
        t, (d_flat, i_flat) = best_time(lambda: flat.search(queries, k), 1)
        flat_times.append(t)
    t_raw, t_flat = min(raw_times), min(flat_times)
    paired = float(np.median(np.array(flat_times) / np.array(raw_times)))
    nref = min(args.ref_queries, len(queries))
    t_np, (d_np, i_np) = best_time(lambda: numpy_top_k(db, queries[:nref], k), 1)
    same_ref = np.array_equal(d_flat[:nref], d_np) and np.array_equal(i_flat[:nref], i_np)
    same_raw = np.array_equal(d_flat, d_raw)
    print(f"flat top-{k}: {t_flat * 1000 / len(queries):.3f} ms/query ({len(queries) / t_flat:,.0f} q/s); "
          f"raw FAISS IndexBinaryFlat {t_raw * 1000 / len(queries):.3f} ms/query; ratio of best times "
          f"{t_flat / t_raw:.3f}x, median ratio of {args.repeat} interleaved pairs {paired:.3f}x")
    print(f"  numpy reference ({nref} queries): {t_np * 1000 / nref:.1f} ms/query "
          f"({t_np / nref / (t_flat / len(queries)):.0f}x slower); identical to reference: {same_ref}; "
          f"distances identical to raw FAISS: {same_raw}, ids identical: {np.array_equal(i_flat, i_raw)}")
    if not same_ref:
        sys.exit("flat results differ from the numpy reference")
    exact_q = len(queries) / t_flat
    for kind, params in (("ivf", {"nlist": args.nlist, "nprobe": args.nprobe}),
                         ("multihash", {"nhash": args.bits // 16, "nflip": args.nflip})):
        start = time.perf_counter()
        index = CodeIndex(args.bits, kind, **params)
        index.add(db, ids=ids)
        build = time.perf_counter() - start
        t, (d, _) = best_time(lambda: index.search(queries, k), args.repeat)
        print(f"{kind} {params}: build {build:.1f} s; {t * 1000 / len(queries):.3f} ms/query "
              f"({len(queries) / t:,.0f} q/s, {len(queries) / t / exact_q:.1f}x flat); "
              f"tie-aware recall@{k} {tie_aware_recall(d, d_flat, k):.4f}")
        if kind == "ivf" and args.nprobe_sweep:
            for nprobe in args.nprobe_sweep:
                index.set_search_params(nprobe=nprobe)
                t, (d, _) = best_time(lambda: index.search(queries, k), args.repeat)
                print(f"  nprobe {nprobe}: {t * 1000 / len(queries):.3f} ms/query "
                      f"({len(queries) / t / exact_q:.1f}x flat), recall@{k} {tie_aware_recall(d, d_flat, k):.4f}")
            index.set_search_params(nprobe=args.nprobe)
        for radius in (2, 8):
            t, (lims, _, _) = best_time(lambda: index.range_search(queries, radius), args.repeat)
            t_exact, (lims_exact, _, _) = best_time(lambda: flat.range_search(queries, radius), args.repeat)
            print(f"  range radius {radius}: {kind} {t * 1000 / len(queries):.3f} ms/query, "
                  f"found {lims[-1] / max(1, lims_exact[-1]):.4f} of {lims_exact[-1]:,} results; "
                  f"flat {t_exact * 1000 / len(queries):.3f} ms/query")
        persist(kind, index, tmp)
    p50, p99 = latency_ms(flat, queries, args.latency_queries)
    faiss.omp_set_num_threads(os.cpu_count())
    t_all = [best_time(lambda q=q: raw.search(q[None], 10), 1)[0] * 1000 for q in queries[:args.latency_queries]]
    print(f"single query, flat, k=10: p50 {p50:.2f} ms, p99 {p99:.2f} ms with 1 thread (lbhash); "
          f"raw FAISS with {os.cpu_count()} threads p50 {np.percentile(t_all, 50):.2f} ms, "
          f"p99 {np.percentile(t_all, 99):.2f} ms")
    persist("flat", flat, tmp)


def persist(kind, index, tmp: Path):
    path = tmp / kind
    t_save, _ = best_time(lambda: index.save(path), 1)
    t_load, loaded = best_time(lambda: CodeIndex.load(path), 1)
    print(f"  {kind} save {t_save:.2f} s, load {t_load:.2f} s (checksums verified), "
          f"{directory_bytes(path) / 1e6:.1f} MB on disk ({loaded.ntotal:,} codes)")
    shutil.rmtree(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--nq", type=int, default=1000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--data", default="random,clustered")
    parser.add_argument("--run", help="a trained run directory: also its codes, replicated with 1-3 flips")
    parser.add_argument("--nlist", type=int, default=1024)
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--nprobe-sweep", type=lambda s: [int(x) for x in s.split(",")], default=[])
    parser.add_argument("--nflip", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ref-queries", type=int, default=100, help="queries checked against numpy")
    parser.add_argument("--latency-queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, n=5000, nq=20, k=10, nlist=16, nprobe=4, repeat=1, ref_queries=10, latency_queries=10)
    print(f"load average at start: {load_average()}; faiss {faiss.__version__}, "
          f"{faiss.omp_get_max_threads()} OpenMP threads")
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for name, db, queries in datasets(args, rng):
            bench(name, db, queries, args, Path(tmp))
    print(f"\nload average at end: {load_average()}")


if __name__ == "__main__":
    main()
