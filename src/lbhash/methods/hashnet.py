"""HashNet: deep learning to hash by continuation (Cao et al., ICCV 2017)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, register_method


def balance_weights(sim: torch.Tensor) -> torch.Tensor:
    """Per-pair weights |S|/S1 for similar and |S|/S0 for dissimilar pairs (all 1 if one kind is absent)."""
    total = sim.numel()
    s1 = sim.sum()
    # When one kind is absent the other kind's count is |S|, so its weight is exactly 1; the
    # clamp only keeps the absent kind's (unused) weight finite. No host sync needed.
    s0 = (total - s1).clamp(min=1)
    return sim * (total / s1.clamp(min=1)) + (1 - sim) * (total / s0)


@register_method
class HashNet(HashLoss):
    """Weighted pairwise likelihood on tanh(scale * u), scale = sqrt(epoch // step + 1)."""

    name = "hashnet"
    display_name = "HashNet"
    description = "HashNet: class-balanced pairwise likelihood on tanh outputs with a continuation scale"

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False,
                 alpha: float = 0.1, continuation_step: int = 20):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if not alpha > 0:
            raise InputError(f"hashnet: alpha must be > 0, got {alpha!r}")
        if int(continuation_step) != continuation_step or continuation_step < 1:
            raise InputError("hashnet: continuation_step must be a positive integer, "
                             f"got {continuation_step!r}")
        self.alpha = float(alpha)
        self.continuation_step = int(continuation_step)
        # A persistent buffer, so a checkpoint holds the scale; on_epoch_start also recomputes
        # it from the epoch, so a resumed run gets it right either way.
        self.register_buffer("scale", torch.tensor(1.0))

    def on_epoch_start(self, epoch: int) -> None:
        if int(epoch) != epoch or epoch < 0:
            raise InputError(f"hashnet: epoch must be a non-negative integer, got {epoch!r}")
        self.scale.fill_(math.sqrt(int(epoch) // self.continuation_step + 1))

    def compute_loss(self, u, labels, index):
        y = labels.to(u.dtype)
        h = torch.tanh(self.scale.to(u.dtype) * u)
        dp = self.alpha * (h @ h.T)
        sim = ((y @ y.T) > 0).to(u.dtype)
        # softplus(dp) = log(1 + exp(-|dp|)) + max(dp, 0), stable, and exact in gradient at dp = 0
        pair = F.softplus(dp) - sim * dp
        return {"pairwise": (balance_weights(sim) * pair).mean()}
