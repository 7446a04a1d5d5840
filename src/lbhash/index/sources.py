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

PARTS = ("database", "all")


def load_encoder(run_dir: str | Path):
    """The fitted encoder of a trained run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    try:
        from lbhash import HashEncoder  # the training layer's public encoder, where it exists
    except ImportError:
        return _RunEncoder(run_dir)
    return HashEncoder.load(run_dir)


def run_codes(run_dir: str | Path, part: str = "database") -> dict[str, np.ndarray]:
    """Codes of a run's items: part="database" reads its codes.npz; part="all" encodes
    every item of its data with its model. ids are the items' positions in the data set."""
    run_dir = Path(run_dir)
    if part not in PARTS:
        raise InputError(f"--part must be one of {', '.join(PARTS)}, got {part!r}")
    if part == "database":
        path = run_dir / "codes.npz"
        if not path.is_file():
            raise InputError(f"{run_dir}: no codes.npz (not a finished run directory)")
        data = _load(path)
        return _checked(path, data["db_codes"], data["bits"], data.get("db_index"), data.get("db_labels"))
    encoded = _encode_run()(run_dir, None, "all", progress=False)
    ids = np.arange(len(encoded["codes"]), dtype=np.int64)  # image data names files: use positions
    return _checked(run_dir, encoded["codes"], encoded["bits"], ids, encoded["labels"])


def codes_file(path: str | Path) -> dict[str, np.ndarray]:
    """codes/bits/ids/labels of an `lbhash encode` output, or the database of a run's codes.npz."""
    path = Path(path)
    data = _load(path)
    if "codes" in data:
        ids = data.get("ids")
        if ids is not None and ids.dtype.kind not in "iu":
            ids = None  # file names of image items: number them instead
        return _checked(path, data["codes"], data.get("bits"), ids, data.get("labels"))
    if "db_codes" in data:
        return _checked(path, data["db_codes"], data.get("bits"), data.get("db_index"), data.get("db_labels"))
    raise InputError(f"{path}: holds neither 'codes' (lbhash encode) nor 'db_codes' (a run's codes.npz)")


def _encode_run():
    """The training layer's "encode every item of a run" (lbhash.train.rundir on main since
    the training rewrite; lbhash.train.restore before it)."""
    try:
        from lbhash.train.rundir import encode_run
    except ImportError:
        from lbhash.train.restore import encode_run
    return encode_run


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
    return {"codes": codes, "bits": int(bits), "ids": ids, "labels": labels}


class _RunEncoder:
    """A run's model behind the encoder interface, for a training layer without
    lbhash.HashEncoder (drop it once HashEncoder is merged)."""

    def __init__(self, run_dir: Path):
        from lbhash.train.restore import load_model

        self._model, cfg = load_model(run_dir)
        self.bits_ = int(cfg.bits)
        self.input_kind_ = "features" if cfg.backbone is None else "images"
        self._transform = None
        if self.input_kind_ == "images":
            from lbhash.train.experiment import image_transform

            self._transform = image_transform(cfg, train=False)
        first = dict(self._model.named_parameters()).get("head.net.0.weight")
        self._input_dim = None if first is None or self._transform is not None else int(first.shape[1])

    def encode(self, x) -> np.ndarray:
        import torch

        from lbhash.codes import pack
        from lbhash.train.encode import encode_array

        if self.input_kind_ == "features":
            x = np.asarray(x, np.float32)
            if self._input_dim is not None and x.shape[1] != self._input_dim:
                raise InputError(f"features have {x.shape[1]} columns but the run's model takes {self._input_dim}")
            return pack(encode_array(self._model, x))
        batch = torch.stack([self._transform(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1))
                             for img in x])
        with torch.no_grad():
            out = self._model(batch)
        return pack(torch.where(out >= 0, 1, -1).to(torch.int8).numpy())
