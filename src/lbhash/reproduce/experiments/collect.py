"""Tidy tables from finished runs: grid.csv, curves.csv, epochs.csv, codes_sample.npz."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from lbhash._io import atomic_path, save_npz
from lbhash.codes import unpack
from lbhash.codes_file import load_codes_file
from lbhash.reproduce.runner import Cell
from lbhash.reproduce.tables import (CODES_FILE, CURVES_COLUMNS, CURVES_FILE, EPOCHS_COLUMNS, EPOCHS_FILE,
                                     GRID_COLUMNS, GRID_FILE)
from lbhash.runs.rundir import LOG, read_log


def write_csv(path: Path, columns, rows: Iterable[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in columns})


def _cell(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def grid_row(cell: Cell, metrics: dict) -> dict[str, Any]:
    run, ball, bound = metrics["run"], metrics["precision_within_radius"], metrics["lower_bound"]
    return {"run_id": cell.name, "method": run["method"], "variant": run["variant"],
            "lbhash": run["lbhash"], "bits": run["bits"], "seed": run["seed"], "data": run["data"],
            "protocol": run["protocol"], "epochs": run["epochs"], "config_hash": cell.config_hash,
            "map": metrics["map"], "map_tie_averaged": metrics["map_tie_averaged"],
            "topk": metrics["topk"], "knn_accuracy": metrics["knn_accuracy"]["accuracy"],
            "classifier_accuracy": metrics.get("classifier_accuracy"),
            "precision_h2": ball["precision"], "empty_h2": ball["empty_fraction"],
            "lb_min_inter": bound["min_inter"], "lb_max_intra": bound["max_intra"],
            "lb_ratio": bound["ratio"], "seconds_per_epoch": run["seconds_per_epoch"]}


def curve_rows(cell: Cell, metrics: dict) -> list[dict[str, Any]]:
    rows = []
    pr, at_k = metrics["pr_curve"], metrics["precision_at_k"]
    for name, xs, ys in (("pr_precision", pr["radius"], pr["precision"]),
                         ("pr_recall", pr["radius"], pr["recall"]),
                         ("pr_retrieved", pr["radius"], pr["retrieved_fraction"]),
                         ("p_at_k", at_k["k"], at_k["precision"]),
                         ("r_at_k", at_k["k"], at_k["recall"])):
        rows += [{"run_id": cell.name, "curve": name, "x": x, "y": y} for x, y in zip(xs, ys)]
    return rows


def epoch_rows(cell: Cell, run_dir: Path, metrics: dict) -> list[dict[str, Any]]:
    """Per epoch: mAP and database lower bound where evaluated (the last epoch from the final
    metrics), the training codes' ratio and the mean loss."""
    rows = []
    for record in read_log(run_dir / LOG):
        evaluation = record.get("eval", {})
        rows.append({"run_id": cell.name, "epoch": record["epoch"], "map": evaluation.get("map"),
                     "lb_ratio_db": evaluation.get("lower_bound_ratio"),
                     "lb_ratio_train": record.get("train_lower_bound", {}).get("ratio"),
                     "loss_total": record["loss"].get("total")})
    if rows:
        rows[-1]["map"] = metrics["map"]
        rows[-1]["lb_ratio_db"] = metrics["lower_bound"]["ratio"]
    return rows


def write_grid_tables(out: Path, cells: list[Cell], root: Path, results: list[dict]) -> None:
    """grid.csv (one row per run), curves.csv and epochs.csv of those runs."""
    write_csv(out / GRID_FILE, GRID_COLUMNS, [grid_row(c, m) for c, m in zip(cells, results)])
    write_csv(out / CURVES_FILE, CURVES_COLUMNS,
              [row for c, m in zip(cells, results) for row in curve_rows(c, m)])
    write_csv(out / EPOCHS_FILE, EPOCHS_COLUMNS,
              [row for c, m in zip(cells, results) for row in epoch_rows(c, root / c.name, m)])


def write_codes_sample(out: Path, runs: dict[str, Path], size: int = 5000, seed: int = 0) -> None:
    """Up to `size` database codes (+/-1) and labels of each run, the same items for all."""
    arrays = {}
    for name, run_dir in runs.items():
        codes = load_codes_file(run_dir / "codes.npz")
        n = len(codes["db_codes"])
        pick = np.sort(np.random.default_rng(seed).choice(n, size=min(size, n), replace=False))
        arrays[f"{name}__codes"] = unpack(codes["db_codes"][pick], codes["bits"])
        arrays[f"{name}__labels"] = codes["db_labels"][pick]
    save_npz(out / CODES_FILE, **arrays)
