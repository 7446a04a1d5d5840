"""Hash heads and the backbone -> head composition."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from lbhash.errors import InputError


class FeatureNorm(nn.Module):
    """(x - mean) / std with statistics fitted on the training split and saved in the model,
    so that encoding raw features later gives the same codes."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.float().clone())
        self.register_buffer("std", std.float().clamp_min(1e-6).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class HashHead(nn.Module):
    """MLP from features to `bits` real outputs: [Linear -> ReLU (-> Dropout)] * len(hidden) -> Linear."""

    def __init__(self, in_features: int, bits: int, hidden: Sequence[int] = (1024,), dropout: float = 0.0):
        super().__init__()
        if in_features < 1 or bits < 1 or any(h < 1 for h in hidden):
            raise InputError(f"hash head sizes must be positive, got in={in_features}, hidden={list(hidden)}, bits={bits}")
        if not 0 <= dropout < 1:
            raise InputError(f"head dropout must be in [0, 1), got {dropout}")
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, bits))
        self.net = nn.Sequential(*layers)
        self.in_features, self.bits = in_features, bits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class HashModel(nn.Module):
    """backbone -> hash head. The backbone maps inputs to features (identity for features).

    A frozen image backbone also takes its own pooled features (B, D): they go to the head
    alone. Training and encoding the items of a data set use this, with features the backbone
    computed once (lbhash.data.feature_cache); new images (B, 3, H, W) go through both."""

    def __init__(self, head: HashHead, backbone: nn.Module | None = None, freeze_backbone: bool = False):
        super().__init__()
        self.backbone = backbone if backbone is not None else nn.Identity()
        self.head = head
        self.freeze_backbone = freeze_backbone
        if freeze_backbone:
            self.backbone.requires_grad_(False)

    @property
    def bits(self) -> int:
        return self.head.bits

    def train(self, mode: bool = True) -> "HashModel":
        super().train(mode)
        if self.freeze_backbone:
            self.backbone.eval()  # frozen: keep batch-norm statistics and dropout fixed
        return self

    def takes_features(self, x: torch.Tensor) -> bool:
        """Whether `x` is a batch of the frozen backbone's features rather than images."""
        return self.freeze_backbone and x.ndim == 2 and x.shape[1] == self.head.in_features

    def head_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """What the head reads: the backbone's features of x (x itself when it already is them)."""
        return x if self.takes_features(x) else self.backbone(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.head_inputs(x))


def create_feature_model(in_features: int, bits: int, hidden: Sequence[int] = (1024,),
                         dropout: float = 0.0, mean: torch.Tensor | None = None,
                         std: torch.Tensor | None = None) -> HashModel:
    """A hash model for feature vectors, with optional standardisation as its first layer."""
    backbone = FeatureNorm(mean, std) if mean is not None else None
    return HashModel(HashHead(in_features, bits, hidden, dropout), backbone)
