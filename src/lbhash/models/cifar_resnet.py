"""Backbones for small images, trained from scratch: the CIFAR ResNets and `smallcnn`.

CIFAR ResNets (He et al. 2016, section 4.2), depth 6n + 2: a 3x3 stem, then three stages of n
basic blocks with 16w, 32w and 64w channels (w the width multiplier; the second and third stages
halve the resolution), global average pooling. Shortcuts that change shape are 1x1 convolutions
with BatchNorm. Global pooling accepts any input size.

`smallcnn`: a plain four-stage CNN for small images (28x28, 32x32, gray or RGB) that trains at
CPU speed. Each stage is a 3x3 convolution, a 2x2 max pool (all but the last), BatchNorm and ReLU;
global average pooling gives D = 256w features. Pooling first runs the memory-bound layers on a
quarter of the activations (docs/models.md has the measured speed).
"""
from __future__ import annotations

import torch
from torch import nn

from lbhash.errors import InputError
from lbhash.models.registry import Backbone, register_backbone

DEFAULT_WIDTH = 1.5  # resnet20 at width 1.5 has 0.61 M parameters; width 1 is the original (0.27 M)
STAGE_WIDTHS = (32, 64, 128, 256)  # smallcnn's, times its width


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)  # BatchNorm follows: no bias


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = _conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class CifarResNet(Backbone):
    def __init__(self, depth: int = 20, width: float = DEFAULT_WIDTH):
        super().__init__()
        if not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
            raise InputError(f"CIFAR ResNet depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, ...), got {depth!r}")
        if not width > 0:
            raise InputError(f"CIFAR ResNet width must be positive, got {width!r}")
        n = (depth - 2) // 6
        c1, c2, c3 = (max(1, round(16 * width * m)) for m in (1, 2, 4))
        self.stem = nn.Sequential(_conv3x3(3, c1), nn.BatchNorm2d(c1), nn.ReLU(inplace=True))
        self.stage1 = self._stage(c1, c1, n, stride=1)
        self.stage2 = self._stage(c1, c2, n, stride=2)
        self.stage3 = self._stage(c2, c3, n, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_features = c3
        self.depth, self.width = depth, width
        self.init_conv_bn()

    @staticmethod
    def _stage(cin: int, cout: int, blocks: int, stride: int) -> nn.Sequential:
        return nn.Sequential(BasicBlock(cin, cout, stride), *(BasicBlock(cout, cout) for _ in range(blocks - 1)))

    def stages(self) -> list[nn.Module]:
        return [self.stem, self.stage1, self.stage2, self.stage3]

    def prefix(self, x: torch.Tensor, stop: int) -> torch.Tensor:
        for stage in self.stages()[:stop]:
            x = stage(x)
        return x

    def forward_from(self, x: torch.Tensor, start: int) -> torch.Tensor:
        for stage in self.stages()[start:]:
            x = stage(x)
        return torch.flatten(self.pool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_from(x, 0)


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


# both trained at native size with a random crop (padding 4) and flip
@register_backbone("cifar_resnet", image_size=32, transform="cifar-augment")
def cifar_resnet(depth: int = 20, width: float = DEFAULT_WIDTH) -> Backbone:
    """CIFAR ResNet of any depth 6n + 2 and width multiplier."""
    return CifarResNet(depth, width)


@register_backbone("smallcnn", image_size=32, transform="cifar-augment")
def smallcnn(width: float = 1.0) -> Backbone:
    """Four 3x3 conv (-max pool) -BN-ReLU stages (32/64/128/256 x width channels)."""
    return SmallCNN(width)


def _register_depth(depth: int) -> None:
    def factory(width: float = DEFAULT_WIDTH) -> Backbone:
        return CifarResNet(depth, width)

    factory.__doc__ = f"CIFAR ResNet-{depth} (width multiplier `width`; 1 is the original)."
    register_backbone(f"resnet{depth}", image_size=32, transform="cifar-augment")(factory)


for _depth in (8, 14, 20, 32, 56):
    _register_depth(_depth)
