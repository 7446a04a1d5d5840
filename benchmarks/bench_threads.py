"""Backbone images/s on a busy machine: torch's intra-op threads, idle and beside a competing process.

    python benchmarks/bench_threads.py [--images 192] [--batch 32] [--size 128] [--threads 1,2] [--repeats 3] [--smoke]

For each thread count (and lbhash's default, `lbhash.cpus.torch_threads()` with LBHASH_NUM_THREADS
unset) it measures EfficientNet-Lite0 feature extraction (no gradients, the frozen path's
`BatchTransform` in front, fp32, random weights: the cost does not depend on them) twice in this
run: with the machine as it is (the reference) and beside one competing CPU-bound process
(`python -c 'while True: pass'`, started here and killed after), and prints both images/s and
their ratio. An OpenMP pool whose threads outnumber the free cores waits at every barrier for a
thread the scheduler has parked, so a pool of every core loses far more than the core it lost.
Each figure is the best of `--repeats` passes. The reference is "the machine as it is": on a
shared machine it already holds the other users' load, so compare ratios, not across runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch

from lbhash.cpus import torch_threads, usable_cpus
from lbhash.data.augment import BatchTransform
from lbhash.models import create_backbone
from _smoke import parse_args  # beside this script


def rate(net, transform, images: np.ndarray, batch: int, repeats: int) -> float:
    """Best images/s of `repeats` passes over `images` (after one warm-up batch)."""
    def one_pass():
        with torch.no_grad():
            for i in range(0, len(images), batch):
                net(transform(torch.from_numpy(images[i:i + batch])).contiguous(memory_format=torch.channels_last))
    with torch.no_grad():
        net(transform(torch.from_numpy(images[:batch])).contiguous(memory_format=torch.channels_last))
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        best = max(best, len(images) / (time.perf_counter() - start))
    return best


class Competitor:
    """One CPU-bound process for the length of a `with` block."""

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)  # running before the measurement starts
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=192)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--threads", default="1,2", help="thread counts to measure besides the default")
    parser.add_argument("--repeats", type=int, default=3)
    args = parse_args(parser, images=4, batch=2, size=32, repeats=1)
    os.environ.pop("LBHASH_NUM_THREADS", None)
    default = torch_threads()
    counts = sorted({int(t) for t in args.threads.split(",")} | {default})
    images = np.random.default_rng(0).integers(0, 256, (args.images, 32, 32, 3), dtype=np.uint8)
    net = create_backbone("efficientnet_lite0").eval().to(memory_format=torch.channels_last)
    transform = BatchTransform("imagenet", args.size, train=False)
    print(f"EfficientNet-Lite0 extraction, {args.images} images at {args.size} px in batches of {args.batch}, "
          f"fp32; {usable_cpus()} usable CPUs; lbhash's default: {default} thread(s) "
          f"(LBHASH_NUM_THREADS unset); load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for threads in counts:
        torch.set_num_threads(threads)
        idle = rate(net, transform, images, args.batch, args.repeats)
        with Competitor():
            busy = rate(net, transform, images, args.batch, args.repeats)
        mark = "  <- lbhash's default" if threads == default else ""
        print(f"{threads} thread(s): as it is {idle:7.1f} images/s, beside one competing process "
              f"{busy:7.1f} images/s, idle/busy = {idle / busy:.2f}x{mark}", flush=True)
        if threads == default:
            print(f"default holds up (idle/busy within 2x): {'yes' if idle / busy <= 2 else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
