"""The Milvus backend against the FAISS flat index on the same codes.

    # a Milvus server (2.4 or later) at --uri; docs/scale.md, "Milvus backend", says how the tests start one
    python benchmarks/bench_milvus.py --uri http://127.0.0.1:19530 --n 200000

Inserts --n clustered 64-bit codes into a fresh collection (dropped at the end), then times
top-k and range search for --nq queries on Milvus (BIN_FLAT, and BIN_IVF_FLAT) and on
`CodeIndex` (flat), and checks that BIN_FLAT returns the same (id, distance) lists.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import flip_bits  # noqa: E402
from lbhash.index import CodeIndex  # noqa: E402
from lbhash.index.milvus import MilvusIndex  # noqa: E402
from _smoke import parse_args, skip  # beside this script


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def milvus_missing(uri: str) -> str | None:
    """Why the smoke run cannot reach Milvus at `uri` (None: it can)."""
    import importlib.util
    import socket
    from urllib.parse import urlparse

    if importlib.util.find_spec("pymilvus") is None:
        return "pymilvus is not installed (pip install -e '.[milvus]'; make test-milvus runs a server)"
    address = urlparse(uri)
    try:
        socket.create_connection((address.hostname or "127.0.0.1", address.port or 19530), timeout=2).close()
    except OSError as e:
        return f"no Milvus server answers at {uri} ({e.strerror or e})"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", default="http://127.0.0.1:19530")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--nq", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--settle", type=float, default=30, help="seconds to wait after inserting "
                        "(Milvus compacts new segments in the background)")
    args = parse_args(parser, n=2000, nq=5, settle=1.0)
    if args.smoke:
        reason = milvus_missing(args.uri)
        if reason:
            skip(reason)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    rng = np.random.default_rng(0)
    centers = rng.integers(0, 256, (1000, 8), np.uint8)
    db = flip_bits(rng, centers[rng.integers(0, 1000, args.n)], 3, 6)
    queries = flip_bits(rng, centers[rng.integers(0, 1000, args.nq)], 3, 6)
    ids = np.arange(args.n)
    flat = CodeIndex(64)
    flat.add(db, ids=ids)
    t_flat, (d_ref, i_ref) = timed(lambda: flat.search(queries, args.k))
    t_flat_r, ref_range = timed(lambda: flat.range_search(queries, 2))
    print(f"{args.n:,} clustered 64-bit codes, {args.nq} queries, top-{args.k}")
    print(f"CodeIndex flat: top-k {t_flat * 1000 / args.nq:.2f} ms/query, range r=2 {t_flat_r * 1000 / args.nq:.2f} ms/query")
    for kind in ("flat", "ivf"):
        index = MilvusIndex(64, collection=f"bench_{uuid.uuid4().hex[:8]}", uri=args.uri, kind=kind,
                            nlist=1024, nprobe=16, timeout=600)
        try:
            t_add, _ = timed(lambda: index.add(db, ids=ids))
            time.sleep(args.settle)
            t_first, _ = timed(lambda: index.search(queries[:1], args.k))  # index build, loading
            t_knn, (d, i) = timed(lambda: index.search(queries, args.k))
            t_range, got_range = timed(lambda: index.range_search(queries, 2))
            same = np.array_equal(d, d_ref) and np.array_equal(i, i_ref)
            same_range = all(np.array_equal(a, b) for a, b in zip(got_range, ref_range))
            recall = ((d <= d_ref[:, -1:]) & (i >= 0)).mean()
            print(f"Milvus {kind}: insert {args.n / t_add:,.0f} codes/s; first search {t_first:.1f} s; "
                  f"top-k {t_knn * 1000 / args.nq:.2f} ms/query (same as flat: {same}, tie-aware recall {recall:.4f}); "
                  f"range r=2 {t_range * 1000 / args.nq:.2f} ms/query (same as flat: {same_range})")
        finally:
            index.drop()
            index.close()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
