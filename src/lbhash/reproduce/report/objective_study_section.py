"""The report's sections of the studies (study.csv, study_epochs.csv): per study, validation
mAP (and test mAP where the study evaluated the queries) by setting, method and bit length,
and the validation curves along training."""

from __future__ import annotations

import math

import numpy as np

from lbhash.reproduce import figures as fig
from lbhash.reproduce.report.context import ReportContext, cell, md_table, signed
from lbhash.reproduce.stats import mean_std


def study_section(ctx: ReportContext) -> list[str]:
    table = ctx.tables.study
    if table is None:
        return []
    lines = ["Studies of the _D objective (see docs/methods.md, \"When to use --lbhash\"). Each cell "
             "is the mean ± sample std over seeds of the runs' validation mAP (the validation items, "
             "held out of the training items, as queries against the training items; the run keeps "
             "its best-validation epoch), in %. Settings: `base` is the method alone, `paper` the "
             "paper-faithful _D objective, other settings list their _D options.", ""]
    for study in table.unique("study"):
        rows = table.select(table["study"] == study)
        lines += [f"### {study}", ""]
        lines += _metric_table(rows, "val_map", "validation mAP")
        lines += _summary(rows)
        if not np.isnan(rows["map"].astype(float)).all():
            lines += _test_table(rows)
        lines += _curves(ctx, study, rows)
    return lines


def _summary(rows) -> list[str]:
    """Per method: each setting's validation mAP averaged over its bit lengths and seeds, best
    first, with the spread of the seeds (the mean of the per-cell sample stds)."""
    out = []
    for method in rows.unique("method"):
        mine = rows.select(rows["method"] == method)
        scores, spreads = [], []
        for setting in dict.fromkeys(mine["setting"]):
            cells = [mine["val_map"][(mine["setting"] == setting) & (mine["bits"] == b)] for b in mine.unique("bits")]
            cells = [c for c in cells if len(c)]
            scores.append((float(np.mean([np.mean(c) for c in cells])), setting))
            spreads += [float(np.std(c, ddof=1)) for c in cells if len(c) > 1]
        scores.sort(reverse=True)
        noise = f"; seed spread (mean sample std of a cell) {100 * np.mean(spreads):.2f}" if spreads else ""
        ranking = ", ".join(f"`{name}` {100 * value:.2f}" for value, name in scores)
        out.append(f"- {method}: {ranking}{noise}")
    return ["Mean validation mAP over bit lengths and seeds, best first:", "", *out, ""]


def _test_table(rows) -> list[str]:
    """Test mAP with one row per method and bit length, each setting beside the others and, where
    the study has a `base` setting, each other setting's difference from it in points."""
    settings = list(dict.fromkeys(rows["setting"]))
    others = [s for s in settings if s != "base"] if "base" in settings else []
    full = _seeds_per_cell(rows, settings)
    body = []
    for method, bits in _columns(rows):
        values = {s: rows["map"][_cell_mask(rows, s, method, bits)].astype(float) for s in settings}
        out = [method, str(bits)] + [cell(values[s], full) for s in settings]
        base = mean_std(values["base"])[0] if others else math.nan
        out += [signed(100 * (mean_std(values[s])[0] - base)) for s in others]
        body.append(out)
    header = ["method", "bits", *[f"`{s}`" for s in settings], *[f"`{s}` − `base`" for s in others]]
    return ["**test mAP** (%, mean ± sample std over seeds; computed once, for these settings; "
            "differences in points)", "", md_table(header, body), ""]


def _columns(rows) -> list[tuple[str, int]]:
    return [(m, b) for m in rows.unique("method") for b in rows.unique("bits")
            if ((rows["method"] == m) & (rows["bits"] == b)).any()]


def _cell_mask(rows, setting: str, method: str, bits: int):
    """The rows (one per seed) of one setting, method and bit length."""
    return (rows["setting"] == setting) & (rows["method"] == method) & (rows["bits"] == bits)


def _seeds_per_cell(rows, settings) -> int:
    """The most runs any cell has; cells with fewer say how many."""
    return max(int(_cell_mask(rows, s, m, b).sum()) for s in settings for m, b in _columns(rows))


def _metric_table(rows, column: str, title: str) -> list[str]:
    columns = _columns(rows)
    settings = list(dict.fromkeys(rows["setting"]))
    full = _seeds_per_cell(rows, settings)
    body, means = [], []
    for setting in settings:
        values = [rows[column][_cell_mask(rows, setting, method, bits)] for method, bits in columns]
        body.append([f"`{setting}`"] + [cell(v, full) for v in values])
        means.append([mean_std(v)[0] for v in values])
    for j, column_means in enumerate(zip(*means), 1):  # the best mean of each column in bold
        if not all(math.isnan(m) for m in column_means):
            best = int(np.nanargmax(column_means))
            body[best][j] = f"**{body[best][j]}**"
    header = ["setting"] + [f"{m} {b} bits" for m, b in columns]
    return [f"**{title}** (best mean per column in bold)", "", md_table(header, body), ""]


def _curves(ctx: ReportContext, study: str, rows) -> list[str]:
    epochs = ctx.tables.study_epochs
    if epochs is None:
        return []
    epochs = epochs.select((epochs["study"] == study) & ~np.isnan(epochs["val_map"].astype(float)))
    if not len(epochs):
        return []
    settings = list(dict.fromkeys(rows["setting"]))
    panels = []
    for method, bits in _columns(rows):
        lines = []
        for k, setting in enumerate(settings):
            runs = rows["run_id"][_cell_mask(rows, setting, method, bits)]
            sel = np.isin(epochs["run_id"], runs)
            if sel.any():
                xs = np.unique(epochs["epoch"][sel])
                ys = [100 * float(np.mean(epochs["val_map"][sel & (epochs["epoch"] == x)])) for x in xs]
                lines.append(fig.Line(setting, xs, np.array(ys), fig.color(k)))
        if lines:
            panels.append(fig.Panel(f"{method} {bits} bits", lines))
    if not panels:
        return []
    name = f"study_{_slug(study)}.png"
    fig.setting_curves(panels, ctx.figdir / name, f"{study}: validation mAP along training (mean over seeds)",
                       "epoch", "validation mAP (%)")
    return ctx.image(name, f"{study}: validation mAP (%) at each evaluated epoch, mean over seeds, one line per "
                           "setting, one panel per method and bit length.")


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")
