"""grid.csv indexed for display: the report's sections and figures read runs through it."""

from __future__ import annotations

import math

import numpy as np

from lbhash.reproduce.tables import Table


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
        v = self.values(method, variant, bits, column)
        v = v[~np.isnan(v)]
        return float(v.mean()) if len(v) else math.nan

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
