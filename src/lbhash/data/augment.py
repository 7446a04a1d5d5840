"""The transform presets on whole batches: uint8 (B, H, W, 3) in, normalised float32 (B, 3, s, s) out.

`BatchTransform` does what `lbhash.data.transforms.build_transforms` does to one image (the
reference) as a few tensor operations per batch: one resize, one gather for the random crop,
padding and flip, then normalisation; the result is channels-last in memory. Evaluation pixels
equal the per-image pipeline's exactly on the CPU; random crops and flips have the same
distribution, drawn from an explicit torch.Generator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lbhash.data.eval_images import resized_shape
from lbhash.data.transforms import IMAGENET_MEAN, IMAGENET_STD, check_pipeline
from lbhash.errors import InputError

CIFAR_PADDING = 4


class BatchTransform:
    """One preset's train or eval pipeline for batches of same-sized uint8 NHWC images."""

    def __init__(self, preset: str, image_size: int, train: bool, augment: str = "crop-flip"):
        check_pipeline(preset, image_size, augment)
        self.preset, self.size, self.train, self.augment = preset, image_size, train, augment
        self._stats: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def __repr__(self) -> str:
        return f"BatchTransform({self.preset!r}, {self.size}, train={self.train}, augment={self.augment!r})"

    @property
    def random(self) -> bool:
        """Whether the pipeline draws random flips (the cifar preset never does)."""
        return self.train and self.preset != "cifar" and self.augment != "none"

    @property
    def crops(self) -> bool:
        """Whether the pipeline draws random crops (augment crop-flip, in training)."""
        return self.random and self.augment == "crop-flip"

    def resized_shape(self, h: int, w: int) -> tuple[int, int]:
        """The (h, w) the preset resizes an h x w image to before cropping."""
        return resized_shape(self.preset, self.size, h, w)

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[3] != 3:
            raise InputError(f"BatchTransform needs uint8 (B, H, W, 3) images, got {images.dtype} "
                             f"{tuple(images.shape)}")
        x = self._resize(images)
        x = self._crop_flip(x, generator)
        return self._normalize(x)

    # --- steps -----------------------------------------------------------------------------

    def _resize(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[1:3]
        th, tw = self.resized_shape(h, w)
        if (th, tw) == (h, w) or not len(x):
            return x
        nchw = x.permute(0, 3, 1, 2).contiguous()  # the per-image path's layout: same rounding
        if x.device.type == "cpu":  # torch's uint8 kernel rounds, as the per-image Resize does
            out = F.interpolate(nchw, size=(th, tw), mode="bilinear", align_corners=False, antialias=True)
        else:  # no uint8 kernel on accelerators: float, then round (may differ by 1 in a few pixels)
            out = F.interpolate(nchw.float(), size=(th, tw), mode="bilinear", align_corners=False,
                                antialias=True).round_().clamp_(0, 255).to(torch.uint8)
        return out.permute(0, 2, 3, 1)

    def _crop_flip(self, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        s, (b, h, w) = self.size, x.shape[:3]
        pad = CIFAR_PADDING if (self.crops and self.preset == "cifar-augment") else 0
        if s > h + 2 * pad or s > w + 2 * pad:
            raise InputError(f"crop {s}x{s} is larger than the (padded) image {h + 2 * pad}x{w + 2 * pad}")
        if not self.crops:  # the evaluation pipeline's window (imagenet: central; cifar presets: all)
            top, left = (h - s) // 2, (w - s) // 2
            x = x[:, top:top + s, left:left + s]
            if not self.random:
                return x
            # flips only (augment flip): one draw per image from the epoch's generator
            flip = torch.rand((b,), generator=generator, device=x.device) < 0.5
            return torch.where(flip[:, None, None, None], x.flip(2), x)
        if pad:
            x = F.pad(x, (0, 0, pad, pad, pad, pad))
            h, w = h + 2 * pad, w + 2 * pad
        dev = x.device
        top = torch.randint(0, h - s + 1, (b,), generator=generator, device=dev)
        left = torch.randint(0, w - s + 1, (b,), generator=generator, device=dev)
        flip = torch.rand((b,), generator=generator, device=dev) < 0.5
        step = torch.arange(s, device=dev)
        rows = top[:, None] + step                                              # (b, s)
        cols = left[:, None] + torch.where(flip[:, None], s - 1 - step, step)  # (b, s)
        batch = torch.arange(b, device=dev)[:, None, None]
        return x[batch, rows[:, :, None], cols[:, None, :]]                    # (b, s, s, 3)

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats_on(x.device)
        out = x.contiguous().to(torch.float32).div_(255).sub_(mean).div_(std)  # per-image ToFloat, Normalize
        return out.permute(0, 3, 1, 2)  # (B, 3, s, s), channels-last in memory

    def _stats_on(self, device: torch.device):
        if device not in self._stats:
            self._stats[device] = (torch.tensor(IMAGENET_MEAN, dtype=torch.float32, device=device),
                                   torch.tensor(IMAGENET_STD, dtype=torch.float32, device=device))
        return self._stats[device]
