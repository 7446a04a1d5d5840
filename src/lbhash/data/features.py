"""In-memory data sets: feature files (.npz, .npy, MATLAB .mat) and scikit-learn's digits.

Labels are converted at this edge to the library's boolean (n, C) multi-hot form. Files are
read without unpickling: .npz/.npy through `allow_pickle=False`, .mat through scipy. The key
lookup (`read_arrays`) is shared with the image-array kind (lbhash.data.image_arrays).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from lbhash import _io
from lbhash.arrays import as_float32, first_nonfinite
from lbhash.data.array_memory import Copies, check_load_memory, float32_copies
from lbhash.data.base import EpochShard, HashDataset, InputOptions, check_indices, split_flags
from lbhash.errors import InputError
from lbhash.labels import as_multihot

# Keys tried in order when the caller names none.
FEATURE_KEYS = ("feat", "features", "x", "X", "data")
LABEL_KEYS = ("labels", "label", "y", "Y", "targets")
SPLIT_KEYS = ("is_test",)
CLASS_NAME_KEYS = ("label_names", "class_names")
FEATURE_SUFFIXES = (".npz", ".npy", ".mat")
DEQUANTIZE_MODES = ("auto", "on", "off")


@dataclass(eq=False)
class ArrayDataset(HashDataset):
    """In-memory feature vectors `x` (kept as C-contiguous float32, copied only when not that) and labels
    (class ids or 0/1 rows, kept as bool (n, C)); `is_test`: the file's own split (True = test) or None."""

    input_kind = "features"
    x: np.ndarray
    labels: np.ndarray
    is_test: np.ndarray | None
    name: str
    class_names: list[str] | None = None
    # the raw form (lbhash.data.input_form): the stored dtype, and the (scale, zero_point) that
    # turned stored values into x, or None when x holds the stored values as float32
    raw_dtype: str = "float32"
    quantization: tuple[float, float] | None = None

    @property
    def dequantized(self) -> bool:
        return self.quantization is not None

    def __post_init__(self) -> None:
        x = np.asarray(self.x)
        if x.ndim != 2:
            raise InputError(f"{self.name}: features must have shape (n, d), got {x.shape}")
        if x.dtype.kind not in "biuf":
            raise InputError(f"{self.name}: features must be numbers, got dtype {x.dtype}")
        self.x = as_float32(x)
        self.check_labels(len(self.x))

    def subset(self, indices) -> ArrayDataset:
        """The items at `indices` (class axis and names kept), e.g. `ds.subset(split.train)`."""
        idx = check_indices(self, indices)
        return ArrayDataset(self.x[idx], self.labels[idx],
                            None if self.is_test is None else self.is_test[idx],
                            self.name, self.class_names, self.raw_dtype, self.quantization)

    def check_items(self, indices, skip_bad: bool = False) -> tuple[np.ndarray, int]:
        """Every feature of the items must be finite (skip_bad does not apply to features)."""
        idx = check_indices(self, indices)
        bad = first_nonfinite(self.x, idx)
        if bad is not None:
            raise InputError(f"{self.name}: features contain NaN or inf at row {bad[0]}")
        return idx, 0

    def input_dim(self) -> int:
        return int(self.x.shape[1])

    def normalization(self, indices) -> tuple[np.ndarray, np.ndarray]:
        import torch  # the model's statistics are computed as torch computes them

        rows = torch.from_numpy(self.x[check_indices(self, indices)])
        return rows.mean(0).numpy(), rows.std(0).numpy()

    def train_batches(self, indices, shard: EpochShard, device="cpu", options: InputOptions = InputOptions()):
        from lbhash.data.batches import ArrayBatches

        idx = check_indices(self, indices)
        return ArrayBatches(self.x[idx], self.labels[idx], shard, device)

    def encode_batches(self, indices, options: InputOptions = InputOptions(), device="cpu",
                       progress: bool = False, batch_size: int | None = None):
        from lbhash.data.batches import array_inputs

        return array_inputs(self.x[check_indices(self, indices)], batch_size or 1024, device)


def count_unlabelled(data) -> int:
    """Number of items with no label (of a data set, or labels in any accepted form): evaluation takes
    them as relevant to nothing; methods that need a label refuse them."""
    labels = data.labels if isinstance(data, HashDataset) else as_multihot(data)
    return int((~labels.any(axis=1)).sum())


def load_digits() -> ArrayDataset:
    """scikit-learn's bundled digits (no download): 1797 items x 64 pixel features (0..16), 10 classes, no split."""
    from sklearn.datasets import load_digits as sk_load_digits

    raw = sk_load_digits()
    return ArrayDataset(x=raw.data,
                        labels=as_multihot(raw.target, num_classes=len(raw.target_names)),
                        is_test=None, name="digits",
                        class_names=[str(c) for c in raw.target_names], raw_dtype=str(raw.data.dtype))


