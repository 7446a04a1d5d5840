"""Image transforms on CHW tensors (torch only, no torchvision) and the torch Dataset view.

Random transforms draw from torch's global RNG (which the training loop seeds per epoch and
DataLoader seeds per worker) or from an explicit torch.Generator, never from numpy's.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from lbhash.data.eval_images import TRANSFORM_PRESETS
from lbhash.errors import InputError
from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD


def _pair(size, what: str) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    if not all(isinstance(v, int) and v >= 1 for v in (h, w)):
        raise InputError(f"{what} size must be a positive integer or (h, w), got {size!r}")
    return h, w


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self) -> str:
        return f"Compose({', '.join(map(repr, self.transforms))})"


class ToFloat:
    """uint8 [0, 255] -> float32 [0, 1]; float input is only cast to float32."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float32).div_(255) if x.dtype == torch.uint8 else x.to(torch.float32)

    def __repr__(self) -> str:
        return "ToFloat()"


class Resize:
    """Antialiased bilinear resize: an int sets the shorter side (the longer one truncated, as torchvision
    does), (h, w) both. uint8 gives rounded uint8 (faster before ToFloat), float gives float32."""

    def __init__(self, size):
        pair = _pair(size, "Resize")
        self.size = size if isinstance(size, int) else pair

    def _target(self, h: int, w: int) -> tuple[int, int]:
        if not isinstance(self.size, int):
            return self.size
        if h <= w:
            return self.size, int(self.size * w / h)
        return int(self.size * h / w), self.size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        th, tw = self._target(h, w)
        if (th, tw) == (h, w):
            return x
        # uint8 has its own fast kernel (rounds the result), an order of magnitude quicker
        src = x if x.dtype == torch.uint8 else x.to(torch.float32)
        return F.interpolate(src.unsqueeze(0), size=(th, tw), mode="bilinear", align_corners=False,
                             antialias=True).squeeze(0)

    def __repr__(self) -> str:
        return f"Resize({self.size})"


def _crop(x: torch.Tensor, top: int, left: int, h: int, w: int) -> torch.Tensor:
    return x[..., top:top + h, left:left + w]


class CenterCrop:
    """The central (h, w) window; top = (H - h) // 2, left = (W - w) // 2."""

    def __init__(self, size):
        self.size = _pair(size, "CenterCrop")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        (h, w), (H, W) = self.size, x.shape[-2:]
        if h > H or w > W:
            raise InputError(f"CenterCrop {h}x{w} is larger than the image {H}x{W}")
        return _crop(x, (H - h) // 2, (W - w) // 2, h, w)

    def __repr__(self) -> str:
        return f"CenterCrop({self.size})"


class RandomCrop:
    """A uniformly placed (h, w) window, after zero-padding `padding` pixels on every side."""

    def __init__(self, size, padding: int = 0, generator: torch.Generator | None = None):
        self.size = _pair(size, "RandomCrop")
        if not isinstance(padding, int) or padding < 0:
            raise InputError(f"RandomCrop padding must be a non-negative integer, got {padding!r}")
        self.padding, self.generator = padding, generator

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding:
            x = F.pad(x, (self.padding,) * 4)
        (h, w), (H, W) = self.size, x.shape[-2:]
        if h > H or w > W:
            raise InputError(f"RandomCrop {h}x{w} is larger than the (padded) image {H}x{W}")
        top = int(torch.randint(0, H - h + 1, (1,), generator=self.generator))
        left = int(torch.randint(0, W - w + 1, (1,), generator=self.generator))
        return _crop(x, top, left, h, w)

    def __repr__(self) -> str:
        return f"RandomCrop({self.size}, padding={self.padding})"


class RandomHorizontalFlip:
    """Mirror left-right with probability p."""

    def __init__(self, p: float = 0.5, generator: torch.Generator | None = None):
        if not 0 <= p <= 1:
            raise InputError(f"RandomHorizontalFlip p must be in [0, 1], got {p!r}")
        self.p, self.generator = p, generator

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(-1) if float(torch.rand((), generator=self.generator)) < self.p else x

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class Normalize:
    """(x - mean) / std per channel, on float input."""

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        self.values = (tuple(float(m) for m in mean), tuple(float(s) for s in std))  # for repr
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
        if (self.std <= 0).any():
            raise InputError(f"Normalize std must be positive, got {std!r}")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            raise InputError(f"Normalize needs a float tensor (apply ToFloat first), got {x.dtype}")
        return (x - self.mean) / self.std

    def __repr__(self) -> str:
        return f"Normalize(mean={self.values[0]}, std={self.values[1]})"


AUGMENTS = ("crop-flip", "flip", "none")


def check_pipeline(preset: str, image_size: int, augment: str) -> None:
    """The one-line errors of a preset, augment or image size that no pipeline has."""
    if preset not in TRANSFORM_PRESETS:
        raise InputError(f"unknown transform preset {preset!r} (known: {', '.join(TRANSFORM_PRESETS)})")
    if augment not in AUGMENTS:
        raise InputError(f"unknown augment {augment!r} (known: {', '.join(AUGMENTS)})")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise InputError(f"image_size must be a positive integer, got {image_size!r}")


def build_transforms(preset: str, image_size: int, train: bool, augment: str = "crop-flip") -> Compose:
    """The pipelines of docs/data.md; every one maps uint8 CHW to float32 (3, s, s), ImageNet-normalised.
    `augment` (training only): crop-flip is the preset's; flip and none start from the evaluation pipeline."""
    check_pipeline(preset, image_size, augment)
    s = image_size
    crops = train and augment == "crop-flip"
    # geometry on uint8 (fast resize kernel, 4x less memory), then float and normalise
    if preset == "imagenet":
        steps = [Resize(round(s * 256 / 224))]
        steps += [RandomCrop(s), RandomHorizontalFlip()] if crops else [CenterCrop(s)]
    elif preset == "cifar":
        steps = [Resize((s, s))]
    else:
        steps = [Resize((s, s))]
        if crops:
            steps += [RandomCrop(s, padding=4), RandomHorizontalFlip()]
    if train and augment == "flip" and preset != "cifar":
        steps.append(RandomHorizontalFlip())
    return Compose([*steps, ToFloat(), Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class TransformedImages(Dataset):
    """Item k: (transform(image of indices[k] as uint8 CHW), labels row as float32, k); picklable for
    DataLoader workers (a tarball source reopens its file in each process)."""

    def __init__(self, dataset, indices: np.ndarray, transform=None):
        self.dataset, self.indices, self.transform = dataset, np.asarray(indices, np.int64), transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int):
        img = torch.from_numpy(self.dataset.image(self.indices[k])).permute(2, 0, 1)  # a fresh array
        if self.transform is not None:
            img = self.transform(img)
        labels = torch.from_numpy(self.dataset.labels[self.indices[k]].astype(np.float32))
        return img, labels, int(k)
