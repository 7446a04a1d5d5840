"""The backbone registry: images (B, 3, H, W) -> features (B, D).

`create_backbone(name, pretrained=None, **options)` builds a registered backbone; each name is
registered (`@register_backbone`) with its defaults beside its factory, read without building it
by `backbone_defaults(name)`. lbhash.models imports every model file, so this module imports
none. `pretrained`: lbhash.models.weights.
"""

from __future__ import annotations

import inspect
import os
from typing import Callable, NamedTuple

import torch
from torch import nn

from lbhash.cpus import use_torch_threads
from lbhash.errors import InputError
from lbhash.models.weights import load_backbone_weights, resolve_weights


# The input statistics every image transform normalises with (ImageNet's RGB mean and std on
# 0..1, lbhash.data.transforms): what image backbones receive.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class PackagedWeights(NamedTuple):
    """ImageNet weights shipped in a registry package (pip name, import name, file, SHA-256 checked first)."""
    distribution: str
    module: str
    file: str
    sha256: str


class BackboneDefaults(NamedTuple):
    image_size: int       # the input side the backbone was designed for
    transform: str        # its transform preset (lbhash.data.transforms)


_REGISTRY: dict[str, tuple[Callable[..., "Backbone"], BackboneDefaults]] = {}


class Backbone(nn.Module):
    """A feature extractor. Subclasses set `out_features` and may override the class defaults:
    `source_prefixes_dropped`, the source checkpoint's keys it does not hold (its classifier: ignored when
    loading); `hub_weights`, torchvision weight tag -> file names in the torch hub cache (the first tag
    the default); `packaged_weights`, what pretrained="imagenet" loads (None: nothing)."""

    out_features: int
    default_image_size: int = 224     # set from the registry by create_backbone
    transform_preset: str = "imagenet"
    source_prefixes_dropped: tuple[str, ...] = ()
    hub_weights: dict[str, tuple[str, ...]] = {}
    packaged_weights: PackagedWeights | None = None
    name: str = ""
    weights_source: str | None = None  # the file the weights came from, None for random init
    weights_sha256: str | None = None  # that file's SHA-256

    def init_conv_bn(self) -> None:
        """He-normal convolutions (fan out), BatchNorm scale 1 and shift 0: the CNNs trained from scratch."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def stages(self) -> list[nn.Module]:
        """The stages from input to output (`train_stages` counts from the end); by default one."""
        return [self]

    def prefix(self, x: torch.Tensor, stop: int) -> torch.Tensor:
        """The activations after the first `stop` stages (x itself for 0), unpooled."""
        if stop == 0:
            return x
        raise NotImplementedError(f"backbone {self.name or type(self).__name__} runs as one stage")

    def forward_from(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """The pooled features of activations `x` after the first `start` stages: `forward_from(prefix(x, k), k)`
        is `forward(x)`."""
        if start == 0:
            return self(x)
        raise NotImplementedError(f"backbone {self.name or type(self).__name__} runs as one stage")


def register_backbone(name: str, image_size: int = 224, transform: str = "imagenet") -> Callable:
    """Decorator registering `factory(**options) -> Backbone` under `name`, with its defaults."""

    def decorate(factory: Callable[..., Backbone]) -> Callable[..., Backbone]:
        if name in _REGISTRY:
            raise InputError(f"backbone {name!r} is already registered")
        _REGISTRY[name] = (factory, BackboneDefaults(image_size, transform))
        return factory

    return decorate


def backbone_defaults(name: str) -> BackboneDefaults:
    """The registered defaults of backbone `name`, without building it."""
    return _entry(name)[1]


def _entry(name: str):
    if name not in _REGISTRY:
        raise InputError(f"unknown backbone {name!r}; available: {', '.join(available_backbones())}")
    return _REGISTRY[name]


def available_backbones() -> list[str]:
    """Registered names, including those whose optional dependency (torchvision) is missing."""
    return sorted(_REGISTRY)


def create_backbone(name: str, pretrained: str | os.PathLike | None = None, **options) -> Backbone:
    """Build backbone `name` with its factory's `options`, then load `pretrained` weights if any."""
    factory, defaults = _entry(name)
    use_torch_threads()  # backbone work is where too many threads cost most on a busy machine
    params = inspect.signature(factory).parameters
    unknown = [k for k in options if k not in params]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        known = ", ".join(params) or "none"
        raise InputError(f"backbone {name} has no option {unknown[0]!r}; its options: {known}")
    model = factory(**options)
    model.name = name
    model.default_image_size, model.transform_preset = defaults
    if pretrained is not None:
        load_backbone_weights(model, resolve_weights(model, pretrained))
    return model