def load_features(path: str | os.PathLike, x_key: str | None = None, y_key: str | None = None,
                  split_key: str | None = None, labels_path: str | os.PathLike | None = None,
                  scale: float | None = None, zero_point: float | None = None,
                  dequantize: str = "auto", labels_required: bool = True) -> ArrayDataset:
    """Load a feature file (.npz, .npy or MATLAB .mat up to v7) as an ArrayDataset (docs/data.md).

    Keys not given are looked up in FEATURE_KEYS, LABEL_KEYS and SPLIT_KEYS order; x_train/x_test
    files are read as train then test. `labels_path` gives (or overrides) the labels; quantised
    features are dequantised as (x - zero_point) * scale ("auto", "on" or "off");
    labels_required=False reads a file without labels as items with none.
    """
    path = Path(path).expanduser()
    if dequantize not in DEQUANTIZE_MODES:
        raise InputError(f"dequantize must be one of {', '.join(DEQUANTIZE_MODES)}, got {dequantize!r}")
    if dequantize == "off" and (scale is not None or zero_point is not None):
        raise InputError("scale/zero_point were given but dequantize='off'")
    quantized = lambda keys: dequantize == "on" or (dequantize == "auto" and (  # noqa: E731
        scale is not None or zero_point is not None or {"scale", "zero_point"} <= keys))
    inputs = ArrayInputs(_features, "features", FEATURE_KEYS,
                         (float32_copies(quantized), "the float32 copy of its features"))
    read = read_arrays(path, x_key, y_key, split_key, labels_path, inputs, labels_required)
    quantization = _quantization(read.arrays, path, scale, zero_point) if quantized(set(read.arrays)) else None
    if quantization is not None and dequantize == "auto" and np.asarray(read.x).dtype.kind == "f":
        # scaling float rows would scale features a second time, silently
        raise InputError(f"{path}: holds float features ({np.asarray(read.x).dtype}), which are feature values "
                         "already; scale and zero_point dequantise stored integers (dequantize=on forces it)")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by _check_finite
        x = dequantize_values(read.x, quantization)
        _check_finite(x, path)
    return ArrayDataset(x=x, labels=read.labels, is_test=read.is_test, name=f"features:{path.name}",
                        class_names=read.class_names, raw_dtype=str(read.x.dtype), quantization=quantization)


class LabelledArrays(NamedTuple):
    x: np.ndarray
    labels: np.ndarray               # (n, C) bool
    is_test: np.ndarray | None
    class_names: list[str] | None
    arrays: dict[str, np.ndarray]    # everything the file holds


@dataclass(frozen=True)
class ArrayInputs:
    """The model inputs an array file holds, as one kind of data set reads them: `check_x(array, path,
    key)` validates them, `what` names them, `x_keys` are tried when the caller names no key, and
    `copies` (lbhash.data.array_memory) are the copies the caller makes, checked against the memory first."""

    check_x: Callable
    what: str
    x_keys: tuple[str, ...]
    copies: tuple[Copies, str]


