"""The _D objective (paper Alg. 1): one wrapper that turns any method into its _D variant.

It holds the surrogate P_pi and the class centers; `losses(u, labels, index)` gives the method's
loss plus lambda * L_theta ("add", or "replace" its center loss) and L_pi. L_theta reaches the
hash model only and L_pi reaches pi only, so one backward pass and a step of each optimizer
perform lines 7-8 of Alg. 1. Its options are an `ObjectiveOptions` (`lbhash train --lbhash-weight
...`); those beyond the paper's text are off in the paper-faithful setting (docs/methods.md).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import nn

from lbhash.errors import InputError
from lbhash.methods.base import PAPER_LBHASH, HashLoss, LossOutput, loss_output
from lbhash.methods.csq import TIE_RULES, majority_targets
from lbhash.options import Options, option
from lbhash.surrogate import MULTILABEL_THETA, REDUCTIONS, BlockSurrogate, theta_weights

MODES = ("add", "replace")
ASSIGNMENTS = ("contiguous", "permuted", "redraw")
MULTILABEL_TARGETS = ("average", "majority")


class ObjectiveOptions(Options):
    """The _D objective's options (the module docstring); None: the method's default under the
    run's profile (lbhash.train.resolve), or the paper's where the objective is built directly."""

    lbhash_mode: Literal[MODES] | None = option(
        None, "Add L_theta to the method's loss, or replace its center loss.", f"one of {', '.join(MODES)}",
        shown="the method's")
    lbhash_weight: float | None = option(None, "lambda: the weight of L_theta.", "a positive number",
                                         shown="the method's", gt=0)
    lbhash_reduction: Literal[REDUCTIONS] | None = option(
        None, "L_theta over the blocks: sum (the paper's reading) or mean.", f"one of {', '.join(REDUCTIONS)}",
        shown="the method's")
    surrogate_flips: int | None = option(None, "Random bits flipped per sample in the surrogate's training codes.",
                                         "a non-negative integer", shown="the method's", ge=0)
    block_assignment: Literal[ASSIGNMENTS] | None = option(
        None, "Bits to surrogate blocks: contiguous, one seeded permutation, or a permutation redrawn every "
              "block_redraw_every epochs.", f"one of {', '.join(ASSIGNMENTS)}", shown="the method's")
    block_redraw_every: int = option(4, "Epochs between redraws of the bit-to-block permutation.",
                                     "a positive integer", ge=1)
    multilabel_target: Literal[MULTILABEL_TARGETS] | None = option(
        None, "Multi-label L_theta: averaged over the positive labels' centers, or against their bitwise "
              "majority.", f"one of {', '.join(MULTILABEL_TARGETS)}", shown="the method's")
    multilabel_theta: Literal[MULTILABEL_THETA] | None = option(
        None, "Multi-label L_theta against the positive labels' centers: their losses summed (the paper) or "
              "averaged.", f"one of {', '.join(MULTILABEL_THETA)}",
        shown="the profile's (sum: the paper's, also recommended)")
    csq_ties: Literal[TIE_RULES] = option(
        "random-center", "Tied bits of a multi-label item's majority target (CSQ, multilabel_target majority): "
                         "the bits of one fixed random center drawn from the seed (CSQ's reference) or +1.",
        "one of random-center, plus-one")
    fused_surrogate: bool = option(True, "L_pi and L_theta from one surrogate forward pass where possible.",
                                   "true or false")
    theta_dropout: bool = option(True, "Dropout active in the L_theta pass.", "true or false")

    def filled(self, base: HashLoss) -> "ObjectiveOptions":
        """These options with every None set to the paper's value for `base`."""
        paper = {"lbhash_mode": base.lbhash_mode, **{k: v for k, v in PAPER_LBHASH.items() if k in type(self).model_fields}}
        return self.model_copy(update={k: v for k, v in paper.items() if getattr(self, k) is None})


