"""CSQ: central similarity quantization (Yuan et al., CVPR 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, Recipe, register_method


def majority_targets(centers: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per sample, the bitwise majority (ties -> +1) of its positive labels' centers.

    For single-label rows this is the class center itself.
    """
    votes = labels.float() @ centers.float()  # (B, bits): sum of +/-1 over positive labels
    return torch.where(votes >= 0, 1.0, -1.0)


@register_method
class CSQ(HashLoss):
    """L = BCE((tanh(u) + 1) / 2, (c + 1) / 2) + lambda * mean((|tanh(u)| - 1)^2)."""

    name = "csq"
    display_name = "CSQ"
    description = "Central similarity quantization: pull tanh outputs to class hash centers (BCE)"
    center_part = "center"
    uses_centers = True
    lbhash_mode = "replace"  # CSQ_D replaces the BCE center loss with L_theta, as in the paper
    benchmark_recipe = Recipe(optimizer="adam", lr=1e-3, lr_step=0, epochs=150, batch_size=128)

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False,
                 quantization: float = 1e-4):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if centers is None or tuple(centers.shape) != (num_classes, bits):
            raise InputError(f"CSQ needs ({num_classes}, {bits}) class centers")
        self.quantization = float(quantization)
        self.register_buffer("centers", centers.float().clone())

    def compute_loss(self, u, labels, index):
        target = majority_targets(self.centers, labels).to(u.dtype)
        # (tanh(u) + 1) / 2 = sigmoid(2u): the logits form is stable and autocast-safe
        center = F.binary_cross_entropy_with_logits(2 * u, (target + 1) / 2)
        quant = self.quantization * ((torch.tanh(u).abs() - 1) ** 2).mean()
        return {"center": center, "quantization": quant}