def read_arrays(path: Path, x_key, y_key, split_key, labels_path, inputs: ArrayInputs,
                labels_required: bool) -> LabelledArrays:
    """Inputs, labels, split flags and class names of an array file (see load_features), the
    inputs read as `inputs` says. Without labels_required, a file without labels gives zero label
    columns."""
    check_x, what, x_keys = inputs.check_x, inputs.what, inputs.x_keys
    suffix = _check_file(path, f"{what} file")
    check_load_memory(path, suffix, x_key, x_keys, *inputs.copies)
    y_path, y_name = path, "y_train/y_test"  # the names used in label error messages
    if suffix == ".npy":
        for option, value in (("x_key", x_key), ("split_key", split_key)):
            if value is not None:
                raise InputError(f"{path}: {option}={value!r} does not apply to a .npy file (it holds one array)")
        if labels_path is None and labels_required:
            raise InputError(f"{path}: a .npy file holds {what} only; give labels_path (labels=PATH in a data spec)")
        arrays: dict[str, np.ndarray] = {}
        x = check_x(_io.load_npy(path), path, "array")
        raw_y = is_test = None
    else:
        arrays = _read_mapping(path, suffix)
        key = _pick(arrays, path, x_key, x_keys, what)
        if key is not None:
            x = check_x(arrays[key], path, key)
            raw_y = None
            if labels_path is None:
                y_name = _pick(arrays, path, y_key, LABEL_KEYS, "labels")
                if y_name is not None:
                    raw_y = _label_vector(arrays[y_name], len(x), path, y_name)
                elif labels_required:
                    raise InputError(f"{path}: no labels: none of the keys {', '.join(LABEL_KEYS)} "
                                     f"(keys: {_keys(arrays)}); give y_key or labels_path")
            split_name = _pick(arrays, path, split_key, SPLIT_KEYS, "split")
            is_test = None if split_name is None else split_flags(arrays[split_name], len(x), path, split_name)
        elif "x_train" in arrays and "x_test" in arrays:
            x, raw_y, is_test = _presplit(arrays, path, y_key, split_key, labels_path is None, check_x,
                                          labels_required)
        else:
            raise InputError(f"{path}: no {what}: none of the keys {', '.join(x_keys)} and no "
                             f"x_train/x_test (keys: {_keys(arrays)}); give x_key")

    if labels_path is not None:
        raw_y, y_path, y_name = _labels_file(labels_path, y_key, len(x))
    elif raw_y is None:  # no labels, and none needed
        raw_y = np.zeros((len(x), 0), dtype=bool)
    class_names = _class_names(arrays)
    ids = raw_y.ndim == 1
    labels = as_multihot(raw_y, f"{y_path}: labels {y_name!r}",
                         num_classes=len(class_names) if class_names and ids else None)
    if class_names is not None and len(class_names) != labels.shape[1]:
        raise InputError(f"{path}: {len(class_names)} class names for {labels.shape[1]} label columns")
    return LabelledArrays(x, labels, is_test, class_names, arrays)


def _check_file(path: Path, what: str) -> str:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in FEATURE_SUFFIXES:
        raise InputError(f"{path}: unsupported {what} type {suffix or '(no suffix)'!r} "
                         f"(expected {', '.join(FEATURE_SUFFIXES)})")
    return suffix


def _read_mapping(path: Path, suffix: str) -> dict[str, np.ndarray]:
    if suffix == ".npz":
        return _io.load_npz(path)
    from scipy import io as sio, sparse
    from scipy.io.matlab import MatReadError

    try:
        raw = sio.loadmat(path)
    except NotImplementedError:  # scipy's answer to v7.3 files
        raise InputError(f"{path}: MATLAB v7.3 (HDF5) .mat files cannot be read by scipy; "
                         "re-save with save(..., '-v7') or convert to .npz") from None
    except (MatReadError, ValueError, TypeError, OSError, EOFError) as err:
        raise InputError(f"{path}: not a readable .mat file ({err})") from None
    return {k: (v.toarray() if sparse.issparse(v) else np.asarray(v))
            for k, v in raw.items() if not k.startswith("__")}


def _keys(arrays: dict) -> str:
    return ", ".join(arrays) or "(none)"


def _pick(arrays: dict, path: Path, given: str | None, defaults: tuple[str, ...], what: str) -> str | None:
    if given is not None:
        if given not in arrays:
            raise InputError(f"{path}: no {what} key {given!r} (keys: {_keys(arrays)})")
        return given
    return next((k for k in defaults if k in arrays), None)


