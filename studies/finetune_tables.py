"""The markdown tables of issue 57's fine-tuning experiments, from what `studies/finetune.sh` wrote.

    python studies/finetune_tables.py OUT [--copy DEST]

OUT is finetune.sh's output folder. Prints three tables: the recipe study (validation mAP of the
epoch each run kept and of its last, seconds per fine-tuning epoch), the check (frozen against
fine-tuned on the first 100 training and 100 test images per class), and the grid on protocol
cifar10 (mAP@54000 per method, variant and code length, mean and sample std over the seeds
finished so far, with the count). `--copy DEST` also copies the tables' sources (the study's
per-run records, the check's metrics, grid.csv, each finished grid cell's metrics and epochs) into
DEST as CSV, without run directories; the cells and epochs DEST holds already stay (a cell of OUT replaces
its own), and the tables then count them too. A cell is its name and its epoch count: a method trained by
another recipe (DBDH's and DSDH's own, 70 and 60 epochs, against the shared recipe's 18) is another cell,
kept beside the first and never paired or averaged with it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path


def _log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]


def study_rows(out: Path) -> list[dict]:
    rows = []
    for run in sorted((out / "study" / "runs" / "finetune").glob("*")):
        if not (run / "metrics.json").is_file():
            continue
        meta = json.loads((run / "metrics.json").read_text())["run"]
        records = _log(run)
        tune = [r["seconds"] for r in records if r.get("phase") != "probe"]
        setting = run.name.removeprefix("csq-").removesuffix("-64bits-seed0")
        rows.append({"setting": setting, "epochs": len(records), "kept_epoch": meta["selected_epoch"],
                     "val_map_kept": meta["validation_map"], "val_map_last": records[-1]["eval"]["val_map"],
                     "tune_seconds_median": statistics.median(tune) if tune else 0.0})
    return rows


def check_rows(out: Path) -> list[dict]:
    rows = []
    for run in sorted((out / "check").glob("*")):
        if not (run / "metrics.json").is_file():
            continue
        metrics = json.loads((run / "metrics.json").read_text())
        records = _log(run)
        rows.append({"run": run.name, "map": metrics["map"], "epochs": len(records),
                     "train_seconds": sum(r["seconds"] for r in records),
                     "encode_seconds": metrics["run"].get("encode_seconds")})
    return rows


def grid_rows(out: Path) -> list[dict]:
    path = out / "grid" / "grid.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as fh:  # without the data spec: it names this machine's path
        return [{k: v for k, v in row.items() if k != "data"} for row in csv.DictReader(fh)]


def grid_cell_rows(out: Path) -> list[dict]:
    """Each finished grid cell's metrics.json, also before its step has written grid.csv."""
    rows = []
    for run in sorted((out / "grid" / "runs" / "grid").glob("*")):
        if (run / "metrics.json").is_file():
            m = json.loads((run / "metrics.json").read_text())
            rows.append({"cell": run.name, "map_54000": m["map"], "map_tie_averaged": m["map_tie_averaged"],
                         "knn_accuracy": (m.get("knn_accuracy") or {}).get("accuracy"), "selected_epoch": m["run"]["selected_epoch"],
                         "validation_map": m["run"].get("validation_map"), "epochs": len(_log(run))})
    return rows


def grid_epoch_rows(out: Path) -> list[dict]:
    """Each finished grid cell's epochs: phase, seconds and validation mAP (from its log)."""
    rows = []
    for run in sorted((out / "grid" / "runs" / "grid").glob("*")):
        if (run / "metrics.json").is_file():
            records = _log(run)
            rows += [{"cell": run.name, "epoch": r["epoch"], "phase": r.get("phase", ""), "seconds": r["seconds"],
                      "val_map": r.get("eval", {}).get("val_map"), "epochs": len(records)} for r in records]
    return rows


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _run_of(row: dict) -> tuple[str, int]:
    """A cell's identity: its name and its epoch count (the recipe it trained by)."""
    return row["cell"], int(row["epochs"])


def _with_epochs(cells: list[dict], epochs: list[dict]) -> list[dict]:
    """Rows written before the epoch count was a column get it from their cell's epoch rows (one run per
    cell then); a row with no epoch rows is refused, never guessed."""
    count: dict[str, int] = {}
    for r in epochs:
        count[r["cell"]] = count.get(r["cell"], 0) + 1
    for r in cells:
        if not r.get("epochs"):
            if r["cell"] not in count:
                raise SystemExit(f"{r['cell']}: no epoch count, and no epoch rows to count")
            r["epochs"] = count[r["cell"]]
    return cells


def _mixed(rows: list[dict]) -> set[str]:
    """The methods (a base and its `_D` together) whose cells ran more than one epoch count: the tables
    name each of their counts."""
    counts: dict[str, set[int]] = {}
    for r in rows:
        counts.setdefault(r["cell"].split("-")[0].removesuffix("_D"), set()).add(int(r["epochs"]))
    return {method for method, seen in counts.items() if len(seen) > 1}


def _label(variant: str, epochs: int, mixed: set[str]) -> str:
    return f"{variant} ({epochs} epochs)" if variant.removesuffix("_D") in mixed else variant


def _md(rows: list[dict], columns: list[str]) -> str:
    def cell(v):
        return f"{v:.4f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows])


