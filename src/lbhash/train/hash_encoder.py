"""`HashEncoder`: the front door for users who have arrays, in scikit-learn style.

    from lbhash import HashEncoder
    enc = HashEncoder(method="csq", bits=64, lbhash=True, epochs=30, seed=0).fit(X, y)
    codes = enc.encode(X_new)            # packed uint8 (n, bits // 8), FAISS bit layout
    u = enc.encode(X_new, real=True)     # float32 (n, bits): the head's outputs, codes = signs
    enc.save("runs/my-encoder")          # a normal run directory
    enc = HashEncoder.load("runs/csq_D-64")   # any run directory, `lbhash train`'s too

`__init__` only stores its parameters; `fit` validates the arrays, trains with the same
builder, loop and encoder as `lbhash train` (into a run directory), and sets the fitted
attributes, which end in `_`. X is a float array (n, d) of features, or a uint8 array of
images (n, H, W) or (n, H, W, C); y holds class ids (n,) or multi-hot rows (n, C).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from lbhash.arrays import as_float32, first_nonfinite
from lbhash.codes import pack
from lbhash.codes_file import load_codes_file
from lbhash.data import ArrayDataset, HashDataset, ImageDataset
from lbhash.data.image_arrays import as_rgb_images
from lbhash.data.input_form import conform_dataset, conform_features
from lbhash.errors import InputError
from lbhash.evaluate import lower_bound
from lbhash.evaluate.report import jsonable
from lbhash.labels import as_multihot_pair
from lbhash.train.builder import input_options
from lbhash.train.config import make_config
from lbhash.train.encoder import encode
from lbhash.train.rundir import CODES, CONFIG, LOG, load_input_form, load_run_model, read_log, read_metrics
from lbhash.train.run import train


ARRAYS = "arrays"  # the data spec of a run trained by fit: arrays, not a file


class NotFittedError(InputError):
    """encode or save was called before fit (or load)."""


class HashEncoder:
    """Learn binary hash codes from arrays; encode new arrays into packed codes.

    Parameters are TrainConfig options (see docs/training.md): method, bits, lbhash, epochs,
    seed and any other, e.g. lr=1e-4, batch_size=128, hidden=[512]. `progress` shows a bar
    per epoch.

    Fitted attributes: `config_` (the resolved TrainConfig), `model_` (the torch hash model),
    `bits_`, `input_kind_` ("features" or "images"), `n_features_in_` (feature width, None
    for images), `run_dir_` (where the run lives), `history_` (one record per epoch) and
    `metrics_` (with `validation`: the validation items' metrics, `n_validation`, `n_train` and
    the validation codes' lower bound; else the run summary). A 2-D uint8 X trains as raw
    feature values, with a warning (uint8 usually means pixels or quantized features).
    """

    def __init__(self, method: str = "csq", bits: int = 64, lbhash: bool = False,
                 epochs: int | None = None, seed: int = 0, progress: bool = False, **options: Any):
        self.method, self.bits, self.lbhash, self.epochs, self.seed = method, bits, lbhash, epochs, seed
        self.progress, self.options = progress, dict(options)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"method": self.method, "bits": self.bits, "lbhash": self.lbhash, "epochs": self.epochs,
                "seed": self.seed, "progress": self.progress, **self.options}

    def set_params(self, **params: Any) -> "HashEncoder":
        for key, value in params.items():
            if key in ("method", "bits", "lbhash", "epochs", "seed", "progress"):
                setattr(self, key, value)
            else:
                self.options[key] = value
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"HashEncoder({args})"

    # --- fit ----------------------------------------------------------------------------------

    def fit(self, X, y=None, validation: tuple | None = None, run_dir: str | Path | None = None) -> "HashEncoder":
        """Train on (X, y); `validation=(X_val, y_val)` adds validation mAP (the validation items
        as queries against the training items). y=None (no labels) suits the unsupervised
        methods only (lsh, pca, itq). The run is written to `run_dir` (default: a temporary
        directory that lives as long as this object)."""
        for key in ("data", "protocol"):
            if key in self.options:
                raise InputError(f"HashEncoder trains on the arrays given to fit; drop the option {key!r}")
        dataset = arrays_dataset(X, y, validation)
        cfg = make_config({**self.options, "method": self.method, "bits": self.bits, "lbhash": self.lbhash,
                           "epochs": self.epochs, "seed": self.seed, "progress": self.progress,
                           "data": ARRAYS, "protocol": "given" if validation is not None else "all-train"})
        if run_dir is None:
            tmp = tempfile.mkdtemp(prefix="lbhash-encoder-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, tmp, True)
            run_dir = Path(tmp) / "run"
        train(cfg, run_dir, dataset=dataset)
        return self._load_fitted(Path(run_dir))

    @classmethod
    def load(cls, run_dir: str | Path) -> "HashEncoder":
        """A fitted encoder from any finished (or checkpointed) run directory."""
        model_dir = Path(run_dir)
        if not (model_dir / CONFIG).is_file():
            raise InputError(f"{model_dir}: not a run directory (no {CONFIG})")
        enc = cls()
        enc._load_fitted(model_dir)
        cfg = enc.config_
        enc.method, enc.bits, enc.lbhash, enc.epochs, enc.seed = cfg.method, cfg.bits, cfg.lbhash, cfg.epochs, cfg.seed
        return enc

    def _load_fitted(self, run_dir: Path) -> "HashEncoder":
        self.model_, self.config_ = load_run_model(run_dir)
        self.bits_ = self.config_.bits
        self.input_kind_ = self.config_.input_kind
        self.n_features_in_ = self.config_.input_dim
        self.input_form_ = load_input_form(run_dir, self.config_)
        self.run_dir_ = run_dir
        self.history_ = read_log(run_dir / LOG)
        self.metrics_ = read_metrics(run_dir) if (run_dir / "metrics.json").is_file() else {}
        if self.config_.data == ARRAYS and self.config_.protocol == "given" and "map" in self.metrics_:
            self.metrics_ = validation_metrics(self.metrics_, run_dir)
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
        asymmetric ranking and `CodeIndex.search(..., rerank=u)` score the codes with."""
        self._check_fitted("encode")
        out = encode(self.model_, self._inputs(X, json_numbers), None, input_options(self.config_),
                     batch_size=batch_size, real=real)
        return out if real else pack(out)

    def save(self, path: str | Path) -> Path:
        """Write the fitted run as a run directory at `path` (a new directory, written atomically)."""
        self._check_fitted("save")
        path = Path(path)
        if path.exists():
            raise InputError(f"{path} already exists; HashEncoder.save writes a new directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
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
        arr = np.asarray(X)
        if self.input_kind_ == "images":
            pixels = as_rgb_images(arr, "X", "X")
            return ImageDataset(np.zeros((len(pixels), 0), bool), None, "X", pixels=pixels)
        features = conform_features(self.input_form_, arr, "X", json_numbers=json_numbers)
        return ArrayDataset(features, np.zeros((len(features), 0), bool), None, "X")


def validation_metrics(metrics: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The metrics of a fit with `validation`, named for what they measure: the validation items
    (the run's queries) searched among the training items (its database). The lower bound is
    that of the validation codes: the training items' own codes, which the model has fitted,
    can sit on their centers (max_intra 0, ratio inf); `history_` keeps their bound per epoch."""
    out = {k: v for k, v in metrics.items() if k not in ("n_query", "n_db", "lower_bound", "run")}
    out["n_validation"], out["n_train"] = metrics["n_query"], metrics["n_db"]
    codes = load_codes_file(run_dir / CODES)
    percentile = metrics.get("lower_bound", {}).get("percentile", 99.9)
    try:
        bound = lower_bound(codes["query_codes"], codes["query_labels"], percentile, codes["bits"])
        out["lower_bound"] = jsonable({"codes": "validation", "percentile": percentile, "min_inter": bound.min_inter,
                                       "max_intra": bound.max_intra, "ratio": bound.ratio})
    except InputError:  # fewer than two classes among the validation items: no bound
        pass
    out["run"] = {**metrics["run"], "protocol": "validation", "n_validation": metrics["n_query"]}
    return out


def arrays_dataset(X, y, validation: tuple | None = None) -> HashDataset:
    """Training arrays (and validation arrays after them, flagged as test items) as a data set;
    y=None gives items without labels."""
    if y is None:  # unlabelled: zero label columns (the builder refuses supervised methods)
        if validation is not None:
            raise InputError("validation mAP needs labels: pass y with validation=(X_val, y_val)")
        y = np.zeros((len(np.asarray(X)), 0), dtype=bool)
    X, y = np.asarray(X), np.asarray(y)
    if X.dtype == np.uint8 and X.ndim == 2:
        warnings.warn(f"X is a 2-D uint8 array {X.shape}: it trains as features with their raw values 0..255. "
                      "Quantised features need their scale first ((X - zero_point) * scale); images go in as "
                      "(n, H, W) or (n, H, W, C); X.astype(np.float32) trains on the raw values without "
                      "this warning", UserWarning, stacklevel=3)
    parts = [(X, y, "X", "y")]
    if validation is not None:
        if not isinstance(validation, (tuple, list)) or len(validation) != 2:
            raise InputError("validation must be a pair (X_val, y_val)")
        parts.append((np.asarray(validation[0]), np.asarray(validation[1]), "X_val", "y_val"))
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
