"""Indexing a compressed image tarball: lbhash.data.ustar's reader against tarfile's stream, the same
tarball, the two alternating (the machine's speed drifts), with the same members and bytes checked.

    python benchmarks/bench_tarball.py [../shared/data/cifar10-jpg.tar.gz] [--rounds 3]

Prints each path's median seconds for `open_tarball` (every member into memory) and the ratio. `--smoke`:
a tarball of 200 small members written here, one round.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from lbhash.data import image_sources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import parse_args  # noqa: E402  (beside this script)


def timed(path: Path, plain: bool) -> tuple[float, image_sources.BlobSource]:
    started = time.perf_counter()
    if plain:
        source = image_sources.open_tarball(path)
    else:  # tarfile's stream, as before lbhash.data.ustar
        with mock.patch.object(image_sources, "plain_members", lambda *a, **k: None):
            source = image_sources.open_tarball(path)
    return time.perf_counter() - started, source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball", nargs="?", default="../shared/data/cifar10-jpg.tar.gz", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parse_args(parser, rounds=1, tarball=None)
    if args.tarball is None:  # the smoke run's own tarball
        args.tarball = Path(tempfile.mkdtemp()) / "smoke.tar.gz"
        with tarfile.open(args.tarball, "w:gz") as tf:
            for i in range(200):
                info = tarfile.TarInfo(f"train/c{i % 4}/{i:04d}.jpg")
                info.size = 100 + i
                tf.addfile(info, io.BytesIO(bytes(info.size)))
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        (before, reference), (after, source) = (timed(args.tarball, plain) for plain in (False, True))
        assert np.array_equal(source.names, reference.names) and np.array_equal(source.blob, reference.blob)
        times[False].append(before)
        times[True].append(after)
    before, after = statistics.median(times[False]), statistics.median(times[True])
    print(f"{args.tarball}: {len(reference.names)} members; tarfile {before:.2f} s, lbhash.data.ustar {after:.2f} s "
          f"(median of {args.rounds}); ratio {before / after:.1f}x")


if __name__ == "__main__":
    main()
