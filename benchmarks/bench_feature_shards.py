"""A feature-cache space that requests of new photos alone grew to many shards: the lookup of one photo before
and after `lbhash.data.feature_shards.compact` merges them by size tier (docs/reference/backbones.md).

    python benchmarks/bench_feature_shards.py [--shards 2582] [--rounds 5]

Writes `--shards` shards of one photo each (random digests, 1,280 float32 features) into a temporary space, times
`lookup` of one photo (every shard's photo list read) as the median of `--rounds`, compacts the space, times it
again, and checks that every photo is still found with its features. `--smoke`: 20 shards, 2 rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lbhash.data import feature_shards

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import parse_args  # noqa: E402  (beside this script)


def median_lookup(space: Path, digest: np.ndarray, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        feature_shards.lookup(space, digest)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=2582)
    parser.add_argument("--rounds", type=int, default=5)
    args = parse_args(parser, shards=20, rounds=2)
    rng = np.random.default_rng(0)
    digests = rng.integers(0, 256, (args.shards, 32), dtype=np.uint8)
    features = rng.standard_normal((args.shards, 1280)).astype(np.float32)
    key = {"bench": "feature_shards"}
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "space"
        space.mkdir()
        for i in range(args.shards):  # (written as requests of one new photo each wrote them, before compaction)
            feature_shards.write_shard(space, digests[i:i + 1], features[i:i + 1], key)
        absent = rng.integers(0, 256, (1, 32), dtype=np.uint8)
        before = median_lookup(space, absent, args.rounds)
        started = time.perf_counter()
        merged = feature_shards.compact(space, key)
        took = time.perf_counter() - started
        after = median_lookup(space, absent, args.rounds)
        left = len([p for p in space.iterdir() if not p.name.startswith(".")])
        found_features, found, _ = feature_shards.lookup(space, digests)
        same = bool(found.all()) and np.array_equal(found_features, features)
    print(f"{args.shards} shards of one photo: lookup {before:.4f} s; compacted ({merged} merged in {took:.1f} s) "
          f"into {left} shards: lookup {after:.4f} s; ratio {before / after:.1f}x; every photo found, the same "
          f"features: {same}")


if __name__ == "__main__":
    main()
