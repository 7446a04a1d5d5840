"""What a training returns, in memory: the fitted model (`Fitted`), and the metrics of its codes
with a summary of the run (`run_metrics`: what metrics.json holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lbhash.data import Split
from lbhash.data.input_form import InputForm
from lbhash.models import HashModel
from lbhash.train.config import RunConfig, TrainConfig


@dataclass
class Fitted:
    """A run's trained model as `HashEncoder` holds it: the model (eval mode, on the CPU, float32
    weights, as `load_run_model` builds it), the run's config, its input contract and its log."""
    model: HashModel
    config: RunConfig
    input_form: InputForm
    history: list[dict]



def selection_summary(cfg: TrainConfig, log: list[dict]) -> dict[str, Any]:
    """Which epoch the run kept, how many it trained, and the validation mAP of the kept one."""
    trained = log[-1]["epoch"] if log else 0
    validated = [(r["epoch"], r["eval"]["val_map"]) for r in log if "val_map" in r.get("eval", {})]
    if not validated:
        return {"select": cfg.recipe.select, "epochs_trained": trained, "selected_epoch": trained}
    best = max(validated, key=lambda e: (e[1], -e[0]))  # the first epoch reaching the best mAP
    kept = best if cfg.recipe.select == "best-val" else validated[-1]
    return {"select": cfg.recipe.select, "epochs_trained": trained,
            "selected_epoch": kept[0] if cfg.recipe.select == "best-val" else trained,
            "validation_map": kept[1]}


def _codes_metrics(codes: dict) -> dict[str, Any]:
    # here, not at the top: reading a run's Fitted must not load the metrics' numba kernels
    from lbhash.evaluate import classifier_accuracy, evaluate_codes

    metrics = evaluate_codes(codes["query_codes"], codes["db_codes"], codes["query_labels"],
                             codes["db_labels"], bits=codes["bits"], topk=codes["topk"], tie_averaged=True,
                             query_real=codes.get("query_real"))
    if "query_scores" in codes:  # the method's own classifier, beside the kNN accuracy
        metrics["classifier_accuracy"] = classifier_accuracy(codes["query_scores"], codes["query_labels"])
    return metrics


def run_metrics(cfg: TrainConfig, log: list[dict], split: Split, codes: dict | None,
                seen: dict | None = None) -> dict[str, Any]:
    """Every metric of a run's codes (`load_codes_file`'s dict of codes.npz, None without
    queries; `seen`: of codes_seen.npz under unseen:K) and a summary of the run (metrics.json)."""
    metrics: dict[str, Any] = {} if codes is None else _codes_metrics(codes)
    if seen is not None:  # unseen:K: the training classes' numbers beside
        metrics["seen"] = _codes_metrics(seen)
    seconds = [r["seconds"] for r in log]
    metrics["run"] = {
        "variant": cfg.variant, "method": cfg.hashing.method, "lbhash": cfg.hashing.lbhash, "bits": cfg.hashing.bits,
        "data": cfg.dataset.data, "protocol": cfg.dataset.protocol, "seed": cfg.recipe.seed, "epochs": cfg.recipe.epochs,
        "n_train": len(split.train), "n_validation": len(split.validation),
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "encode_seconds": float(codes["encode_seconds"]) if codes is not None and "encode_seconds" in codes
        else None,
        **selection_summary(cfg, log),
    }
    if len(split.unseen_classes):
        metrics["run"]["unseen_classes"] = split.unseen_classes.tolist()
    return metrics
