"""Draw docs/lower-bound.png: what the lower-bound ratio min D_inter / max D_intra means, and
where measured runs fall against their mAP.

Left: two classes, their centers min D_inter apart and every code within max D_intra of its
center. By the triangle inequality a code's class-mates lie within 2 max D_intra of it and
every other code at least min D_inter - 2 max D_intra away, so above a ratio of 4 the two
never overlap. Right: runs trained here on scikit-learn's digits (protocol `digits`, seed 0):
the baselines, and deep methods after 3 and 30 epochs, each point the ratio the run prints
against its mAP@all.

    python docs/lower_bound_picture.py [--out docs/lower-bound.png]

Trains 28 runs in a temporary directory (15 minutes on 2 busy cores) and prints one row
per run. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Circle  # noqa: E402

from lbhash.reproduce.stats import spearman  # noqa: E402
from lbhash.runs import RunDirectory  # noqa: E402
from lbhash.train import TrainConfig

BASELINES = ("lsh", "pca", "itq", "linear")
DEEP = (("csq", False), ("csq", True), ("hashnet", False), ("dch", False))
COLORS = {"lsh": "#bbbbbb", "pca": "#888888", "itq": "#555555", "linear": "#8c564b", "csq": "#1f77b4",
          "csq_D": "#d62728", "hashnet": "#2ca02c", "dch": "#ff7f0e"}
MARKERS = {16: "o", 32: "s", 64: "^"}


def runs() -> list[tuple[str, bool, int, int | None]]:
    """(method, lbhash, bits, epochs or None for a closed-form baseline)."""
    return ([(m, False, b, None) for m in BASELINES for b in (16, 32, 64)]
            + [(m, d, b, e) for m, d in DEEP for b in (16, 64) for e in (3, 30)])


def measure(folder: Path) -> list[dict]:
    logging.getLogger("lbhash").setLevel(logging.WARNING)
    rows = []
    for method, lbhash, bits, epochs in runs():
        name = method + ("_D" if lbhash else "")
        start = time.perf_counter()
        metrics = RunDirectory(folder / f"{name}-{bits}-{epochs}").train(TrainConfig(data="digits", method=method, lbhash=lbhash, bits=bits, epochs=epochs,
                                    seed=0, progress=False))
        bound = metrics["lower_bound"]
        rows.append({"name": name, "bits": bits, "epochs": epochs, "map": metrics["map"],
                     "ratio": float(bound["ratio"]), "chance": metrics["chance_map"]})
        print(f"{name:8} {bits:3} bits {epochs or '-':>3} epochs  mAP@all {metrics['map']:.3f}  lower bound "
              f"{bound['min_inter']:.2f} / {bound['max_intra']:.2f} = {float(bound['ratio']):.3f}  "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return rows


def geometry(ax, ratio: float, title: str) -> None:
    """Two classes in a plane (a cartoon of Hamming space: the same triangle inequality):
    centers `ratio` apart, codes within 1 of their center, query on the edge facing the other."""
    ax.set_aspect("equal")
    ax.axis("off")
    for x, color in ((0.0, "#1f77b4"), (ratio, "#d62728")):
        ax.add_patch(Circle((x, 0), 1, color=color, alpha=0.25))
        ax.plot(x, 0, "+", color=color, ms=10, mew=2)
    ax.add_patch(Circle((1, 0), 2, fill=False, ls="--", color="#1f77b4"))
    ax.plot(1, 0, "o", color="#1f77b4")
    ax.annotate("query", (1, 0), (1.1, 0.35), fontsize=8)
    ax.annotate("", (ratio, -1.45), (0, -1.45), arrowprops={"arrowstyle": "<->", "color": "k"})
    ax.text(ratio / 2, -1.85, f"min D_inter = {ratio:g} x max D_intra", ha="center", fontsize=8)
    ax.set_xlim(-1.3, max(ratio, 3) + 1.3)
    ax.set_ylim(-2.2, 2.2)
    ax.set_title(title, fontsize=9)


def draw(rows: list[dict], out: Path) -> None:
    fig = plt.figure(figsize=(11, 4.6), dpi=100)
    grid = fig.add_gridspec(2, 2, width_ratios=(1, 1.6))
    geometry(fig.add_subplot(grid[0, 0]), 5,
             "ratio 5: the query's class (dashed: within 2 max D_intra)\nends before the other class starts: AP 1")
    geometry(fig.add_subplot(grid[1, 0]), 3, "ratio 3: the other class may come as close\nas its own: no guarantee")
    ax = fig.add_subplot(grid[:, 1])
    ax.axvspan(4, 5.2, color="#2ca02c", alpha=0.12)
    ax.text(4.1, 0.5, "above 4: every class\nfully apart, each\ndatabase item's AP 1", fontsize=8)
    ax.axhline(rows[0]["chance"], color="k", ls=":", lw=1)
    ax.text(0.05, rows[0]["chance"] + 0.015, "chance (a random ranking)", fontsize=8)
    for r in rows:
        ax.scatter(r["ratio"], r["map"], color=COLORS[r["name"]], marker=MARKERS[r["bits"]],
                   s=30 if r["epochs"] == 3 else 55, edgecolors="k", linewidths=0.4)
    for name, color in COLORS.items():
        ax.scatter([], [], color=color, label=name, edgecolors="k", linewidths=0.4)
    for bits, marker in MARKERS.items():
        ax.scatter([], [], color="w", marker=marker, label=f"{bits} bits", edgecolors="k")
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    rho = spearman([r["ratio"] for r in rows], [r["map"] for r in rows])
    ax.set_title(f"digits, {len(rows)} runs: baselines, and deep methods after 3 (small) and 30 epochs"
                 f"\nSpearman rho = {rho.rho:.2f}", fontsize=9)
    ax.set_xlabel("lower bound min D_inter / max D_intra (database codes, 99.9th percentiles), as printed")
    ax.set_ylabel("mAP@all (300 held-out queries)")
    ax.set_xlim(0, 5.2)
    ax.set_ylim(0, 1.02)
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp)
    tmp.replace(out)
    print(f"wrote {out}; Spearman rho {rho.rho:.3f} over {len(rows)} runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("lower-bound.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        draw(measure(Path(folder)), args.out)


if __name__ == "__main__":
    main()
