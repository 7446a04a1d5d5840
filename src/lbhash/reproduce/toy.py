"""The MVB toy experiment (paper Sec. 6.2 Fig. "Toy", App. "Sanity16"; docs/toy.md).

A multivariate Bernoulli over all 2^bits codes has joint probabilities softmax(z), z ~ N(0, 1)
per code. A `BlockSurrogate` trained with L_pi on samples of it estimates the joint, scored by
KL(real || estimate) next to the product of per-bit marginals and the empirical histogram of the
same samples (the sampling floor).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from lbhash.errors import InputError
from lbhash.evaluate.report import jsonable
from lbhash.reproduce.figures import plot_window, toy_plot
from lbhash.reproduce.paper import TOY_KL
from lbhash.reproduce.stats import kl_divergence
from lbhash.surrogate import BlockSurrogate, joint_distribution, marginal_product

# Names of the random streams; fixed so that a seed always gives the same numbers.
_REAL, _TRAIN, _EVAL, _TORCH = 1, 2, 3, 4
_MAX_BITS = 16


@dataclass(frozen=True)
class ToyConfig:
    bits: int = 8
    block_size: int = 8
    train_samples: int = 10_000
    eval_samples: tuple[int, ...] = (100, 10_000, 100_000)
    noise: float = 0.1  # inputs l = code + noise * N(0, 1); 0 gives clean +/-1 inputs
    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_samples", tuple(sorted({int(n) for n in self.eval_samples})))
        if self.block_size < 1 or self.bits < 1 or self.bits % self.block_size:
            raise InputError(f"bits={self.bits} is not a positive multiple of the block size "
                             f"{self.block_size}")
        if self.bits > _MAX_BITS:
            raise InputError(f"the toy enumerates all 2^bits codes; bits must be <= {_MAX_BITS}, "
                             f"got {self.bits}")
        for name in ("train_samples", "epochs", "batch_size"):
            if int(getattr(self, name)) <= 0:
                raise InputError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.eval_samples or min(self.eval_samples) <= 0:
            raise InputError(f"eval_samples must be positive integers, got {list(self.eval_samples)}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise InputError(f"noise must be a finite number >= 0, got {self.noise}")
        if self.seed < 0:
            raise InputError(f"seed must be >= 0, got {self.seed}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"lr must be a positive number, got {self.lr}")


@dataclass
class ToyResult:
    """All numbers of one run. `kl[N][estimator]` is KL(real || estimate) in nats."""

    config: ToyConfig
    real: np.ndarray  # (2^bits,) the true joint
    kl: dict[int, dict[str, float]]
    true_marginal_product_kl: float  # what "naive" costs as N -> inf
    true_block_product_kl: float | None  # best single product of block distributions (blocks > 1)
    unseen_mass: dict[int, float]  # real mass on codes absent from the N evaluation samples
    flipped_bits: dict[int, float]  # share of input bits whose sign the noise flipped
    train: dict[str, float]
    estimates: dict[int, dict[str, np.ndarray]] = field(repr=False)  # for plots

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (infinities as the string "inf"); estimates are left out."""
        return jsonable({
            "config": asdict(self.config),
            "codes": len(self.real),
            "blocks": self.config.bits // self.config.block_size,
            "kl_real_vs": {str(n): row for n, row in self.kl.items()},
            "true_marginal_product_kl": self.true_marginal_product_kl,
            "true_block_product_kl": self.true_block_product_kl,
            "unseen_real_mass": {str(n): v for n, v in self.unseen_mass.items()},
            "flipped_input_bits": {str(n): v for n, v in self.flipped_bits.items()},
            "train": self.train,
            "paper": TOY_KL.get(self.config.bits),
        })


ESTIMATORS = {  # row key -> label of the printed table
    "surrogate": "surrogate: mean of block products",
    "naive": "naive: product of sample marginals",
    "histogram": "histogram of the N samples (floor)",
    "histogram_jeffreys": "histogram, add-1/2 smoothed",
    "floor_asymptotic": "(K-1)/(2N), asymptotic floor",
}


def random_mvb(bits: int, rng: np.random.Generator) -> np.ndarray:
    """Joint probabilities of all 2^bits codes: softmax of i.i.d. N(0, 1) logits."""
    z = rng.standard_normal(2 ** bits)
    p = np.exp(z - z.max())
    return p / p.sum()


