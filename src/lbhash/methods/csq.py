"""CSQ: central similarity quantization (Yuan et al., CVPR 2020)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, register_method


TIE_RULES = ("random-center", "plus-one")


def tie_center(bits: int, seed: int, rule: str = "random-center") -> torch.Tensor | None:
    """CSQ's tie rule of multi-label majority targets (option `csq_ties`): "random-center", the seeded
    random +/-1 center whose bits break the ties (CSQ's reference `label2center` draws one per run);
    "plus-one": None, ties take +1 (the rule of runs made before it)."""
    if rule not in TIE_RULES:
        raise InputError(f"csq_ties must be one of {', '.join(TIE_RULES)}, got {rule!r}")
    if rule == "plus-one":
        return None
    rng = np.random.default_rng([int(seed), 28, int(bits)])
    return torch.from_numpy(rng.integers(0, 2, bits) * 2.0 - 1).float()


def majority_targets(centers: torch.Tensor, labels: torch.Tensor, ties: torch.Tensor | None = None) -> torch.Tensor:
    """Per sample, the bitwise majority (sign of the sum) of its positive labels' centers (a single-label
    row's class center); a tied bit takes that bit of `ties` (CSQ's reference rule), or +1 when `ties` is
    None (the rule of runs made before it)."""
    votes = labels.float() @ centers.float()  # (B, bits): sum of +/-1 over positive labels
    tied = torch.ones_like(votes) if ties is None else ties.to(votes).expand_as(votes)
    return torch.where(votes > 0, 1.0, torch.where(votes < 0, -1.0, tied))


@register_method
class CSQ(HashLoss):
    """L = BCE((tanh(u) + 1) / 2, (c + 1) / 2) + lambda * mean((|tanh(u)| - 1)^2)."""

    name = "csq"
    display_name = "CSQ"
    description = "Central similarity quantization: pull tanh outputs to class hash centers (BCE)"
    center_part = "center"
    uses_centers = True
    majority_targets = True
    lbhash_mode = "replace"  # CSQ_D replaces the BCE center loss with L_theta, as in the paper
    benchmark_recipe = {"optimizer": "adam", "lr": 1e-3, "lr_step": 0, "epochs": 150, "batch_size": 128}

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False,
                 tie_center: torch.Tensor | None = None, quantization: float = 1e-4):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if centers is None or tuple(centers.shape) != (num_classes, bits):
            raise InputError(f"CSQ needs ({num_classes}, {bits}) class centers")
        if not (isinstance(quantization, (int, float)) and math.isfinite(quantization) and quantization >= 0):
            raise InputError(f"method csq: quantization must be a finite number >= 0, got {quantization!r}")
        self.quantization = float(quantization)
        self.register_buffer("centers", centers.float().clone())
        # the bits that break multi-label ties (`tie_center`), saved in checkpoints; None: +1 ties
        # (runs made before the reference rule; their checkpoints have no such key)
        self.register_buffer("tie_center", None if tie_center is None else tie_center.float().clone())

    def compute_loss(self, u, labels, index):
        target = majority_targets(self.centers, labels, self.tie_center).to(u.dtype)
        # (tanh(u) + 1) / 2 = sigmoid(2u): the logits form is stable and autocast-safe
        center = F.binary_cross_entropy_with_logits(2 * u, (target + 1) / 2)
        quant = self.quantization * ((torch.tanh(u).abs() - 1) ** 2).mean()
        return {"center": center, "quantization": quant}
