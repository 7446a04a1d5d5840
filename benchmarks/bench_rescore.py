"""Re-scoring by stored embeddings against Hamming order alone, on one flat index (issue 58).

An index of `--items` 64-bit codes (clustered: `--classes` centers, up to 6 bits flipped, so the
candidates tie as a trained run's do) with a `--dim`-wide embedding each, saved and loaded back
(its embeddings memory-mapped, as `CodeIndex.load` maps them), then `--queries` queries one at
a time: the Hamming top 10 (the reference), and the re-scored top 10 at factors 1, 4 and 16.
Prints ms per query of each and its ratio to the Hamming search in the same run, the bytes
per item of the codes and of the embeddings, and the candidates re-scored per query (the
boundary's ties included). First run, cold page cache: the first query of each mode is left
out of the timing.

    python benchmarks/bench_rescore.py [--items 1000000 --dim 1024 --queries 50]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from _smoke import parse_args
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.index.rescore import with_boundary_ties

BITS = 64


def clustered(rng, n: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    centers = rng.integers(0, 256, (classes, BITS // 8), dtype=np.uint8)
    labels = rng.integers(0, classes, n)
    codes = centers[labels].copy()
    for _ in range(6):  # up to 6 flipped bits per item
        bit = rng.integers(0, BITS, n)
        flip = rng.random(n) < 0.5
        codes[np.flatnonzero(flip), bit[flip] // 8] ^= (1 << (bit[flip] % 8)).astype(np.uint8)
    return codes, labels


def per_query_ms(fn, queries: int) -> float:
    fn(0)  # cold: pages of the mapped embeddings come in
    start = time.perf_counter()
    for q in range(1, queries + 1):
        fn(q)
    return 1000 * (time.perf_counter() - start) / queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=50)
    args = parse_args(parser, items=5000, dim=32, classes=10, queries=5)
    rng = np.random.default_rng(0)
    codes, labels = clustered(rng, args.items, args.classes)
    with tempfile.TemporaryDirectory() as tmp:
        index = CodeIndex(BITS, embedding_dim=args.dim)
        for start in range(0, args.items, 100_000):  # the embeddings drawn in slices: bounded memory
            part = slice(start, min(args.items, start + 100_000))
            emb = rng.standard_normal((part.stop - part.start, args.dim), dtype=np.float32)
            index.add(codes[part], ids=np.arange(part.start, part.stop), embeddings=emb)
        index.save(Path(tmp) / "idx")
        index = CodeIndex.load(Path(tmp) / "idx")
        q_codes = codes[rng.integers(0, args.items, args.queries + 1)]
        q_emb = rng.standard_normal((args.queries + 1, args.dim), dtype=np.float32)
        queries = Queries(q_codes, q_emb)
        hamming = per_query_ms(lambda q: index.search(q_codes[q:q + 1], 10), args.queries)
        print(f"{args.items} items, {BITS}-bit codes, {args.dim}-d embeddings, {args.queries} queries, one at a time")
        print(f"bytes per item: code {BITS // 8}, embedding {2 * args.dim} (float16)")
        print(f"Hamming top 10 (reference): {hamming:.2f} ms/query x1.00")
        for factor in (1, 4, 16):
            ms = per_query_ms(lambda q: blended_search(index, queries[q:q + 1], 10, factor=factor), args.queries)
            wanted = max(1, min(10 * factor, index.ntotal))
            dist, ids = index.search(q_codes, wanted)
            widened = (with_boundary_ties(index, q_codes, dist, ids)[1] >= 0).sum(1)
            print(f"re-scored, factor {factor}: {ms:.2f} ms/query x{ms / hamming:.2f} "
                  f"({int(np.median(widened))} candidates per query, median)")


if __name__ == "__main__":
    main()
