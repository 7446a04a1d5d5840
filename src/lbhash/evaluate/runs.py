"""Training runs with their evaluation: per-epoch monitoring and metrics.json.

`lbhash.train` writes the codes of a run; this module measures them. `train_and_evaluate`
is what `lbhash train` runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lbhash._io import write_json
from lbhash.codes import load_codes_file
from lbhash.evaluate.bound import lower_bound
from lbhash.evaluate.report import evaluate_codes
from lbhash.evaluate.retrieval import classifier_accuracy, mean_average_precision
from lbhash.train import TrainConfig
from lbhash.data import load_split
from lbhash.train.run import CODES, LOG, SPLIT, load_run_config, read_log
from lbhash.train.run import train as train_run

METRICS = "metrics.json"


class RunMonitor:
    """What the training log records each epoch: the lower bound of the training codes, and
    on evaluation epochs mAP at R plus the lower bound of the database codes."""

    def train_codes(self, codes: np.ndarray, labels: np.ndarray) -> dict:
        bound = lower_bound(codes, labels)
        return {"train_lower_bound": {"min_inter": bound.min_inter, "max_intra": bound.max_intra,
                                      "ratio": _finite_or_str(bound.ratio)}}

    def evaluate(self, query_codes, db_codes, query_labels, db_labels, topk) -> dict:
        bound = lower_bound(db_codes, db_labels)
        return {"map": mean_average_precision(query_codes, db_codes, query_labels, db_labels, topk=topk),
                "lower_bound_ratio": _finite_or_str(bound.ratio), "min_inter": bound.min_inter,
                "max_intra": bound.max_intra}


def train_and_evaluate(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
                       on_epoch_end: Callable[[int], None] | None = None,
                       progress: bool | None = None) -> dict[str, Any]:
    """Train (or resume) a run, then write and return its metrics."""
    out = Path(out)
    if resume and (out / METRICS).is_file():
        return json.loads((out / METRICS).read_text())
    done = train_run(cfg, out, resume=resume, monitor=RunMonitor(), on_epoch_end=on_epoch_end,
                     progress=progress)
    return {} if done is None else evaluate_run(out)  # other ranks of a multi-process run


def evaluate_run(run_dir: str | Path) -> dict[str, Any]:
    """Every metric of a finished run at its protocol's R, plus a summary of the run;
    written to metrics.json in the run directory."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    codes = load_codes_file(run_dir / CODES)
    topk = int(codes["topk"]) if "topk" in codes and int(codes["topk"]) > 0 else None
    metrics = evaluate_codes(codes["query_codes"], codes["db_codes"], codes["query_labels"],
                             codes["db_labels"], bits=codes["bits"], topk=topk)
    if "query_scores" in codes:  # the method's own classifier, beside the kNN accuracy
        metrics["classifier_accuracy"] = classifier_accuracy(codes["query_scores"], codes["query_labels"])
    seconds = [r["seconds"] for r in read_log(run_dir / LOG)]
    metrics["run"] = {
        "variant": cfg.variant, "method": cfg.method, "lbhash": cfg.lbhash, "bits": cfg.bits,
        "data": cfg.data, "protocol": cfg.protocol, "seed": cfg.seed, "epochs": cfg.epochs,
        "n_train": len(load_split(run_dir / SPLIT).train),
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "encode_seconds": float(codes["encode_seconds"]) if "encode_seconds" in codes else None,
    }
    write_json(run_dir / METRICS, metrics)
    return metrics


def _finite_or_str(x: float):
    return x if math.isfinite(x) else "inf"
