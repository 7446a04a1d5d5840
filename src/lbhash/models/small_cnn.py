"""`smallcnn`: a plain four-stage CNN for small images (28x28, 32x32, gray or RGB) that trains
at CPU speed.

Each stage is a 3x3 convolution, a 2x2 max pool (all but the last), BatchNorm and ReLU; global
average pooling gives D = 256w features. Pooling first runs the memory-bound layers on a quarter
of the activations (docs/models.md has the measured speed).
"""

from __future__ import annotations

import torch
from torch import nn

from lbhash.errors import InputError
from lbhash.models.registry import Backbone, register_backbone

STAGE_WIDTHS = (32, 64, 128, 256)


class SmallCNN(Backbone):
    def __init__(self, width: float = 1.0):
        super().__init__()
        if not isinstance(width, (int, float)) or isinstance(width, bool) or not width > 0:
            raise InputError(f"smallcnn width must be a positive number, got {width!r}")
        layers: list[nn.Module] = []
        cin = 3
        for k, base in enumerate(STAGE_WIDTHS):
            cout = max(1, round(base * width))
            layers.append(nn.Conv2d(cin, cout, 3, padding=1, bias=False))
            if k < len(STAGE_WIDTHS) - 1:
                layers.append(nn.MaxPool2d(2))
            layers += [nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_features = cin
        self.init_conv_bn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self.features(x)), 1)


# trained at native size with a random crop (padding 4) and flip, like the CIFAR ResNets
@register_backbone("smallcnn", image_size=32, transform="cifar-augment")
def smallcnn(width: float = 1.0) -> Backbone:
    """Four 3x3 conv (-max pool) -BN-ReLU stages (32/64/128/256 x width channels)."""
    return SmallCNN(width)
