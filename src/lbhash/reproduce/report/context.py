"""What every report section shares: the context it builds from, grid.csv indexed for display
(`GridView`), and markdown formatting.

A section is a function `ReportContext -> list[str]` (its markdown lines, or [] when its
tables are absent); it may draw figures into `ctx.figdir` and add findings for the section
"Agreement with the paper". lbhash.reproduce.report.writer runs the sections in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lbhash.reproduce.stats import mean_std
from lbhash.reproduce.tables import Table, Tables

FIGURES_DIR = "figures"


class GridView:
    """grid.csv indexed by method, variant and bit length, in a fixed display order.

    `names` maps method keys to display names; their order is the methods' order (others
    follow alphabetically). A method's base variants come before its _D ones.
    """

    def __init__(self, grid: Table, names: dict[str, str]):
        self.grid, self.names = grid, names
        self.runs = {row[0]: dict(zip(grid.columns, row)) for row in zip(*grid.columns.values())}
        order = list(names)
        self.methods = sorted(grid.unique("method"),
                              key=lambda m: (order.index(m) if m in order else len(order), m))
        kinds = {(m, v, bool(d)) for m, v, d in zip(grid["method"], grid["variant"], grid["lbhash"])}
        self.variants = sorted(kinds, key=lambda k: (self.methods.index(k[0]), k[2], k[1]))
        self.bits = grid.unique("bits")

    def of(self, method: str, d: bool | None = None) -> list[str]:
        """A method's variants; only the bases (d=False) or only the _D ones (d=True)."""
        return [v for m, v, is_d in self.variants if m == method and d in (None, is_d)]

    def label(self, method: str, variant: str | None = None) -> str:
        name = self.names.get(method, method)
        if variant is None:
            return name
        return name + variant[len(method):] if variant.startswith(method) else variant

    def style(self, method: str, variant: str) -> int:
        return self.of(method).index(variant)

    def style_labels(self) -> list[str]:
        """Per line style (0 = first base, ...), the variant suffixes drawn with it."""
        out: list[list[str]] = []
        for m in self.methods:
            for i, v in enumerate(self.of(m)):
                suffix = (v[len(m):] if v.startswith(m) else v) or "base"
                out += [[] for _ in range(i + 1 - len(out))]
                out[i] += [suffix] if suffix not in out[i] else []
        return [" / ".join(s) for s in out]

    def values(self, method: str, variant: str, bits: int, column: str) -> np.ndarray:
        g = self.grid
        return g[column][(g["method"] == method) & (g["variant"] == variant) & (g["bits"] == bits)]

    def mean(self, method: str, variant: str, bits: int, column: str) -> float:
        return mean_std(self.values(method, variant, bits, column))[0]

    def runs_of(self, method: str, variant: str, bits: int) -> list[str]:
        key = (method, variant, bits)
        return [r for r, row in self.runs.items()
                if (row["method"], row["variant"], row["bits"]) == key]

    def pairs(self, run_ids, first_bits: int | None = None) -> list[tuple[str, str]]:
        """(base, _D) run pairs among run_ids, one per method and bit length, `first_bits`
        first; the _D run has the base's seed when one does."""
        out = []
        for bits in sorted(self.bits, key=lambda b: b != first_bits):
            for method in self.methods:
                have = [r for r in run_ids if r in self.runs
                        and (self.runs[r]["method"], self.runs[r]["bits"]) == (method, bits)]
                base = [r for r in have if not self.runs[r]["lbhash"]]
                with_d = [r for r in have if self.runs[r]["lbhash"]]
                if base and with_d:
                    seed = self.runs[base[0]]["seed"]
                    out.append((base[0], min(with_d, key=lambda r: self.runs[r]["seed"] != seed)))
        return out


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
