"""The 224 px GPU tables from what `studies/gpu_finetune.sh` brought back.

    python studies/gpu_finetune_table.py DEST SRC [SRC...]

Each SRC is a folder holding grid folders (`fp32/`, `bf16/`, `pairs/`: a `grid.csv`, or only the
finished cells' `runs/grid/*/metrics.json` when the deadline stopped the grid first), or a grid folder
itself (its `meta.json` names its precision). Writes DEST/grid.csv (one row per cell and precision, the
grid's columns plus `precision`; `selected_epoch`, `validation_map`, the median seconds of a
fine-tuning epoch and the seconds of the final encoding where the cell's metrics and log came back) and
prints two markdown tables: mAP@54000 per variant at seed 0, float32 and bf16; and per method and
precision over the seeds whose base and `_D` cells both finished, mean +- standard deviation (n - 1) of
each and of the paired difference.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

COLUMNS = ["precision", "method", "variant", "bits", "seed", "epochs", "map", "lb_ratio", "seconds_per_epoch",
           "selected_epoch", "validation_map", "tune_seconds_median", "encode_seconds"]


def _precision_of(grid: Path) -> str:
    meta = json.loads((grid / "meta.json").read_text())
    command = meta["experiments"]["grid"]["command"]
    return "bf16" if "precision=bf16-mixed" in command else "fp32"


def grid_rows(grid: Path, precision: str) -> dict[tuple, dict]:
    rows = {}
    if (grid / "grid.csv").is_file():
        for r in csv.DictReader((grid / "grid.csv").open()):
            rows[(precision, r["variant"], int(r["seed"]))] = {"precision": precision, **{k: r.get(k, "") for k in COLUMNS[1:]}}
    for path in sorted(grid.glob("runs/grid/*/metrics.json")):
        m = json.loads(path.read_text())
        run = m["run"]
        key = (precision, run["variant"], run["seed"])
        row = rows.setdefault(key, {"precision": precision, "method": run["method"], "variant": run["variant"],
                                    "bits": m["bits"], "seed": run["seed"], "epochs": run["epochs_trained"],
                                    "map": m["map"], "lb_ratio": m["lower_bound"]["ratio"],
                                    "seconds_per_epoch": run["seconds_per_epoch"]})
        log = [json.loads(line) for line in (path.parent / "log.jsonl").read_text().splitlines() if line.strip()]
        tune = [r["seconds"] for r in log if r.get("phase") == "tune"]
        row.update(selected_epoch=run["selected_epoch"], validation_map=run["validation_map"],
                   tune_seconds_median=statistics.median(tune) if tune else "", encode_seconds=run["encode_seconds"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("sources", type=Path, nargs="+")
    args = parser.parse_args()
    rows: dict[tuple, dict] = {}
    for src in args.sources:
        grids = [src] if (src / "meta.json").is_file() else [src / p for p in ("fp32", "bf16", "pairs")
                                                              if (src / p).is_dir()]
        for grid in grids:
            precision = _precision_of(grid) if (grid / "meta.json").is_file() else grid.name
            for key, row in grid_rows(grid, precision).items():
                rows.setdefault(key, {}).update({k: v for k, v in row.items() if v != ""})  # a rerun keeps both's records
    args.dest.mkdir(parents=True, exist_ok=True)
    with (args.dest / "grid.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(sorted(rows.values(), key=lambda r: (r["precision"], r["method"], r["variant"],
                                                              int(r["seed"]))))
    variants = sorted({v for _, v, _ in rows}, key=lambda v: (v.removesuffix("_D"), v.endswith("_D")))
    print("| cell, seed 0 | float32 | bf16 |\n|---|---|---|")
    for v in variants:
        cells = [f"{100 * float(rows[(p, v, 0)]['map']):.1f}" if (p, v, 0) in rows else "" for p in ("fp32", "bf16")]
        print(f"| {v} | {' | '.join(cells)} |")
    print("\n| method | precision | seeds | base | _D | _D - base |\n|---|---|---|---|---|---|")
    for method, precision in sorted({(v.removesuffix("_D"), p) for p, v, _ in rows}):
        seeds = sorted(s for p, v, s in rows if (p, v) == (precision, method) and (p, f"{method}_D", s) in rows)
        if not seeds:
            continue
        base = [100 * float(rows[(precision, method, s)]["map"]) for s in seeds]
        lifted = [100 * float(rows[(precision, f"{method}_D", s)]["map"]) for s in seeds]
        print(f"| {method} | {precision} | {','.join(map(str, seeds))} | {_mean_std(base)} | {_mean_std(lifted)} | "
              f"{_mean_std([b - a for a, b in zip(base, lifted)], signed=True)} |")

def _mean_std(values: list[float], signed: bool = False) -> str:
    mean = f"{statistics.mean(values):+.1f}" if signed else f"{statistics.mean(values):.1f}"
    return mean if len(values) < 2 else f"{mean} +- {statistics.stdev(values):.1f}"


if __name__ == "__main__":
    main()
