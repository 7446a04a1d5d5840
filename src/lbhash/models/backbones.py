"""Image backbones by name: images (B, 3, H, W) -> features (B, D), and image hash models.

`create_backbone(name, pretrained=None, **options)` builds a registered backbone. Each name is
registered with its defaults beside its factory: the input side it was designed for and the
name of its transform preset (the presets themselves are lbhash.data.transforms'), read without
building it by `backbone_defaults(name)`. Weights come only from local files, loaded safely
(`torch.load(weights_only=True)` or safetensors): `pretrained` is None (random
initialisation), a path, or "torchvision[:TAG]" for torchvision's ImageNet weights already in
the torch hub cache. Nothing here downloads.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import torch
from torch import nn

from lbhash.errors import InputError
from lbhash.models.hash_model import HashHead, HashModel


class BackboneDefaults(NamedTuple):
    image_size: int       # the input side the backbone was designed for
    transform: str        # its transform preset (lbhash.data.transforms)


_REGISTRY: dict[str, tuple[Callable[..., "Backbone"], BackboneDefaults]] = {}


class Backbone(nn.Module):
    """A feature extractor. Subclasses set `out_features` and may override the class defaults.

    `source_prefixes_dropped`: keys of the source network's checkpoint (its classifier) that this
    feature extractor does not hold; loading ignores them, so full torchvision files load as is.
    `hub_weights`: torchvision weight tag -> accepted file names in the torch hub cache, first
    tag the default.
    """

    out_features: int
    default_image_size: int = 224     # set from the registry by create_backbone
    transform_preset: str = "imagenet"
    source_prefixes_dropped: tuple[str, ...] = ()
    hub_weights: dict[str, tuple[str, ...]] = {}
    name: str = ""
    weights_source: str | None = None  # the file the weights came from, None for random init


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
    params = inspect.signature(factory).parameters
    unknown = [k for k in options if k not in params]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        known = ", ".join(params) or "none"
        raise InputError(f"backbone {name} has no option {unknown[0]!r}; its options: {known}")
    model = factory(**options)
    model.name = name
    model.default_image_size, model.transform_preset = defaults
    if pretrained is not None:
        load_backbone_weights(model, _resolve_weights(model, pretrained))
    return model


def create_image_model(backbone_name: str, bits: int, hidden: Sequence[int] = (),
                       pretrained: str | os.PathLike | None = None, freeze_backbone: bool = False,
                       dropout: float = 0.0, **backbone_options) -> HashModel:
    """backbone -> hash head. The default head is one Linear layer from the features to `bits`
    (the DeepHash convention); `hidden` adds Linear -> ReLU layers before it. With
    `freeze_backbone` only the head trains and the backbone stays in eval mode."""
    backbone = create_backbone(backbone_name, pretrained=pretrained, **backbone_options)
    head = HashHead(backbone.out_features, bits, hidden, dropout)
    return HashModel(head, backbone, freeze_backbone=freeze_backbone)


# ---------------------------------------------------------------- weights


def _resolve_weights(model: Backbone, pretrained: str | os.PathLike) -> Path:
    """A path as given, or "torchvision[:TAG]" -> the file in the torch hub cache."""
    if not isinstance(pretrained, (str, os.PathLike)):
        raise InputError(f"pretrained must be None, a file path or 'torchvision', got {pretrained!r}")
    text = os.fspath(pretrained)
    if text != "torchvision" and not text.startswith("torchvision:"):
        return Path(text).expanduser()
    if not model.hub_weights:
        raise InputError(f"backbone {model.name} has no torchvision weights; pass pretrained=None or a file path")
    tag = text.partition(":")[2] or next(iter(model.hub_weights))
    if tag not in model.hub_weights:
        raise InputError(f"backbone {model.name} has no torchvision weights {tag!r}; "
                         f"known: {', '.join(model.hub_weights)}")
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    names = model.hub_weights[tag]
    for file_name in names:
        if (folder / file_name).is_file():
            return folder / file_name
    # Never download: say which file to fetch and where it goes.
    raise InputError(f"backbone {model.name}: torchvision weights {tag} are not in the torch hub cache; "
                     f"lbhash does not download, so put {names[0]} (from https://download.pytorch.org/models/) "
                     f"in {folder} or pass its path as pretrained")


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors of a weights file, read without unpickling arbitrary objects.

    Accepts a plain state dict or one nested under "state_dict", "model" or "learner" (training
    checkpoints, including lbhash's checkpoint.pt), and strips a "module." prefix (DataParallel).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such weights file")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as err:
            raise InputError(f"{path}: reading .safetensors needs the safetensors package "
                             f"({_first_line(err)})") from None
        try:
            data = load_file(str(path), device="cpu")
        except Exception as err:  # the library raises several types for bad files
            raise InputError(f"{path}: not a readable safetensors file ({_first_line(err)})") from None
    else:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # UnpicklingError for unsafe content, RuntimeError for bad archives, ...
            raise InputError(f"{path}: cannot load safely as a state dict ({_first_line(err)})") from None
    if isinstance(data, Mapping):
        for key in ("state_dict", "model", "learner"):
            if isinstance(data.get(key), Mapping):
                data = data[key]
                break
    if not isinstance(data, Mapping) or not data or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in data.items()):
        raise InputError(f"{path}: not a state dict (expected a mapping of names to tensors, "
                         f"got {type(data).__name__})")
    if all(k.startswith("module.") for k in data):
        data = {k[len("module."):]: v for k, v in data.items()}
    return dict(data)


def load_backbone_weights(model: Backbone, path: str | os.PathLike) -> Backbone:
    """Load a weights file into `model` strictly; a hash model's file gives its backbone part.

    Keys of the source network's classifier (`source_prefixes_dropped`) are ignored, and BatchNorm
    step counters missing from old files keep their current values.
    """
    path = Path(path)
    data = read_state_dict(path)
    own = model.state_dict()
    for prefix in ("backbone.", "model.backbone."):  # a HashModel, or lbhash's training Learner
        if not own.keys() & data.keys() and any(k.startswith(prefix) for k in data):
            data = {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}
    data = {k: v for k, v in data.items() if not k.startswith(model.source_prefixes_dropped)}
    for key in own.keys() - data.keys():
        if key.endswith("num_batches_tracked"):
            data[key] = own[key]
    label = model.name or type(model).__name__
    missing = [k for k in own if k not in data]
    unexpected = sorted(data.keys() - own.keys())
    if missing or unexpected:
        parts = [f"{kind} keys {_few(keys)}" for kind, keys in (("missing", missing), ("unexpected", unexpected))
                 if keys]
        raise InputError(f"{path}: weights do not fit backbone {label}: {'; '.join(parts)}")
    for key, value in own.items():
        if data[key].shape != value.shape:
            raise InputError(f"{path}: weight {key} has shape {tuple(data[key].shape)}, "
                             f"backbone {label} needs {tuple(value.shape)}")
    model.load_state_dict(data, strict=True)
    model.weights_source = str(path)
    return model


def _few(keys: list[str], n: int = 3) -> str:
    shown = ", ".join(keys[:n])
    return f"[{shown}{f', ... +{len(keys) - n} more' if len(keys) > n else ''}]"


# ---------------------------------------------------------------- torchvision (optional)


def _torchvision_models(name: str):
    """torchvision.models, imported only when an ImageNet backbone is built."""
    try:
        from torchvision import models
    except Exception as err:  # not installed, or a build that does not match torch (RuntimeError)
        raise InputError(f"backbone {name} needs torchvision, which is not installed or does not import "
                         f"({_first_line(err)})") from None
    return models


class TorchvisionResNet(Backbone):
    """torchvision ResNet without its final fc layer: the pooled features (2048 for ResNet-50).
    Submodules keep torchvision's names, so its checkpoints load directly."""

    source_prefixes_dropped = ("fc.",)

    def __init__(self, net: nn.Module):
        super().__init__()
        for part in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool"):
            setattr(self, part, getattr(net, part))
        self.out_features = net.fc.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)


