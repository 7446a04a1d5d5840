"""Codes files: the one schema that every command writes and reads (docs/evaluation.md#codes-files).

An .npz holding `format` ("lbhash-codes/2"), `bits`, an optional `topk` and one or more parts:
a set of items whose arrays share a prefix (none for `lbhash encode`'s "items", `query_` and
`db_` for a run's queries and database): `codes`, `ids`, and optionally `labels`, `sources`,
`real`, `embeddings` and `scores`. Files of earlier versions and `.npy` code arrays are read too.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lbhash import _io
from lbhash.checks import WHOLE_DATABASE, topk_from_file, topk_to_file
from lbhash.codes import as_packed
from lbhash.errors import InputError
from lbhash.labels import check_label_shape

FORMAT = "lbhash-codes/2"
PARTS = {"items": "", "query": "query_", "db": "db_"}
FIELDS = ("codes", "ids", "labels", "sources", "real", "scores", "embeddings")
_LEGACY_IDS = {"query_index": "query_ids", "db_index": "db_ids"}


def save_codes_file(path: str | os.PathLike, query_codes, db_codes, query_labels=None, db_labels=None,
                    bits: int | None = None, **extra) -> None:
    """Write a codes file with a query part and a database part (a run's codes.npz)."""
    write_codes(path, bits, {"query": {"codes": query_codes, "labels": query_labels},
                             "db": {"codes": db_codes, "labels": db_labels}}, **extra)


def write_codes(path: str | os.PathLike, bits: int | None, parts: dict[str, dict], topk: int | None = None,
                **extra) -> None:
    """Write a codes file atomically (the arrays of `codes_arrays`)."""
    _io.save_npz(path, **codes_arrays(bits, parts, topk, str(path), **extra))


def stored_labels(multi_label: bool, labels: np.ndarray) -> np.ndarray:
    """The labels a codes file stores of multi-hot rows: class ids for single-label data, else the rows (uint8)."""
    return labels.astype(np.uint8) if multi_label else labels.argmax(1).astype(np.int64)


def codes_arrays(bits: int | None, parts: dict[str, dict], topk: int | None = None, where: str = "codes",
                 **extra) -> dict[str, np.ndarray]:
    """The arrays of a codes file, checked as a reader checks them (errors name `where`).
    `parts` maps a part name (items, query, db) to its fields (codes, ids, labels, sources,
    real, scores; None = absent); `extra` adds arrays, where `query_ids=...` style names fill a
    part's fields too. `codes_from_arrays` reads them as `load_codes_file` reads the file."""
    for old, new in _LEGACY_IDS.items():
        if old in extra:
            extra[new] = extra.pop(old)
    arrays: dict[str, np.ndarray] = {"format": np.array(FORMAT), "bits": None}
    for name, fields in parts.items():
        prefix = PARTS[name]
        fields = {**fields, **{f: extra.pop(prefix + f) for f in FIELDS if prefix + f in extra}}
        packed, bits = as_packed(fields["codes"], bits, f"{prefix}codes")
        arrays[prefix + "codes"] = packed
        ids = fields.get("ids")
        arrays[prefix + "ids"] = np.arange(len(packed), dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
        for field in FIELDS[2:]:
            if fields.get(field) is not None:
                arrays[prefix + field] = np.asarray(fields[field])
    arrays["bits"] = np.int64(bits)
    arrays["topk"] = np.array(topk_to_file(topk))
    arrays.update({k: np.asarray(v) for k, v in extra.items()})
    _normalized(where, dict(arrays))  # what is written is what a reader accepts
    return arrays


def codes_from_arrays(arrays: dict[str, np.ndarray], where: str = "codes") -> dict:
    """A codes file's arrays held in memory, read as `load_codes_file` reads the file."""
    return _normalized(where, arrays)


def load_codes_file(path: str | os.PathLike, need: tuple[str, ...] = ("query", "db"), bits: int | None = None) -> dict:
    """Read and check a codes file; every part named in `need` must be there.

    Returns a dict with `bits` (int), `topk` (int R, or None for the whole database; the file records
    one when `topk_recorded`), `parts` (the part names present) and each part's arrays under their
    prefixed keys, ids always filled in. A .npy file of codes is one part ("items"); `bits` reads
    packed uint8 codes of a width other than 8 x bytes."""
    path = Path(path)
    if path.suffix.lower() == ".npy":
        codes = _io.load_npy(path)
        packed, width = as_packed(codes, bits, f"{path}: codes")
        arrays = {"codes": packed, "bits": np.int64(width)}
    else:
        try:
            arrays = _io.load_npz(path)
        except ValueError as err:
            raise InputError(str(err)) from None
    data = _normalized(str(path), arrays)
    for name in need:
        if name not in data["parts"]:
            have = ", ".join(data["parts"]) or "none"
            raise InputError(f"{path}: no {name} part (key {PARTS[name]}codes; parts here: {have})")
    return data


def part(data: dict, name: str) -> dict:
    """The fields of one part of a loaded codes file (absent fields are None)."""
    prefix = PARTS[name]
    return {f: data.get(prefix + f) for f in FIELDS}


def only_part(data: dict, preferred: str, path) -> str:
    """The part a one-sided reader uses: `preferred` if the file has it, else its only part."""
    if preferred in data["parts"]:
        return preferred
    if len(data["parts"]) == 1:
        return data["parts"][0]
    raise InputError(f"{path}: holds parts {', '.join(data['parts'])}; none is {preferred!r}")


def _normalized(path: str, arrays: dict) -> dict:
    data = dict(arrays)
    for old, new in _LEGACY_IDS.items():
        if old in data and new not in data:
            data[new] = data.pop(old)
    if "codes" in data and "ids" in data and data["ids"].dtype.kind in "US" and "sources" not in data:
        data["sources"] = data.pop("ids")  # `lbhash encode` before format 2: the files of image items
    fmt = data.get("format")
    if fmt is not None and str(fmt) != FORMAT:
        raise InputError(f"{path}: codes file format {str(fmt)!r}; this lbhash reads {FORMAT} and earlier files")
    if data.get("bits") is None:
        raise InputError(f"{path}: missing key bits (the code length; a codes file needs bits and "
                         f"codes, or query_codes and db_codes)")
    bits = np.asarray(data["bits"])
    if bits.shape != () or bits.dtype.kind not in "iu" or int(bits) <= 0:
        raise InputError(f"{path}: 'bits' must be a positive integer scalar, got {bits!r}")
    data["bits"] = int(bits)
    data["topk"] = topk_from_file(np.asarray(data.get("topk", WHOLE_DATABASE)), path)
    data["topk_recorded"] = "topk" in arrays
    data["parts"] = [name for name, prefix in PARTS.items() if prefix + "codes" in data]
    if not data["parts"]:
        raise InputError(f"{path}: holds no codes (keys codes, or query_codes and db_codes; "
                         f"keys here: {', '.join(k for k in arrays) or 'none'})")
    for name in data["parts"]:
        _check_part(path, data, PARTS[name])
    return data


def _check_part(path: str, data: dict, p: str) -> None:
    codes = data[p + "codes"]
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise InputError(f"{path}: '{p}codes' must be packed uint8 (n, bytes), got {codes.dtype} {codes.shape}")
    as_packed(codes, data["bits"], f"{path}: '{p}codes'")  # width and padding bits
    n = len(codes)
    ids = data.get(p + "ids")
    if ids is None:
        data[p + "ids"] = np.arange(n, dtype=np.int64)
    else:
        ids = np.asarray(ids)
        if ids.dtype.kind == "f" and ids.ndim == 1 and len(ids) == n:
            bad = ids[ids != np.round(ids)]
            found = f"found {bad[0].item()!r}" if len(bad) else "integral values"
            raise InputError(f"{path}: '{p}ids' must be integers, {found} (dtype {ids.dtype}); ids are never "
                             "silently converted")
        if ids.ndim != 1 or len(ids) != n or ids.dtype.kind not in "iu":
            raise InputError(f"{path}: '{p}ids' must be {n} integers, got {ids.dtype} {ids.shape}")
        data[p + "ids"] = ids.astype(np.int64)
    if data.get(p + "labels") is not None:
        labels = data[p + "labels"]
        check_label_shape(labels, f"{path}: '{p}labels'")
        if len(labels) != n:
            raise InputError(f"{path}: '{p}labels' has {len(labels)} rows but '{p}codes' has {n}")
    if data.get(p + "sources") is not None:
        sources = data[p + "sources"]
        if sources.ndim != 1 or len(sources) != n or sources.dtype.kind not in "US":
            raise InputError(f"{path}: '{p}sources' must be {n} strings, got {sources.dtype} {sources.shape}")
    for field, width in (("real", data["bits"]), ("scores", None), ("embeddings", None)):
        arr = data.get(p + field)
        if arr is not None and (arr.ndim != 2 or len(arr) != n or (width and arr.shape[1] != width)):
            raise InputError(f"{path}: '{p}{field}' must have {n} rows" + (f" of {width}" if width else "")
                             + f", got shape {arr.shape}")
    emb = data.get(p + "embeddings")
    if emb is not None and (emb.dtype.kind != "f" or not np.isfinite(emb).all()):
        raise InputError(f"{path}: '{p}embeddings' must be finite floats, got {emb.dtype}"
                         + (" with non-finite values" if emb.dtype.kind == "f" else ""))
