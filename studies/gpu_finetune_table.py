"""The 224 px GPU table of issue 57 from what `studies/gpu_finetune.sh` brought back.

    python studies/gpu_finetune_table.py DEST SRC [SRC...]

Each SRC is a folder holding `fp32/` and `bf16/` grid folders (a `grid.csv`, or only the finished
cells' `runs/grid/*/metrics.json` when the deadline stopped the grid first), or a grid folder itself
(its `meta.json` names its precision). Writes DEST/grid.csv (one row per cell and precision, the
grid's columns plus `precision`; `selected_epoch`, `validation_map`, the median seconds of a
fine-tuning epoch and the seconds of the final encoding where the cell's metrics and log came back) and prints the markdown table: mAP@54000 per method and variant, float32 and bf16.
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
            rows[(precision, r["variant"])] = {"precision": precision, **{k: r.get(k, "") for k in COLUMNS[1:]}}
    for path in sorted(grid.glob("runs/grid/*/metrics.json")):
        m = json.loads(path.read_text())
        run = m["run"]
        key = (precision, run["variant"])
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
        grids = [src] if (src / "meta.json").is_file() else [src / p for p in ("fp32", "bf16") if (src / p).is_dir()]
        for grid in grids:
            precision = _precision_of(grid) if (grid / "meta.json").is_file() else grid.name
            for key, row in grid_rows(grid, precision).items():
                rows.setdefault(key, {}).update({k: v for k, v in row.items() if v != ""})  # a rerun keeps both's records
    args.dest.mkdir(parents=True, exist_ok=True)
    with (args.dest / "grid.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(sorted(rows.values(), key=lambda r: (r["precision"], r["method"], r["variant"])))
    variants = sorted({v for _, v in rows}, key=lambda v: (v.removesuffix("_D"), v.endswith("_D")))
    print("| cell | float32 | bf16 |\n|---|---|---|")
    for v in variants:
        cells = [f"{100 * float(rows[(p, v)]['map']):.1f}" if (p, v) in rows else "" for p in ("fp32", "bf16")]
        print(f"| {v} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
