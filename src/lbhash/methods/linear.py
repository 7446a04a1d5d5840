"""A supervised linear baseline: ridge regression of the class centers on the features.

The target of an item is the mean of its labels' centers (the class center for single-label
data), the centers those lbhash generates for CSQ and the _D objective. W and b minimise
mean_i ||W x_i + b - t_i||^2 + ridge ||W||_F^2 (b unpenalised), in closed form:
W^T = (X_c^T X_c / n + ridge I)^-1 X_c^T T_c / n over the centred X and T, b = mean(t) - W mean(x).
"""

from __future__ import annotations

import numpy as np
import torch

from lbhash.errors import InputError
from lbhash.methods.base import register_method
from lbhash.methods.closed_form import ClosedFormFit, ClosedFormHash, cross_moment, feature_mean


@register_method
class Linear(ClosedFormHash):
    """u = W x + b, the ridge regression onto the class centers (see the module docstring)."""

    name = "linear"
    display_name = "Linear"
    description = "Baseline: closed-form ridge regression of the features onto the class centers"
    uses_centers = True

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False, ridge: float = 0.1):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if centers is None or tuple(centers.shape) != (num_classes, bits):
            raise InputError(f"method linear needs ({num_classes}, {bits}) class centers")
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge > 0 or ridge == float("inf"):
            raise InputError(f"method linear: ridge must be a positive finite number, got {ridge!r}")
        self.ridge = float(ridge)
        self.register_buffer("centers", centers.float().clone())

    def compute_loss(self, u, labels, index):
        # the regression's data term (the penalty needs W, which u does not show)
        counts = labels.sum(1, keepdim=True).clamp_min(1)
        target = (labels.to(u.dtype) @ self.centers.to(u.dtype)) / counts
        return {"regression": ((u - target) ** 2).mean()}

    def fit_projection(self, x: np.ndarray, labels: np.ndarray, seed: int) -> ClosedFormFit:
        labels = np.asarray(labels, dtype=np.float64)  # targets: each item's mean of its labels' centers
        targets = (labels @ self.centers.double().numpy()) / np.maximum(labels.sum(1, keepdims=True), 1)
        mean_x, mean_t = feature_mean(x), targets.mean(0)
        n, d = x.shape
        gram = cross_moment(x, mean_x) / n + self.ridge * np.eye(d)
        weight = np.linalg.solve(gram, cross_moment(x, mean_x, targets - mean_t) / n).T
        return ClosedFormFit(np.ascontiguousarray(weight), mean_t - weight @ mean_x, {})
