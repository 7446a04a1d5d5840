"""`lbhash reproduce study`: controlled studies of the _D objective, named settings x methods x
bits x seeds (docs/reproduce.md; the report's section: lbhash.reproduce.report.experiment_sections.study_section).

A setting is `base`, `paper`, `recommended`, or a comma-separated list of option assignments
(`lbhash_reduction=mean,lbhash_weight=0.1`) on the paper-faithful _D objective (on the base
method with `base` among them). Studies select on the validation split and, unless `test` is
set, never encode the queries; results go to study.csv and study_epochs.csv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from lbhash._io import check_name
from lbhash.errors import InputError
from lbhash.reproduce.experiments.specs import write_csv
from lbhash.reproduce.runner import Cell, run_cells
from lbhash.reproduce.tables import (STUDY_COLUMNS, STUDY_EPOCHS_COLUMNS, STUDY_EPOCHS_FILE, STUDY_FILE,
                                     read_rows_if_present)
from lbhash.runs.run_dir import RunDirectory

PRESETS = ("base", "paper", "recommended")
# what every study cell does unless the study says otherwise
STUDY_DEFAULTS = {"validation": 0.1, "select": "best-val", "eval_every": 5}


def setting_values(setting: str, method: str) -> dict:
    """The config values of one setting for one method (see the module docstring)."""
    from lbhash.methods import method_defaults
    from lbhash.methods.base import PAPER_LBHASH
    from lbhash.runs.train_options import parse_yaml
    from lbhash.train.config import FIELDS

    values: dict = {"lbhash": True, **PAPER_LBHASH}
    for token in (t.strip() for t in setting.split(",") if t.strip()):
        if token == "base":
            values = {k: v for k, v in values.items() if k not in PAPER_LBHASH} | {"lbhash": False}
        elif token == "paper":
            values.update(lbhash=True, **PAPER_LBHASH)
        elif token == "recommended":
            values.update(lbhash=True, **method_defaults(method, "recommended").lbhash)
        else:
            key, eq, raw = token.partition("=")
            if not eq or key not in FIELDS:
                raise InputError(f"setting {setting!r}: {token!r} is neither {', '.join(PRESETS)} nor "
                                 "OPTION=VALUE with a training option")
            values[key] = parse_yaml(raw, f"setting {setting!r}")
    if not values.get("lbhash"):
        values = {k: v for k, v in values.items() if k not in PAPER_LBHASH}
    return values


def setting_slug(setting: str) -> str:
    """A file-name-safe form of a setting, for run directories."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", setting).strip("-") or "default"


@dataclass(frozen=True)
class StudySpec:
    study: str = "study"
    methods: tuple = ("csq",)
    settings: tuple = ("base", "paper")
    bits: tuple = (32,)
    seeds: tuple = (0, 1)
    test: bool = False

    def __post_init__(self) -> None:
        check_name(self.study, "--study")  # the folder runs/NAME under --out

    def plan(self, ctx) -> list[tuple[str, str, Cell]]:
        """(method, setting, cell) of every run."""
        plan = []
        study = {k: v for k, v in STUDY_DEFAULTS.items() if k not in ctx.overrides}  # --set values win over the study's
        for method, setting in product(self.methods, self.settings):
            values = setting_values(setting, method)
            for b, s in product(self.bits, self.seeds):
                config = {**ctx.config(method=method, bits=b, seed=s), **study, **values, "test": self.test}
                plan.append((method, setting, Cell(f"{method}-{setting_slug(setting)}-{b}bits-seed{s}", config)))
        return plan

    def configs(self, ctx) -> list[dict]:
        return [cell.config for _, _, cell in self.plan(ctx)]

    def run(self, ctx) -> None:
        plan, root = self.plan(ctx), ctx.runs(self.study)
        results = run_cells([cell for _, _, cell in plan], root, ctx.workers, ctx.report)
        rows, epochs = [], []
        for (method, setting, cell), m in zip(plan, results):
            run = m["run"]
            rows.append({"study": self.study, "run_id": cell.name, "method": method, "setting": setting,
                         "lbhash": bool(cell.config.get("lbhash")), "bits": run["bits"], "seed": run["seed"],
                         "val_map": run.get("validation_map"), "selected_epoch": run["selected_epoch"],
                         "epochs_trained": run["epochs_trained"], "map": m.get("map"),
                         "config_hash": cell.config_hash})
            for record in RunDirectory(root / cell.name).log():
                e = record.get("eval", {})
                epochs.append({"study": self.study, "run_id": cell.name, "epoch": record["epoch"],
                               "val_map": e.get("val_map"), "loss_total": record["loss"].get("total")})
        _merge(ctx.out / STUDY_FILE, STUDY_COLUMNS, self.study, rows)
        _merge(ctx.out / STUDY_EPOCHS_FILE, STUDY_EPOCHS_COLUMNS, self.study, epochs)


def _merge(path, columns, study: str, rows: list[dict]) -> None:
    """Replace this study's rows of a table, keeping the other studies' rows."""
    kept = [r for r in read_rows_if_present(path, columns) if r["study"] != study]
    write_csv(path, columns, kept + rows)
