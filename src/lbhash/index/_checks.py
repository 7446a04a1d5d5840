"""Validation of everything a caller hands to an index: one-line InputErrors naming the value."""

from __future__ import annotations

import numpy as np

from lbhash.checks import is_int, non_negative_int, positive_int
from lbhash.errors import InputError
from lbhash.index.sparse_labels import SparseLabels
from lbhash.labels import as_class_ids, as_multihot
from lbhash.limits import MAX_CLASS_ID, check_ids


def check_bits(bits, name: str = "bits") -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits <= 0 or bits % 8:
        raise InputError(f"{name} must be a positive multiple of 8, got {bits!r}")
    return int(bits)


def instance_codes(codes, n: int, bits: int | None, held: bool) -> np.ndarray | None:
    """An add's instance codes checked against what the index keeps: `bits` (None: none), `held` (it
    has held items, so it can no longer start keeping them)."""
    if codes is None:
        if bits is not None and n:
            raise InputError(f"the index keeps a {bits}-bit instance code per item: give the items' instance codes "
                             "with their codes")
        return None
    if bits is None:
        if held:
            raise InputError("the index keeps no instance codes (its first items came without them): add codes "
                             "alone, or build a new index with instance codes")
        width = np.asarray(codes).shape[-1] if np.asarray(codes).ndim == 2 else 0
        bits = check_bits(width * 8, "instance codes' bits")
    arr = packed_codes(codes, bits, "instance codes")
    if len(arr) != n:
        raise InputError(f"instance codes has {len(arr)} rows but there are {n} codes")
    return arr


def packed_codes(codes, bits: int, name: str = "codes") -> np.ndarray:
    """Packed uint8 codes (n, bits // 8) as a C-contiguous array; anything else is refused."""
    arr = np.asarray(codes)
    width = bits // 8
    if arr.dtype != np.uint8:
        hint = ""
        if arr.ndim == 2 and arr.shape[1] == bits and arr.dtype.kind in "biuf":
            hint = " (these look like unpacked +/-1 or boolean codes: pack them with lbhash.codes.pack)"
        raise InputError(f"{name} must be packed uint8 codes of shape (n, {width}) for {bits} bits, "
                         f"got dtype {arr.dtype} with shape {arr.shape}{hint}")
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D array (n, {width}) of packed codes, got shape {arr.shape} "
                         "(one code: reshape it to (1, -1))")
    if arr.shape[1] != width:
        raise InputError(f"{name} has {arr.shape[1]} bytes per code ({arr.shape[1] * 8} bits), "
                         f"but the index holds {bits}-bit codes ({width} bytes)")
    return np.ascontiguousarray(arr)


def item_ids(ids, n: int | None = None, name: str = "ids") -> np.ndarray:
    """Non-negative int64 ids, 1-D, without duplicates (length n where given)."""
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size == 0 and arr.dtype.kind == "f":  # an empty list comes out as float64
        arr = arr.astype(np.int64)
    if arr.dtype == object and all(isinstance(v, int) for v in arr.ravel()):  # Python ints past int64
        check_ids(arr.ravel(), name)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise InputError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise InputError(f"{name} has {len(arr)} entries but there are {n} codes")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise InputError(f"{name} holds {int(arr.max())}, above the int64 range")
    out = arr.astype(np.int64)
    if out.size and out.min() < 0:
        raise InputError(f"{name} must be non-negative, found {int(out.min())}")
    if out.size > 1:
        ordered = np.sort(out)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.size:
            raise InputError(f"{name} holds id {int(repeated[0])} more than once")
    return out


def label_rows(labels, n: int, name: str = "labels") -> SparseLabels:
    """Class ids (n,), multi-hot rows (n, C) or `SparseLabels` -> `SparseLabels` (n rows).

    Class ids go straight to the sparse form: no (n, max id + 1) matrix is built on the way."""
    if isinstance(labels, SparseLabels):
        rows = labels.check(name)
        if rows.indices.size and int(rows.indices.max()) > MAX_CLASS_ID:
            raise InputError(f"{name} has class id {int(rows.indices.max())}; class ids must be at most {MAX_CLASS_ID}")
    else:
        try:
            arr = np.asarray(labels)
            if arr.ndim == 1:
                # label ids identify classes across batches: kept as they are, so bounded by the limit
                rows = SparseLabels.from_class_ids(as_class_ids(arr, name, MAX_CLASS_ID))
            else:
                dense = as_multihot(arr, name, keep_ids=True, max_id=MAX_CLASS_ID)
                if dense.shape[1] > MAX_CLASS_ID + 1:
                    raise InputError(f"{name} has {dense.shape[1]} label columns; class ids must be at most "
                                     f"{MAX_CLASS_ID}")
                rows = SparseLabels.from_dense(dense)
        except ValueError as err:
            raise InputError(str(err)) from None
    if len(rows) != n:
        raise InputError(f"{name} has {len(rows)} rows but there are {n} codes")
    return rows


def top_k(k) -> int:
    return positive_int(k, "k")


def rescore_factor(factor, name: str = "rescore_factor") -> int:
    if not is_int(factor) or factor < 1:
        raise InputError(f"{name} must be a positive integer (Hamming candidates per result), got {factor!r}")
    return int(factor)


def radius_value(radius) -> int:
    return non_negative_int(radius, "radius")
