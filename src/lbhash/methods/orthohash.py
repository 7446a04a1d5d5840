"""OrthoHash: one cosine-similarity loss (Hoe et al., NeurIPS 2021, "One Loss for All").

The logits are scaled cosine similarities of u to each class's fixed code (the run's centers),
with a CosFace margin on the item's own classes:

    z_k = scale * (cos(u, c_k) - margin * y_k)
    classification = mean_i  - sum_k t_ik log softmax(z_i)_k,   t_i = y_i / sum_k y_ik

The optional quantization term is the authors' "cs" form, 1 - cos(u, bin(u)), weighted 0 by
default as in their code. Their BatchNorm and codebook are not included (docs/methods.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, register_method
from lbhash.methods.dbdh import check_constant

MIN_NORM = 1e-12  # floor of ||u||: a zero output has cosine 0 to every code, not 0/0


def cosine_logits(u: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """cos(u_i, c_k), shape (len(u), len(codes))."""
    return F.normalize(u, dim=1, eps=MIN_NORM) @ F.normalize(codes.to(u.dtype), dim=1, eps=MIN_NORM).T


@register_method
class OrthoHash(HashLoss):
    """L = CE over classes of scale * (cos(u, c_k) - margin [k in y]) + quantization * mean(1 - cos(u, bin u))."""

    name = "orthohash"
    display_name = "OrthoHash"
    description = "OrthoHash: cross-entropy on scaled cosines to fixed class codes with an additive margin"
    center_part = "classification"
    uses_centers = True
    # "add", unlike CSQ: with "replace" nothing of OrthoHash would remain (its quantization
    # weight is 0), and OrthoHash_D would be L_theta alone, i.e. CSQ_D without CSQ's term.
    lbhash_mode = "add"
    # Not in the DeepHash benchmark: the authors' own script (Adam lr 1e-4, weight decay 5e-4,
    # batch 256, 100 epochs, lr x0.1 after 80).
    benchmark_recipe = {"optimizer": "adam", "lr": 1e-4, "weight_decay": 5e-4, "lr_step": 80, "epochs": 100,
                        "batch_size": 256}

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False,
                 scale: float = 8.0, margin: float = 0.2, quantization: float = 0.0):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if centers is None or tuple(centers.shape) != (num_classes, bits):
            raise InputError(f"method orthohash needs ({num_classes}, {bits}) class centers")
        self.scale = check_constant(self.name, "scale", scale, strict=True)
        self.margin = check_constant(self.name, "margin", margin)
        # cosines differ by at most 2: a margin of 2 or more could never be met
        if self.margin >= 2:
            raise InputError(f"method orthohash: margin must be below 2, got {margin!r}")
        self.quantization = check_constant(self.name, "quantization", quantization)
        self.register_buffer("centers", centers.float().clone())

    def compute_loss(self, u, labels, index):
        y = labels.to(u.dtype)
        logits = self.scale * (cosine_logits(u, self.centers) - self.margin * y)
        # clamp: an unlabelled row gets target 0 (no loss), not 0/0, without a device sync
        target = y / y.sum(1, keepdim=True).clamp(min=1)
        classification = -(target * F.log_softmax(logits, dim=1)).sum(1).mean()
        signs = torch.where(u >= 0, 1.0, -1.0).to(u.dtype)  # bin(u): 0 -> +1, no gradient
        quant = self.quantization * (1 - F.cosine_similarity(u, signs, dim=1, eps=MIN_NORM)).mean()
        return {"classification": classification, "quantization": quant}

    def classify(self, codes: torch.Tensor) -> torch.Tensor:
        """Class scores cos(b, c_k) (= <b, c_k> / bits for +/-1 codes b), shape (n, C)."""
        return cosine_logits(codes.to(self.centers.dtype), self.centers)
