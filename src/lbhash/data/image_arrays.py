"""Image arrays in an .npz (or .npy/.mat) file: the MNIST and "CIFAR as numpy" files many
users have, read as an ImageDataset held in memory.

Images are uint8 (N, H, W), (N, H, W, C) with C = 1 or 3, or unambiguously channels first;
grayscale becomes RGB by repeating the channel. Keys, labels and splits are found as in feature
files (lbhash.data.features).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lbhash.data.array_memory import rgb_copies
from lbhash.data.features import ArrayInputs, read_arrays
from lbhash.data.images import ImageDataset
from lbhash.errors import InputError

IMAGE_KEYS = ("images", "x", "X", "data", "pixels")


def load_image_arrays(path: str | os.PathLike, x_key: str | None = None, y_key: str | None = None,
                      split_key: str | None = None,
                      labels_path: str | os.PathLike | None = None, labels_required: bool = True) -> ImageDataset:
    """Load an image-array file as an in-memory ImageDataset (see the module docstring)."""
    path = Path(path).expanduser()
    inputs = ArrayInputs(as_rgb_images, "images", IMAGE_KEYS, (rgb_copies, "the RGB copy of its images"))
    read = read_arrays(path, x_key, y_key, split_key, labels_path, inputs, labels_required)
    return ImageDataset(read.labels, read.is_test, f"image-array:{path.name}", read.class_names,
                        pixels=read.x, rows_of=path.name)


def as_rgb_images(arr, where, key: str = "images") -> np.ndarray:
    """uint8 images as (N, H, W, 3); grayscale is repeated into three channels."""
    arr = np.asarray(arr)
    if arr.dtype != np.uint8:
        raise InputError(f"{where}: images {key!r} must be uint8 (0..255), got dtype {arr.dtype}")
    if arr.ndim == 4 and arr.shape[3] not in (1, 3) and arr.shape[1] in (1, 3):
        arr = arr.transpose(0, 2, 3, 1)  # channels first
    if arr.ndim == 3:
        arr = arr[..., None]
    if arr.ndim != 4 or arr.shape[3] not in (1, 3):
        raise InputError(f"{where}: images {key!r} must have shape (N, H, W), (N, H, W, 1) or (N, H, W, 3), "
                         f"got {arr.shape}")
    if min(arr.shape[:3]) == 0:
        raise InputError(f"{where}: images {key!r} are empty, shape {arr.shape}")
    if arr.shape[3] == 1:
        arr = np.repeat(arr, 3, axis=3)
    return np.ascontiguousarray(arr)
