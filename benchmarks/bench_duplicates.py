"""`lbhash duplicates` at scale (issue 88, item 2): every item of an index searched against the rest.

An index of `--items` items with a 256-bit instance code each (random bits: distinct photos' codes are
spread) and no float rows; the last `--copies` items are copies of seeded others, each its original's
code with `--flips` random bits flipped. Saved and loaded back (its codes memory-mapped, a main segment:
at 262,144 items and more its instance candidates come from the chunk tables, lbhash.index._lookup).
Then `lbhash.indexes.duplicates.index_groups` at a share of 0.1 of the bits (a pair within 25 bits), the
reference being the same items' instance searches alone (`CodeIndex.instance_search`, top 11, in chunks
of 1,024: the search the job is made of) timed in the same run. Prints the items per second of each,
their ratio, the planted pairs found, the other pairs, and the process's peak memory (VmHWM).
`--identical`: every item the same code (a photo a million times: one group).

    python benchmarks/bench_duplicates.py [--items 1000000 --copies 1000]
    python benchmarks/bench_duplicates.py --items 1000000 --identical
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from _smoke import parse_args
from lbhash.index import CodeIndex
from lbhash.instance import InstanceTransform
from lbhash.indexes.duplicates import CHUNK, K, index_groups
from lbhash.indexes.index_dir import open_index
from lbhash.indexes.instance_codes import attach

BITS = 256
SLICE = 100_000


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(path: Path, n: int, copies: int, flips: int, identical: bool, rng) -> list[tuple[int, int]]:
    """The index at `path`; the planted (original, copy) ids."""
    index = CodeIndex(8, instance_bits=BITS)
    transform = InstanceTransform.fit(rng.standard_normal((2 * BITS, BITS)), BITS, "pca")  # (its record only)
    attach(index, transform, "random codes")
    codes = rng.integers(0, 256, (n, BITS // 8), dtype=np.uint8) if not identical else \
        np.repeat(rng.integers(0, 256, (1, BITS // 8), dtype=np.uint8), n, axis=0)
    planted = []
    if not identical:
        originals = rng.choice(n - copies, copies, replace=False)
        for c, o in enumerate(originals):
            j = n - copies + c
            codes[j] = codes[o]
            for bit in rng.choice(BITS, flips, replace=False):
                codes[j, bit // 8] ^= np.uint8(1 << (bit % 8))
            planted.append((int(o), j))
    for start in range(0, n, SLICE):
        part = codes[start:start + SLICE]
        index.add(np.zeros((len(part), 1), np.uint8), ids=np.arange(start, start + len(part)), instance=part)
    index.save(path)
    return planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--copies", type=int, default=1000)
    parser.add_argument("--flips", type=int, default=8)
    parser.add_argument("--identical", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, items=3000, copies=30)
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        planted = build(Path(tmp) / "ix", args.items, args.copies, args.flips, args.identical, rng)
        print(f"{args.items:,} items ({'one code' if args.identical else f'{len(planted):,} planted copies, {args.flips} bits off'}): "
              f"built and saved in {time.perf_counter() - started:.1f} s", flush=True)
        index = open_index(Path(tmp) / "ix")
        ids = index.ids()
        started = time.perf_counter()
        index.warm()
        warm = time.perf_counter() - started
        started = time.perf_counter()
        if not args.identical:
            for s in range(0, len(ids), CHUNK):
                index.instance_search(index.get_instance_codes(ids[s:s + CHUNK]), K + 1)
        reference = time.perf_counter() - started
        started = time.perf_counter()
        found = index_groups(index, "the synthetic index", threshold=0.1)
        job = time.perf_counter() - started
    truth = {frozenset(p) for p in planted}
    pairs = {frozenset((a, b)) for g in found.groups for a, b, _ in g["pairs"]}
    print(f"chunk tables warmed in {warm:.1f} s", flush=True)
    if not args.identical:
        print(f"instance searches alone (reference): {reference:.1f} s, {len(ids) / reference:,.0f} items/s x1.00")
    print(f"lbhash duplicates (index_groups): {job:.1f} s, {len(ids) / job:,.0f} items/s"
          + ("" if args.identical else f" x{job / reference:.2f}"))
    print(f"groups {len(found.groups):,}, largest {max((len(g['items']) for g in found.groups), default=0):,}; "
          f"planted pairs found {len(pairs & truth):,} of {len(truth):,}; other pairs {found.pairs - len(pairs & truth):,}")
    print(f"peak memory {peak_mb():,.0f} MB")


if __name__ == "__main__":
    main()
