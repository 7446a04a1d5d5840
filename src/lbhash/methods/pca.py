"""PCA hashing: sign of the leading principal components, an unsupervised baseline."""

from __future__ import annotations

import numpy as np

from lbhash.methods.base import register_method
from lbhash.methods.closed_form import ClosedFormFit, ClosedFormHash, affine, feature_mean, principal_directions


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
