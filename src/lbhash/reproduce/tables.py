"""The result tables of a reproduction directory: names, columns, reading and validation.

The experiment runner writes these files and the report reads them; nothing else passes
between the two. Every reader checks the columns and parses every value, and a problem is
one ValueError naming the file and the column or line.

A CSV column's kind is str, bool, int, float (finite), frac ([0, 1]), ratio (>= 0, inf allowed)
or topk ('all' or a positive integer); a trailing "?" lets a cell be empty.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lbhash._io import load_npz
from lbhash.reproduce.meta import META_FILE, Meta, read_json, read_meta
from lbhash.errors import InputError

GRID_FILE = "grid.csv"
CURVES_FILE = "curves.csv"
EPOCHS_FILE = "epochs.csv"
CODES_FILE = "codes_sample.npz"
TIMING_FILE = "timing.csv"
CENTERS_FILE = "centers.csv"
BOUND_FILE = "bound.csv"
TOY_FILE = "toy.json"
TOY_PROBS_FILE = "toy_probs.npz"
STUDY_FILE = "study.csv"
STUDY_EPOCHS_FILE = "study_epochs.csv"
BASELINES_FILE = "baselines.csv"
# the table each experiment writes (a study's key is "study:NAME")
EXPERIMENT_FILES = {"grid": GRID_FILE, "timing": TIMING_FILE, "centers": CENTERS_FILE, "toy": TOY_FILE,
                    "bound": BOUND_FILE, "baselines": BASELINES_FILE, "study": STUDY_FILE}

GRID_COLUMNS = ("run_id", "method", "variant", "lbhash", "bits", "seed", "data", "protocol",
                "epochs", "config_hash", "map", "map_tie_averaged", "topk", "knn_accuracy",
                "classifier_accuracy", "precision_h2", "empty_h2", "lb_min_inter", "lb_max_intra",
                "lb_ratio", "seconds_per_epoch")
CURVES_COLUMNS = ("run_id", "curve", "x", "y")
CURVE_NAMES = ("pr_precision", "pr_recall", "pr_retrieved", "p_at_k", "r_at_k")
EPOCHS_COLUMNS = ("run_id", "epoch", "map", "lb_ratio_db", "lb_ratio_train", "loss_total")
TIMING_COLUMNS = ("variant", "bits", "seconds_per_epoch", "steps_per_epoch", "ratio")
TIMING_VARIANTS = ("bce", "cauchy", "ours")
CENTERS_COLUMNS = ("kind", "bits", "seed", "min_distance", "map", "map_tie_averaged")
BOUND_COLUMNS = ("run_id", "bits", "epoch", "map", "lb_ratio", "lb_min_inter", "lb_max_intra")
STUDY_COLUMNS = ("study", "run_id", "method", "setting", "lbhash", "bits", "seed", "val_map", "selected_epoch",
                 "epochs_trained", "map", "config_hash")
STUDY_EPOCHS_COLUMNS = ("study", "run_id", "epoch", "val_map", "loss_total")
BASELINES_COLUMNS = ("method", "variant", "kind", "bits", "bytes_per_item", "seed", "classes", "ranking",
                     "map_all", "map_1000", "precision_h2", "n_query", "n_database", "held_out", "protocol")
BASELINES_REFERENCE = "cosine-knn"  # method and variant of the float cosine kNN rows
TOY_PROB_KINDS = ("real", "surrogate", "naive")
CODES_SUFFIX, LABELS_SUFFIX = "__codes", "__labels"

# How each column is parsed (see the module docstring); an empty optional cell reads as NaN or "".
# "frac" holds mAP, accuracies and precisions, which the report shows in %.
_KINDS: dict[str, dict[str, str]] = {
    GRID_FILE: dict(zip(GRID_COLUMNS, (
        "str", "str", "str", "bool", "int", "int", "str", "str", "int", "str?", "frac",
        "frac?", "topk", "frac?", "frac?", "frac?", "frac?", "float?", "float?", "ratio",
        "float?"))),
    CURVES_FILE: dict(zip(CURVES_COLUMNS, ("str", "str", "float", "float?"))),
    EPOCHS_FILE: dict(zip(EPOCHS_COLUMNS, ("str", "int", "frac?", "ratio?", "ratio?", "float?"))),
    TIMING_FILE: dict(zip(TIMING_COLUMNS, ("str", "int", "float", "float?", "float?"))),
    CENTERS_FILE: dict(zip(CENTERS_COLUMNS, ("str", "int", "int", "float", "frac", "frac?"))),
    STUDY_FILE: dict(zip(STUDY_COLUMNS, ("str", "str", "str", "str", "bool", "int", "int", "frac?", "int",
                                         "int", "frac?", "str?"))),
    STUDY_EPOCHS_FILE: dict(zip(STUDY_EPOCHS_COLUMNS, ("str", "str", "int", "frac?", "float?"))),
    BOUND_FILE: dict(zip(BOUND_COLUMNS, ("str", "int", "int", "frac", "ratio", "float?",
                                         "float?"))),
    BASELINES_FILE: dict(zip(BASELINES_COLUMNS, ("str", "str", "str", "int", "int", "int", "str", "str", "frac",
                                                 "frac", "frac?", "int", "int", "str?", "str"))),
}
_CHOICES = {CURVES_FILE: ("curve", CURVE_NAMES), TIMING_FILE: ("variant", TIMING_VARIANTS),
            BASELINES_FILE: ("classes", ("seen", "unseen"))}


class Table:
    """Columns of one CSV file as numpy arrays (str columns as object arrays)."""

    def __init__(self, name: str, columns: dict[str, np.ndarray]):
        self.name, self.columns = name, columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def select(self, mask: np.ndarray) -> "Table":
        return Table(self.name, {k: v[mask] for k, v in self.columns.items()})

    def unique(self, column: str) -> list:
        return sorted(set(self.columns[column].tolist()))


@dataclass
class Tables:
    """Everything found in one directory; an absent optional file is None."""

    directory: Path
    meta: Meta
    grid: Table | None = None
    curves: Table | None = None
    epochs: Table | None = None
    timing: Table | None = None
    centers: Table | None = None
    bound: Table | None = None
    study: Table | None = None
    study_epochs: Table | None = None
    baselines: Table | None = None
    codes: dict[str, tuple[np.ndarray, np.ndarray]] | None = None  # run_id -> (codes, labels)
    toy: dict[int, dict[str, Any]] | None = None
    toy_probs: dict[int, dict[str, np.ndarray]] | None = None
    files: list[str] = field(default_factory=list)  # names of the files read
    empty: list[str] = field(default_factory=list)  # CSV files with a header but no rows


def load_tables(directory: str | Path) -> Tables:
    """Read and check every table present in `directory`; meta.json is required."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    tables = Tables(directory, read_meta(directory / META_FILE), files=[META_FILE])
    for attr, name in (("grid", GRID_FILE), ("curves", CURVES_FILE), ("epochs", EPOCHS_FILE),
                       ("timing", TIMING_FILE), ("centers", CENTERS_FILE), ("bound", BOUND_FILE),
                       ("study", STUDY_FILE), ("study_epochs", STUDY_EPOCHS_FILE),
                       ("baselines", BASELINES_FILE)):
        if (directory / name).is_file():
            table = read_table(directory / name)
            tables.files.append(name)
            if len(table):  # a header alone (an experiment not run yet) counts as absent
                setattr(tables, attr, table)
            else:
                tables.empty.append(name)
    seen: set[str] = set()
    for run_id in [] if tables.grid is None else tables.grid["run_id"].tolist():
        if run_id in seen:
            raise InputError(f"{directory / GRID_FILE}: duplicate run_id {run_id!r}")
        seen.add(run_id)
    for attr, name, reader in (("codes", CODES_FILE, read_codes_sample), ("toy", TOY_FILE, read_toy),
                               ("toy_probs", TOY_PROBS_FILE, read_toy_probs)):
        if (directory / name).is_file():
            setattr(tables, attr, reader(directory / name))
            tables.files.append(name)
    return tables


