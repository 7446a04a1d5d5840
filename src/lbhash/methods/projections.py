"""The unsupervised closed-form baselines: LSH, PCA hashing and ITQ, each the sign of a linear map of the
centred features that needs no labels.

- LSH: signs of random projections (Charikar, STOC 2002).
- PCA hashing: sign of the leading principal components.
- ITQ: iterative quantization (Gong and Lazebnik, CVPR 2011). V = the centred features projected on their
  `bits` leading principal directions; starting from a seeded random rotation R, alternate B = bin(V R) and
  the orthogonal Procrustes step R = argmin ||B - V R||_F (SVD of B^T V = U S W^T gives R = W U^T). Each
  step minimises the quantization error exactly given the other, so it never increases.
"""

from __future__ import annotations

import numpy as np

from lbhash.errors import InputError
from lbhash.methods.base import register_method
from lbhash.methods.closed_form import (ClosedFormFit, ClosedFormHash, affine, bin_np, feature_mean,
                                        principal_directions, project)


@register_method
class LSH(ClosedFormHash):
    """u = W (x - mean), W with i.i.d. standard normal entries drawn from the run's seed."""

    name = "lsh"
    display_name = "LSH"
    description = "Baseline: sign of seeded Gaussian random projections of the centred features (no labels)"
    needs_labels = False

    def fit_projection(self, x: np.ndarray, labels: np.ndarray, seed: int) -> ClosedFormFit:
        # hyperplanes through the training mean: through the origin, skewed features would
        # give bits that are almost constant
        directions = np.random.default_rng(seed).standard_normal((x.shape[1], self.bits))
        return affine(directions, feature_mean(x))


@register_method
class PCAHash(ClosedFormHash):
    """u = P^T (x - mean), P the `bits` leading eigenvectors of the training scatter matrix."""

    name = "pca"
    display_name = "PCA"
    description = "Baseline: sign of the leading principal components of the features (no labels)"
    needs_labels = False
    max_bits_is_dim = True

    def fit_projection(self, x: np.ndarray, labels: np.ndarray, seed: int) -> ClosedFormFit:
        mean = feature_mean(x)
        return affine(principal_directions(x, mean, self.bits), mean)


def itq_rotation(v: np.ndarray, rotation: np.ndarray, iterations: int) -> tuple[np.ndarray, list[float]]:
    """`iterations` ITQ steps from `rotation`; (R, the error ||B - V R||^2 / V.size after each)."""
    errors = []
    for _ in range(iterations):
        b = bin_np(v @ rotation)
        u, _, wt = np.linalg.svd(b.T @ v)
        rotation = wt.T @ u.T
        errors.append(float(((b - v @ rotation) ** 2).sum() / v.size))
    return rotation, errors


@register_method
class ITQ(ClosedFormHash):
    """u = R^T P^T (x - mean): PCA to `bits` dimensions, then the rotation ITQ learns."""

    name = "itq"
    display_name = "ITQ"
    description = "Baseline: PCA then a learned rotation minimising the quantization error (no labels)"
    needs_labels = False
    max_bits_is_dim = True

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None, centers=None,
                 multi_label: bool = False, iterations: int = 50):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
            raise InputError(f"method itq: iterations must be a non-negative integer, got {iterations!r}")
        self.iterations = iterations

    def fit_projection(self, x: np.ndarray, labels: np.ndarray, seed: int) -> ClosedFormFit:
        mean = feature_mean(x)
        directions = principal_directions(x, mean, self.bits)
        # the start: a seeded random rotation, Q of the QR of a Gaussian matrix, its columns' signs fixed by R's
        # diagonal (so that Q is uniquely defined by the draw)
        q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((self.bits, self.bits)))
        start = q * np.where(np.diag(r) < 0, -1.0, 1.0)
        rotation, errors = itq_rotation(project(x, mean, directions), start, self.iterations)
        return affine(directions @ rotation, mean, {"quantization": errors})