def sample_codes(real: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n codes drawn from `real`: their indices (n,) and +/-1 codes (n, bits), bit k = 2^k."""
    bits = int(len(real)).bit_length() - 1
    index = rng.choice(len(real), size=n, p=real)
    signs = np.where((index[:, None] >> np.arange(bits)) & 1, 1, -1).astype(np.int8)
    return index, signs


def histogram(index: np.ndarray, codes: int, pseudocount: float = 0.0) -> np.ndarray:
    """Empirical distribution of code indices, with `pseudocount` added to every code."""
    counts = np.bincount(index, minlength=codes).astype(np.float64) + pseudocount
    return counts / counts.sum()


def block_marginals(joint: np.ndarray, bits: int, block_size: int) -> np.ndarray:
    """Marginal distribution of every block (u, 2^s) of a joint over 2^bits codes."""
    u, k = bits // block_size, 2 ** block_size
    # index = sum_j i_j k^j, so block j is axis u-1-j of the C-ordered reshape
    grid = joint.reshape((k,) * u)
    axes = range(u)
    return np.stack([grid.sum(axis=tuple(a for a in axes if a != u - 1 - j)) for j in range(u)])


def make_inputs(signs: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Surrogate inputs l = code + noise * N(0, 1), float32."""
    l = signs.astype(np.float32)
    if noise > 0:
        l += (noise * rng.standard_normal(signs.shape)).astype(np.float32)
    return l


def train_surrogate(l: np.ndarray, cfg: ToyConfig) -> tuple[BlockSurrogate, dict[str, float]]:
    """Fit a BlockSurrogate to inputs l (n, bits) with L_pi (Adam, shuffled mini-batches)."""
    torch.set_flush_denormal(True)  # denormals slow CPU training by orders of magnitude
    x = torch.from_numpy(l)
    threads = torch.get_num_threads()
    # Steps this small are dominated by thread hand-offs, which collapse on a busy machine
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # seeded init, shuffles and dropout; global RNG untouched
            torch.manual_seed(int(np.random.SeedSequence([cfg.seed, _TORCH, cfg.bits]).generate_state(1)[0]))
            model = BlockSurrogate(cfg.bits, block_size=cfg.block_size)
            opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)
            model.train()
            start = time.perf_counter()
            for _ in range(cfg.epochs):
                total, correct = 0.0, 0.0
                for batch in torch.randperm(len(x)).split(cfg.batch_size):
                    loss, acc = model.loss_pi(x[batch])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += loss.item() * len(batch)
                    correct += acc.item() * len(batch)
            seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return model, {"final_epoch_loss": total / len(x), "final_epoch_pattern_accuracy": correct / len(x),
                   "seconds": seconds, "steps": cfg.epochs * math.ceil(len(x) / cfg.batch_size)}


