"""GreedyHash: greedy sign with a straight-through gradient (Su et al., NeurIPS 2018)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, register_method

CLASSIFIER_LOSSES = ("auto", "ce", "bce")


class _SignStraightThrough(torch.autograd.Function):
    """b = bin(u) (0 -> +1) forward; the gradient passes through unchanged."""

    @staticmethod
    def forward(ctx, u: torch.Tensor) -> torch.Tensor:
        return torch.where(u >= 0, 1.0, -1.0).to(u.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def sign_straight_through(u: torch.Tensor) -> torch.Tensor:
    return _SignStraightThrough.apply(u)


@register_method
class GreedyHash(HashLoss):
    """L = CE(fc(b), y) + quantization * mean(| |u| - 1 |^3), b = sign(u) straight-through.

    Multi-label data uses BCE-with-logits on fc(b) against the multi-hot labels instead.
    """

    name = "greedyhash"
    display_name = "GreedyHash"
    description = "GreedyHash: classifier on sign(u) with a straight-through gradient, cubic quantization"
    benchmark_recipe = {"optimizer": "sgd", "lr": 1e-3, "weight_decay": 5e-4, "lr_step": 30, "epochs": 200,
                        "batch_size": 64}

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False,
                 quantization: float = 0.1, classifier_loss: str = "auto"):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        if classifier_loss not in CLASSIFIER_LOSSES:
            raise InputError(f"greedyhash: classifier_loss must be one of {', '.join(CLASSIFIER_LOSSES)}, "
                             f"got {classifier_loss!r}")
        if classifier_loss == "ce" and multi_label:
            raise InputError("greedyhash: classifier_loss 'ce' is single-label only, but the data is "
                             "multi-label; use 'bce' or 'auto'")
        if not quantization >= 0:
            raise InputError(f"greedyhash: quantization must be >= 0, got {quantization!r}")
        self.quantization = float(quantization)
        self.classifier_loss = classifier_loss
        self.use_bce = classifier_loss == "bce" or (classifier_loss == "auto" and multi_label)
        # A submodule, so the training loop puts it into the hash model's optimizer.
        self.fc = nn.Linear(bits, num_classes, bias=False)

    def compute_loss(self, u, labels, index):
        b = sign_straight_through(u)
        logits = self.fc(b.to(self.fc.weight.dtype))
        y = labels.to(logits.dtype)
        if self.use_bce:
            classification = F.binary_cross_entropy_with_logits(logits, y)
        else:
            counts = (labels > 0).sum(1)
            if not bool((counts == 1).all()):
                row = int((counts != 1).nonzero()[0])
                raise InputError(f"greedyhash: cross-entropy needs exactly one label per item, but batch "
                                 f"row {row} has {int(counts[row])}; use classifier_loss 'bce'")
            classification = F.cross_entropy(logits, y.argmax(1))
        quant = self.quantization * ((u.abs() - 1).abs() ** 3).mean()
        return {"classification": classification, "quantization": quant.to(classification.dtype)}

    def classify(self, codes: torch.Tensor) -> torch.Tensor:
        """Class scores fc(codes) for +/-1 codes, shape (B, C)."""
        return self.fc(codes.to(self.fc.weight.dtype))
