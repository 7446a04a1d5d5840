"""Training-step time of CSQ_D vs CSQ: same data, head, batch and bits, measured in one run.

Times CSQ, CSQ_D with one surrogate forward per step (the default) and CSQ_D with the former
two passes (`fused_surrogate=False`) with lbhash's own timing loop (lbhash.train.fit), which
alternates their epochs so that all see the same machine state; reports the median time per
step and the ratios to CSQ, for the hash head of the quality benchmarks (1024 -> 1024 -> bits)
and for a heavier, backbone-like head (1024 -> 4096 -> 4096 -> bits).

    python benchmarks/bench_overhead.py [--data features:PATH.npz] [--bits 64] [--epochs 5]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from lbhash.train import TrainConfig
from lbhash.train.fit import epoch_times
from _smoke import parse_args  # beside this script


def default_data(tmp: Path, rows: int = 6000, shared_data: bool = True) -> str:
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-mobilenetv1-features.npz"
    if shared_data and shared.is_file():
        return f"features:{shared}"
    rng = np.random.default_rng(0)  # stand-in with the same shape as the CIFAR-10 features
    path = tmp / "random.npz"
    np.savez(path, x=rng.normal(size=(rows, 1024)).astype(np.float32),
             labels=rng.integers(0, 10, rows), is_test=np.arange(rows) >= rows * 5 // 6)
    return f"features:{path}"


VARIANTS = {"CSQ": dict(lbhash=False), "CSQ_D": dict(lbhash=True),
            "CSQ_D two passes": dict(lbhash=True, fused_surrogate=False)}


def measure(data: str, protocol: str | None, hidden: list[int], bits: int, epochs: int) -> tuple[int, dict]:
    configs = {name: TrainConfig(data=data, protocol=protocol, method="csq", bits=bits, hidden=hidden, validation=0.0, **values)
               for name, values in VARIANTS.items()}
    times = epoch_times(configs, epochs)
    steps = times["CSQ"].steps_per_epoch
    return steps, {name: t.median() / steps for name, t in times.items()}  # epoch 1 warms up


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None)
    p.add_argument("--protocol", default="cifar10")
    p.add_argument("--bits", type=int, default=64)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--rows", type=int, default=6000,
                   help="rows of the random stand-in features (used without --data when the shared features are "
                        "missing, and always with --smoke)")
    args = parse_args(p, epochs=2, rows=300)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = args.data or default_data(tmp, args.rows, shared_data=not args.smoke)
        protocol = args.protocol if "cifar10-mobilenet" in data else "given"
        print(f"data {data}, protocol {protocol}, {args.bits} bits, batch 64, "
              f"{torch.get_num_threads()} torch threads; median over epochs 2..{args.epochs}")
        for name, hidden in (("hash head 1024-1024-bits", [1024]),
                             ("backbone-like head 1024-4096-4096-bits", [4096, 4096])):
            steps, per_step = measure(data, protocol, hidden, args.bits, args.epochs)
            base = per_step["CSQ"]
            cells = "  ".join(f"{variant} {1e3 * t:6.2f} ms ({t / base:4.2f}x)" for variant, t in per_step.items())
            print(f"{name:<40} {steps} steps/epoch  {cells}")


if __name__ == "__main__":
    main()
