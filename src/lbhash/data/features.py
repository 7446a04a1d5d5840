"""In-memory data sets: feature files (.npz, .npy, MATLAB .mat) and scikit-learn's digits.

Labels are converted at this edge to the library's boolean (n, C) multi-hot form (SPEC §1).
Files are read without unpickling: .npz/.npy through `allow_pickle=False`, .mat through scipy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash import _io
from lbhash.labels import as_multihot

# Keys tried in order when the caller names none.
FEATURE_KEYS = ("feat", "features", "x", "X", "data")
LABEL_KEYS = ("labels", "label", "y", "Y", "targets")
SPLIT_KEYS = ("is_test",)
CLASS_NAME_KEYS = ("label_names", "class_names")
FEATURE_SUFFIXES = (".npz", ".npy", ".mat")
DEQUANTIZE_MODES = ("auto", "on", "off")


@dataclass
class ArrayDataset:
    """An in-memory data set: features (or later images) plus labels.

    `labels` may be given as class ids or 0/1 rows; it is stored as a boolean (n, C) array.
    `is_test` is the file's own train/test split (True = test), or None when it has none.
    """

    x: np.ndarray
    labels: np.ndarray
    is_test: np.ndarray | None
    name: str
    class_names: list[str] | None = None

    def __post_init__(self) -> None:
        self.x = np.asarray(self.x)
        if self.x.ndim < 2:
            raise ValueError(f"{self.name}: x must have shape (n, ...), got {self.x.shape}")
        self.labels = as_multihot(self.labels, f"{self.name}: labels")
        n = len(self.x)
        if len(self.labels) != n:
            raise ValueError(f"{self.name}: {len(self.labels)} label rows for {n} items")
        if self.is_test is not None:
            self.is_test = _flags(self.is_test, n, self.name, "is_test")
        if self.class_names is not None:
            self.class_names = [str(c) for c in self.class_names]
            if len(self.class_names) != self.num_classes:
                raise ValueError(f"{self.name}: {len(self.class_names)} class names for "
                                 f"{self.num_classes} label columns")

    def __len__(self) -> int:
        return len(self.x)

    @property
    def num_classes(self) -> int:
        return int(self.labels.shape[1])

    @property
    def multi_label(self) -> bool:
        """True if any item has a number of labels other than one (none counts too)."""
        return bool((self.labels.sum(axis=1) != 1).any())

    def subset(self, indices) -> ArrayDataset:
        """The items at `indices` (class axis and names kept), e.g. `ds.subset(split.train)`."""
        idx = np.asarray(indices, dtype=np.int64)
        return ArrayDataset(self.x[idx], self.labels[idx],
                            None if self.is_test is None else self.is_test[idx],
                            self.name, self.class_names)


def count_unlabelled(data) -> int:
    """Number of items with no label at all (a data set, or labels in any accepted form).

    They are allowed in a data set (evaluation treats them as relevant to nothing), but
    training code rejects them where a method needs a label.
    """
    labels = data.labels if hasattr(data, "labels") else as_multihot(data)
    return int((~labels.any(axis=1)).sum())


def load_digits() -> ArrayDataset:
    """scikit-learn's bundled digits: 1797 items x 64 pixel features (0..16), 10 classes.

    It ships inside scikit-learn (no download) and has no train/test split of its own.
    """
    from sklearn.datasets import load_digits as sk_load_digits

    raw = sk_load_digits()
    return ArrayDataset(x=np.ascontiguousarray(raw.data, dtype=np.float32),
                        labels=as_multihot(raw.target, num_classes=len(raw.target_names)),
                        is_test=None, name="digits",
                        class_names=[str(c) for c in raw.target_names])


def load_features(path: str | os.PathLike, x_key: str | None = None, y_key: str | None = None,
                  split_key: str | None = None, labels_path: str | os.PathLike | None = None,
                  scale: float | None = None, zero_point: float | None = None,
                  dequantize: str = "auto") -> ArrayDataset:
    """Load a feature file (.npz, .npy or MATLAB .mat up to v7) as an ArrayDataset.

    Keys not given are looked up in FEATURE_KEYS, LABEL_KEYS and SPLIT_KEYS order. A file
    without a feature key but with x_train/x_test (and y_train/y_test) is read as train then
    test, with is_test set. A .npy file holds the features only: labels come from
    `labels_path` (.npy, or .npz/.mat read with `y_key`), which also overrides labels held
    in the main file. Quantised features are dequantised as (x - zero_point) * scale: with
    "auto" when the file holds both `scale` and `zero_point` or either argument is given,
    always with "on" (zero_point defaults to 0), never with "off".
    """
    path = Path(path).expanduser()
    if dequantize not in DEQUANTIZE_MODES:
        raise ValueError(f"dequantize must be one of {', '.join(DEQUANTIZE_MODES)}, got {dequantize!r}")
    if dequantize == "off" and (scale is not None or zero_point is not None):
        raise ValueError("scale/zero_point were given but dequantize='off'")
    suffix = _check_file(path, "feature file")

    y_path, y_name = path, "y_train/y_test"  # the names used in label error messages
    if suffix == ".npy":
        for option, value in (("x_key", x_key), ("split_key", split_key)):
            if value is not None:
                raise ValueError(f"{path}: {option}={value!r} does not apply to a .npy file (it holds one array)")
        if labels_path is None:
            raise ValueError(f"{path}: a .npy file holds features only; give labels_path (labels=PATH in a data spec)")
        arrays: dict[str, np.ndarray] = {}
        x = _features(_read_npy(path), path, "array")
        raw_y = is_test = None
    else:
        arrays = _read_mapping(path, suffix)
        key = _pick(arrays, path, x_key, FEATURE_KEYS, "features")
        if key is not None:
            x = _features(arrays[key], path, key)
            raw_y = None
            if labels_path is None:
                y_name = _pick(arrays, path, y_key, LABEL_KEYS, "labels")
                if y_name is None:
                    raise ValueError(f"{path}: no labels: none of the keys {', '.join(LABEL_KEYS)} "
                                     f"(keys: {_keys(arrays)}); give y_key or labels_path")
                raw_y = _label_vector(arrays[y_name], len(x), path, y_name)
            split_name = _pick(arrays, path, split_key, SPLIT_KEYS, "split")
            is_test = None if split_name is None else _flags(arrays[split_name], len(x), path, split_name)
        elif "x_train" in arrays and "x_test" in arrays:
            x, raw_y, is_test = _presplit(arrays, path, y_key, split_key, labels_path is None)
        else:
            raise ValueError(f"{path}: no features: none of the keys {', '.join(FEATURE_KEYS)} and no "
                             f"x_train/x_test (keys: {_keys(arrays)}); give x_key")

    if labels_path is not None:
        raw_y, y_path, y_name = _labels_file(labels_path, y_key, len(x))
    class_names = _class_names(arrays)
    ids = raw_y.ndim == 1
    labels = as_multihot(raw_y, f"{y_path}: labels {y_name!r}",
                         num_classes=len(class_names) if class_names and ids else None)
    if class_names is not None and len(class_names) != labels.shape[1]:
        raise ValueError(f"{path}: {len(class_names)} class names for {labels.shape[1]} label columns")

    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by _check_finite
        x = _dequantize(x, arrays, path, scale, zero_point, dequantize)
        _check_finite(x, path)
    return ArrayDataset(x=x, labels=labels, is_test=is_test, name=f"features:{path.name}",
                        class_names=class_names)


def _check_file(path: Path, what: str) -> str:
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in FEATURE_SUFFIXES:
        raise ValueError(f"{path}: unsupported {what} type {suffix or '(no suffix)'!r} "
                         f"(expected {', '.join(FEATURE_SUFFIXES)})")
    return suffix


def _read_npy(path: Path) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as err:  # pickled data or object arrays
        raise ValueError(f"{path}: cannot read safely ({err})") from None
    except (OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable .npy file ({err})") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive behind a .npy name
        arr.close()
        raise ValueError(f"{path}: is an .npz archive, not a single .npy array")
    return arr


def _read_mapping(path: Path, suffix: str) -> dict[str, np.ndarray]:
    if suffix == ".npz":
        return _io.load_npz(path)
    from scipy import io as sio, sparse
    from scipy.io.matlab import MatReadError

    try:
        raw = sio.loadmat(path)
    except NotImplementedError:  # scipy's answer to v7.3 files
        raise ValueError(f"{path}: MATLAB v7.3 (HDF5) .mat files cannot be read by scipy; "
                         "re-save with save(..., '-v7') or convert to .npz") from None
    except (MatReadError, ValueError, TypeError, OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable .mat file ({err})") from None
    return {k: (v.toarray() if sparse.issparse(v) else np.asarray(v))
            for k, v in raw.items() if not k.startswith("__")}


def _keys(arrays: dict) -> str:
    return ", ".join(arrays) or "(none)"


def _pick(arrays: dict, path: Path, given: str | None, defaults: tuple[str, ...], what: str) -> str | None:
    if given is not None:
        if given not in arrays:
            raise ValueError(f"{path}: no {what} key {given!r} (keys: {_keys(arrays)})")
        return given
    return next((k for k in defaults if k in arrays), None)


def _features(arr: np.ndarray, path: Path, key: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim != 2:
        raise ValueError(f"{path}: features {key!r} must be 2-D (n, d), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{path}: features {key!r} are empty, shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{path}: features {key!r} must be numeric, got dtype {arr.dtype}")
    return arr


def _label_vector(arr: np.ndarray, n: int, path: Path, key: str) -> np.ndarray:
    """Shape labels for as_multihot: one column (or a MATLAB row vector) = class ids."""
    arr = np.asarray(arr)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]  # a single column is ids, even if it only holds 0 and 1
    elif arr.ndim == 2 and arr.shape[0] == 1 and arr.shape[1] == n and n > 1:
        arr = arr[0]  # savemat stores 1-D arrays as (1, n) rows
    if arr.ndim not in (1, 2):
        raise ValueError(f"{path}: labels {key!r} must be class ids (n,) or multi-hot (n, C), got shape {arr.shape}")
    if len(arr) != n:
        raise ValueError(f"{path}: labels {key!r} have {len(arr)} rows but the features have {n}")
    return arr


def _flags(arr, n: int, path, key: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.ravel()  # MATLAB row or column vector
    if arr.shape != (n,):
        raise ValueError(f"{path}: split {key!r} must have shape ({n},), got {arr.shape}")
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind not in "iuf" or not ((arr == 0) | (arr == 1)).all():
        raise ValueError(f"{path}: split {key!r} must hold booleans or 0/1 (True = test item)")
    return arr.astype(bool)


def _presplit(arrays: dict, path: Path, y_key, split_key, need_labels: bool):
    """Files stored as x_train, x_test, y_train, y_test: train rows first, then test."""
    for option, value in (("y_key", y_key), ("split_key", split_key)):
        if value is not None:
            raise ValueError(f"{path}: {option}={value!r} does not apply to a file stored as x_train/x_test")
    x_tr, x_te = _features(arrays["x_train"], path, "x_train"), _features(arrays["x_test"], path, "x_test")
    if x_tr.shape[1] != x_te.shape[1]:
        raise ValueError(f"{path}: x_train has {x_tr.shape[1]} columns but x_test has {x_te.shape[1]}")
    x = np.concatenate([x_tr, x_te])
    is_test = np.concatenate([np.zeros(len(x_tr), bool), np.ones(len(x_te), bool)])
    if not need_labels:
        return x, None, is_test
    missing = [k for k in ("y_train", "y_test") if k not in arrays]
    if missing:
        raise ValueError(f"{path}: stored as x_train/x_test but {' and '.join(missing)} missing (keys: {_keys(arrays)})")
    y_tr = _label_vector(arrays["y_train"], len(x_tr), path, "y_train")
    y_te = _label_vector(arrays["y_test"], len(x_te), path, "y_test")
    if y_tr.shape[1:] != y_te.shape[1:]:
        raise ValueError(f"{path}: y_train has shape {y_tr.shape} but y_test has {y_te.shape}")
    return x, np.concatenate([y_tr, y_te]), is_test


def _labels_file(labels_path, y_key: str | None, n: int):
    lp = Path(labels_path).expanduser()
    suffix = _check_file(lp, "labels file")
    if suffix == ".npy":
        if y_key is not None:
            raise ValueError(f"{lp}: y_key={y_key!r} does not apply to a .npy labels file (it holds one array)")
        return _label_vector(_read_npy(lp), n, lp, "array"), lp, "array"
    arrays = _read_mapping(lp, suffix)
    key = _pick(arrays, lp, y_key, LABEL_KEYS, "labels")
    if key is None:
        raise ValueError(f"{lp}: no labels: none of the keys {', '.join(LABEL_KEYS)} (keys: {_keys(arrays)})")
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
        raise ValueError(f"{path}: {key!r} must be a single number, got shape {arr.shape} dtype {arr.dtype}")
    return float(arr.ravel()[0])


def _dequantize(x: np.ndarray, arrays: dict, path: Path, scale, zero_point, mode: str) -> np.ndarray:
    in_file = "scale" in arrays and "zero_point" in arrays
    given = scale is not None or zero_point is not None
    if mode == "off" or (mode == "auto" and not (given or in_file)):
        return np.ascontiguousarray(x, dtype=np.float32)
    if scale is None:
        if "scale" not in arrays:
            raise ValueError(f"{path}: dequantising needs a scale: none given and the file has no 'scale' key")
        scale = _scalar(arrays["scale"], path, "scale")
    if zero_point is None:
        zero_point = _scalar(arrays["zero_point"], path, "zero_point") if "zero_point" in arrays else 0.0
    scale, zero_point = float(scale), float(zero_point)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"{path}: scale must be a positive finite number, got {scale!r}")
    if not np.isfinite(zero_point):
        raise ValueError(f"{path}: zero_point must be finite, got {zero_point!r}")
    out = x.astype(np.float32)  # a fresh array: the in-place steps below never touch x
    if zero_point:
        out -= np.float32(zero_point)
    out *= np.float32(scale)
    return out


def _check_finite(x: np.ndarray, path: Path) -> None:
    # Row sums are non-finite wherever a row holds NaN or inf (and rarely by overflow):
    # a fast screen, confirmed on the flagged rows only.
    rows = np.flatnonzero(~np.isfinite(x.sum(axis=1, dtype=np.float32)))
    bad = rows[~np.isfinite(x[rows]).all(axis=1)]
    if bad.size:  # also catches float64 values beyond float32's range
        raise ValueError(f"{path}: features contain NaN or inf (first at row {int(bad[0])})")
