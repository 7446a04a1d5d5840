"""Issue 28, item 3: the schedule study's table (studies/schedule_study.sh writes its inputs).

Reads OUT/study.csv and OUT/study_epochs.csv of `lbhash reproduce study` and prints, per study
(data x epochs) and setting family (base or the paper-faithful _D), the mean validation mAP (%)
of each schedule over methods and seeds: at the best-validation epoch (what a study keeps) and
at the last epoch (what a run with the default `select: last` keeps), with the mean sample std
over seeds of the method cells, and the per-method means.

    python studies/schedule_table.py OUT > docs/results/schedule/schedule.md
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

NAMES = {"lr_step=10,lr_gamma=0.1": "x0.1 / 10 ep", "lr_step=0": "constant",
         "schedule=cosine,lr_step=0": "cosine"}


def main(out: Path) -> None:
    rows = list(csv.DictReader(open(out / "study.csv")))
    last: dict = {}
    for r in csv.DictReader(open(out / "study_epochs.csv")):
        key, epoch = (r["study"], r["run_id"]), int(r["epoch"])
        if r["val_map"] and (key not in last or epoch > last[key][0]):
            last[key] = (epoch, float(r["val_map"]))
    cells: dict = defaultdict(lambda: defaultdict(list))  # (study, family, schedule) -> method -> [(best, last)]
    for r in rows:
        family, schedule = r["setting"].split(",", 1)
        cells[r["study"], family, NAMES[schedule]][r["method"]].append(
            (100 * float(r["val_map"]), 100 * last[r["study"], r["run_id"]][1]))
    methods = sorted({r["method"] for r in rows})
    print("| study | _D | schedule | best-val epoch | last epoch | seed std | "
          + " | ".join(methods) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(methods))
    for (study, family, schedule), by_method in sorted(cells.items()):
        pairs = [p for runs in by_method.values() for p in runs]
        best = statistics.mean(b for b, _ in pairs)
        final = statistics.mean(f for _, f in pairs)
        spread = statistics.mean(statistics.stdev([b for b, _ in runs]) for runs in by_method.values()
                                 if len(runs) > 1)
        per = " | ".join(f"{statistics.mean(b for b, _ in by_method[m]):.1f}" if m in by_method else "-"
                         for m in methods)
        print(f"| {study} | {'yes' if family == 'paper' else 'no'} | {schedule} | {best:.2f} | {final:.2f} | "
              f"{spread:.2f} | {per} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
