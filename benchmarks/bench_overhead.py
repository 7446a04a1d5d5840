"""Training-step time of CSQ_D vs CSQ: same data, head, batch and bits, measured in one run.

Times both with lbhash's own timing loop (lbhash.train.timing), which alternates their epochs so
that both see the same machine state; reports the median time per step and the ratio CSQ_D / CSQ, for the
hash head of the quality benchmarks (1024 -> 1024 -> bits) and for a heavier,
backbone-like head (1024 -> 4096 -> 4096 -> bits).

    python benchmarks/bench_overhead.py [--data features:PATH.npz] [--bits 64] [--epochs 5]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from lbhash.train import TrainConfig
from lbhash.train.timing import epoch_times


def default_data(tmp: Path) -> str:
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-mobilenetv1-features.npz"
    if shared.is_file():
        return f"features:{shared}"
    rng = np.random.default_rng(0)  # stand-in with the same shape as the CIFAR-10 features
    path = tmp / "random.npz"
    np.savez(path, x=rng.normal(size=(6000, 1024)).astype(np.float32),
             labels=rng.integers(0, 10, 6000), is_test=np.arange(6000) >= 5000)
    return f"features:{path}"


def measure(data: str, protocol: str | None, hidden: list[int], bits: int, epochs: int):
    configs = {lbhash: TrainConfig(data=data, protocol=protocol, method="csq", lbhash=lbhash, bits=bits,
                                   hidden=hidden) for lbhash in (False, True)}
    times = epoch_times(configs, epochs)
    steps = times[False].steps_per_epoch
    return steps, times[False].median() / steps, times[True].median() / steps  # epoch 1 warms up


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None)
    p.add_argument("--protocol", default="cifar10")
    p.add_argument("--bits", type=int, default=64)
    p.add_argument("--epochs", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = args.data or default_data(tmp)
        protocol = args.protocol if "cifar10-mobilenet" in data else "given"
        print(f"data {data}, protocol {protocol}, {args.bits} bits, batch 64, "
              f"{torch.get_num_threads()} torch threads; median over epochs 2..{args.epochs}")
        for name, hidden in (("hash head 1024-1024-bits", [1024]),
                             ("backbone-like head 1024-4096-4096-bits", [4096, 4096])):
            steps, base, ours = measure(data, protocol, hidden, args.bits, args.epochs)
            print(f"{name:<40} {steps} steps/epoch  CSQ {1e3 * base:7.2f} ms/step  "
                  f"CSQ_D {1e3 * ours:7.2f} ms/step  ratio {ours / base:5.2f}x")


if __name__ == "__main__":
    main()