class TorchvisionAlexNet(Backbone):
    """torchvision AlexNet up to the second fully connected layer and its ReLU (classifier[:6],
    4096-d), as in DeepHash. The classifier's dropout is active in training mode."""

    source_prefixes_dropped = ("classifier.6.",)

    def __init__(self, net: nn.Module):
        super().__init__()
        self.features, self.avgpool = net.features, net.avgpool
        self.classifier = net.classifier[:6]  # slicing keeps the indices, so checkpoint keys match
        self.out_features = [m for m in self.classifier if isinstance(m, nn.Linear)][-1].out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@register_backbone("resnet50", image_size=224, transform="imagenet")
def resnet50() -> Backbone:
    """ResNet-50 (torchvision), 2048-d features, 224x224 ImageNet-style input."""
    model = TorchvisionResNet(_torchvision_models("resnet50").resnet50(weights=None))
    # V1 is the original recipe the hashing literature used; 19c8e357 is its pre-0.13 file name.
    model.hub_weights = {"IMAGENET1K_V1": ("resnet50-0676ba61.pth", "resnet50-19c8e357.pth"),
                         "IMAGENET1K_V2": ("resnet50-11ad3fa6.pth",)}
    return model


@register_backbone("alexnet", image_size=224, transform="imagenet")
def alexnet() -> Backbone:
    """AlexNet (torchvision), 4096-d fc7 features, 224x224 ImageNet-style input."""
    model = TorchvisionAlexNet(_torchvision_models("alexnet").alexnet(weights=None))
    model.hub_weights = {"IMAGENET1K_V1": ("alexnet-owt-7be5be79.pth",)}
    return model


# The CIFAR ResNets register themselves; imported last because they subclass Backbone.
from lbhash.models import cifar_resnet as _cifar_resnet  # noqa: E402,F401
