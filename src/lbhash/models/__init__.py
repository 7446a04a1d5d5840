"""Hash models: backbone -> hash head -> `bits` real outputs."""

from lbhash.models.backbones import (
    Backbone,
    BackboneDefaults,
    backbone_defaults,
    available_backbones,
    create_backbone,
    create_image_model,
    load_backbone_weights,
    read_state_dict,
    register_backbone,
)
from lbhash.models.cifar_resnet import CifarResNet
from lbhash.models.small_cnn import SmallCNN
from lbhash.models.hash_model import FeatureNorm, HashHead, HashModel, create_feature_model

__all__ = [
    "Backbone", "BackboneDefaults", "CifarResNet", "SmallCNN", "backbone_defaults", "FeatureNorm", "HashHead", "HashModel",
    "available_backbones", "create_backbone", "create_feature_model", "create_image_model",
    "load_backbone_weights", "read_state_dict", "register_backbone",
]
