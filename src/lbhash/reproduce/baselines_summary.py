"""baselines.csv's rows summarised: mean ± std over seeds as markdown, and mAP against bytes
per item as a figure. The baselines experiment writes them beside its table (baselines.md,
baselines.png); the report embeds them in its baselines section.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lbhash.reproduce.figures import Line, Panel, color, lines_plot
from lbhash.reproduce.stats import mean_std
from lbhash.reproduce.tables import BASELINES_REFERENCE


def summary_table(rows: list[dict]) -> dict:
    """{(variant, bits, classes, ranking): {metric: (mean, std, n)}} over seeds (std: ddof=1)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["variant"], r["bits"], r["classes"], r["ranking"]), []).append(r)
    out = {}
    for key, group in groups.items():
        stats = {metric: mean_std([g[metric] for g in group if g[metric] is not None])
                 for metric in ("map_all", "map_1000", "precision_h2")}
        out[key] = {metric: cell for metric, cell in stats.items() if cell[2]}
    return out


def _fmt(cell) -> str:
    if cell is None:
        return ""
    mean, std, n = cell
    return f"{100 * mean:.1f}" + ("" if n < 2 else f" ± {100 * std:.1f}")


def summary_lines(rows: list[dict], level: str = "##") -> list[str]:
    """The markdown of baselines.md below its title; `level` marks the per-bits headers."""
    table = summary_table(rows)
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["kind"] != "reference"))
    reference = [r for r in rows if r["kind"] == "reference"]
    lines = ["mAP (%) as mean ± std over seeds (std with n-1); sym = Hamming ranking of the query's code, "
             "asym = the database codes ranked by their inner product with the query's real outputs; "
             "P@H<=2 does not depend on the ranking. Seen: queries and database of the training classes; "
             "unseen: of the held-out classes.", ""]
    header = ("| variant | seen mAP@all sym | asym | seen mAP@1000 sym | asym | seen P@H<=2 "
              "| unseen mAP@all sym | asym | unseen mAP@1000 sym | asym | unseen P@H<=2 |")
    for bits in sorted({r["bits"] for r in rows if r["kind"] != "reference"}):
        lines += [f"{level} {bits} bits ({-(-bits // 8)} bytes per item)", "", header, "|---" * 11 + "|"]
        for v in variants:
            cells = []
            for classes in ("seen", "unseen"):
                sym, asym = table.get((v, bits, classes, "symmetric")), table.get((v, bits, classes, "asymmetric"))
                if sym is None:
                    cells += [""] * 5
                    continue
                cells += [_fmt(sym.get("map_all")), _fmt(asym.get("map_all")), _fmt(sym.get("map_1000")),
                          _fmt(asym.get("map_1000")), _fmt(sym.get("precision_h2"))]
            if any(cells):
                lines.append(f"| {v} | " + " | ".join(cells) + " |")
        lines.append("")
    if reference:
        dims = reference[0]["bytes_per_item"]
        lines += [f"{level} Float cosine kNN on the raw features ({dims} bytes per item)", "",
                  "| classes | mAP@all | mAP@1000 |", "|---|---|---|"]
        for classes in ("seen", "unseen"):
            s = table.get((BASELINES_REFERENCE, reference[0]["bits"], classes, "float"), {})
            lines.append(f"| {classes} | {_fmt(s.get('map_all'))} | {_fmt(s.get('map_1000'))} |")
        lines.append("")
    return lines


def baselines_figure(rows: list[dict], path: Path) -> Path:
    """mAP@all against bytes per item, seen and unseen panels: a colour per variant, solid for
    symmetric and dashed for asymmetric ranking, float cosine kNN as a dotted reference."""
    table = summary_table(rows)
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["kind"] != "reference"))
    bits = sorted({r["bits"] for r in rows if r["kind"] != "reference"})
    sizes = sorted({-(-b // 8) for b in bits})
    panels = []
    for classes in ("seen", "unseen"):
        lines = []
        for i, v in enumerate(variants):
            for style, ranking in enumerate(("symmetric", "asymmetric")):
                points = [(-(-b // 8), table[key]["map_all"][0]) for b in bits
                          if (key := (v, b, classes, ranking)) in table]
                if points:
                    x, y = zip(*points)
                    lines.append(Line(f"{v} ({ranking[:4]})", np.array(x), np.array(y), color(i), style))
        for r in (r for r in rows if r["kind"] == "reference" and r["classes"] == classes):
            mean = table[(BASELINES_REFERENCE, r["bits"], classes, "float")]["map_all"][0]
            lines.append(Line(f"float cosine kNN ({r['bytes_per_item']} B)", np.array([sizes[0], sizes[-1]]),
                              np.array([mean, mean]), "0.3", 2))
            break
        panels.append(Panel(f"{classes} classes", lines))
    return lines_plot(panels, path, "mAP@all against code size (mean over seeds)", "bytes per item",
                      ["mAP@all", "mAP@all"], xticks=sizes)
