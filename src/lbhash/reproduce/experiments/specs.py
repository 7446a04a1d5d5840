"""The paper's experiments as small declarative specs (paper Sec. 6.2-6.4, App. G; docs/reproduce.md),
and the Context every spec runs in.

Each spec expands into cells, which the runner trains, and writes its tables (`write_csv`): grid
(Tables 2-3), timing (Table 1), centers (Table 5), toy (Fig. 3) and bound (Fig. 1). The study and
baselines specs build on these; lbhash.reproduce.experiments.registry lists them all.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from lbhash._io import atomic_path, save_npz, write_json
from lbhash.codes import unpack
from lbhash.codes_file import load_codes_file
from lbhash.errors import InputError
from lbhash.reproduce.runner import Cell, run_cells
from lbhash.reproduce.tables import (BOUND_COLUMNS, BOUND_FILE, CENTERS_COLUMNS, CENTERS_FILE, CODES_FILE,
                                     CURVES_COLUMNS, CURVES_FILE, EPOCHS_COLUMNS, EPOCHS_FILE, GRID_COLUMNS,
                                     GRID_FILE, TIMING_COLUMNS, TIMING_FILE, TOY_FILE, TOY_PROBS_FILE)
from lbhash.runs.run_dir import RunDirectory


def all_methods() -> tuple[str, ...]:
    """The paper's deep methods (its Table 2), in its row order. Methods beyond the paper
    (OrthoHash, the closed-form baselines) join a grid only when --methods names them."""
    from lbhash.methods import available_methods
    from lbhash.reproduce.paper import TABLE2_CIFAR10, method_order

    return tuple(method_order(m for m in available_methods() if m in TABLE2_CIFAR10))


# Options of gradient training that a closed-form baseline's cell leaves out (it fits in one pass).
GRADIENT_ONLY = ("epochs",)


@dataclass
class Context:
    data: str
    out: Path
    protocol: str | None = None
    workers: int = 1
    overrides: dict = field(default_factory=dict)   # TrainConfig values for every cell
    report: Callable[[str], None] = print

    def config(self, **values) -> dict:
        clash = sorted(set(values) & set(self.overrides))
        if clash:  # the experiment's own axes (method, bits, seed, centers ...) are not settable
            raise InputError(f"--set {clash[0]} conflicts with the experiment's own {clash[0]} values")
        # the paper's split: every training item trains and the last epoch is kept, whatever the
        # profile's default (an experiment, such as the studies, or --set may hold a share out)
        base = {"data": self.data, **({"protocol": self.protocol} if self.protocol else {}), "validation": 0.0}
        return {**base, **values, **self.overrides}

    def runs(self, experiment: str) -> Path:
        return self.out / "runs" / experiment


def variant_name(method: str, lbhash: bool) -> str:
    return method + ("_D" if lbhash else "")


class CellSpec:
    """A spec that trains its `cells(ctx)`: their configs are what `configs` gives to be checked first."""

    def configs(self, ctx: Context) -> list[dict]:
        return [c.config for c in self.cells(ctx)]


@dataclass(frozen=True)
class GridSpec(CellSpec):
    methods: tuple = field(default_factory=all_methods)
    variants: tuple = (False, True)
    bits: tuple = (16, 32, 64)
    seeds: tuple = (0, 1, 2, 3, 4)

    def cells(self, ctx: Context) -> list[Cell]:
        """Every method x variant x bits x seed; a closed-form baseline has no _D variant and
        ignores the grid's epochs."""
        from lbhash.methods import method_class

        cells = []
        for m in self.methods:
            closed = method_class(m).closed_form
            for v, b, s in product(self.variants, self.bits, self.seeds):
                if v and closed:
                    continue
                config = ctx.config(method=m, lbhash=v, bits=b, seed=s)
                if closed:
                    config = {k: x for k, x in config.items() if k not in GRADIENT_ONLY}
                cells.append(Cell(f"{variant_name(m, v)}-{b}bits-seed{s}", config))
        return cells

    def run(self, ctx: Context) -> None:
        cells, root = self.cells(ctx), ctx.runs("grid")
        results = run_cells(cells, root, ctx.workers, ctx.report)
        write_grid_tables(ctx.out, cells, root, results)
        # t-SNE sample: CSQ and CSQ_D (or the first method) at the largest bits, first seed
        method = "csq" if "csq" in self.methods else self.methods[0]
        picks = {variant_name(method, v): root / f"{variant_name(method, v)}-{max(self.bits)}bits-seed{self.seeds[0]}"
                 for v in self.variants}
        write_codes_sample(ctx.out, picks)


