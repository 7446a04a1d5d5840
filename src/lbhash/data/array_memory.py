"""The memory an array file needs once loaded, checked from its headers before any array is read.

`check_load_memory` adds the copies that loading makes (float32 features, RGB images,
channels-last, concatenated splits) to the bytes the .npy headers (or `whosmat`) describe, and
refuses in one line a file that does not fit (`lbhash._io.check_fits_in_memory`), where numpy
would otherwise fail part-way or the machine start swapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from lbhash import _io

# `copies(shape, dtype, keys) -> (bytes of the copies made of these inputs, bytes of the inputs
# as the loader's check returns them)`; keys: the names of every array in the file
Copies = Callable[[tuple, np.dtype, set], tuple[int, int]]

# MATLAB classes as whosmat names them -> the numpy dtype loadmat gives (sparse: made dense)
MAT_DTYPES = {"double": np.float64, "single": np.float32, "logical": np.uint8, "sparse": np.float64,
              **{t: np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")}}


def file_headers(path: Path, suffix: str) -> dict[str, tuple[tuple[int, ...], np.dtype]] | None:
    """(shape, dtype) of each array of an .npy ('' key), .npz or .mat file; None when they cannot
    be told without reading the file (the reader then reports what is wrong with it)."""
    if suffix in (".npy", ".npz"):
        return _io.array_headers(path)
    try:
        from scipy.io import whosmat

        listed = whosmat(path)
    except Exception:  # noqa: BLE001 - v7.3 or unreadable: loadmat's own message follows
        return None
    return {name: (tuple(int(n) for n in shape), np.dtype(MAT_DTYPES[cls]))
            for name, shape, cls in listed if cls in MAT_DTYPES}


def check_load_memory(path: Path, suffix: str, x_key: str | None, x_keys: tuple[str, ...], copies: Copies,
                      copy_what: str) -> None:
    """Refuse, before reading it, a file whose arrays plus the `copies` loading makes of its inputs (found as
    the loader finds them; when not, the loader's message follows) exceed the available memory."""
    headers = file_headers(path, suffix)
    if not headers:
        return
    if suffix == ".npy":
        parts = [""]
    elif x_key is not None or any(k in headers for k in x_keys):
        parts = [x_key if x_key is not None else next(k for k in x_keys if k in headers)]
    else:
        parts = ["x_train", "x_test"]
    if not all(k in headers for k in parts):
        return
    extra, out = 0, []
    for key in parts:
        made, result = copies(*headers[key], set(headers))
        extra += made
        out.append(result)
    shape, dtype = headers[parts[0]]
    name = "the array" if parts == [""] else f"array {parts[0]!r}"
    if len(parts) == 2:  # read as one: x_train's rows, then x_test's
        extra += sum(out)
        copy_what += " and the concatenation of x_train and x_test"
        name = "'x_train' + 'x_test'"
        shape = (shape[0] + headers["x_test"][0][0], *shape[1:]) if shape else shape
    _io.check_fits_in_memory(path, headers, extra, copy_what, (name, shape, dtype))


def float32_copies(quantized: Callable[[set], bool]) -> Copies:
    """The copies of feature loading: a float32 array, unless the file's features are float32
    already and `quantized(keys)` says they are not dequantised (then they are used as read)."""
    def copies(shape, dtype, keys):
        n = int(np.prod(shape, dtype=object))
        made = 0 if dtype == np.float32 and not quantized(keys) else n * 4
        return made, n * dtype.itemsize
    return copies


def rgb_copies(shape, dtype, keys) -> tuple[int, int]:
    """The copies of image-array loading (lbhash.data.image_arrays.as_rgb_images): (N, H, W, 3)
    uint8 made of grayscale by repetition, or of channels-first images by a transposing copy."""
    n = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if dtype != np.uint8 or len(shape) not in (3, 4):
        return 0, n  # refused when read
    last = shape[3] if len(shape) == 4 else 1
    first = len(shape) == 4 and last not in (1, 3) and shape[1] in (1, 3)
    channels = shape[1] if first else last
    if channels == 1:
        return 3 * n, 3 * n
    return (n if first else 0), n
