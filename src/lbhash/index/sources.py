"""Where codes and encoders come from. Every call into the training layer is in this module,
so that a change there is rewired here alone.

- `load_encoder(run_dir)`: a fitted encoder (attributes `bits_`, `input_kind_`; `encode(X)`
  -> packed uint8 codes) for a run directory.
- `run_codes(run_dir, part)`: the codes, ids and labels of a run's items.
- `codes_file(path)`: the codes, ids and labels of an .npz written by `lbhash encode` or a
  run's codes.npz.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lbhash import _io
from lbhash.errors import InputError
from lbhash.index import _checks

PARTS = ("database", "all")


def load_encoder(run_dir: str | Path):
    """The fitted encoder (lbhash.HashEncoder) of a trained run."""
    from lbhash.train.hash_encoder import HashEncoder

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    return HashEncoder.load(run_dir)


def run_codes(run_dir: str | Path, part: str = "database") -> dict[str, np.ndarray]:
    """Codes of a run's items: part="database" reads its codes.npz; part="all" encodes
    every item of its data with its model. ids are the items' positions in the data set."""
    run_dir = Path(run_dir)
    if part not in PARTS:
        raise InputError(f"--part must be one of {', '.join(PARTS)}, got {part!r}")
    if part == "database":
        from lbhash.train.rundir import CODES, verify_files

        path = run_dir / CODES
        if not path.is_file():
            raise InputError(f"{run_dir}: no codes.npz (not a finished run directory)")
        verify_files(run_dir, (CODES,))
        data = _load(path)
        return _checked(path, data["db_codes"], data["bits"], data.get("db_index"), data.get("db_labels"))
    from lbhash.train.rundir import encode_run

    encoded = encode_run(run_dir, None, "all", progress=False)
    ids = np.arange(len(encoded["codes"]), dtype=np.int64)  # image data names files: use positions
    return _checked(run_dir, encoded["codes"], encoded["bits"], ids, encoded["labels"])


def codes_file(path: str | Path) -> dict[str, np.ndarray]:
    """codes/bits/ids/labels of an `lbhash encode` output, or the database of a run's codes.npz."""
    path = Path(path)
    data = _load(path)
    if "codes" in data:
        ids = data.get("ids")
        if ids is not None and ids.dtype.kind in "US":
            ids = None  # file names of image items: number them instead
        return _checked(path, data["codes"], data.get("bits"), ids, data.get("labels"))
    if "db_codes" in data:
        return _checked(path, data["db_codes"], data.get("bits"), data.get("db_index"), data.get("db_labels"))
    raise InputError(f"{path}: holds neither 'codes' (lbhash encode) nor 'db_codes' (a run's codes.npz)")


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        return _io.load_npz(path)
    except ValueError as err:
        raise InputError(str(err)) from None


def _checked(where, codes, bits, ids, labels) -> dict:
    if bits is None:
        raise InputError(f"{where}: no 'bits' entry")
    bits = np.asarray(bits)
    if bits.shape != () or bits.dtype.kind not in "iu":
        raise InputError(f"{where}: 'bits' must be an integer scalar, got {bits!r}")
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] * 8 != int(bits):
        raise InputError(f"{where}: codes must be packed uint8 (n, {int(bits) // 8}), got {codes.dtype} {codes.shape}")
    if ids is not None:  # given ids are used or refused, never silently replaced
        if ids.dtype.kind == "f" and ids.size and (ids != np.round(ids)).any():
            bad = ids.ravel()[ids.ravel() != np.round(ids.ravel())][0]
            raise InputError(f"{where}: ids must be integers, found {bad.item()!r} (dtype {ids.dtype})")
        ids = _checks.item_ids(ids, len(codes), f"{where}: ids")
    return {"codes": codes, "bits": int(bits), "ids": ids, "labels": labels}
