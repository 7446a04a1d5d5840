"""`HashEncoder`: the front door for users who have arrays, in scikit-learn style (README.md).
`fit` trains in memory with the builder, loop and encoder of `lbhash train` (writing nothing
unless `run_dir` asks); `transform` gives the codes, so it is a `Pipeline` step.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError as SklearnNotFittedError

from lbhash.arrays import as_float32, first_nonfinite
from lbhash.codes import unpack
from lbhash.codes_file import codes_from_arrays
from lbhash.data import ArrayDataset, HashDataset, ImageDataset
from lbhash.data.image_arrays import as_rgb_images
from lbhash.errors import InputError
from lbhash.labels import as_multihot_pair
from lbhash.methods import method_class
from lbhash.encoders import dense_array
from lbhash.runs.encoder import ARRAYS, RunEncoder, eval_set_metrics
from lbhash.runs.run_dir import RunDirectory
from lbhash.runs.run_files import MANIFEST, DirectoryStore
from lbhash.train.config import FIELDS, make_config
from lbhash.train.fit import fit as fit_model
CODE_FORMATS = ("packed", "signs")
OWN_PARAMS = ("method", "bits", "lbhash", "epochs", "seed", "progress", "code_format")
FIT_DATA = ("data", "protocol")  # fit trains on its arrays: these options are refused


class NotFittedError(InputError, SklearnNotFittedError):
    """encode, transform or save before fit (or load); scikit-learn's NotFittedError too."""