class LowerBoundObjective(nn.Module):
    """base loss (+ or instead of its center loss) + lbhash_weight * L_theta, and L_pi.

    Parameters
    ----------
    base : HashLoss
        The method to wrap (`create_method(...)`).
    centers : torch.Tensor
        (num_classes, bits) +/-1 class centers (`lbhash.centers.generate_centers`).
    surrogate : BlockSurrogate
        P_pi over blocks of the code (`lbhash.surrogate.BlockSurrogate(bits)`).
    options : ObjectiveOptions, optional
        The options of the module docstring; None, or a None field: the paper's.
    seed : int
        Seeds the bit-to-block permutations.
    tie_center : torch.Tensor, optional
        The center whose bits break ties of majority targets (None: +1).

    Returns
    -------
    Called as `objective(u, labels, index)`, it gives the hash model's loss (a `LossOutput`);
    `losses(u, labels, index)` gives that and (L_pi, pattern accuracy), L_pi for P_pi's own
    optimizer. docs/contributing.md shows it in a training loop of one's own.

    Examples
    --------
    >>> import torch
    >>> from lbhash.centers import generate_centers
    >>> from lbhash.methods import LowerBoundObjective, create_method
    >>> from lbhash.surrogate import BlockSurrogate
    >>> centers = torch.as_tensor(generate_centers(16, 3, seed=0, cache=False), dtype=torch.float32)
    >>> objective = LowerBoundObjective(create_method("dch", 16, 3), centers, BlockSurrogate(16))
    >>> u = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    >>> theta_loss, (pi_loss, accuracy) = objective.losses(u, torch.eye(3)[[0, 0, 1, 2]], None)
    >>> sorted(theta_loss.parts), pi_loss.ndim
    (['lower_bound', 'pairwise', 'quantization'], 0)
    """

    def __init__(self, base: HashLoss, centers: torch.Tensor, surrogate: BlockSurrogate,
                 options: ObjectiveOptions | None = None, seed: int = 0, tie_center: torch.Tensor | None = None):
        super().__init__()
        o = (ObjectiveOptions() if options is None else options).filled(base)
        if o.lbhash_mode == "replace" and base.center_part is None:
            raise InputError(f"method {base.name} has no center loss to replace; use mode 'add'")
        if tuple(centers.shape) != (base.num_classes, base.bits):
            raise InputError(f"centers must have shape ({base.num_classes}, {base.bits}), got {tuple(centers.shape)}")
        if surrogate.bits != base.bits:
            raise InputError(f"surrogate has {surrogate.bits} bits but the method has {base.bits}")
        if not 0 <= o.surrogate_flips <= base.bits:
            raise InputError(f"surrogate flips must be between 0 and bits={base.bits}, got {o.surrogate_flips}")
        self.base, self.surrogate, self.seed = base, surrogate, int(seed)
        self.weight, self.mode, self.theta_dropout = float(o.lbhash_weight), o.lbhash_mode, o.theta_dropout
        self.reduction, self.flips, self.assignment = o.lbhash_reduction, int(o.surrogate_flips), o.block_assignment
        self.redraw_every, self.multilabel_target = o.block_redraw_every, o.multilabel_target
        self.fused, self.multilabel_theta = o.fused_surrogate, o.multilabel_theta
        # saved with the run (checkpoint); None (no key) in runs with +1 ties
        self.register_buffer("tie_center", None if tie_center is None else tie_center.float().clone())
        self.register_buffer("centers", centers.float().clone())
        self.register_buffer("order", torch.arange(base.bits))  # bit j of block input = bit order[j]
        self.register_buffer("center_patterns", surrogate.pattern_index(self.centers))
        if o.block_assignment == "permuted":
            self.set_order(self.draw_order(0))

    @property
    def name(self) -> str:
        return f"{self.base.name}_D"

    def draw_order(self, draw: int) -> torch.Tensor:
        """The seeded permutation number `draw` of the bits: a resumed run redraws what an uninterrupted one did."""
        rng = np.random.default_rng([self.seed, 7, draw])
        return torch.from_numpy(rng.permutation(self.base.bits)).to(self.order.device)

    @torch.no_grad()
    def set_order(self, order: torch.Tensor) -> None:
        """Assign bit order[j] to block input j; the centers' patterns follow the same order."""
        self.order.copy_(order)
        self.center_patterns.copy_(self.surrogate.pattern_index(self.centers[:, self.order]))

    def forward(self, u: torch.Tensor, labels: torch.Tensor, index: torch.Tensor,
                features: torch.Tensor | None = None) -> LossOutput:
        return self.losses(u, labels, index, features)[0]

    def losses(self, u: torch.Tensor, labels: torch.Tensor, index: torch.Tensor,
               features: torch.Tensor | None = None) -> tuple[LossOutput, tuple[torch.Tensor, torch.Tensor]]:
        """(the theta loss, (L_pi, pattern accuracy)); `features` go to the base method."""
        parts = dict(self.base(u, labels, index, features).parts)
        if self.mode == "replace":
            parts.pop(self.base.center_part)
        l = u if self.assignment == "contiguous" else u.index_select(1, self.order)
        patterns, weights = self._targets(labels)
        if self.fused and self.flips == 0 and self.theta_dropout:
            pi, theta, accuracy = self.surrogate.fused_losses(l, patterns, weights, self.reduction,
                                                              self.multilabel_theta)
        else:
            theta = self.surrogate.loss_theta(l, patterns, weights, dropout=self.theta_dropout,
                                              reduction=self.reduction, multilabel=self.multilabel_theta)
            pi, accuracy = self.surrogate.loss_pi(flip_bits(l, self.flips) if self.flips else l)
        parts["lower_bound"] = self.weight * theta
        return loss_output(parts), (pi, accuracy)

    def _targets(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidate patterns (P, u) and per-sample weights (B, P) of L_theta."""
        if self.multilabel_target == "average":
            return self.center_patterns, labels
        theta_weights(labels)  # its check: every sample has a label
        codes = majority_targets(self.centers, labels, self.tie_center)[:, self.order]            # (B, bits)
        return self.surrogate.pattern_index(codes), torch.eye(len(labels), device=labels.device)

    def on_epoch_start(self, epoch: int) -> None:
        if self.assignment == "redraw":
            self.set_order(self.draw_order(epoch // self.redraw_every))
        self.base.on_epoch_start(epoch)

    def on_epoch_end(self, epoch: int) -> None:
        self.base.on_epoch_end(epoch)

    def classify(self, codes: torch.Tensor) -> torch.Tensor | None:
        return self.base.classify(codes)


@torch.no_grad()
def flip_bits(l: torch.Tensor, count: int) -> torch.Tensor:
    """The detached outputs with `count` distinct random bits of every row flipped: their signs
    change, and an exact 0 (bin = +1) becomes slightly negative, so bin() flips too."""
    l = l.detach()
    positions = torch.rand(l.shape, device=l.device).argsort(dim=1)[:, :count]
    flip = torch.zeros_like(l, dtype=torch.bool).scatter_(1, positions, True)
    flipped = torch.where(flip, -l, l)
    tiny = torch.finfo(l.dtype).tiny
    return torch.where(flip & (l == 0), torch.full_like(l, -tiny), flipped)
