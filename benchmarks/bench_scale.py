"""How search cost grows with n: every index kind beside raw FAISS at 1M, 10M and 100M codes.

For each n and code shape (64-bit codes clustered like learned ones: 100 class centers, 12% of
the bits flipped per item; and uniform random codes), a child process per kind builds the
index and measures, in that process alone:

- build seconds (CodeIndex.add with ids and one label per item; raw FAISS: index.add);
- memory: peak RSS above the process's RSS with the raw codes loaded (MB);
- save and load seconds (CodeIndex: the checksummed index directory; FAISS: write/read_index_binary);
- single-query latency on one thread, p50 and p99 over the queries (ms), after one untimed query;
- batch throughput on every thread (queries per second, all queries in one call);
- tie-aware recall@10 and @100 against the exact result: the share of returned items whose
  distance is at most the exact k-th distance (so any order among ties counts as right).

The exact neighbours come from a raw FAISS flat scan over the same codes, measured first.

    python benchmarks/bench_scale.py [--sizes 1000000,10000000,100000000] [--kinds flat,ivf,multihash]
        [--shapes clustered,uniform] [--queries 200] [--out FILE.json]

Cost: the codes take 8 bytes per item (800 MB at 100M, generated once per n and shape and
read by each child); flat adds a FAISS copy, multihash one hash-map entry per item and
substring (so multihash stops at 10M, and HNSW, whose build is slow, at 1M, by default). Run
it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _smoke import parse_args  # beside this script

BITS = 64


def make_codes(n: int, shape: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(packed codes (n, 8) uint8, class ids (n,)), generated in chunks to bound memory. The
    100 class centers are the same for every seed: seed 0 is the database, seed 1 the queries."""
    centers = np.random.default_rng(12345).integers(0, 256, size=(100, BITS // 8), dtype=np.uint8)
    rng = np.random.default_rng(seed)
    codes = np.empty((n, BITS // 8), np.uint8)
    labels = rng.integers(0, 100, n).astype(np.int32)
    for a in range(0, n, 1_000_000):
        b = min(n, a + 1_000_000)
        if shape == "uniform":
            codes[a:b] = rng.integers(0, 256, size=(b - a, BITS // 8), dtype=np.uint8)
        else:
            flips = np.packbits(rng.random((b - a, BITS)) < 0.12, axis=1, bitorder="little")
            codes[a:b] = centers[labels[a:b]] ^ flips
    return codes, labels


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: its peak) in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    try:  # Linux >= 4.0: writing 5 resets VmHWM to the current RSS
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def tie_aware_recall(found_dist: np.ndarray, exact_dist: np.ndarray, k: int) -> float:
    kth = exact_dist[:, k - 1:k]
    return float(((found_dist[:, :k] <= kth) & (found_dist[:, :k] >= 0)).sum() / (k * len(kth)))


def measure_child(n: int, shape: str, kind: str, n_queries: int, folder: str) -> dict:
    import faiss

    codes, labels = np.load(Path(folder) / "codes.npy"), np.load(Path(folder) / "labels.npy")
    truth_path = Path(folder) / "truth.npy"
    queries, _ = make_codes(n_queries, shape, seed=1)
    base_rss = status_mb("VmRSS")
    reset_peak()
    out: dict = {"n": n, "shape": shape, "kind": kind}
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    start = time.perf_counter()
    if kind.startswith("faiss-"):
        index = make_raw(kind, codes)
        out["build_s"] = time.perf_counter() - start
        search = index.search
        path = tmp / "index.faiss"
        start = time.perf_counter()
        faiss.write_index_binary(index, str(path))
        out["save_s"] = time.perf_counter() - start
        start = time.perf_counter()
        faiss.read_index_binary(str(path))
        out["load_s"] = time.perf_counter() - start
    else:
        from lbhash.index import CodeIndex

        index = CodeIndex(BITS, kind=kind)
        index.add(codes, labels=labels)
        if kind == "ivf" and not index.is_trained:
            index.train()
        out["build_s"] = time.perf_counter() - start
        search = index.search
        start = time.perf_counter()
        index.save(tmp / "index")
        out["save_s"] = time.perf_counter() - start
        start = time.perf_counter()
        CodeIndex.load(tmp / "index")
        out["load_s"] = time.perf_counter() - start
    out["memory_mb"] = status_mb("VmHWM") - base_rss
    subprocess.run(["rm", "-rf", str(tmp)], check=False)
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    search(queries[:1], 10)  # untimed: lbhash's flat scan loads its numba code on a process's first search
    latencies = []
    for q in queries[: min(len(queries), 100)]:
        start = time.perf_counter()
        search(q[None], 10)
        latencies.append(time.perf_counter() - start)
    faiss.omp_set_num_threads(previous)
    out["p50_ms"], out["p99_ms"] = (1e3 * float(np.percentile(latencies, p)) for p in (50, 99))
    start = time.perf_counter()
    dist, _ = search(queries, 100)
    out["batch_qps"] = len(queries) / (time.perf_counter() - start)
    dist = np.where(dist > BITS, -1, dist)  # padding
    if kind == "faiss-flat":
        np.save(truth_path, dist)
    truth = np.load(truth_path)
    out["recall10"] = tie_aware_recall(dist, truth, 10)
    out["recall100"] = tie_aware_recall(dist, truth, 100)
    return out


def make_raw(kind: str, codes: np.ndarray):
    import faiss

    if kind == "faiss-flat":
        index = faiss.IndexBinaryFlat(BITS)
    elif kind == "faiss-ivf":
        index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(BITS), BITS, 1024)
        sample = codes[np.random.default_rng(0).choice(len(codes), min(len(codes), 256 * 1024), replace=False)]
        index.train(sample)
        index.nprobe = 16
    elif kind == "faiss-multihash":
        index = faiss.IndexBinaryMultiHash(BITS, BITS // 16, 16)
        index.nflip = 2
    else:
        index = faiss.IndexBinaryHNSW(BITS, 16)
        index.hnsw.efSearch = 128
    index.add(codes)
    return index


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000000,10000000,100000000")
    p.add_argument("--kinds", default="flat,ivf,multihash,faiss-flat,faiss-ivf,faiss-multihash,faiss-hnsw")
    p.add_argument("--shapes", default="clustered,uniform")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--hnsw-max", type=int, default=1_000_000,
                   help="largest n for faiss-hnsw (its build takes about 2 h per 10M codes on 2 cores)")
    p.add_argument("--multihash-max", type=int, default=10_000_000,
                   help="largest n for multihash (about 160-180 bytes per code at 10M: some 16 GB at 100M)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per child before it is abandoned")
    p.add_argument("--out", default=None, help="also write the rows as JSON")
    p.add_argument("--figure", default=None, help="draw cost against n (log-log) into this PNG")
    p.add_argument("--rows-from", nargs="*", default=None,
                   help="draw --figure from the JSON rows of earlier runs (--out) instead of measuring")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parse_args(p, sizes="3000", queries=10, shapes="clustered", timeout=300)
    if args.rows_from is not None:
        draw([row for f in args.rows_from for row in json.loads(Path(f).read_text())], args.figure)
        return
    if args.child:
        n, shape, kind, truth = args.child
        print(json.dumps(measure_child(int(n), shape, kind, args.queries, truth)))
        return
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    kinds = [k for k in args.kinds.split(",") if k != "faiss-flat"]
    rows = []
    header = (f"{'n':>11} {'shape':<9} {'kind':<16} {'build s':>8} {'MB':>7} {'save s':>7} {'load s':>7} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'batch q/s':>10} {'R@10':>6} {'R@100':>6}")
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.sizes.split(",")):
            for shape in args.shapes.split(","):
                folder = Path(tmp) / f"{n}-{shape}"
                folder.mkdir()
                codes, labels = make_codes(n, shape)
                np.save(folder / "codes.npy", codes)
                np.save(folder / "labels.npy", labels)
                del codes, labels
                for kind in ["faiss-flat", *kinds]:  # the exact neighbours first
                    if n > args.hnsw_max and kind == "faiss-hnsw" or n > args.multihash_max and "multihash" in kind:
                        print(f"{n:>11} {shape:<9} {kind:<16} skipped (see --hnsw-max / --multihash-max)", flush=True)
                        continue
                    cmd = [sys.executable, __file__, "--queries", str(args.queries), "--child", str(n), shape,
                           kind, str(folder)]
                    try:
                        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                    except subprocess.TimeoutExpired:
                        print(f"{n:>11} {shape:<9} {kind:<16} not finished within {args.timeout} s", flush=True)
                        continue
                    if done.returncode != 0:
                        last = (done.stderr.strip().splitlines() or ["killed"])[-1]
                        print(f"{n:>11} {shape:<9} {kind:<16} failed (rc {done.returncode}): {last}", flush=True)
                        continue
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    rows.append(row)
                    print(f"{n:>11} {shape:<9} {kind:<16} {row['build_s']:>8.2f} {row['memory_mb']:>7.0f} "
                          f"{row['save_s']:>7.2f} {row['load_s']:>7.2f} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} "
                          f"{row['batch_qps']:>10.0f} {row['recall10']:>6.3f} {row['recall100']:>6.3f}", flush=True)
                subprocess.run(["rm", "-rf", str(folder)], check=False)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    if args.figure:
        draw(rows, args.figure)


def draw(rows: list[dict], path: str) -> None:
    """Single-query p50, build time and memory against n, one line per (kind, shape), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for (key, label), ax in zip((("p50_ms", "single-query p50 (ms)"), ("build_s", "build (s)"),
                                 ("memory_mb", "peak memory above the codes (MB)")), axes):
        kinds = sorted({r["kind"] for r in rows})
        for kind, shape in sorted({(r["kind"], r["shape"]) for r in rows}):
            line = sorted((r["n"], r[key]) for r in rows if r["kind"] == kind and r["shape"] == shape)
            ax.plot(*zip(*line), marker="o", linestyle="-" if shape == "clustered" else "--",
                    color=plt.cm.tab10(kinds.index(kind) % 10), label=f"{kind} ({shape})")
        ax.set(xscale="log", yscale="log", xlabel="codes (64 bits)", ylabel=label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
