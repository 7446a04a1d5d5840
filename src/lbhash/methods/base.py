"""The method interface and registry.

A method is a loss module with one signature (as in pytorch-metric-learning):
`loss(u, labels, index) -> LossOutput`, where u is the hash layer's raw output (B, bits),
labels are multi-hot (B, C) and index holds the samples' stable positions in the training
set (for memory banks). LossOutput.total is the sum of the weighted named parts.
"""

from __future__ import annotations

from typing import Callable, ClassVar, NamedTuple

import torch
from torch import nn


class LossOutput(NamedTuple):
    total: torch.Tensor
    parts: dict[str, torch.Tensor]


def loss_output(parts: dict[str, torch.Tensor]) -> LossOutput:
    return LossOutput(sum(parts.values()), parts)


class HashLoss(nn.Module):
    """Base class of the hashing methods.

    Class attributes describe what a method needs, so that the training loop and the _D
    wrapper can check inputs at the edge instead of failing deep inside a loss.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    center_part: ClassVar[str | None] = None   # the part that _D's "replace" mode drops
    needs_index: ClassVar[bool] = False        # keeps per-sample state (a memory bank)
    single_label_only: ClassVar[bool] = False
    uses_centers: ClassVar[bool] = False       # needs class centers (lbhash.centers)
    has_classifier: ClassVar[bool] = False

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False):
        super().__init__()
        self.bits, self.num_classes, self.num_train = bits, num_classes, num_train
        self.multi_label = multi_label
        if self.needs_index and not num_train:
            raise ValueError(f"method {self.name} keeps a memory bank of every training item and "
                             "needs the training-set size (num_train)")

    def forward(self, u: torch.Tensor, labels: torch.Tensor, index: torch.Tensor | None) -> LossOutput:
        raise NotImplementedError

    def check_index(self, index: torch.Tensor | None, batch: int) -> torch.Tensor:
        """The batch's stable training-set positions, required by memory-bank methods."""
        if index is None:
            raise ValueError(f"method {self.name} keeps a memory bank of every training item and needs "
                             "each sample's stable index in the training set; this data gives none")
        if index.shape != (batch,):
            raise ValueError(f"method {self.name}: index must have shape ({batch},), got {tuple(index.shape)}")
        return index

    def on_epoch_start(self, epoch: int) -> None:
        """Called before each epoch (0-based), e.g. for continuation schedules."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called after each epoch's last step (0-based), e.g. for per-epoch discrete updates."""

    def classify(self, codes: torch.Tensor) -> torch.Tensor | None:
        """Class scores from +/-1 codes for methods with a classifier branch, else None."""
        return None


_REGISTRY: dict[str, type[HashLoss]] = {}


def register_method(cls: type[HashLoss]) -> type[HashLoss]:
    """Class decorator: make a method available by its `name`."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"method name {cls.name!r} is empty or already registered")
    _REGISTRY[cls.name] = cls
    return cls


def method_class(name: str) -> type[HashLoss]:
    key = name.lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[key]


def available_methods() -> list[str]:
    return sorted(_REGISTRY)


def create_method(name: str, bits: int, num_classes: int, num_train: int | None = None,
                  centers: torch.Tensor | None = None, multi_label: bool = False,
                  **constants) -> HashLoss:
    """Build a registered method; `constants` override its defaults (e.g. CSQ's quantization)."""
    cls = method_class(name)
    return _build(cls, bits=bits, num_classes=num_classes, num_train=num_train,
                  centers=centers, multi_label=multi_label, **constants)


def _build(cls: Callable[..., HashLoss], **kwargs) -> HashLoss:
    try:
        return cls(**kwargs)
    except TypeError as err:  # an unknown constant name
        raise ValueError(f"method {cls.name}: {err}") from None
