"""What every report section shares: the context it builds from, and markdown formatting.

A section is a function `ReportContext -> list[str]` (its markdown lines, or [] when its
tables are absent); it may draw figures into `ctx.figdir` and add findings for the section
"Agreement with the paper". lbhash.reproduce.report.writer runs the sections in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from lbhash.reproduce.stats import mean_std
from lbhash.reproduce.report.grid_view import GridView
from lbhash.reproduce.tables import Tables

FIGURES_DIR = "figures"


@dataclass
class ReportContext:
    """One report being written: its tables, where figures go, the options of `write_report`,
    the grid view (None without grid.csv), and the findings and notes gathered so far."""

    tables: Tables
    figdir: Path
    bits: int | None
    tsne_pairs: int
    tsne_points: int
    view: GridView | None = None
    findings: list[tuple[str, bool | None, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def image(self, name: str, caption: str) -> list[str]:
        return [f"![{caption.split('. ')[0]}]({FIGURES_DIR}/{name})", "", f"*{caption}*", ""]


# ---- formatting ----

def md_table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def num(v: float, digits: int = 2) -> str:
    if v is None or math.isnan(v):
        return "—"
    return ("inf" if v > 0 else "-inf") if math.isinf(v) else f"{v:.{digits}f}"


def pval(p: float) -> str:
    return "p undefined" if math.isnan(p) else "p < 0.0001" if p < 1e-4 else f"p = {p:.4f}"


def cell(values, full: int, scale: float = 100.0) -> str:
    """'mean ± std' of values * scale, with '(n=k)' when fewer than `full` values were there."""
    m, s, n = mean_std(values)
    if n == 0:
        return "—"
    text = num(m * scale) + ("" if math.isnan(s) else f" ± {num(s * scale)}")
    return text + (f" (n={n})" if n < full else "")


def signed(v: float, digits: int = 2) -> str:
    if math.isnan(v):
        return "—"
    return f"{v:+.{digits}f} ▲" if v > 0 else f"{v:+.{digits}f} ▼" if v < 0 else f"{v:.{digits}f} ="
