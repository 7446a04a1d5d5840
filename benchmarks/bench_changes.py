"""What one change costs in a `CodeIndex`, beside one search of the same index.

    python benchmarks/bench_changes.py                       # 1,000,000 x 64-bit codes, every kind
    python benchmarks/bench_changes.py --n 10000000 --kinds flat

For each kind: builds the index (ids 0..n-1, clustered codes), then times --repeats of each
change on its own: remove one random id, insert one id below the largest (a removed one,
re-added), upsert one random id, append one id above the largest; then single-query searches
(one thread) while those changes are pending, and one fold of them into the main segment. Prints the median and worst time of each, and
each change's median as a multiple of the search's median, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lbhash.index import CodeIndex  # noqa: E402
from _smoke import parse_args  # beside this script


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} cores)"


def clustered(rng, n: int, width: int) -> np.ndarray:
    centers = rng.integers(0, 256, (1000, width), np.uint8)
    flips = np.packbits(rng.random((n, width * 8)) < 0.06, axis=1, bitorder="little")
    return centers[rng.integers(0, 1000, n)] ^ flips


def timed(call, repeats: int) -> np.ndarray:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000)
    return np.array(out)


def measure(kind: str, codes: np.ndarray, queries: np.ndarray, args, rng) -> list[str]:
    index = CodeIndex(args.bits, kind)
    index.add(codes)
    search = timed(lambda: index.search(queries[:1], 10), args.repeats)
    removed: list[int] = []

    def remove():
        item = int(rng.integers(args.n))
        while item in removed:
            item = int(rng.integers(args.n))
        index.remove([item])
        removed.append(item)

    def insert_below():
        index.add(codes[:1], ids=[removed.pop()])

    def upsert():
        index.add(codes[:1], ids=[int(rng.integers(args.n))], upsert=True)

    def append():
        index.add(codes[:1])

    rows = {"remove one id": timed(remove, args.repeats),
            "insert one id below the largest": timed(insert_below, args.repeats),
            "upsert one id": timed(upsert, args.repeats), "append one id": timed(append, args.repeats)}
    after = timed(lambda: index.search(queries[rng.integers(len(queries))][None], 10), args.repeats)
    base = float(np.median(search))
    lines = [f"| {kind} | one search (k=10, one thread) | {base:.3f} | {search.max():.2f} | 1 |"]
    lines += [f"| {kind} | {name} | {np.median(ms):.3f} | {ms.max():.2f} | {np.median(ms) / base:.3f} |"
              for name, ms in rows.items()]
    lines.append(f"| {kind} | one search, {3 * args.repeats} changes pending | {np.median(after):.3f} | "
                 f"{after.max():.2f} | {np.median(after) / base:.2f} |")
    if hasattr(index, "prepare_fold"):  # what the pending changes cost to fold into the main segment, once
        fold = timed(lambda: index.apply_fold(index.prepare_fold()), 1)
        lines.append(f"| {kind} | fold the pending changes (once, O(n)) | {fold[0]:.1f} | {fold[0]:.1f} | "
                     f"{fold[0] / base:.1f} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--bits", type=int, default=64)
    p.add_argument("--kinds", default="flat,ivf,multihash")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    args = parse_args(p, n=5000, repeats=3)
    print(f"load average at start: {load_average()}")
    rng = np.random.default_rng(args.seed)
    width = args.bits // 8
    codes = clustered(rng, args.n, width)
    queries = clustered(rng, 200, width)
    print("| kind | change | median ms | worst ms | median / one search |")
    print("|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for line in measure(kind, codes, queries, args, rng):
            print(line)
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
