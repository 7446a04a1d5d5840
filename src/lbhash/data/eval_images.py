"""The evaluation transform of images in numpy: uint8 (n, H, W, 3) in, normalised float32
(n, 3, s, s) out, without torch.

What an exported encoder (lbhash.encoders.exported) feeds its model: exactly the pixels of
`BatchTransform`'s evaluation pipeline on the CPU (the tests compare them), with the resize a
port of torch's uint8 antialiased bilinear kernel and the same IEEE operations in the same order.
"""

from __future__ import annotations

import math

import numpy as np

from lbhash.errors import InputError

TRANSFORM_PRESETS = ("imagenet", "cifar", "cifar-augment")


def resized_shape(preset: str, size: int, h: int, w: int) -> tuple[int, int]:
    """The (h, w) a preset resizes an h x w image to before cropping: imagenet sets the shorter
    side to round(size * 256 / 224) (the longer one truncated, as torchvision does); the cifar
    presets resize to (size, size)."""
    if preset != "imagenet":
        return size, size
    short = round(size * 256 / 224)
    return (short, int(short * w / h)) if h <= w else (int(short * h / w), short)


FILTER_BUDGET = 64 << 20  # bytes of gathered taps a resize holds at once (`_filter_axis`)


def eval_inputs(images: np.ndarray, preset: str, size: int, mean, std) -> np.ndarray:
    """Model inputs float32 (n, 3, size, size) of same-sized uint8 images (n, H, W, 3)."""
    if preset not in TRANSFORM_PRESETS:
        raise InputError(f"unknown transform preset {preset!r} (known: {', '.join(TRANSFORM_PRESETS)})")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise InputError(f"images must be uint8 (n, H, W, 3), got {images.dtype} {images.shape}")
    h, w = images.shape[1:3]
    x = resize_uint8(images, resized_shape(preset, size, h, w))
    if preset == "imagenet":
        h, w = x.shape[1:3]
        if size > h or size > w:
            raise InputError(f"crop {size}x{size} is larger than the image {h}x{w}")
        top, left = (h - size) // 2, (w - size) // 2
        x = x[:, top:top + size, left:left + size]
    mean32, std32 = np.asarray(mean, np.float32), np.asarray(std, np.float32)
    out = (x.astype(np.float32) / np.float32(255) - mean32) / std32
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def resize_uint8(images: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """uint8 (n, H, W, C) resized to `shape` by antialiased bilinear filtering, rounded as
    torch's uint8 CPU kernel rounds; an axis of unchanged size is not filtered."""
    x = images
    th, tw = shape
    if tw != x.shape[2]:
        x = _filter_axis(x, 2, tw)
    if th != x.shape[1]:
        x = _filter_axis(x, 1, th)
    return x


def _filter_axis(x: np.ndarray, axis: int, out_size: int) -> np.ndarray:
    """`x` (n, H, W, C) filtered along `axis` (1 or 2) to `out_size`, a block of the other axis at a time:
    each output is its own integer sum, and the gathered taps of a whole 80-megapixel photo, shrunk to
    the model's size (73 taps a value), took 2 GB at once where a block takes at most FILTER_BUDGET."""
    start, weights, precision = axis_weights(x.shape[axis], out_size)
    taps = weights.shape[1]
    index = np.minimum(start[:, None] + np.arange(taps), x.shape[axis] - 1)  # zero weights past xsize
    shape = [1] * (x.ndim + 1)
    shape[axis], shape[axis + 1] = out_size, taps
    weights = weights.reshape(shape)
    other = 3 - axis  # the spatial axis not filtered
    out_shape = list(x.shape)
    out_shape[axis] = out_size
    out = np.empty(out_shape, np.uint8)
    block = max(1, FILTER_BUDGET // (8 * out_size * taps * x.shape[3]))  # int32 taps and their products
    for i in range(x.shape[0]):
        for b in range(0, x.shape[other], block):
            part = x[i:i + 1, b:b + block] if other == 1 else x[i:i + 1, :, b:b + block]
            gathered = np.take(part, index, axis=axis).astype(np.int32)  # the axis becomes (out, taps)
            acc = (gathered * weights).sum(axis=axis + 1, dtype=np.int32)
            acc += np.int32(1 << (precision - 1))
            target = out[i:i + 1, b:b + block] if other == 1 else out[i:i + 1, :, b:b + block]
            target[...] = np.clip(acc >> precision, 0, 255)
    return out


def axis_weights(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(first input index (out,), int16 weights (out, taps) as int32, their precision in bits)
    of one axis, computed as torch computes them (float64, in the same order of operations)."""
    scale = in_size / out_size
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    taps = math.ceil(support) * 2 + 1
    start = np.zeros(out_size, np.int64)
    floats = np.zeros((out_size, taps), np.float64)
    for i in range(out_size):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xsize = min(max(min(int(center + support + 0.5), in_size) - xmin, 0), taps)
        row = [_triangle((j + xmin - center + 0.5) * invscale) for j in range(xsize)]
        total = 0.0
        for value in row:
            total += value
        if total != 0.0:
            row = [value / total for value in row]
        floats[i, :xsize] = row
        start[i] = xmin
    w_max = float(floats.max())
    precision = 0
    while precision < 22 and int(0.5 + w_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = floats * (1 << precision)
    rounded = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int16)
    return start, rounded.astype(np.int32), precision


def _triangle(x: float) -> float:
    x = -x if x < 0 else x
    return 1.0 - x if x < 1.0 else 0.0