def _features(arr: np.ndarray, path: Path, key: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim != 2:
        hint = (" (images? read them as an image array: the data spec image-array:PATH, or `lbhash search "
                "--images PATH`)") if arr.ndim in (3, 4) else ""
        raise InputError(f"{path}: features {key!r} must be 2-D (n, d), got shape {arr.shape}{hint}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{path}: features {key!r} are empty, shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise InputError(f"{path}: features {key!r} must be numeric, got dtype {arr.dtype}")
    return arr


def _label_vector(arr: np.ndarray, n: int, path: Path, key: str) -> np.ndarray:
    """Shape labels for as_multihot: one column (or a MATLAB row vector) = class ids."""
    arr = np.asarray(arr)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]  # a single column is ids, even if it only holds 0 and 1
    elif arr.ndim == 2 and arr.shape[0] == 1 and arr.shape[1] == n and n > 1:
        arr = arr[0]  # savemat stores 1-D arrays as (1, n) rows
    if arr.ndim not in (1, 2):
        raise InputError(f"{path}: labels {key!r} must be class ids (n,) or multi-hot (n, C), got shape {arr.shape}")
    if len(arr) != n:
        raise InputError(f"{path}: labels {key!r} have {len(arr)} rows but the features have {n}")
    return arr


def _presplit(arrays: dict, path: Path, y_key, split_key, need_labels: bool, check_x: Callable,
              labels_required: bool = True):
    """Files stored as x_train, x_test, y_train, y_test: train rows first, then test."""
    for option, value in (("y_key", y_key), ("split_key", split_key)):
        if value is not None:
            raise InputError(f"{path}: {option}={value!r} does not apply to a file stored as x_train/x_test")
    x_tr, x_te = check_x(arrays["x_train"], path, "x_train"), check_x(arrays["x_test"], path, "x_test")
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise InputError(f"{path}: x_train items have shape {x_tr.shape[1:]} but x_test items {x_te.shape[1:]}")
    x = np.concatenate([x_tr, x_te])
    is_test = np.concatenate([np.zeros(len(x_tr), bool), np.ones(len(x_te), bool)])
    if not need_labels:
        return x, None, is_test
    missing = [k for k in ("y_train", "y_test") if k not in arrays]
    if missing and not labels_required:
        return x, None, is_test
    if missing:
        raise InputError(f"{path}: stored as x_train/x_test but {' and '.join(missing)} missing (keys: {_keys(arrays)})")
    y_tr = _label_vector(arrays["y_train"], len(x_tr), path, "y_train")
    y_te = _label_vector(arrays["y_test"], len(x_te), path, "y_test")
    if y_tr.shape[1:] != y_te.shape[1:]:
        raise InputError(f"{path}: y_train has shape {y_tr.shape} but y_test has {y_te.shape}")
    return x, np.concatenate([y_tr, y_te]), is_test


def _labels_file(labels_path, y_key: str | None, n: int):
    lp = Path(labels_path).expanduser()
    suffix = _check_file(lp, "labels file")
    if suffix == ".npy":
        if y_key is not None:
            raise InputError(f"{lp}: y_key={y_key!r} does not apply to a .npy labels file (it holds one array)")
        return _label_vector(_io.load_npy(lp), n, lp, "array"), lp, "array"
    arrays = _read_mapping(lp, suffix)
    key = _pick(arrays, lp, y_key, LABEL_KEYS, "labels")
    if key is None:
        raise InputError(f"{lp}: no labels: none of the keys {', '.join(LABEL_KEYS)} (keys: {_keys(arrays)})")
    return _label_vector(arrays[key], n, lp, key), lp, key


def _class_names(arrays: dict) -> list[str] | None:
    for key in CLASS_NAME_KEYS:
        if key in arrays:
            arr = np.asarray(arrays[key]).ravel()
            if arr.dtype.kind == "U":
                return [s.strip() for s in arr.tolist()]  # MATLAB pads char rows with spaces
            if arr.dtype.kind == "S":
                return [s.decode("utf-8", "replace").strip() for s in arr.tolist()]
            if arr.dtype == object:  # a MATLAB cell array of strings
                items = [np.asarray(e).ravel() for e in arr]
                if all(e.size == 1 and e.dtype.kind == "U" for e in items):
                    return [str(e[0]).strip() for e in items]
    return None


def _scalar(value, path: Path, key: str) -> float:
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iuf":
        raise InputError(f"{path}: {key!r} must be a single number, got shape {arr.shape} dtype {arr.dtype}")
    return float(arr.ravel()[0])


def _quantization(arrays: dict, path: Path, scale, zero_point) -> tuple[float, float]:
    """The (scale, zero_point) that turns the file's stored values into features."""
    if scale is None:
        if "scale" not in arrays:
            raise InputError(f"{path}: dequantising needs a scale: none given and the file has no 'scale' key")
        scale = _scalar(arrays["scale"], path, "scale")
    if zero_point is None:
        zero_point = _scalar(arrays["zero_point"], path, "zero_point") if "zero_point" in arrays else 0.0
    scale, zero_point = float(scale), float(zero_point)
    if not (np.isfinite(scale) and scale > 0):
        raise InputError(f"{path}: scale must be a positive finite number, got {scale!r}")
    if not np.isfinite(zero_point):
        raise InputError(f"{path}: zero_point must be finite, got {zero_point!r}")
    return scale, zero_point


def dequantize_values(x: np.ndarray, quantization: tuple[float, float] | None) -> np.ndarray:
    """float32 features of stored values: (x - zero_point) * scale, or x itself without a
    quantization. Training and every encoding path use this one rule, so that the same stored
    row gives the same model input bit for bit."""
    if quantization is None:
        return as_float32(x)
    scale, zero_point = quantization
    out = x.astype(np.float32)  # a fresh array: the in-place steps below never touch x
    if zero_point:
        out -= np.float32(zero_point)
    out *= np.float32(scale)
    return out


def _check_finite(x: np.ndarray, path: Path) -> None:
    bad = first_nonfinite(x)  # x is float32: values beyond its range are infinite here
    if bad is not None:
        raise InputError(f"{path}: features contain NaN or inf (first at row {bad[0]})")
