"""DCH: deep Cauchy hashing (Cao et al., CVPR 2018)."""

from __future__ import annotations

import torch

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, register_method
from lbhash.methods.hashnet import balance_weights

MAX_COSINE = 0.99   # keeps the distance away from 0, so gamma / d stays finite
MIN_NORM = 1e-4     # floor of the norm product: a zero output gives cosine 0, not 0/0


def cosine_distance(a: torch.Tensor, b: torch.Tensor, bits: int) -> torch.Tensor:
    """d_ij = (1 - min(cos(a_i, b_j), 0.99)) * bits / 2, shape (len(a), len(b))."""
    norms = a.norm(dim=1, keepdim=True) * b.norm(dim=1, keepdim=True).T
    cos = (a @ b.T) / norms.clamp(min=MIN_NORM)
    return (1 - cos.clamp(max=MAX_COSINE)) * (bits / 2)


@register_method
class DCH(HashLoss):
    """Class-balanced Cauchy pair loss on cosine distances plus a Cauchy quantization term."""

    name = "dch"
    display_name = "DCH"
    description = "Deep Cauchy hashing: balanced Cauchy pair loss on cosine distances, Cauchy quantization"

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False,
                 gamma: float = 20.0, quantization: float = 0.1):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if not gamma > 0:
            raise InputError(f"dch: gamma must be > 0, got {gamma!r}")
        if not quantization >= 0:
            raise InputError(f"dch: quantization must be >= 0, got {quantization!r}")
        self.gamma, self.quantization = float(gamma), float(quantization)

    def compute_loss(self, u, labels, index):
        y = labels.to(u.dtype)
        sim = ((y @ y.T) > 0).to(u.dtype)
        d = cosine_distance(u, u, self.bits)
        # S log(d/g) + log(1 + g/d) written per pair type: log1p of a bounded ratio
        pair = sim * torch.log1p(d / self.gamma) + (1 - sim) * torch.log1p(self.gamma / d)
        pairwise = (balance_weights(sim) * pair).mean()
        ones = torch.ones(1, self.bits, dtype=u.dtype, device=u.device)
        d_quant = cosine_distance(u.abs(), ones, self.bits)
        quant = self.quantization * torch.log1p(d_quant / self.gamma).mean()
        return {"pairwise": pairwise, "quantization": quant}
