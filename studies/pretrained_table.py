"""The CIFAR-10 table of the pretrained backbone beside the paper's Table 2 and our MobileNet
feature table: mAP@54000 in %, mean ± sample std over seeds, from two `lbhash reproduce grid`
outputs (their grid.csv).

    python studies/pretrained_table.py docs/results/pretrained/grid.csv docs/results/tables/grid.csv

Prints a Markdown table: one row per method and variant, for each code length the pretrained
backbone's mAP, the MobileNet features' and the paper's.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from statistics import mean, stdev

from lbhash.reproduce.paper import TABLE2_CIFAR10


def read_grid(path: str) -> dict[tuple[str, int], list[float]]:
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            cells[row["variant"], int(row["bits"])].append(100 * float(row["map"]))
    return cells


def cell(values: list[float]) -> str:
    if not values:
        return "-"
    spread = f" ± {stdev(values):.1f}" if len(values) > 1 else ""
    return f"{mean(values):.1f}{spread}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pretrained")
    parser.add_argument("mobilenet")
    args = parser.parse_args()
    ours, mobilenet = read_grid(args.pretrained), read_grid(args.mobilenet)
    bits = sorted({b for _, b in ours})
    head = " | ".join(f"{b} bits: Lite0 / MobileNet / paper" for b in bits)
    print(f"| method | {head} |")
    print("|---|" + "---|" * len(bits))
    for variant in TABLE2_CIFAR10:
        parts = []
        for b in bits:
            best = max((mean(v) for (m, bb), v in ours.items() if bb == b and v), default=None)
            value = cell(ours.get((variant, b), []))
            if ours.get((variant, b)) and mean(ours[variant, b]) == best:
                value = f"**{value}**"
            parts.append(f"{value} / {cell(mobilenet.get((variant, b), []))} / {TABLE2_CIFAR10[variant][b]:.1f}")
        print(f"| {variant} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
