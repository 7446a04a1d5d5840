"""The table of studies/default_recipe_study.sh: per data set, recipe and variant, test mAP
and the lower-bound ratio over seeds (mean +- sample std, and each seed's mAP).

Usage: python studies/default_recipe_table.py OUT   (OUT as given to the study)
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

def _spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} +- {100 * sd:.1f}"


def main(out: Path) -> None:
    print("| features | epochs | recipe | variant | test mAP (%) | per seed | LB ratio |")
    print("|---|---|---|---|---|---|---|")
    for cell in sorted(out.glob("*-*/grid.csv")):
        data, epochs, recipe = cell.parent.name.split("-", 2)
        rows = list(csv.DictReader(cell.open()))
        for variant in sorted({r["variant"] for r in rows}):
            mine = sorted((r for r in rows if r["variant"] == variant), key=lambda r: int(r["seed"]))
            maps = [float(r["map"]) for r in mine]
            ratios = [float(r["lb_ratio"]) for r in mine]
            seeds = " / ".join(f"{100 * m:.1f}" for m in maps)
            print(f"| {data} | {epochs} | {recipe} | {variant} | {_spread(maps)} | {seeds} | "
                  f"{statistics.mean(ratios):.2f} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(Path(sys.argv[1]))
