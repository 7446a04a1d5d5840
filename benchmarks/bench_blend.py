"""The default ranking (class and instance codes, floats where kept) against a class-code-only search,
at scale (issue 68: 1M and 100M items).

An index of `--items` items, each a 64-bit class code (clustered: `--classes` centers, up to 6 bits
flipped, so that whole classes tie as a trained run's do) and a `--instance-bits` instance code
(random bits: the instance codes of distinct photos are spread), with a `--dim`-wide float row
each where `--dim` is not 0, added in slices of 100,000, saved and loaded back (codes and floats
memory-mapped, as `CodeIndex.load` maps them). Then `--queries` queries one at a time: the class
code's Hamming top 10 (the reference), the ranking by both codes alone (and its two candidate steps,
the class code's top 40 and the instance code's, timed one after the other, and `both_candidates`, which
takes both and their union's distances in compiled code for a large flat index), and with
`--dim`, the default ranking with the floats, twice: its candidates' float rows read for the first time (a
page fault each, mapped from the file), then the same queries again with those rows mapped (a long-running
server's case). `--index DIR` builds the index into DIR once and loads it on later runs with the same
sizes (a saved index's pages are then in the page cache, not being written back while the searches are
timed). Prints the build time (adds and save), the process's peak memory
(VmHWM), the directory's bytes on disk, the time `CodeIndex.warm` takes (a large index's instance
chunk tables, lbhash.index._lookup), ms per query of each search and its ratio to the reference
measured in the same run. The first query of each search is left out of the timing.

    python benchmarks/bench_blend.py [--items 1000000 --dim 1280 --queries 50]
    python benchmarks/bench_blend.py --items 100000000 --dim 0 --queries 5    # 100M, codes alone
    python benchmarks/bench_blend.py --items 1000000 --dim 0 --queries 200 --batch 100    # and in batches
    python benchmarks/bench_blend.py --items 1000000 --dim 1280 --queries 200 --index /tmp/bench-1m
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from _smoke import parse_args
from bench_rescore import per_query_ms  # (the first query left out: cold pages)
from lbhash.index import RESCORE_FACTOR, CodeIndex, Queries, blended_search, table_bytes_per_item

BITS = 64
SLICE = 100_000  # items drawn and added at a time: bounded memory (100,000 x 1,280 floats: 512 MB)


def clustered(rng, n: int, centers: np.ndarray) -> np.ndarray:
    codes = centers[rng.integers(0, len(centers), n)]
    for _ in range(6):  # up to 6 flipped bits per item
        bit = rng.integers(0, BITS, n)
        flip = np.flatnonzero(rng.random(n) < 0.5)
        codes[flip, bit[flip] // 8] ^= (1 << (bit[flip] % 8)).astype(np.uint8)
    return codes


def step_ms(index, q_codes, q_inst, wanted: int, queries: int) -> tuple[float, float, float]:
    """ms per query of a blended search's two candidate steps, each query's class search then its instance
    search as `blended_search` takes them (the scan of every class code evicts the lookup's tables from the
    cache), and of the instance search timed alone."""
    spent = [0.0, 0.0]
    for q in range(queries + 1):  # (the first query left out, as per_query_ms leaves it)
        start = time.perf_counter()
        index.search(q_codes[q:q + 1], wanted)
        middle = time.perf_counter()
        index.instance_search(q_inst[q:q + 1], wanted)
        if q:
            spent[0] += middle - start
            spent[1] += time.perf_counter() - middle
    alone = per_query_ms(lambda q: index.instance_search(q_inst[q:q + 1], wanted), queries)
    return 1000 * spent[0] / queries, 1000 * spent[1] / queries, alone


def build(path: Path, sizes: dict, rng, centers: np.ndarray) -> float | None:
    """The benchmark's index saved at `path` (seconds to add and save), or None where `path` holds one of
    the same `sizes` already (a reused index's run then reports the peak memory of its searches alone)."""
    record = path / "bench_sizes.json"
    if record.exists():
        if json.loads(record.read_text()) != sizes:
            raise SystemExit(f"--index {path}: built with {record.read_text()}, not {json.dumps(sizes)}")
        return None
    if path.exists():
        raise SystemExit(f"--index {path}: exists but holds no benchmark index (no bench_sizes.json)")
    start = time.perf_counter()
    index = CodeIndex(BITS, embedding_dim=sizes["dim"] or None, instance_bits=sizes["instance_bits"])
    ibytes = sizes["instance_bits"] // 8
    for first in range(0, sizes["items"], SLICE):
        n = min(sizes["items"], first + SLICE) - first
        emb = rng.standard_normal((n, sizes["dim"]), dtype=np.float32) if sizes["dim"] else None
        index.add(clustered(rng, n, centers), ids=np.arange(first, first + n), embeddings=emb,
                  instance=rng.integers(0, 256, (n, ibytes), dtype=np.uint8))
    index.save(path)
    record.write_text(json.dumps(sizes))
    return time.perf_counter() - start


def peak_mb() -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--instance-bits", type=int, default=256)
    parser.add_argument("--dim", type=int, default=1280, help="float row width (0: no float rows)")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1, help="also time the searches in batches of this many queries")
    parser.add_argument("--index", help="build the index into this directory once, load it on later runs")
    args = parse_args(parser, items=3000, dim=16, classes=10, queries=3, batch=2)
    rng = np.random.default_rng(0)
    centers = rng.integers(0, 256, (args.classes, BITS // 8), dtype=np.uint8)
    ibytes = args.instance_bits // 8
    with contextlib.ExitStack() as stack:
        path = Path(args.index) if args.index else Path(stack.enter_context(tempfile.TemporaryDirectory())) / "idx"
        sizes = {"items": args.items, "instance_bits": args.instance_bits, "dim": args.dim, "classes": args.classes}
        built = build(path, sizes, rng, centers)
        index = CodeIndex.load(path)
        disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        nq = args.queries + 1
        rng = np.random.default_rng(1)  # (the queries' own draws: the same whether the index was built or loaded)
        q_codes = clustered(rng, nq, centers)
        q_inst = rng.integers(0, 256, (nq, ibytes), dtype=np.uint8)
        q_emb = rng.standard_normal((nq, args.dim), dtype=np.float32) if args.dim else None
        print(f"{args.items} items, {BITS}-bit class codes, {args.instance_bits}-bit instance codes, "
              f"{args.dim}-d float rows, {args.queries} queries, one at a time")
        print(f"build (adds and save): {'loaded, built before' if built is None else f'{built:.1f} s'}; on disk {disk / 2**20:.0f} MB "
              f"({disk / args.items:.1f} bytes per item); codes in memory {BITS // 8 + ibytes} bytes per item")
        start = time.perf_counter()
        index.warm()  # the compiled scans, and at LOOKUP_MIN items and more the instance codes' chunk tables
        print(f"warm (chunk tables: {table_bytes_per_item(args.items, args.instance_bits)} bytes per item): "
              f"{time.perf_counter() - start:.1f} s")
        hamming = per_query_ms(lambda q: index.search(q_codes[q:q + 1], 10), args.queries)
        print(f"class code alone, top 10 (reference): {hamming:.2f} ms/query x1.00")
        both = Queries(q_codes, instance=q_inst)
        codes = per_query_ms(lambda q: blended_search(index, both[q:q + 1], 10), args.queries)
        print(f"both codes, no float read: {codes:.2f} ms/query x{codes / hamming:.2f}")
        steps = step_ms(index, q_codes, q_inst, 10 * RESCORE_FACTOR, args.queries)
        print(f"  its two candidate searches, one after the other: the class code's top "
              f"{10 * RESCORE_FACTOR} {steps[0]:.2f} ms x{steps[0] / hamming:.2f}, the instance code's "
              f"{steps[1]:.2f} ms ({steps[2]:.2f} ms timed alone); together x{(steps[0] + steps[1]) / hamming:.2f}")
        union = per_query_ms(lambda q: index.both_candidates(q_codes[q:q + 1], q_inst[q:q + 1], 10 * RESCORE_FACTOR),
                             args.queries)
        print(f"  as the search takes them (both_candidates: both searches, their union and its two distances): "
              f"{union:.2f} ms x{union / hamming:.2f}")
        if args.batch > 1:  # the same queries in batches (the service's): ms per query of each batch's search
            n = args.queries // args.batch * args.batch
            batches = [slice(s, s + args.batch) for s in range(1, n + 1, args.batch)]
            index.search(q_codes[batches[0]], 10), blended_search(index, both[batches[0]], 10)  # (threads, pages)
            timed = []
            for search in (lambda b: index.search(q_codes[b], 10), lambda b: blended_search(index, both[b], 10)):
                start = time.perf_counter()
                for b in batches:
                    search(b)
                timed.append(1000 * (time.perf_counter() - start) / n)
            print(f"in batches of {args.batch}: class code alone {timed[0]:.3f} ms/query, both codes "
                  f"{timed[1]:.3f} ms/query x{timed[1] / timed[0]:.2f}")
        if args.dim:
            full = Queries(q_codes, q_emb, q_inst, np.zeros(args.dim))
            floats = per_query_ms(lambda q: blended_search(index, full[q:q + 1], 10), args.queries)
            print(f"the default ranking (both codes, floats), rows read for the first time: {floats:.2f} ms/query "
                  f"x{floats / hamming:.2f}")
            floats = per_query_ms(lambda q: blended_search(index, full[q:q + 1], 10), args.queries)
            print(f"  the same queries again, their rows mapped: {floats:.2f} ms/query x{floats / hamming:.2f}")
        print(f"peak memory: {peak_mb():.0f} MB")


if __name__ == "__main__":
    main()
