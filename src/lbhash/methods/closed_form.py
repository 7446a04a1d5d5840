"""Closed-form baselines: a linear map of the features fitted in one pass, then sign.

LSH, PCA, ITQ and `linear` fit `u = W x + b` on the run's normalised training features (`fit_projection`), which
training writes into the hash head (lbhash.train.closed_form), so a baseline is an ordinary hash model everywhere else.
`compute_loss` is only reported, never trained with; the fits run in float64 on the CPU, seeded by the run's seed.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss

# One pass over the training set; the optimizer fields are not used.
CLOSED_FORM_RECIPE = {"lr_step": 0, "epochs": 1}
CHUNK = 8192  # rows per float64 block: bounds the extra memory of the moments


class ClosedFormFit(NamedTuple):
    weight: np.ndarray                 # (bits, d) float64
    bias: np.ndarray                   # (bits,) float64
    history: dict[str, list[float]]    # per-iteration values of an iterative fit (ITQ)


def bin_np(v: np.ndarray) -> np.ndarray:
    """bin(v) = +1 if v >= 0 else -1, as float64 (the library's sign convention)."""
    return np.where(v >= 0, 1.0, -1.0)


def feature_mean(x: np.ndarray) -> np.ndarray:
    total = np.zeros(x.shape[1])
    for start in range(0, len(x), CHUNK):
        total += x[start:start + CHUNK].sum(0, dtype=np.float64)
    return total / len(x)


def cross_moment(x: np.ndarray, mean: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """(x - mean)^T (x - mean), or (x - mean)^T other when `other` is given, in float64 blocks."""
    width = x.shape[1] if other is None else other.shape[1]
    out = np.zeros((x.shape[1], width))
    for start in range(0, len(x), CHUNK):
        block = x[start:start + CHUNK].astype(np.float64) - mean
        out += block.T @ (block if other is None else other[start:start + CHUNK])
    return out


def project(x: np.ndarray, mean: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """(x - mean) @ directions in float64 blocks: (n, k)."""
    return np.concatenate([(x[s:s + CHUNK].astype(np.float64) - mean) @ directions for s in range(0, len(x), CHUNK)])


def principal_directions(x: np.ndarray, mean: np.ndarray, k: int) -> np.ndarray:
    """The k leading eigenvectors (d, k) of the centred scatter matrix, by decreasing eigenvalue; each column's
    largest-magnitude entry is made positive so that the result does not depend on the eigensolver's arbitrary signs."""
    values, vectors = np.linalg.eigh(cross_moment(x, mean))
    order = np.argsort(-values, kind="stable")[:k]
    top = vectors[:, order]
    pivot = top[np.argmax(np.abs(top), axis=0), np.arange(k)]
    return top * np.where(pivot < 0, -1.0, 1.0)


def affine(directions: np.ndarray, mean: np.ndarray, history: dict | None = None) -> ClosedFormFit:
    """u = directions^T (x - mean) as a weight and a bias."""
    weight = np.ascontiguousarray(directions.T)
    return ClosedFormFit(weight, -weight @ mean, history or {})


class ClosedFormHash(HashLoss):
    """Base of the closed-form baselines (see the module docstring)."""

    closed_form = True
    recipe = benchmark_recipe = recommended_recipe = CLOSED_FORM_RECIPE
    max_bits_is_dim = False   # PCA and ITQ: at most one bit per principal direction

    def compute_loss(self, u, labels, index):
        # the quantization error ||bin(u) - u||^2 per element: what ITQ minimises
        b = torch.where(u >= 0, 1.0, -1.0).to(u.dtype)
        return {"quantization": ((b - u) ** 2).mean()}

    def check_fit_inputs(self, num_train: int, input_dim: int | None) -> None:
        """Refuse, before a run writes anything, data this fit cannot use."""
        if input_dim is None:
            raise InputError(f"method {self.name} fits a linear map of feature vectors; image data needs a "
                             "deep method (or features extracted first)")
        if num_train < 2:
            raise InputError(f"method {self.name} needs at least 2 training items, got {num_train}")
        if self.max_bits_is_dim and self.bits > min(input_dim, num_train - 1):
            limit = ("feature dimensions" if input_dim <= num_train - 1 else "training items - 1")
            raise InputError(f"method {self.name}: bits={self.bits} exceeds the {min(input_dim, num_train - 1)} "
                             f"{limit} (one bit per principal direction); use fewer bits or lsh")

    def fit_projection(self, x: np.ndarray, labels: np.ndarray, seed: int) -> ClosedFormFit:
        raise NotImplementedError
