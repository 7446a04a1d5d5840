"""LSH: signs of random projections (Charikar, STOC 2002), an unsupervised baseline."""

from __future__ import annotations

import numpy as np

from lbhash.methods.base import register_method
from lbhash.methods.closed_form import ClosedFormFit, ClosedFormHash, affine, feature_mean


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
