"""Backbones of torchvision (optional): ResNet-50 and AlexNet. torchvision is imported only when
one of them is built, with a one-line InputError when it is missing or does not import."""

from __future__ import annotations

import torch
from torch import nn

from lbhash.errors import InputError
from lbhash.models.registry import Backbone, register_backbone
from lbhash.models.weights import first_line


def _torchvision_models(name: str):
    """torchvision.models, imported only when an ImageNet backbone is built."""
    try:
        from torchvision import models
    except Exception as err:  # not installed, or a build that does not match torch (RuntimeError)
        raise InputError(f"backbone {name} needs torchvision, which is not installed or does not import "
                         f"({first_line(err)})") from None
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
