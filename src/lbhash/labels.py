"""Label conversion at the edge: integer class ids or multi-hot rows -> boolean multi-hot.

Inside the library labels are always a 2-D multi-hot array (n, C). An item is relevant to a
query when they share at least one label.
"""

from __future__ import annotations

import numpy as np
from lbhash.errors import InputError


def as_multihot(labels, name: str = "labels", num_classes: int | None = None) -> np.ndarray:
    """Return labels as a boolean (n, C) multi-hot array.

    `labels` is either a vector of non-negative integer class ids or a 2-D 0/1 matrix.
    """
    arr = np.asarray(labels)
    if arr.ndim == 1:
        ids = _as_class_ids(arr, name)
        width = int(ids.max()) + 1 if ids.size else 0
        if num_classes is not None:
            if width > num_classes:
                raise InputError(
                    f"{name} has class id {width - 1}, but there are only {num_classes} classes"
                )
            width = num_classes
        out = np.zeros((ids.size, width), dtype=bool)
        out[np.arange(ids.size), ids] = True
        return out
    if arr.ndim != 2:
        raise InputError(f"{name} must be a vector of class ids or an (n, C) multi-hot matrix, got shape {arr.shape}")
    if arr.dtype == bool:
        out = arr
    else:
        if arr.dtype.kind not in "iuf":
            raise InputError(f"{name} must be numeric, got dtype {arr.dtype}")
        bad = ~((arr == 0) | (arr == 1))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise InputError(f"{name} must be 0/1 multi-hot, found {arr[r, c].item()!r} at row {r}, column {c}")
        out = arr.astype(bool)
    if num_classes is not None and out.shape[1] != num_classes:
        raise InputError(f"{name} has {out.shape[1]} label columns, expected {num_classes}")
    return out


def as_multihot_pair(a, b, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Convert two label sets so that they share one class axis (for query vs database)."""
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    width = None
    for arr in (a_arr, b_arr):
        if arr.ndim == 2:
            width = arr.shape[1] if width is None else width
    if a_arr.ndim == 2 and b_arr.ndim == 2 and a_arr.shape[1] != b_arr.shape[1]:
        raise InputError(
            f"{names[0]} has {a_arr.shape[1]} label columns but {names[1]} has {b_arr.shape[1]}"
        )
    if width is None:  # both integer vectors: one class axis wide enough for both
        ids = [_as_class_ids(x, n) for x, n in zip((a_arr, b_arr), names)]
        width = max((int(i.max()) + 1 for i in ids if i.size), default=0)
    return as_multihot(a_arr, names[0], width), as_multihot(b_arr, names[1], width)


def _as_class_ids(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            raise InputError(f"{name} contains NaN at index {int(np.flatnonzero(np.isnan(arr))[0])}")
        if (arr != np.round(arr)).any():
            i = int(np.flatnonzero(arr != np.round(arr))[0])
            raise InputError(f"{name} must hold integer class ids, found {arr[i].item()!r} at index {i}")
    elif arr.dtype.kind not in "iub":
        raise InputError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    ids = arr.astype(np.int64)
    if ids.size and ids.min() < 0:
        i = int(np.argmin(ids))
        raise InputError(f"{name} must hold non-negative class ids, found {ids[i]} at index {i}")
    return ids