def read_rows_if_present(path: Path, columns) -> list[dict[str, str]]:
    """The rows of a CSV table as written (strings), [] when the file is absent; a file with
    other columns is an error naming it."""
    if not path.is_file():
        return []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != tuple(columns):
            raise InputError(f"{path}: expected the columns {', '.join(columns)}")
        return list(reader)


def read_table(path: Path) -> Table:
    """One of the CSV tables, chosen by file name; values parsed by their column's kind."""
    kinds = _KINDS.get(path.name)
    if kinds is None:
        raise InputError(f"{path}: not a known table (expected one of {', '.join(_KINDS)})")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return _read_rows(path, csv.reader(fh), kinds)
    except (UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{path}: not a readable CSV file ({err})") from None


def _read_rows(path: Path, reader, kinds: dict[str, str]) -> Table:
    header = [h.strip() for h in next(reader, [])]
    if not header:
        raise InputError(f"{path}: empty file, expected a header row")
    missing = [c for c in kinds if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
    where = {c: header.index(c) for c in kinds}
    values: dict[str, list] = {c: [] for c in kinds}
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue  # blank line
        if len(row) != len(header):
            raise InputError(f"{path} line {reader.line_num}: {len(row)} fields, "
                             f"the header has {len(header)}")
        for column, kind in kinds.items():
            cell = row[where[column]].strip()
            try:
                values[column].append(parse_cell(cell, kind))
            except ValueError as err:
                raise InputError(f"{path} line {reader.line_num}, column '{column}': "
                                 f"{err}") from None
    table = Table(path.name, {c: column_array(v, kinds[c]) for c, v in values.items()})
    if path.name in _CHOICES:
        column, allowed = _CHOICES[path.name]
        bad = sorted(set(table[column].tolist()) - set(allowed))
        if bad:
            raise InputError(f"{path}: column '{column}' has {bad[0]!r}, expected one of "
                             f"{', '.join(allowed)}")
    return table


def parse_number(value: Any) -> float:
    """A number from JSON: "inf" is +inf and null is NaN; anything else but a number is an error."""
    if value == "inf":
        return math.inf
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {value!r}")
    return float(value)


def parse_cell(cell: str, kind: str) -> Any:
    """One CSV cell parsed as `kind` (see the module docstring); the error says what is wrong,
    and the caller adds the file and the column or line."""
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if cell == "":
        if optional:
            return "" if kind == "str" else math.nan
        raise InputError("empty, expected a value")
    if kind == "str":
        return cell
    if kind == "bool":
        if cell.lower() not in ("true", "1", "false", "0"):
            raise InputError(f"cannot parse {cell!r} as True/False")
        return cell.lower() in ("true", "1")
    if kind == "topk":
        if cell.lower() == "all":
            return "all"
        if not cell.isdigit() or int(cell) <= 0:
            raise InputError(f"cannot parse {cell!r} as 'all' or a positive integer")
        return cell
    return _parse_numeric(cell, kind, optional)


def _parse_numeric(cell: str, kind: str, optional: bool) -> int | float:
    """int, float, frac or ratio; a non-empty optional frac may be NaN."""
    try:
        number = float(cell)
    except ValueError:
        raise InputError(f"cannot parse {cell!r} as a number") from None
    if kind == "int":
        if not number.is_integer():
            raise InputError(f"cannot parse {cell!r} as an integer")
        return int(number)
    if kind == "ratio" and not (number >= 0):  # +inf allowed, NaN and negatives not
        raise InputError(f"{cell!r} is not a ratio >= 0 (inf allowed)")
    if kind == "float" and not math.isfinite(number):
        raise InputError(f"{cell!r} is not a finite number")
    if kind == "frac" and not (0 <= number <= 1 or (optional and math.isnan(number))):
        raise InputError(f"{cell!r} is not a fraction in [0, 1]")
    return number


def column_array(values: list, kind: str) -> np.ndarray:
    """A column's parsed values as one array: object for str and topk, else bool, int or float."""
    kind = kind.rstrip("?")
    if kind in ("str", "topk"):
        return np.array(values, dtype=object)
    return np.array(values, dtype={"bool": bool, "int": np.int64}.get(kind, np.float64))


def read_codes_sample(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    arrays = load_npz(path)
    out = {}
    for key in sorted(arrays):
        if not key.endswith(CODES_SUFFIX):
            if not key.endswith(LABELS_SUFFIX):
                raise InputError(f"{path}: key {key!r} ends in neither {CODES_SUFFIX} nor "
                                 f"{LABELS_SUFFIX}")
            continue
        run = key[:-len(CODES_SUFFIX)]
        codes, labels = arrays[key], arrays.get(run + LABELS_SUFFIX)
        if labels is None:
            raise InputError(f"{path}: {key!r} has no matching {run + LABELS_SUFFIX!r}")
        if codes.ndim != 2 or not np.isin(codes, (-1, 1)).all():
            raise InputError(f"{path}: {key!r} must be a 2-D array of +/-1")
        if labels.ndim not in (1, 2) or len(labels) != len(codes):
            raise InputError(f"{path}: {run + LABELS_SUFFIX!r} must have one label (row) per "
                             f"code, got shape {labels.shape} for {len(codes)} codes")
        out[run] = (codes.astype(np.int8), labels)
    for key in arrays:
        if key.endswith(LABELS_SUFFIX) and key[:-len(LABELS_SUFFIX)] not in out:
            raise InputError(f"{path}: {key!r} has no matching codes array")
    return out


def read_toy(path: Path) -> dict[int, dict[str, Any]]:
    """toy.json: bits -> ToyResult.to_dict(), with "inf" strings turned into floats."""
    raw = read_json(path)
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"{path}: expected a JSON object keyed by bit length")
    out = {}
    for key, result in raw.items():
        if not key.isdigit():
            raise InputError(f"{path}: key {key!r} is not a bit length")
        if not isinstance(result, dict) or not isinstance(result.get("kl_real_vs"), dict):
            raise InputError(f"{path}: entry {key!r} has no 'kl_real_vs' table")
        kl = {}
        for n, row in result["kl_real_vs"].items():
            if not str(n).isdigit() or not isinstance(row, dict):
                raise InputError(f"{path}: entry {key!r}: bad 'kl_real_vs' row {n!r}")
            try:
                kl[int(n)] = {est: parse_number(v) for est, v in row.items()}
            except ValueError as err:
                raise InputError(f"{path}: entry {key!r}, N = {n}: {err}") from None
        try:
            limit = parse_number(result.get("true_marginal_product_kl"))
        except ValueError as err:
            raise InputError(f"{path}: entry {key!r}, true_marginal_product_kl: {err}") from None
        out[int(key)] = {**result, "kl_real_vs": kl, "true_marginal_product_kl": limit}
    return dict(sorted(out.items()))


def read_toy_probs(path: Path) -> dict[int, dict[str, np.ndarray]]:
    """toy_probs.npz: bits -> {real, surrogate, naive}, each of length 2^bits."""
    arrays = load_npz(path)
    out: dict[int, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        bits, _, kind = key.partition("__")
        if not bits.isdigit() or kind not in TOY_PROB_KINDS:
            raise InputError(f"{path}: key {key!r} is not <bits>__<{'|'.join(TOY_PROB_KINDS)}>")
        if value.shape != (2 ** int(bits),) or not np.isfinite(value).all() or (value < 0).any():
            raise InputError(f"{path}: {key!r} must hold {2 ** int(bits)} finite probabilities")
        out.setdefault(int(bits), {})[kind] = value.astype(np.float64)
    for bits, kinds in out.items():
        missing = [k for k in TOY_PROB_KINDS if k not in kinds]
        if missing:
            raise InputError(f"{path}: {bits} bits lacks {', '.join(f'{bits}__{k}' for k in missing)}")
    return dict(sorted(out.items()))