def grid_table(rows: list[dict]) -> str:
    """Mean ± std over seeds of each finished cell (grid-cells rows: `csq_D-64bits-seed0`), so that a
    step still running shows what it has finished."""
    cells: dict[tuple[str, int], list[float]] = {}
    mixed = _mixed(rows)
    for r in rows:
        variant, bits, _ = r["cell"].split("-")
        label = _label(variant, int(r["epochs"]), mixed)
        cells.setdefault((label, int(bits.removesuffix("bits"))), []).append(100 * float(r["map_54000"]))
    bits = sorted({b for _, b in cells})
    variants = sorted({v for v, _ in cells}, key=lambda v: (v.split(" ")[0].removesuffix("_D"), v.split(" ")[1:],
                                                           v.split(" ")[0].endswith("_D")))
    lines = ["| method | " + " | ".join(f"{b} bits" for b in bits) + " |", "|---|" + "---|" * len(bits)]
    for v in variants:
        values = []
        for b in bits:
            got = cells.get((v, b), [])
            if not got:
                values.append("—")
            elif len(got) == 1:
                values.append(f"{got[0]:.1f} (1 seed)")
            else:
                values.append(f"{statistics.mean(got):.1f} ± {statistics.stdev(got):.1f} ({len(got)} seeds)")
        lines.append(f"| {v} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def paired_table(rows: list[dict]) -> str:
    """Each base against its `_D` cell of the same bits and seed (a seed draws one split for both):
    the seeds' mAP@54000 and their paired differences, for every (base, bits) with two seeds or more."""
    maps = {_run_of(r): 100 * float(r["map_54000"]) for r in rows}
    mixed = _mixed(rows)
    lines = ["| cell | seeds | base | _D | _D - base | mean |", "|---|---|---|---|---|---|"]
    for cell, epochs in sorted({(c.rsplit("-", 1)[0], e) for c, e in maps}):
        variant, bits = cell.split("-")
        if variant.endswith("_D"):
            continue
        seeds = [s for s in range(10) if (f"{variant}-{bits}-seed{s}", epochs) in maps
                 and (f"{variant}_D-{bits}-seed{s}", epochs) in maps]
        if len(seeds) < 2:
            continue
        base = [maps[(f"{variant}-{bits}-seed{s}", epochs)] for s in seeds]
        with_d = [maps[(f"{variant}_D-{bits}-seed{s}", epochs)] for s in seeds]
        diffs = [d - b for b, d in zip(base, with_d)]
        lines.append(f"| {_label(variant, epochs, mixed)} {bits} | {', '.join(map(str, seeds))} | "
                     f"{', '.join(f'{x:.1f}' for x in base)} | "
                     f"{', '.join(f'{x:.1f}' for x in with_d)} | {' / '.join(f'{x:+.1f}' for x in diffs)} | "
                     f"{statistics.mean(diffs):+.1f} |")
    return "\n".join(lines)


def hours_line(epochs: list[dict]) -> str:
    """The fastest fine-tuning epoch over the cells (the idle speed) and the recorded epochs' sum."""
    # a cell is its name and its epoch count: one seed's cell may run under two recipes
    cells: dict[tuple[str, str], float] = {}  # the fastest fine-tuning epoch of each cell
    for r in epochs:
        key = (r["cell"], str(r.get("epochs", "")))
        seconds = float(r["seconds"]) if r["phase"] == "tune" else float("inf")
        cells[key] = min(cells.get(key, float("inf")), seconds)
    fastest = [s for s in cells.values() if s != float("inf")]
    total = sum(float(r["seconds"]) for r in epochs) / 3600
    return (f"{len(cells)} cells; fastest fine-tuning epoch per cell "
            f"{min(fastest):.0f}-{max(fastest):.0f} s; recorded epochs sum to {total:.1f} h")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--copy", type=Path)
    args = parser.parse_args()
    study, check, grid, cells = study_rows(args.out), check_rows(args.out), grid_rows(args.out), grid_cell_rows(args.out)
    epochs = grid_epoch_rows(args.out)
    if args.copy:  # cells finished in another OUT (another machine) stay, and the tables count them
        kept_epochs = _read_csv(args.copy / "grid-epochs.csv")
        _with_epochs(kept_epochs, kept_epochs)  # an epoch row's count: its cell's rows (one run per cell then)
        kept_cells = _with_epochs(_read_csv(args.copy / "grid-cells.csv"), kept_epochs)
        cells = list({_run_of(r): r for r in kept_cells + cells}.values())
        ran = {_run_of(r) for r in epochs}
        epochs = [r for r in kept_epochs if _run_of(r) not in ran] + epochs
    print("## study\n\n" + _md(study, ["setting", "epochs", "kept_epoch", "val_map_kept", "val_map_last",
                                        "tune_seconds_median"]))
    print("\n## check\n\n" + _md(check, ["run", "map", "epochs", "train_seconds", "encode_seconds"]))
    print("\n## grid (mAP@54000, %)\n\n" + (grid_table(cells) if cells else "(no finished cell)"))
    if cells:
        print("\n## paired by seed (mAP@54000, %)\n\n" + paired_table(cells))
    if epochs:
        print("\n## hours\n\n" + hours_line(epochs))
    if args.copy:
        args.copy.mkdir(parents=True, exist_ok=True)
        # each `reproduce grid` step writes the grid.csv of its own cells: the copy keeps every step's
        grid = list({(r["run_id"], int(r["epochs"])): r for r in _read_csv(args.copy / "grid.csv") + grid}.values())
        for name, rows in (("study.csv", study), ("check.csv", check), ("grid.csv", grid),
                           ("grid-cells.csv", cells), ("grid-epochs.csv", epochs)):
            if rows:
                with open(args.copy / name, "w", newline="") as fh:
                    writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
