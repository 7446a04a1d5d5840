"""An epoch of lbhash's training loop against a minimal hand-written PyTorch loop, in one run.

For each configuration, lbhash's `Trainer` and a hand-written loop train the same model and
objective (built by the same builder with the same seed, so the same initial weights), with the
same optimizers, batch size and data. The hand-written loop holds the data in memory as tensors
(shuffled index slices, no loader, no statistics, no codes kept, no lower bound at the end of
the epoch): what remains is the model's own arithmetic. Epochs of the two alternate, so both see
the same machine state; the first epoch of each warms up and is left out of the medians.

Configurations: CSQ and CSQ_D on features (32 and 64 bits, the 1024 -> 1024 -> bits head) and
CSQ on 28 x 28 grayscale images with the smallcnn backbone (no augmentation). The _D step over
CSQ's comes from hand loops of the two whose epochs alternate (`d_step_ratio`), beside the
floor that P_pi's large matmuls and its Adam step set (`SurrogateArithmetic`), and P_pi's whole step
timed alone beside those matmuls alone (what the step adds to them: elementwise passes, gathers, Python).

    python benchmarks/bench_train.py [--data features:PATH.npz] [--epochs 4] [--images 6000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lbhash.data.base import EpochShard
from lbhash.train import TrainConfig
from lbhash.train.builder import build_experiment, input_options
from lbhash.train.loop import Trainer
from lbhash.train.optim import make_optimizer
from _smoke import parse_args  # beside this script


def default_features(tmp: Path, rows: int = 6000, shared_data: bool = True) -> tuple[str, str]:
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-mobilenetv1-features.npz"
    if shared_data and shared.is_file():
        return f"features:{shared}", "cifar10"
    rng = np.random.default_rng(0)  # stand-in with the shape of the CIFAR-10 features
    path = tmp / "features.npz"
    np.savez(path, x=rng.normal(size=(rows, 1024)).astype(np.float32), labels=rng.integers(0, 10, rows),
             is_test=np.arange(rows) >= rows * 5 // 6)
    return f"features:{path}", "given"


def digit_images(tmp: Path, n: int) -> str:
    """n 28 x 28 grayscale images of 10 classes: a class pattern plus noise."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n)
    patterns = rng.integers(0, 256, size=(10, 28, 28))
    noise = rng.integers(-40, 40, size=(n, 28, 28))
    images = np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8)
    path = tmp / "images.npz"
    np.savez(path, images=images, labels=labels, is_test=np.arange(n) >= int(0.9 * n))
    return f"image-array:{path}"


def surrogate_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    return make_optimizer("adam", params, cfg.surrogate.surrogate_lr, cfg.surrogate.surrogate_weight_decay)


class HandLoop:
    """The minimal loop: the experiment's learner and optimizers, the training data as tensors."""

    def __init__(self, cfg: TrainConfig):
        exp = build_experiment(cfg)
        cfg = exp.cfg  # resolved: the method's learning rate, the backbone's defaults
        self.learner = exp.learner
        self.cfg = cfg
        self.optimizers = [make_optimizer(cfg.recipe.optimizer, self.learner.theta_parameters(), cfg.recipe.lr, cfg.recipe.weight_decay)]
        if self.learner.lower_bound is not None:
            self.optimizers.append(surrogate_optimizer(self.learner.pi_parameters(), cfg))
        batches = exp.dataset.train_batches(exp.split.train, EpochShard(cfg.recipe.batch_size), options=input_options(exp.cfg))
        xs, ys, order = zip(*batches.epoch(0))  # one pass to hold every model input in memory
        position = torch.cat(order)
        self.x = torch.cat(xs)[torch.argsort(position)]
        self.y = torch.cat(ys)[torch.argsort(position)]
        self.batch_size = cfg.recipe.batch_size

    def epoch(self, seed: int) -> float:
        start = time.perf_counter()
        self.learner.train()
        generator = torch.Generator().manual_seed(seed)
        perm = torch.randperm(len(self.x), generator=generator)
        for s in range(0, len(perm), self.batch_size):
            index = perm[s:s + self.batch_size]
            _, out, pi = self.learner(self.x[index], self.y[index], index)
            loss = out.total if pi is None else out.total + pi[0]
            for opt in self.optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in self.optimizers:
                opt.step()
        return time.perf_counter() - start


def compare(cfg: TrainConfig, epochs: int) -> tuple[float, float, int]:
    """Median seconds per epoch of lbhash's Trainer and of the hand loop, and steps per epoch."""
    cfg = cfg.replace(epochs=epochs, lr_step=0, progress=False)
    trainer = Trainer(build_experiment(cfg))  # in memory, as lbhash.train.fit.epoch_times times epochs
    hand = HandLoop(cfg)
    ours, theirs = [], []
    for epoch in range(1, epochs + 1):
        ours.append(trainer.train_epoch(epoch)["seconds"])
        theirs.append(hand.epoch(epoch))
    return float(np.median(ours[1:])), float(np.median(theirs[1:])), len(trainer.batches)


