"""`RunEncoder`: a trained run's model as an encoder, what `lbhash search --run` and the service
load and what `HashEncoder` adds fit and scikit-learn's API to. It imports neither scikit-learn nor
the training loop, so a command that only reads a run starts in about the time torch takes to import
(docs/results/benchmarks.md#start-up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from lbhash.codes_file import load_codes_file
from lbhash.data import ArrayDataset, ImageDataset
from lbhash.errors import InputError
from lbhash.train.builder import build_model, input_options
from lbhash.train.forward import ForwardPass, embed, embed_with_features
from lbhash.encoders import Encoder
from lbhash.models import HashModel
from lbhash.runs.run_files import (BEST, CHECKPOINT, CODES, CONFIG, LOG, METRICS, check_not_failed, load_input_form,
                                load_run_config, model_identity, read_log, read_metrics, verify_files)
from lbhash.train.config import RunConfig
from lbhash.train.results import Fitted

ARRAYS = "arrays"  # the data spec of a run trained by HashEncoder.fit: arrays, not a file


class RunEncoder(Encoder):
    """Encode with the model of a run directory: `RunEncoder.load(run_dir).encode(X)`. Its fitted
    attributes are HashEncoder's (`config_`, `model_`, `bits_`, `input_kind_`, `n_features_in_`,
    `input_form_`, `run_dir_`, `history_`, `metrics_`)."""

    @classmethod
    def load(cls, run_dir: str | Path):
        """A fitted encoder from any finished (or checkpointed) run directory."""
        model_dir = Path(run_dir)
        fitted = read_fitted(model_dir)  # without a config.yaml: "not a run directory" (run_files.load_run_config)
        metrics = read_metrics(model_dir) if (model_dir / METRICS).is_file() else {}
        cfg = fitted.config
        if cfg.dataset.data == ARRAYS and cfg.dataset.protocol == "given" and "map" in metrics:  # a fit with eval_set
            metrics = eval_set_metrics(metrics, load_codes_file(model_dir / CODES))
        return cls._unfitted(cfg)._set_fitted(model_dir, fitted, metrics)

    @classmethod
    def _unfitted(cls, cfg):
        """The instance `load` fills in (HashEncoder gives it the run's parameters)."""
        return cls()

    def _set_fitted(self, run_dir: Path | None, fitted: Fitted, metrics: dict[str, Any]):
        """The fitted attributes, from a fit or a run directory alike."""
        self.model_, self.config_, self.input_form_ = fitted.model, fitted.config, fitted.input_form
        self.bits_, self.input_kind_ = fitted.config.hashing.bits, fitted.config.input_kind
        self.n_features_in_ = fitted.config.input_dim
        self.run_dir_, self.history_, self.metrics_ = run_dir, fitted.history, metrics
        return self

    def _forward(self, inputs, embedded: bool, batch_size: int | None) -> tuple[np.ndarray, np.ndarray | None]:
        if isinstance(inputs, np.ndarray):  # conformed rows or images: a data set of them
            labels = np.zeros((len(inputs), 0), bool)
            if self.input_kind_ == "images":
                inputs = ImageDataset(labels, None, "X", pixels=inputs)
            else:
                inputs = ArrayDataset(inputs, labels, None, "X")
        options, how = input_options(self.config_), ForwardPass(batch_size=batch_size)
        if embedded:
            return embed_with_features(self.model_, inputs, None, options, how)
        return embed(self.model_, inputs, None, options, how), None

    def identity(self) -> dict | None:
        """The weights the run encodes with, as an index records them (None: a fit in memory)."""
        return None if self.run_dir_ is None else model_identity(self.run_dir_)

    def run_info(self) -> dict | None:
        """The run's method, bits, data and quality (metrics.json), as the search page shows them."""
        cfg, metrics = self.config_, self.metrics_ or {}
        asymmetric = metrics.get("asymmetric") if isinstance(metrics.get("asymmetric"), dict) else {}
        run = metrics.get("run") if isinstance(metrics.get("run"), dict) else {}  # the training's own record
        return {"dir": None if self.run_dir_ is None else str(Path(self.run_dir_).resolve()), "method": cfg.hashing.method,
                "lbhash": bool(cfg.hashing.lbhash), "variant": cfg.variant, "bits": cfg.hashing.bits, "data": cfg.dataset.data,
                "protocol": cfg.dataset.protocol, "input_kind": cfg.input_kind, "map": metrics.get("map"),
                "topk": metrics.get("topk"), "n_query": metrics.get("n_query"), "n_db": metrics.get("n_db"),
                "chance_map": metrics.get("chance_map"),  # mAP@all of a random ranking (absent from older runs)
                "asymmetric_map": asymmetric.get("map"),
                # the kept epoch's mAP on the held-out validation items, under `run` in metrics.json: the
                # only quality a run without queries (protocol all-train) measures
                "validation_map": metrics.get("validation_map", run.get("validation_map")),
                "n_validation": run.get("n_validation"),
                "lower_bound": metrics.get("lower_bound"), "pr_curve": metrics.get("pr_curve")}


def eval_set_metrics(metrics: dict[str, Any], query_codes: dict) -> dict[str, Any]:
    """The metrics of a fit with `eval_set`, named for what they measure: the eval items (the
    run's queries) searched among the training items (its database). The lower bound is that of
    the eval codes (`query_codes`: codes.npz's query part): the training items' own codes, which
    the model has fitted, can sit on their centers (max_intra 0, ratio inf); `history_` keeps
    their bound per epoch. The names are those of the first release (`n_validation`, protocol
    "validation"); the share of X held out to choose the epoch is `run.n_held_out`."""
    from lbhash.evaluate import lower_bound
    from lbhash.evaluate.report import jsonable

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


def load_run_model(run_dir: str | Path) -> tuple[HashModel, RunConfig]:
    """The trained hash model of a run (its last checkpoint) and the run's config."""
    run_dir = Path(run_dir)
    check_not_failed(run_dir)
    verify_files(run_dir, (CONFIG, CHECKPOINT, BEST))
    cfg = load_run_config(run_dir)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise InputError(f"{run_dir}: no {CHECKPOINT} (the run has not finished an epoch)")
    try:
        if cfg.recipe.select == "best-val" and (run_dir / BEST).is_file():  # the model the run selected
            path = run_dir / BEST
            weights = torch.load(path, map_location="cpu", weights_only=True)["model"]
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)["learner"]
            weights = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    except Exception as err:  # a truncated or foreign file
        raise InputError(f"{path}: not a readable lbhash checkpoint ({type(err).__name__})") from None
    normalization = None
    if cfg.input_kind == "features" and cfg.dataset.normalize == "zscore":
        if "backbone.mean" not in weights or "backbone.std" not in weights:
            raise InputError(f"{path}: no normalisation statistics, but {CONFIG} says normalize: zscore")
        normalization = (weights["backbone.mean"], weights["backbone.std"])
    model = build_model(cfg.model, cfg.hashing.bits, cfg.input_kind, cfg.input_dim, normalization, pretrained=False)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise InputError(f"{path}: the weights do not fit the model of {CONFIG} "
                         f"({str(err).splitlines()[0]})") from None
    return model.eval(), cfg


def read_fitted(run_dir: str | Path) -> Fitted:
    """The fitted model of a run directory, finished or checkpointed (`RunEncoder.load`)."""
    model, cfg = load_run_model(run_dir)
    return Fitted(model, cfg, load_input_form(run_dir, cfg), read_log(Path(run_dir) / LOG))

