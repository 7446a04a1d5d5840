"""Hash heads and the backbone -> head composition."""

from __future__ import annotations

import contextlib
from typing import NamedTuple, Sequence

import torch
from torch import nn

from lbhash.errors import InputError

# the hash head's hidden widths on feature vectors unless a run gives its own (`--hidden`)
FEATURE_HIDDEN = (1024,)


class FeatureNorm(nn.Module):
    """(x - mean) / std, statistics of the training split saved in the model (later encodings agree)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.float().clone())
        self.register_buffer("std", std.float().clamp_min(1e-6).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class HashHead(nn.Module):
    """MLP from features to `bits` real outputs: [Linear -> ReLU (-> Dropout)] * len(hidden) -> Linear."""

    def __init__(self, in_features: int, bits: int, hidden: Sequence[int] = FEATURE_HIDDEN, dropout: float = 0.0):
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


class StageInputs(NamedTuple):
    """A batch of a backbone's activations after its first `start` (frozen) stages, in place of images."""
    activations: torch.Tensor
    start: int


class HashModel(nn.Module):
    """backbone (identity for features) -> hash head. A frozen image backbone also takes its own cached
    pooled features (B, D), which go to the head alone. Fine-tuning (docs/models.md): `freeze_bn` keeps the
    BatchNorm statistics, `train_stages` N > 0 freezes all but the last N stages, `set_frozen` switches the
    whole backbone off and on, `bf16_backbone` runs it under bf16 autocast on every path (so they agree)."""

    def __init__(self, head: HashHead, backbone: nn.Module | None = None, freeze_backbone: bool = False,
                 freeze_bn: bool = False, train_stages: int = 0, bf16_backbone: bool = False):
        super().__init__()
        self.backbone = backbone if backbone is not None else nn.Identity()
        self.head = head
        self.freeze_bn, self.bf16_backbone = freeze_bn, bf16_backbone
        stages = list(self.backbone.stages()) if hasattr(self.backbone, "stages") else [self.backbone]
        if train_stages > len(stages):
            raise InputError(f"train_stages {train_stages}: backbone {getattr(self.backbone, 'name', '')} has "
                             f"{len(stages)} stage(s)")
        # the stages that never train: all but the last train_stages (none when 0)
        self._fixed = stages[:len(stages) - train_stages] if train_stages else []
        self.built_frozen = freeze_backbone  # a frozen backbone's run never trains it
        self.set_frozen(freeze_backbone)

    @property
    def bits(self) -> int:
        return self.head.bits

    def set_frozen(self, frozen: bool) -> None:
        """Freeze the whole backbone (no gradients, eval mode) or let its trainable stages learn."""
        self.freeze_backbone = frozen
        self.backbone.requires_grad_(not frozen)
        for stage in self._fixed:
            stage.requires_grad_(False)
        self.train(self.training)

    def trainable_backbone_parameters(self) -> list[nn.Parameter]:
        """The backbone's parameters that train when it is not frozen (none if built frozen)."""
        if self.built_frozen:
            return []
        fixed = {id(p) for stage in self._fixed for p in stage.parameters()}
        return [p for p in self.backbone.parameters() if id(p) not in fixed]

    def train(self, mode: bool = True) -> "HashModel":
        super().train(mode)
        if self.freeze_backbone:
            self.backbone.eval()  # frozen: keep batch-norm statistics and dropout fixed
            return self
        for stage in self._fixed:
            stage.eval()
        if self.freeze_bn:
            for module in self.backbone.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
        return self

    def takes_features(self, x: torch.Tensor) -> bool:
        """Whether `x` is a batch of the frozen backbone's features rather than images."""
        return self.freeze_backbone and x.ndim == 2 and x.shape[1] == self.head.in_features

    @property
    def fixed_stages(self) -> int:
        """How many of the backbone's first stages never train (0 unless train_stages is set)."""
        return len(self._fixed)

    def _backbone_precision(self, device: torch.device):
        return torch.autocast(device.type, dtype=torch.bfloat16) if self.bf16_backbone else contextlib.nullcontext()

    @torch.no_grad()
    def fixed_prefix(self, x: torch.Tensor) -> torch.Tensor:
        """The activations of images x after the stages that never train, as training computes them:
        what a run may compute once and cache."""
        with self._backbone_precision(x.device):
            return self.backbone.prefix(x, self.fixed_stages)

    def backbone_features(self, x: torch.Tensor | StageInputs) -> torch.Tensor:
        """The backbone's float32 features of images x (or of StageInputs: from their stage on)."""
        x, start = (x.activations, x.start) if isinstance(x, StageInputs) else (x, 0)
        with self._backbone_precision(x.device):
            features = self.backbone.forward_from(x, start) if start else self.backbone(x)
        return features.float() if self.bf16_backbone else features

    def head_inputs(self, x: torch.Tensor | StageInputs) -> torch.Tensor:
        """What the head reads: the backbone's features of x (x itself when it already is them)."""
        return x if not isinstance(x, StageInputs) and self.takes_features(x) else self.backbone_features(x)

    def forward(self, x: torch.Tensor | StageInputs) -> torch.Tensor:
        return self.head(self.head_inputs(x))

    def forward_embedded(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(real outputs u, embedding) of one forward pass: the embedding an index keeps is an image
        model's pooled features, or a feature model's input (before any standardisation)."""
        features = self.head_inputs(x)
        image_model = not isinstance(self.backbone, (FeatureNorm, nn.Identity))
        return self.head(features), (features if image_model else x).float()


def create_feature_model(in_features: int, bits: int, hidden: Sequence[int] = FEATURE_HIDDEN,
                         dropout: float = 0.0, mean: torch.Tensor | None = None,
                         std: torch.Tensor | None = None) -> HashModel:
    """A hash model for feature vectors, with optional standardisation as its first layer."""
    backbone = FeatureNorm(mean, std) if mean is not None else None
    return HashModel(HashHead(in_features, bits, hidden, dropout), backbone)
