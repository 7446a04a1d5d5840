"""Epoch time of the memory-bank methods (DSDH, DBDH) with the fused likelihood pass, against the
plain autograd formula it replaced and against CSQ, measured in one run (issue 31, item 5).

    python benchmarks/bench_bank.py [--threads 1] [--epochs 2] [--parts features,images]

Part `features` (the default): 40,000 synthetic training items (128-d, 10 classes, plus 1,000
query items), 32 bits, lbhash's trainer with the default feature head (1024 hidden) and batch
(64). CSQ, DSDH and DBDH with the fused pass, and DSDH and DBDH with the plain formula
monkeypatched in ("before"), alternate epoch by epoch so that all see the same machine load;
each reports its last epoch (the first warms up). The plain pass is that formula's forward and
backward alone over the same number of steps (random u against a full bank): the work the
methods add to CSQ's step, and the denominator of (method epoch - CSQ epoch) / plain pass.

Part `images`: 60,000 synthetic 28x28 gray images, smallcnn, one epoch each of CSQ, DSDH and
DSDH_D with the fused pass (minutes per epoch on one thread; hence a separate part).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from _smoke import parse_args  # beside this script

BITS, BATCH, CLASSES = 32, 64, 10
FEATURE_VARIANTS = {"CSQ": ("csq", False), "DSDH": ("dsdh", False), "DBDH": ("dbdh", False),
                    "DSDH plain": ("dsdh", True), "DBDH plain": ("dbdh", True)}
IMAGE_VARIANTS = {"CSQ": dict(method="csq"), "DSDH": dict(method="dsdh"), "DSDH_D": dict(method="dsdh", lbhash=True)}


def plain_likelihood(u, labels, bank_u, bank_y):
    """The formula lbhash used before the fused pass: autograd over batch x bank temporaries."""
    import torch

    theta = 0.5 * (u @ bank_u.to(u.dtype).T)
    s = ((labels.to(bank_y.dtype) @ bank_y.T) > 0).to(theta.dtype)
    return (torch.log1p(torch.exp(-theta.abs())) + theta.clamp(min=0) - s * theta).mean()


class formula:
    """Context: DSDH and DBDH use the plain formula inside when `plain`, else the fused pass."""

    def __init__(self, plain: bool):
        import lbhash.methods.dbdh as dbdh

        self.module, self.plain, self.fused = dbdh, plain, dbdh.bank_likelihood

    def __enter__(self):
        if self.plain:
            self.module.bank_likelihood = plain_likelihood

    def __exit__(self, *exc):
        self.module.bank_likelihood = self.fused


def feature_data(folder: Path, n_train: int) -> str:
    """Synthetic features: 10 Gaussian clusters in 128-d, n_train training and 1,000 query items."""
    import numpy as np

    rng = np.random.default_rng(0)
    n = n_train + 1000
    labels = rng.integers(0, CLASSES, n)
    x = rng.normal(size=(CLASSES, 128))[labels] + rng.normal(size=(n, 128))
    path = folder / "features.npz"
    np.savez(path, x=x.astype(np.float32), labels=labels, is_test=np.arange(n) >= n_train)
    return f"features:{path}"


def image_data(folder: Path, n_train: int) -> str:
    """Synthetic 28x28 gray images: a per-class pattern plus noise, n_train training and 1,000 test."""
    import numpy as np

    rng = np.random.default_rng(0)
    patterns = rng.uniform(0, 255, size=(CLASSES, 28, 28))

    def draw(n):
        y = rng.integers(0, CLASSES, n)
        return np.clip(0.6 * patterns[y] + rng.uniform(0, 100, size=(n, 28, 28)), 0, 255).astype(np.uint8), y

    (x_train, y_train), (x_test, y_test) = draw(n_train), draw(1000)
    path = folder / "images.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return f"image-array:{path}"


def alternating_epochs(configs: dict, plain: dict, epochs: int) -> tuple[dict, int]:
    """Seconds of each epoch of each configuration, their epochs alternating (as
    lbhash.train.fit.epoch_times, with the formula switched per configuration)."""
    from lbhash.train.builder import build_experiment
    from lbhash.train.loop import Trainer

    trainers = {label: Trainer(build_experiment(cfg.replace(epochs=epochs, lr_step=0, progress=False)))  # in memory
                for label, cfg in configs.items()}
    seconds: dict[str, list[float]] = {label: [] for label in trainers}
    for epoch in range(1, epochs + 1):
        for label, trainer in trainers.items():
            with formula(plain[label]):
                seconds[label].append(trainer.train_epoch(epoch)["seconds"])
    steps = len(next(iter(trainers.values())).batches)
    return seconds, steps


def likelihood_pass(fn, steps: int, n: int) -> float:
    """Seconds of `steps` forward+backward passes of fn on random u against a full bank of n."""
    import torch

    gen = torch.Generator().manual_seed(0)
    bank_u = torch.rand(n, BITS, generator=gen) * 2 - 1
    bank_y = torch.eye(CLASSES)[torch.randint(0, CLASSES, (n,), generator=gen)]
    us = torch.randn(steps, BATCH, BITS, generator=gen)
    rows = torch.randint(0, n, (steps, BATCH), generator=gen)
    start = time.perf_counter()
    for u, index in zip(us, rows):
        x = u.requires_grad_()
        fn(x, bank_y[index], bank_u, bank_y).backward()
    return time.perf_counter() - start


def part_features(args, folder: Path) -> None:
    from lbhash.methods.bank_likelihood import bank_likelihood
    from lbhash.train import TrainConfig

    data = feature_data(folder, args.n_features)
    configs = {label: TrainConfig(data=data, protocol="given", method=method, bits=BITS, batch_size=BATCH, validation=0.0)
               for label, (method, _) in FEATURE_VARIANTS.items()}
    seconds, steps = alternating_epochs(configs, {k: v[1] for k, v in FEATURE_VARIANTS.items()}, args.epochs)
    plain_pass = likelihood_pass(plain_likelihood, steps, args.n_features)
    fused_pass = likelihood_pass(bank_likelihood, steps, args.n_features)
    print(f"features: {args.n_features:,} training items, 128-d, {CLASSES} classes, {BITS} bits, batch {BATCH}, "
          f"head 128-1024-{BITS}, {steps} steps/epoch; epoch seconds in order, the last one reported")
    last = {label: s[-1] for label, s in seconds.items()}
    for label, s in seconds.items():
        print(f"  {label:<11} epoch {last[label]:7.2f} s   (epochs: {', '.join(f'{t:.2f}' for t in s)})")
    print(f"  likelihood alone over {steps} steps (forward+backward): plain {plain_pass:.2f} s, fused {fused_pass:.2f} s "
          f"({plain_pass / fused_pass:.1f}x)")
    for method in ("DSDH", "DBDH"):
        after = (last[method] - last["CSQ"]) / plain_pass
        before = (last[f"{method} plain"] - last["CSQ"]) / plain_pass
        print(f"  ({method} epoch - CSQ epoch) / plain pass: fused {after:.2f}, plain formula {before:.2f}; "
              f"{method} epoch {last[f'{method} plain'] / last[method]:.1f}x faster, {last[method] / last['CSQ']:.1f}x CSQ's")


def part_images(args, folder: Path) -> None:
    from lbhash.train import TrainConfig

    data = image_data(folder, args.n_images)
    configs = {label: TrainConfig(data=data, protocol="given", bits=BITS, batch_size=BATCH, validation=0.0, **values)
               for label, values in IMAGE_VARIANTS.items()}
    seconds, steps = alternating_epochs(configs, dict.fromkeys(configs, False), 1)
    print(f"images: {args.n_images:,} synthetic 28x28 gray images, smallcnn, {BITS} bits, batch {BATCH}, "
          f"{steps} steps, one epoch each (fused pass)")
    for label, (s,) in seconds.items():
        print(f"  {label:<7} epoch {s:7.2f} s   {s / seconds['CSQ'][0]:.2f}x CSQ's")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch (and OpenMP) threads")
    p.add_argument("--epochs", type=int, default=2, help="features part: epochs per variant, the last reported")
    p.add_argument("--parts", default="features", help="comma-separated: features, images")
    p.add_argument("--n-features", type=int, default=40_000)
    p.add_argument("--n-images", type=int, default=60_000)
    args = parse_args(p, n_features=1000, n_images=300, parts="features,images")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch is imported
    import torch

    torch.set_num_threads(args.threads)
    parts = args.parts.split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} torch thread(s), {os.cpu_count()} CPUs; "
          f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if "features" in parts:
            part_features(args, Path(tmp))
        if "images" in parts:
            part_images(args, Path(tmp))
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
