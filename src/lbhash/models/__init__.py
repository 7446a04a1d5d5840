"""Hash models: backbone -> hash head -> `bits` real outputs.

Every module of this package is imported here, so a backbone registers itself by being a
module of the package (a factory decorated with `@register_backbone`, lbhash.models.registry):
adding one is one new file.
"""

import importlib
import pkgutil

from lbhash.models.cifar_resnet import CifarResNet
from lbhash.models.hash_model import FeatureNorm, HashHead, HashModel, StageInputs, create_feature_model
from lbhash.models.registry import (
    Backbone,
    BackboneDefaults,
    available_backbones,
    backbone_defaults,
    create_backbone,
    create_image_model,
    register_backbone,
)
from lbhash.models.small_cnn import SmallCNN
from lbhash.models.weights import load_backbone_weights, read_state_dict

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Backbone", "BackboneDefaults", "CifarResNet", "SmallCNN", "backbone_defaults", "FeatureNorm", "HashHead", "HashModel",
    "StageInputs",
    "available_backbones", "create_backbone", "create_feature_model", "create_image_model",
    "load_backbone_weights", "read_state_dict", "register_backbone",
]
