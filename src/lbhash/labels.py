"""Label conversion at the edge: integer class ids or multi-hot rows -> boolean multi-hot.

Inside the library labels are a 2-D multi-hot array (n, C), except in a search index, which keeps class-id sets sparsely
(lbhash.index.sparse_labels). An item is relevant to a query when they share at least one label. A class id is 0 to
MAX_CLASS_ID (65535, what an index holds, lbhash.limits), everywhere: a larger one (a stray 10^9, a hashed 2^40) is
refused in one line naming it and the limit, never remapped to a class the outputs would then name by another id (nor
made a 10^9-column array). Ids that leave some of 0..C-1 unused are remapped to 0..C-1 in increasing order, with a
SparseClassIdsWarning.
"""

from __future__ import annotations

import warnings

import numpy as np

from lbhash.errors import InputError, LbhashWarning
from lbhash.limits import MAX_CLASS_ID


class SparseClassIdsWarning(LbhashWarning):
    """Class ids that leave some of 0..C-1 unused were remapped to 0..C-1 in increasing order."""


def as_multihot(labels, name: str = "labels", num_classes: int | None = None,
                keep_ids: bool = False, max_id: int = MAX_CLASS_ID) -> np.ndarray:
    """Labels (non-negative integer class ids (n,) or a 0/1 matrix (n, C)) as a boolean (n, C) multi-hot
    array. keep_ids: class id c is always column c (ids that name classes elsewhere, as in an index),
    never remapped; ids must then be at most `max_id`."""
    arr = np.asarray(labels)
    if arr.ndim == 1:
        ids = _as_class_ids(arr, name)
        if num_classes is not None:
            if ids.size and int(ids.max()) >= num_classes:
                raise InputError(f"{name} has class id {int(ids.max())}, but there are only {num_classes} classes")
            width = num_classes
        elif keep_ids:
            ids = as_class_ids(ids, name, max_id)
            width = int(ids.max()) + 1 if ids.size else 0
        else:
            ids, width = dense_class_ids(ids, name)
        out = np.zeros((ids.size, width), dtype=bool)
        out[np.arange(ids.size), ids] = True
        return out
    check_label_shape(arr, name)
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
    for arr, name in zip((a_arr, b_arr), names):
        check_label_shape(arr, name)
    width = next((arr.shape[1] for arr in (a_arr, b_arr) if arr.ndim == 2), None)
    if a_arr.ndim == 2 and b_arr.ndim == 2 and a_arr.shape[1] != b_arr.shape[1]:
        raise InputError(f"{names[0]} has {a_arr.shape[1]} label columns but {names[1]} has {b_arr.shape[1]}")
    if width is None:  # both integer vectors: one dense class axis for both
        ids = [_as_class_ids(x, n) for x, n in zip((a_arr, b_arr), names)]
        joint, width = dense_class_ids(np.concatenate(ids), f"{names[0]} and {names[1]}")
        a_arr, b_arr = joint[:len(ids[0])], joint[len(ids[0]):]
    return as_multihot(a_arr, names[0], width), as_multihot(b_arr, names[1], width)


def check_label_shape(arr: np.ndarray, name: str) -> None:
    """Labels are class ids (n,) or multi-hot rows (n, C): anything deeper is refused here, not by numpy later."""
    if arr.ndim not in (1, 2):
        raise InputError(f"{name} must be a vector of class ids (n,) or an (n, C) multi-hot matrix, "
                         f"got shape {arr.shape}")


def dense_class_ids(ids: np.ndarray, name: str) -> tuple[np.ndarray, int]:
    """(ids, C): the ids (each at most MAX_CLASS_ID) as given when 0..C-1 are all used, else
    remapped to 0..C-1 in increasing order (with a SparseClassIdsWarning)."""
    if not ids.size:
        return ids, 0
    top = int(ids.max())
    present = np.bincount(ids, minlength=top + 1) > 0
    if present.all():
        return ids, top + 1
    distinct = np.flatnonzero(present)
    warnings.warn(SparseClassIdsWarning(f"{name}: class ids are not dense (largest {top}, {len(distinct)} used); "
                                        f"remapped to 0..{len(distinct) - 1} in increasing order"), stacklevel=3)
    return np.searchsorted(distinct, ids), len(distinct)


def as_class_ids(labels, name: str = "labels", max_id: int | None = None) -> np.ndarray:
    """Non-negative integer class ids as int64, each at most `max_id` where given (an index keeps them sparse)."""
    ids = _as_class_ids(np.asarray(labels), name)
    if max_id is not None and ids.size and int(ids.max()) > max_id:
        raise InputError(f"{name} has class id {int(ids.max())}; class ids must be at most {max_id}")
    return ids


def _as_class_ids(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            raise InputError(f"{name} contains NaN at index {int(np.flatnonzero(np.isnan(arr))[0])}")
        if (arr != np.round(arr)).any():
            i = int(np.flatnonzero(arr != np.round(arr))[0])
            raise InputError(f"{name} must hold integer class ids, found {arr[i].item()!r} at index {i}")
    elif arr.dtype.kind not in "iub":
        raise InputError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:  # (checked before the cast to int64, which would wrap 2^64 - 1 or 1e30)
        i = int(np.argmin(arr))
        raise InputError(f"{name} must hold non-negative class ids, found {_shown(arr[i])} at index {i}")
    if arr.size and arr.max() > MAX_CLASS_ID:
        i = int(np.argmax(arr))
        raise InputError(f"{name} has class id {_shown(arr[i])} at index {i}; {ID_RULE}")
    return arr.astype(np.int64)


def _shown(value) -> int | float:
    value = value.item()
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**63 else value


ID_RULE = (f"class ids are 0 to {MAX_CLASS_ID} (lbhash.limits.MAX_CLASS_ID, what an index holds): number the "
           "classes 0..C-1 (their class names can keep the old ids)")
