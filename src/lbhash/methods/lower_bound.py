"""The _D objective (paper Alg. 1): one wrapper that turns any method into its _D variant.

It holds the surrogate P_pi and the class centers. Its forward adds lambda * L_theta to the
base method's loss ("add"), or drops the method's own center loss in its favour
("replace"); `loss_pi` gives the surrogate's separate training loss. Gradients are kept
apart: L_theta reaches the hash model only (pi frozen), L_pi reaches pi only (l detached), so
one backward pass followed by a step of each optimizer performs lines 7-8 of Alg. 1.
"""

from __future__ import annotations

import torch
from torch import nn

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, LossOutput, loss_output
from lbhash.surrogate import BlockSurrogate

MODES = ("add", "replace")


class LowerBoundObjective(nn.Module):
    """base loss (+ or instead of its center loss) + weight * L_theta."""

    def __init__(self, base: HashLoss, centers: torch.Tensor, surrogate: BlockSurrogate,
                 weight: float = 1.0, mode: str = "add", theta_dropout: bool = True):
        super().__init__()
        if mode not in MODES:
            raise InputError(f"lower-bound mode must be 'add' or 'replace', got {mode!r}")
        if mode == "replace" and base.center_part is None:
            raise InputError(f"method {base.name} has no center loss to replace; use mode 'add'")
        if tuple(centers.shape) != (base.num_classes, base.bits):
            raise InputError(f"centers must have shape ({base.num_classes}, {base.bits}), got {tuple(centers.shape)}")
        if surrogate.bits != base.bits:
            raise InputError(f"surrogate has {surrogate.bits} bits but the method has {base.bits}")
        self.base, self.surrogate = base, surrogate
        self.weight, self.mode, self.theta_dropout = float(weight), mode, theta_dropout
        self.register_buffer("centers", centers.float().clone())
        self.register_buffer("center_patterns", surrogate.pattern_index(self.centers))

    @property
    def name(self) -> str:
        return f"{self.base.name}_D"

    def forward(self, u: torch.Tensor, labels: torch.Tensor, index: torch.Tensor) -> LossOutput:
        parts = dict(self.base(u, labels, index).parts)
        if self.mode == "replace":
            parts.pop(self.base.center_part)
        parts["lower_bound"] = self.weight * self.surrogate.loss_theta(
            u, self.center_patterns, labels, dropout=self.theta_dropout)
        return loss_output(parts)

    def loss_pi(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """L_pi on the detached outputs, and the surrogate's pattern accuracy."""
        return self.surrogate.loss_pi(u)

    def on_epoch_start(self, epoch: int) -> None:
        self.base.on_epoch_start(epoch)

    def on_epoch_end(self, epoch: int) -> None:
        self.base.on_epoch_end(epoch)

    def classify(self, codes: torch.Tensor) -> torch.Tensor | None:
        return self.base.classify(codes)