@dataclass(frozen=True)
class CentersSpec:
    kinds: tuple = ("hadamard", "bch", "reed_solomon", "random", "auto")
    bits: tuple = (16, 32, 48)
    seeds: tuple = (0, 1, 2)
    method: str = "csq"

    def configs(self, ctx: Context) -> list[dict]:
        from lbhash.centers import CENTER_KINDS

        unknown = [k for k in self.kinds if k not in CENTER_KINDS]
        if unknown:
            raise InputError(f"--kinds: unknown center kind {unknown[0]!r} (known: {', '.join(CENTER_KINDS)})")
        return [ctx.config(method=self.method, lbhash=True, bits=b, seed=s, centers=kind)
                for kind in self.kinds for b in self.bits for s in self.seeds]

    def run(self, ctx: Context) -> None:
        from lbhash.centers import center_report, generate_centers
        from lbhash.data import load_data

        classes = load_data(ctx.data).num_classes
        cells, distances = [], {}
        for kind in self.kinds:
            for b in self.bits:
                for s in self.seeds:
                    try:
                        report = center_report(generate_centers(b, classes, kind=kind, seed=s))
                    except ValueError as err:  # e.g. hadamard at 48 bits: not applicable
                        ctx.report(f"skipping {kind} at {b} bits: {err}")
                        break
                    distances[(kind, b, s)] = report.min_distance
                    cells.append(Cell(f"{kind}-{b}bits-seed{s}",
                                      ctx.config(method=self.method, lbhash=True, bits=b, seed=s, centers=kind)))
        results = run_cells(cells, ctx.runs("centers"), ctx.workers, ctx.report)
        rows = []
        for cell, m in zip(cells, results):
            key = (cell.config["centers"], cell.config["bits"], cell.config["seed"])
            rows.append({"kind": key[0], "bits": key[1], "seed": key[2], "min_distance": distances[key],
                         "map": m["map"], "map_tie_averaged": m["map_tie_averaged"]})
        write_csv(ctx.out / CENTERS_FILE, CENTERS_COLUMNS, rows)


@dataclass(frozen=True)
class BoundSpec(CellSpec):
    method: str = "csq"
    lbhash: bool = True
    bits: tuple = (16, 32, 64)
    seed: int = 0

    def cells(self, ctx: Context) -> list[Cell]:
        name = variant_name(self.method, self.lbhash)
        # the test mAP beside the bound after every epoch: no held-out share, whose runs evaluate
        # the validation items only
        return [Cell(f"{name}-{b}bits-seed{self.seed}",
                     ctx.config(method=self.method, lbhash=self.lbhash, bits=b, seed=self.seed, eval_every=1,
                                validation=0.0))
                for b in self.bits]

    def run(self, ctx: Context) -> None:
        cells, root = self.cells(ctx), ctx.runs("bound")
        results = run_cells(cells, root, ctx.workers, ctx.report)
        rows = []
        for cell, m in zip(cells, results):
            for record in RunDirectory(root / cell.name).log():
                e = record.get("eval")
                if e:
                    rows.append({"run_id": cell.name, "bits": cell.config["bits"], "epoch": record["epoch"],
                                 "map": e["map"], "lb_ratio": e["lower_bound_ratio"],
                                 "lb_min_inter": e.get("min_inter"), "lb_max_intra": e.get("max_intra")})
            last = m["lower_bound"]  # the last epoch is evaluated by the final metrics
            rows.append({"run_id": cell.name, "bits": cell.config["bits"], "epoch": m["run"]["epochs"],
                         "map": m["map"], "lb_ratio": last["ratio"], "lb_min_inter": last["min_inter"],
                         "lb_max_intra": last["max_intra"]})
        write_csv(ctx.out / BOUND_FILE, BOUND_COLUMNS, rows)


@dataclass(frozen=True)
class TimingSpec:
    bits: tuple = (16, 32, 64)
    epochs: int = 5
    variants: tuple = (("bce", "csq", False), ("cauchy", "dch", False), ("ours", "csq", True))
    seed: int = 0

    def configs(self, ctx: Context) -> list[dict]:
        return [ctx.config(method=method, lbhash=lbhash, bits=b, seed=self.seed)
                for b in self.bits for _, method, lbhash in self.variants]

    def run(self, ctx: Context) -> None:
        from lbhash.train import make_config
        from lbhash.train.fit import epoch_times

        rows = []
        for b in self.bits:
            configs = {label: make_config(ctx.config(method=method, lbhash=lbhash, bits=b, seed=self.seed))
                       for label, method, lbhash in self.variants}
            times = epoch_times(configs, self.epochs)
            median = {label: t.median() for label, t in times.items()}
            for label, t in times.items():
                rows.append({"variant": label, "bits": b, "seconds_per_epoch": median[label],
                             "steps_per_epoch": t.steps_per_epoch, "ratio": median[label] / median["bce"]})
                ctx.report(f"timing {label} {b} bits: {median[label]:.3f} s/epoch")
        write_csv(ctx.out / TIMING_FILE, TIMING_COLUMNS, rows)


@dataclass(frozen=True)
class ToySpec:
    bits: tuple = (8, 16)
    seed: int = 0

    def configs(self, ctx: Context) -> list[dict]:
        from lbhash.reproduce.toy import ToyConfig

        for b in self.bits:
            ToyConfig(bits=b, seed=self.seed)
        return []

    def run(self, ctx: Context) -> None:
        from lbhash.reproduce.toy import run_toy

        summary, probs = {}, {}
        for b in self.bits:
            result = run_toy(bits=b, seed=self.seed)
            summary[str(b)] = result.to_dict()
            n = max(result.estimates)  # the largest evaluation sample
            probs[f"{b}__real"] = result.real
            for name in ("surrogate", "naive"):
                probs[f"{b}__{name}"] = result.estimates[n][name]
            ctx.report(f"toy {b} bits done")
        write_json(ctx.out / TOY_FILE, summary)
        save_npz(ctx.out / TOY_PROBS_FILE, **probs)


# ---- the tables of finished runs: grid.csv, curves.csv, epochs.csv, codes_sample.npz ----

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
    for record in RunDirectory(run_dir).log():
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