class SurrogateArithmetic:
    """What a _D step cannot avoid on top of CSQ's: P_pi's three large batched matmuls (the
    forward's output layer, softmax @ W2^T, and W2's gradient) and its Adam step, on random
    data of the step's shapes, as many steps as an epoch has. No elementwise work, no gathers."""

    def __init__(self, loop: HandLoop):
        surrogate = copy.deepcopy(loop.learner.lower_bound.surrogate)  # its steps leave the loop's P_pi alone
        self.params = list(surrogate.parameters())
        self.optimizer = surrogate_optimizer(self.params, loop.cfg)
        self.steps = -(-len(loop.x) // loop.batch_size)
        u, hidden, patterns = surrogate.blocks, surrogate.hidden, surrogate.patterns
        self.hidden = torch.randn(u, loop.batch_size, hidden)
        self.probs = torch.softmax(torch.randn(u, loop.batch_size, patterns), -1)

    def epoch(self, seed: int) -> float:
        w1, b1, w2, b2 = self.params
        start = time.perf_counter()
        for _ in range(self.steps):
            with torch.no_grad():
                torch.baddbmm(b2, self.hidden, w2)
                torch.bmm(self.probs, w2.transpose(1, 2))
                grads = (torch.zeros_like(w1), torch.zeros_like(b1), torch.bmm(self.hidden.transpose(1, 2), self.probs),
                         torch.zeros_like(b2))
            for param, grad in zip(self.params, grads):
                param.grad = grad
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    def alone_ms(self, loop: HandLoop, steps: int) -> tuple[float, float]:
        """(median ms of P_pi's whole step alone: `fused_losses` and its backward on a batch of the loop's codes and
        labels, no optimizer; median ms of the floor's three matmuls alone), `steps` of each in turn."""
        lower_bound = loop.learner.lower_bound
        surrogate = copy.deepcopy(lower_bound.surrogate).train()
        codes = torch.randn(loop.batch_size, surrogate.bits, requires_grad=True)
        patterns, weights = lower_bound._targets(loop.y[:loop.batch_size])
        w1, b1, w2, b2 = self.params
        step, matmuls = [], []
        for _ in range(steps):
            start = time.perf_counter()
            pi, theta, _ = surrogate.fused_losses(codes, patterns, weights)
            (pi + theta).backward()
            step.append(time.perf_counter() - start)
            start = time.perf_counter()
            with torch.no_grad():
                torch.baddbmm(b2, self.hidden, w2)
                torch.bmm(self.probs, w2.transpose(1, 2))
                torch.bmm(self.hidden.transpose(1, 2), self.probs)
            matmuls.append(time.perf_counter() - start)
        return 1e3 * float(np.median(step)), 1e3 * float(np.median(matmuls))


def d_step_ratio(data: str, protocol: str, bits: int, rounds: int) -> tuple[float, ...]:
    """Hand loops of CSQ and CSQ_D with their epochs alternating, so that both see the same
    machine state (this machine's speed drifts by up to 2x within minutes): the median seconds
    per epoch of each, the median of the per-round ratios, and the median per-round ratio of
    (CSQ + `SurrogateArithmetic`) to CSQ, the floor that the _D step's ratio could reach if
    nothing but P_pi's large matmuls and its optimizer step were added. The first round warms up.
    Then (`SurrogateArithmetic.alone_ms`) P_pi's step alone and its three matmuls alone, in ms."""
    loops = [HandLoop(TrainConfig(data=data, protocol=protocol, method="csq", bits=bits, lbhash=lbhash, validation=0.0))
             for lbhash in (False, True)]
    floor = SurrogateArithmetic(loops[1])
    seconds = [[run.epoch(r) for run in (*loops, floor)] for r in range(rounds + 1)][1:]
    base, with_d, _ = zip(*seconds)
    return (float(np.median(base)), float(np.median(with_d)), float(np.median([d / b for b, d, _ in seconds])),
            float(np.median([(b + f) / b for b, _, f in seconds])), *floor.alone_ms(loops[1], 20 * rounds + 20))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None, help="a features: data spec (default: the CIFAR-10 features)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--images", type=int, default=6000, help="synthetic 28 x 28 images (0: skip)")
    p.add_argument("--rounds", type=int, default=8, help="alternating epochs for the _D step ratio")
    p.add_argument("--rows", type=int, default=6000,
                   help="rows of the random stand-in features (used without --data when the shared features are "
                        "missing, and always with --smoke)")
    args = parse_args(p, epochs=2, images=200, rounds=1, rows=300)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{torch.get_num_threads()} torch threads; median over epochs 2..{args.epochs}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, protocol = (args.data, "given") if args.data else default_features(tmp, args.rows, shared_data=not args.smoke)
        rows = []
        for bits in (32, 64):
            for lbhash in (False, True):
                cfg = TrainConfig(data=data, protocol=protocol, method="csq", bits=bits, lbhash=lbhash, validation=0.0)
                rows.append((f"features {cfg.variant} {bits} bits", *compare(cfg, args.epochs)))
        if args.images:
            cfg = TrainConfig(data=digit_images(tmp, args.images), protocol="given", method="csq", bits=32, validation=0.0,
                              backbone="smallcnn", transform="cifar")
            rows.append((f"28x28 images smallcnn CSQ 32 bits ({args.images} images)", *compare(cfg, args.epochs)))
        d_rows = [(bits, *d_step_ratio(data, protocol, bits, args.rounds)) for bits in (32, 64)]
    print(f"{'configuration':<52} {'steps':>5} {'lbhash s/epoch':>15} {'hand loop':>10} {'ratio':>6}")
    for name, ours, theirs, steps in rows:
        print(f"{name:<52} {steps:>5} {ours:>15.3f} {theirs:>10.3f} {ours / theirs:>5.2f}x")
    for bits, base, d, ratio, floor, step_ms, matmul_ms in d_rows:
        print(f"_D step over CSQ step, features {bits} bits (hand loops, {args.rounds} alternating rounds): "
              f"CSQ {base:.3f} s, CSQ_D {d:.3f} s per epoch; median ratio {ratio:.2f}x "
              f"(floor: CSQ plus P_pi's large matmuls and Adam step alone, {floor:.2f}x)")
        print(f"  P_pi's step alone, {bits} bits (fused_losses and its backward, no optimizer): {step_ms:.2f} ms, "
              f"of which its three large matmuls {matmul_ms:.2f} ms")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