class HashEncoder(RunEncoder, TransformerMixin, BaseEstimator):
    """Learn binary hash codes from arrays; encode new arrays into packed codes.

    Parameters are TrainConfig options (see docs/training.md): method, bits, lbhash, epochs,
    seed and any other, e.g. lr=1e-4, batch_size=128, hidden=[512], validation=0.1 (a share
    held out for model selection). `progress` (on by default) shows a bar per epoch on a
    terminal, and elsewhere (a notebook's log, a file) a line for the first, last and evaluated
    epochs and at least every 10 s; `progress=False` trains silently. `code_format` is what
    `transform` returns: "packed" uint8 codes (default) or "signs", int8 +/-1 (n, bits).

    Fitted attributes: `config_` (the resolved RunConfig), `model_` (the torch hash model), `bits_`,
    `input_kind_` ("features" or "images"), `n_features_in_` (feature width, None for images), `input_form_`
    (the input contract), `run_dir_` (the run directory it was trained into or loaded from; None for a fit
    in memory), `history_` (one record per epoch) and `metrics_` (with `eval_set`: the eval items' metrics,
    `n_validation`, `n_train` and the eval codes' lower bound; else the run summary). A 2-D uint8 X
    trains as raw feature values, with a warning (uint8 usually means pixels or quantized features).

    Parameters
    ----------
    method : str
        A registered method (`lbhash methods`), "csq" by default.
    bits : int
        Code length.
    lbhash : bool
        Add the paper's objective (the method's _D variant).
    epochs : int, optional
        Training epochs; None takes the recipe's.
    seed : int
        Seeds the split, the centers and the initialisation: the same seed, the same codes.
    code_format : {"packed", "signs"}
        What `transform` returns.
    **options
        Any other TrainConfig option.

    Returns
    -------
    `fit` returns the encoder; `encode` / `transform` return packed uint8 codes (n, bits / 8),
    the layout `lbhash.index.CodeIndex` and the codes files use.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from lbhash import HashEncoder
    >>> X, y = load_digits(return_X_y=True)
    >>> encoder = HashEncoder(method="csq", bits=16, epochs=2, hidden=[64]).fit(X[:1000], y[:1000])
    >>> codes = encoder.transform(X[1000:1005])
    >>> codes.shape, codes.dtype.name
    ((5, 2), 'uint8')
    """

    def __init__(self, method: str = "csq", bits: int = 64, lbhash: bool = False,
                 epochs: int | None = None, seed: int = 0, progress: bool = True, code_format: str = "packed",
                 **options: Any):
        self.method, self.bits, self.lbhash, self.epochs, self.seed = method, bits, lbhash, epochs, seed
        self.progress, self.code_format = progress, code_format
        self._options = dict(options)  # private: scikit-learn sees only the parameters of the signature

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in OWN_PARAMS}, **self._options}

    def set_params(self, **params: Any) -> "HashEncoder":
        """Change parameters; an unknown name is a ValueError (InputError) naming the valid
        ones, as scikit-learn's estimators do. Values are checked by fit."""
        valid = OWN_PARAMS + tuple(f for f in FIELDS if f not in OWN_PARAMS and f not in FIT_DATA)
        unknown = [key for key in params if key not in valid]
        if unknown:
            raise InputError(f"invalid parameter {unknown[0]!r} for HashEncoder; valid parameters: {', '.join(valid)}")
        for key, value in params.items():
            if key in OWN_PARAMS:
                setattr(self, key, value)
            else:
                self._options[key] = value
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"HashEncoder({args})"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        try:
            tags.target_tags.required = method_class(self.method).needs_labels
        except InputError:  # an unknown method: fit says so
            tags.target_tags.required = True
        tags.transformer_tags.preserves_dtype = []  # codes are uint8 (or int8), whatever X is
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    def fit(self, X, y=None, eval_set: tuple | None = None, run_dir: str | Path | None = None) -> "HashEncoder":
        """Train on (X, y). `eval_set=(X_val, y_val)`: items searched among the training items
        for the final metrics (`metrics_`), never seen during training. y=None (no labels)
        suits the methods that learn without labels only (lsh, pca, itq, distill). Training happens in memory and
        writes nothing; `run_dir` trains into that run directory instead (a checkpoint per
        epoch, resumable with `lbhash train --resume` where the data is a file)."""
        for key in FIT_DATA:
            if key in self._options:
                raise InputError(f"HashEncoder trains on the arrays given to fit; drop the option {key!r}")
        _check_code_format(self.code_format)
        dataset = arrays_dataset(X, y, eval_set)
        cfg = make_config({**self._options, "method": self.method, "bits": self.bits, "lbhash": self.lbhash,
                           "epochs": self.epochs, "seed": self.seed, "progress": self.progress,
                           "data": ARRAYS, "protocol": "given" if eval_set is not None else "all-train"})
        trained = fit_model(cfg, dataset) if run_dir is None else RunDirectory(run_dir).fit(cfg, dataset=dataset)
        self._trained = trained if run_dir is None else None  # an in-memory fit: what save writes
        metrics, query_codes = trained.metrics, trained.codes.get("all")
        query_codes = None if query_codes is None else codes_from_arrays(query_codes)
        if eval_set is not None and "map" in metrics:
            metrics = eval_set_metrics(metrics, query_codes)
        return self._set_fitted(None if run_dir is None else Path(run_dir), trained.fitted, metrics)

    @classmethod
    def _unfitted(cls, cfg) -> "HashEncoder":
        return cls(method=cfg.hashing.method, bits=cfg.hashing.bits, lbhash=cfg.hashing.lbhash, epochs=cfg.recipe.epochs, seed=cfg.recipe.seed)

    def transform(self, X) -> np.ndarray:
        """The codes of the rows of X, as a scikit-learn step: packed uint8 (n, ceil(bits / 8))
        with code_format="packed" (`encode`'s), int8 +/-1 (n, bits) with "signs"."""
        self._check_fitted("transform")
        _check_code_format(self.code_format)
        codes = self.encode(X)
        return codes if self.code_format == "packed" else unpack(codes, self.bits_)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the fitted run as a run directory at `path` (written atomically): the files `lbhash
        train` writes, which `HashEncoder.load`, `lbhash encode` and `lbhash index build` read. A
        path that exists is refused, unless `overwrite` and it is a run directory (its manifest):
        then the new run replaces it, whole, once written."""
        self._check_fitted("save")
        path = Path(path)
        if path.exists() and not overwrite:
            raise InputError(f"{path} already exists: save(path, overwrite=True) replaces the run directory there, "
                             "or choose another path")
        if path.exists() and not (path / MANIFEST).is_file():
            raise InputError(f"{path} exists and is not a run directory (no {MANIFEST}): refusing to replace it")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        old = path.with_name(f".{path.name}.replaced") if path.exists() else None
        try:
            if self.run_dir_ is None:  # fitted in memory
                DirectoryStore.write(tmp, self._trained)
            else:
                shutil.copytree(self.run_dir_, tmp, dirs_exist_ok=True)
            if old is not None:  # (the old run moves aside only once the new one is complete)
                shutil.rmtree(old, ignore_errors=True)
                path.rename(old)
            tmp.rename(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        return path

    def _check_fitted(self, what: str) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError(f"this HashEncoder is not fitted yet: call fit(X, y) or HashEncoder.load(run_dir) "
                                 f"before {what}")


def _check_code_format(code_format: str) -> None:
    if code_format not in CODE_FORMATS:
        raise InputError(f"code_format must be one of {', '.join(CODE_FORMATS)}, got {code_format!r}")


def arrays_dataset(X, y, eval_set: tuple | None = None) -> HashDataset:
    """Training arrays (and the eval_set arrays after them, flagged as test items) as a data set;
    y=None gives items without labels."""
    X = dense_array(X, "X")
    if y is None:  # unlabelled: zero label columns (the builder refuses supervised methods)
        if eval_set is not None:
            raise InputError("eval_set's mAP needs labels: pass y with eval_set=(X_val, y_val)")
        y = np.zeros((len(X), 0), dtype=bool)
    y = np.asarray(y)
    if X.dtype == np.uint8 and X.ndim == 2:
        warnings.warn(f"X is a 2-D uint8 array {X.shape}: it trains as features with their raw values 0..255. "
                      "Quantised features need their scale first ((X - zero_point) * scale); images go in as "
                      "(n, H, W) or (n, H, W, C); X.astype(np.float32) trains on the raw values without "
                      "this warning", UserWarning, stacklevel=3)
    parts = [(X, y, "X", "y")]
    if eval_set is not None:
        if not isinstance(eval_set, (tuple, list)) or len(eval_set) != 2:
            raise InputError("eval_set must be a pair (X_val, y_val)")
        parts.append((dense_array(eval_set[0], "X_val"), np.asarray(eval_set[1]), "X_val", "y_val"))
    images = X.dtype == np.uint8 and X.ndim in (3, 4)
    inputs = [as_rgb_images(x, name, name) if images else _features(x, name) for x, _, name, _ in parts]
    for x, (_, labels, name, label_name) in zip(inputs, parts):
        if labels.ndim not in (1, 2) or len(labels) != len(x):
            raise InputError(f"{label_name} must hold one label row per row of {name} ({len(x)}), "
                             f"got shape {labels.shape}")
    if len(inputs) == 2 and inputs[0].shape[1:] != inputs[1].shape[1:]:
        raise InputError(f"X_val items have shape {inputs[1].shape[1:]} but X items have {inputs[0].shape[1:]}")
    if len(parts) == 2:
        train_labels, val_labels = as_multihot_pair(parts[0][1], parts[1][1], ("y", "y_val"))
        labels = np.concatenate([train_labels, val_labels])
        is_test = np.concatenate([np.zeros(len(inputs[0]), bool), np.ones(len(inputs[1]), bool)])
    else:
        labels, is_test = parts[0][1], None
    x = np.concatenate(inputs) if len(inputs) == 2 else inputs[0]
    if images:
        return ImageDataset(labels, is_test, ARRAYS, pixels=x)
    return ArrayDataset(x, labels, is_test, ARRAYS, raw_dtype=str(X.dtype))


def _features(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim != 2 or arr.dtype.kind not in "biuf":
        raise InputError(f"{name} must be a numeric array (n, d) of features, or uint8 images (n, H, W[, C]); "
                         f"got shape {arr.shape} dtype {arr.dtype}")
    if len(arr) == 0:
        raise InputError(f"{name} is empty")
    x = as_float32(arr)
    bad = first_nonfinite(x)
    if bad is not None:
        raise InputError(f"{name} contains NaN or inf at row {bad[0]}")
    return x
