"""`HashEncoder`: the front door for users who have arrays, in scikit-learn style.

    from lbhash import HashEncoder
    enc = HashEncoder(method="csq", bits=64, lbhash=True, epochs=30, seed=0).fit(X, y)
    codes = enc.encode(X_new)            # packed uint8 (n, bits // 8), FAISS bit layout
    u = enc.encode(X_new, real=True)     # float32 (n, bits): the head's outputs, codes = signs
    enc.save("runs/my-encoder")          # a normal run directory
    enc = HashEncoder.load("runs/csq_D-64")   # any run directory, `lbhash train`'s too

`__init__` only stores its parameters; `fit` validates the arrays, trains in memory with the
same builder, loop and encoder as `lbhash train` (lbhash.train.fit; nothing is written unless
`run_dir` asks for a run directory), and keeps what training returns (model, config, history,
metrics) as the fitted attributes, which end in `_`. X is a
float array (n, d) of features, or a uint8 array of images (n, H, W) or (n, H, W, C); y holds
class ids (n,) or multi-hot rows (n, C). As a scikit-learn transformer, `transform` gives the
codes (packed, or +/-1 with `code_format="signs"`), so it is a step of a `Pipeline`.

Two things are called "validation" elsewhere; here each has one name: `validation` (a
TrainConfig option) is the share of the training items held out for model selection, and
`fit(..., eval_set=(X_val, y_val))` gives the items searched among the training items for the
final metrics (never seen during training).
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
from lbhash.codes import pack
from lbhash.codes_file import codes_from_arrays, load_codes_file
from lbhash.data import ArrayDataset, HashDataset, ImageDataset
from lbhash.data.image_arrays import as_rgb_images
from lbhash.data.input_form import conform_dataset, conform_features
from lbhash.errors import InputError
from lbhash.evaluate import lower_bound
from lbhash.evaluate.report import jsonable
from lbhash.labels import as_multihot_pair
from lbhash.methods import method_class
from lbhash.train.builder import input_options
from lbhash.train.config import FIELDS, make_config
from lbhash.train.encoder import encode
from lbhash.train.fit import fit as fit_in_memory
from lbhash.train.run import train_run, write_run
from lbhash.train.rundir import CODES, CONFIG, METRICS, Fitted, read_fitted, read_metrics

ARRAYS = "arrays"  # the data spec of a run trained by fit: arrays, not a file
CODE_FORMATS = ("packed", "signs")
OWN_PARAMS = ("method", "bits", "lbhash", "epochs", "seed", "progress", "code_format")
FIT_DATA = ("data", "protocol")  # fit trains on its arrays: these options are refused


class NotFittedError(InputError, SklearnNotFittedError):
    """encode, transform or save was called before fit (or load); scikit-learn's
    NotFittedError too."""


class HashEncoder(TransformerMixin, BaseEstimator):
    """Learn binary hash codes from arrays; encode new arrays into packed codes.

    Parameters are TrainConfig options (see docs/training.md): method, bits, lbhash, epochs,
    seed and any other, e.g. lr=1e-4, batch_size=128, hidden=[512], validation=0.1 (a share
    held out for model selection). `progress` (on by default) shows a bar per epoch on a
    terminal, and elsewhere (a notebook's log, a file) a line for the first, last and evaluated
    epochs and at least every 10 s; `progress=False` trains silently. `code_format` is what
    `transform` returns: "packed" uint8 codes (default) or "signs", int8 +/-1 (n, bits).

    Fitted attributes: `config_` (the resolved RunConfig), `model_` (the torch hash model),
    `bits_`, `input_kind_` ("features" or "images"), `n_features_in_` (feature width, None
    for images), `input_form_` (the input contract), `run_dir_` (the run directory it was
    trained into or loaded from; None for a fit in memory),
    `history_` (one record per epoch) and `metrics_` (with `eval_set`: the eval items'
    metrics, `n_validation`, `n_train` and the eval codes' lower bound; else the run summary).
    A 2-D uint8 X trains as raw feature values, with a warning (uint8 usually means pixels or
    quantized features).

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
        tags.target_tags.required = _needs_labels(self.method)
        tags.transformer_tags.preserves_dtype = []  # codes are uint8 (or int8), whatever X is
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    # --- fit ----------------------------------------------------------------------------------

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
        self._trained = None  # an in-memory fit: what save writes
        if run_dir is None:
            self._trained = fit_in_memory(cfg, dataset)
            fitted, metrics, query_codes = self._trained.fitted, self._trained.metrics, self._trained.codes.get("all")
            query_codes = None if query_codes is None else codes_from_arrays(query_codes)
        else:
            result = train_run(cfg, run_dir, dataset=dataset)
            fitted, metrics, query_codes = result.fitted, result.metrics, result.query_codes
        if eval_set is not None and "map" in metrics:
            metrics = eval_set_metrics(metrics, query_codes)
        return self._set_fitted(None if run_dir is None else Path(run_dir), fitted, metrics)

    def fit_transform(self, X, y=None, **fit_params) -> np.ndarray:
        """`fit(X, y, **fit_params)`, then the codes of X (`transform`)."""
        return self.fit(X, y, **fit_params).transform(X)

    @classmethod
    def load(cls, run_dir: str | Path) -> "HashEncoder":
        """A fitted encoder from any finished (or checkpointed) run directory."""
        model_dir = Path(run_dir)
        if not (model_dir / CONFIG).is_file():
            raise InputError(f"{model_dir}: not a run directory (no {CONFIG})")
        fitted = read_fitted(model_dir)
        metrics = read_metrics(model_dir) if (model_dir / METRICS).is_file() else {}
        cfg = fitted.config
        if cfg.data == ARRAYS and cfg.protocol == "given" and "map" in metrics:  # a fit with eval_set
            metrics = eval_set_metrics(metrics, load_codes_file(model_dir / CODES))
        enc = cls(method=cfg.method, bits=cfg.bits, lbhash=cfg.lbhash, epochs=cfg.epochs, seed=cfg.seed)
        return enc._set_fitted(model_dir, fitted, metrics)

    def _set_fitted(self, run_dir: Path | None, fitted: Fitted, metrics: dict[str, Any]) -> "HashEncoder":
        """The fitted attributes, from a fit or a run directory alike."""
        self.model_, self.config_, self.input_form_ = fitted.model, fitted.config, fitted.input_form
        self.bits_, self.input_kind_ = fitted.config.bits, fitted.config.input_kind
        self.n_features_in_ = fitted.config.input_dim
        self.run_dir_, self.history_, self.metrics_ = run_dir, fitted.history, metrics
        return self

    # --- use ----------------------------------------------------------------------------------

    def encode(self, X, batch_size: int | None = None, real: bool = False, json_numbers: bool = False) -> np.ndarray:
        """Packed uint8 codes (n, bits // 8) of the rows of X (features or images).

        X is an array, or a data set loaded from a file (lbhash.data.load_data). It goes through
        the run's input contract (`input_form_`, docs/data.md#the-input-contract): rows in the
        training data's stored form (e.g. quantised uint8) give the codes of those items, and
        input in another form is converted by its rule or refused. json_numbers: the rows came
        from JSON, whose integers a float-trained run takes as values.

        real=True: the hash head's real outputs u instead, float32 (n, bits), from the same
        forward pass; the codes are `pack(to_signs(u))` (lbhash.codes: 0 -> +1). They are what
        asymmetric ranking and `lbhash.index.rerank_search(index, codes, k, u)` score the codes with."""
        self._check_fitted("encode")
        out = self._outputs(X, batch_size, real, json_numbers)
        return out if real else pack(out)

    def transform(self, X) -> np.ndarray:
        """The codes of the rows of X, as a scikit-learn step: packed uint8 (n, ceil(bits / 8))
        with code_format="packed" (`encode`'s), int8 +/-1 (n, bits) with "signs"."""
        self._check_fitted("transform")
        _check_code_format(self.code_format)
        signs = self._outputs(X)
        return pack(signs) if self.code_format == "packed" else signs

    def _outputs(self, X, batch_size: int | None = None, real: bool = False, json_numbers: bool = False):
        """+/-1 int8 codes of the rows of X, or with real=True the head's float32 outputs."""
        return encode(self.model_, self._inputs(X, json_numbers), None, input_options(self.config_),
                      batch_size=batch_size, real=real)

    def save(self, path: str | Path) -> Path:
        """Write the fitted run as a run directory at `path` (a new directory, written
        atomically): the files `lbhash train` writes, which `HashEncoder.load`, `lbhash encode`
        and `lbhash index build` read."""
        self._check_fitted("save")
        path = Path(path)
        if path.exists():
            raise InputError(f"{path} already exists; HashEncoder.save writes a new directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            if self.run_dir_ is None:  # fitted in memory
                write_run(tmp, self._trained)
            else:
                shutil.copytree(self.run_dir_, tmp, dirs_exist_ok=True)
            tmp.rename(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return path

    def _check_fitted(self, what: str) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError(f"this HashEncoder is not fitted yet: call fit(X, y) or HashEncoder.load(run_dir) "
                                 f"before {what}")

    def _inputs(self, X, json_numbers: bool = False) -> HashDataset:
        if isinstance(X, HashDataset):
            return conform_dataset(self.input_form_, X, X.name)
        arr = _dense(X, "X")
        if self.input_kind_ == "images":
            pixels = as_rgb_images(arr, "X", "X")
            return ImageDataset(np.zeros((len(pixels), 0), bool), None, "X", pixels=pixels)
        features = conform_features(self.input_form_, arr, "X", json_numbers=json_numbers)
        return ArrayDataset(features, np.zeros((len(features), 0), bool), None, "X")


def eval_set_metrics(metrics: dict[str, Any], query_codes: dict) -> dict[str, Any]:
    """The metrics of a fit with `eval_set`, named for what they measure: the eval items (the
    run's queries) searched among the training items (its database). The lower bound is that of
    the eval codes (`query_codes`: codes.npz's query part): the training items' own codes, which
    the model has fitted, can sit on their centers (max_intra 0, ratio inf); `history_` keeps
    their bound per epoch. The names are those of the first release (`n_validation`, protocol
    "validation"); the share of X held out to choose the epoch is `run.n_held_out`."""
    out = {k: v for k, v in metrics.items() if k not in ("n_query", "n_db", "lower_bound", "run")}
    out["n_validation"], out["n_train"] = metrics["n_query"], metrics["n_db"]
    percentile = metrics.get("lower_bound", {}).get("percentile", 99.9)
    try:
        bound = lower_bound(query_codes["query_codes"], query_codes["query_labels"], percentile, query_codes["bits"])
        out["lower_bound"] = jsonable({"codes": "validation", "percentile": percentile, "min_inter": bound.min_inter,
                                       "max_intra": bound.max_intra, "ratio": bound.ratio})
    except InputError:  # fewer than two classes among the eval items: no bound
        pass
    out["run"] = {**metrics["run"], "protocol": "validation", "n_validation": metrics["n_query"],
                  "n_held_out": metrics["run"]["n_validation"]}
    return out


def _check_code_format(code_format: str) -> None:
    if code_format not in CODE_FORMATS:
        raise InputError(f"code_format must be one of {', '.join(CODE_FORMATS)}, got {code_format!r}")


def _needs_labels(method: str) -> bool:
    try:
        return method_class(method).needs_labels
    except InputError:  # an unknown method: fit says so
        return True


def arrays_dataset(X, y, eval_set: tuple | None = None) -> HashDataset:
    """Training arrays (and the eval_set arrays after them, flagged as test items) as a data set;
    y=None gives items without labels."""
    X = _dense(X, "X")
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
        parts.append((_dense(eval_set[0], "X_val"), np.asarray(eval_set[1]), "X_val", "y_val"))
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


def _dense(X, name: str) -> np.ndarray:
    from scipy import sparse

    if sparse.issparse(X):  # np.asarray would make an object array of one matrix
        raise InputError(f"{name} is a sparse matrix; HashEncoder takes dense arrays ({name}.toarray())")
    return np.asarray(X)


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