def surrogate_joint(model: BlockSurrogate, l: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """Mean over samples of the Cartesian product of the block distributions, (2^bits,).

    For blocks j = 0..u-1 the product's index is sum_j i_j k^j. Blocks 0..u-2 are expanded per
    sample (B x k^(u-1)); the last one enters through a matrix product, so N x 2^bits is never
    formed: with two blocks the sum is P_2^T P_1.
    """
    u, k = model.blocks, model.patterns
    acc = torch.zeros(k, k ** (u - 1), dtype=torch.float64)
    x = torch.from_numpy(np.ascontiguousarray(l, dtype=np.float32))
    for part in x.split(chunk):
        probs = model.block_probs(part).double()  # (B, u, k), dropout off
        rest = torch.ones(len(part), 1, dtype=torch.float64)
        for j in range(u - 1):
            rest = (probs[:, j, :, None] * rest[:, None, :]).reshape(len(part), -1)
        acc += probs[:, u - 1, :].T @ rest
    return (acc.reshape(-1) / len(x)).numpy()


def run_toy(cfg: ToyConfig | None = None, **overrides: Any) -> ToyResult:
    """The whole experiment for one bit length; same config, same numbers."""
    cfg = replace(cfg or ToyConfig(), **overrides)
    k = 2 ** cfg.bits
    real = random_mvb(cfg.bits, np.random.default_rng([cfg.seed, _REAL, cfg.bits]))
    true_marginals = real @ ((np.arange(k)[:, None] >> np.arange(cfg.bits)) & 1)  # P(bit j = +1), j < bits
    true_naive = joint_distribution(np.stack([1 - true_marginals, true_marginals], axis=1))
    blocks = cfg.bits // cfg.block_size
    true_block = (kl_divergence(real, joint_distribution(block_marginals(real, cfg.bits, cfg.block_size)))
                  if blocks > 1 else None)

    rng = np.random.default_rng([cfg.seed, _TRAIN, cfg.bits])
    _, train_signs = sample_codes(real, cfg.train_samples, rng)
    model, train_stats = train_surrogate(make_inputs(train_signs, cfg.noise, rng), cfg)

    kl, unseen, flipped, estimates = {}, {}, {}, {}
    for n in cfg.eval_samples:
        rng = np.random.default_rng([cfg.seed, _EVAL, cfg.bits, n])
        index, signs = sample_codes(real, n, rng)
        l = make_inputs(signs, cfg.noise, rng)
        est = {"surrogate": surrogate_joint(model, l), "naive": marginal_product(signs),
               "histogram": histogram(index, k)}
        kl[n] = {**{name: kl_divergence(real, p) for name, p in est.items()},
                 "histogram_jeffreys": kl_divergence(real, histogram(index, k, 0.5)),
                 "floor_asymptotic": (k - 1) / (2 * n)}
        unseen[n] = float(real[est["histogram"] == 0].sum())
        flipped[n] = float(np.mean((l >= 0) != (signs > 0)))
        estimates[n] = est
    return ToyResult(cfg, real, kl, kl_divergence(real, true_naive), true_block, unseen, flipped,
                     train_stats, estimates)


def format_table(result: ToyResult) -> str:
    """KL table: rows are estimators, columns the numbers N of evaluation samples."""
    cfg, k = result.config, len(result.real)
    ns = list(result.kl)
    width = max(len(s) for s in ESTIMATORS.values()) + 2
    head = f"{'KL(real || estimate), nats':<{width}}" + "".join(f"{'N=' + str(n):>11}" for n in ns)
    lines = [f"{cfg.bits} bits, {cfg.bits // cfg.block_size} block(s) of {cfg.block_size} "
             f"(K = {k} codes); surrogate trained on {cfg.train_samples} samples, {cfg.epochs} epochs, "
             f"input noise sigma = {cfg.noise:g}, seed {cfg.seed}", head, "-" * len(head)]
    for key, label in ESTIMATORS.items():
        lines.append(f"{label:<{width}}" + "".join(f"{_fmt(result.kl[n][key]):>11}" for n in ns))
    lines.append(f"{'real mass on codes unseen in N':<{width}}"
                 + "".join(f"{_fmt(result.unseen_mass[n]):>11}" for n in ns))
    lines.append(f"{'true marginal product (N -> inf)':<{width}}{_fmt(result.true_marginal_product_kl):>11}")
    if result.true_block_product_kl is not None:
        lines.append(f"{'true block-marginal product':<{width}}{_fmt(result.true_block_product_kl):>11}"
                     "   (best single product of blocks; a mixture of products can do better)")
    paper = TOY_KL.get(cfg.bits)
    if paper:
        at = f"N = {paper['eval_samples']}" if paper["eval_samples"] else "N not stated"
        lines.append(f"{'paper (' + at + ')':<{width}}surrogate {paper['surrogate']}, naive {paper['naive']}")
    return "\n".join(lines)


def paper_comparison(result: ToyResult) -> list[str]:
    """Where the paper's numbers for this bit length can and cannot be matched, in words."""
    paper = TOY_KL.get(result.config.bits)
    if paper is None:
        return []
    kl, k, ns = result.kl, len(result.real), list(result.kl)
    n0, target = ns[0], paper["surrogate"]
    lines = [f"naive: paper {paper['naive']}; here {result.true_marginal_product_kl:.4f} in the limit "
             f"N -> inf and {_fmt(kl[n0]['naive'])} from N = {n0} samples (the limit depends on the "
             "random joint, i.e. on the seed)."]
    at = paper["eval_samples"]
    text = f"surrogate: paper {target}" + (f" from N = {at} samples" if at else " (N not stated)")
    if at in kl:
        text += f"; here {_fmt(kl[at]['surrogate'])} at N = {at}"
    need = math.ceil((k - 1) / (2 * target))
    text += f". The sampling floor (K-1)/(2N) is above {target} for N < {need:,}"
    reached = [n for n in ns if kl[n]["surrogate"] <= target]
    if reached:
        text += f"; this run reaches <= {target} at N = {', '.join(map(str, reached))}."
    else:
        best = min(ns, key=lambda n: kl[n]["surrogate"])
        text += f"; no N of this run reaches it (best {_fmt(kl[best]['surrogate'])} at N = {best})."
    lines.append(text)
    if result.true_block_product_kl is not None and result.true_block_product_kl > target:
        lines.append(f"A single product of block distributions cannot get below "
                     f"{result.true_block_product_kl:.4f} here, so {target} needs the mixture "
                     "(mean over samples) of block products.")
    return lines


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.4f}"


def plot_toy(result: ToyResult, path) -> None:
    """Real probabilities (bars) and the surrogate and naive estimates (steps): at 8 bits for
    the smallest and the largest N, above 8 bits the window of `plot_window` at the largest N."""
    ns = sorted(result.kl)
    shown = [ns[0], ns[-1]] if len(result.real) <= 256 and len(ns) > 1 else ns[-1:]
    codes = plot_window(result.real)
    rows = []
    for n in shown:
        probs = {"real": result.real[codes], **{e: result.estimates[n][e][codes] for e in ("surrogate", "naive")}}
        rows.append((f"{result.config.bits}-bit MVB, codes {codes[0]}-{codes[-1]} of {len(result.real)}, N = {n}: "
                     f"KL surrogate {_fmt(result.kl[n]['surrogate'])}, naive {_fmt(result.kl[n]['naive'])}",
                     codes, probs))
    toy_plot(rows, path)
