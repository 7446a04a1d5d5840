"""Report sections built on the runs of grid.csv: retrieval mAP (paper Table 2), retrieval
curves (App. G), mAP vs lower-bound ratio (Fig. 5), convergence (Fig. 2) and t-SNE (Fig. 4).

All but t-SNE need `ctx.view` (grid.csv indexed by method, variant and bits) and return []
without it; t-SNE embeds codes_sample.npz and pairs its runs through the view when there is one.
"""

from __future__ import annotations

import math
import time

import numpy as np

from lbhash.evaluate.formatting import RATIO_SCALE
from lbhash.reproduce import figures as fig
from lbhash.reproduce import paper
from lbhash.reproduce.report.context import GridView, ReportContext, cell, md_table, num, pval, signed
from lbhash.reproduce.stats import (confidence_band, group_mean, linear_fit, spearman,
                                    tsne_embedding)


def grid_section(ctx: ReportContext) -> list[str]:
    view = ctx.view
    if view is None:
        return []
    bits, data, protocol = view.bits, view.grid["data"][0], view.grid["protocol"][0]  # one pair: _index_grid
    lines = [f"mAP@{'/'.join(view.grid.unique('topk'))} (%) on {data} ({protocol})."
             " Δ rows: mean of the _D variant minus mean of the base, in points (▲ _D higher, "
             "▼ lower).", "", _variant_table(view, "map"), ""]
    rows, cells = [], []
    for m in view.methods:
        if f"{m}_D" not in paper.TABLE2_CIFAR10 or not view.of(m, False):
            continue
        base, with_d = paper.TABLE2_CIFAR10[m], paper.TABLE2_CIFAR10[f"{m}_D"]
        pbits, name, name_d = sorted(base), view.label(m, m), view.label(m, f"{m}_D")
        rows += [[name] + [num(base[b], 1) for b in pbits],
                 [name_d] + [num(with_d[b], 1) for b in pbits],
                 [f"Δ {name_d} − {name}"] + [signed(with_d[b] - base[b], 1) for b in pbits]]
        cells += [(view.label(m, v), b, 100 * (view.mean(m, v, b, "map")
                                               - view.mean(m, view.of(m, False)[0], b, "map")),
                   with_d[b] - base[b]) for v in view.of(m, True) for b in bits if b in base]
    if rows:
        lines += ["**Paper, CIFAR-10 columns of Table 2** (mAP@54000 in %, ResNet-50 trained end "
                  "to end, mean of 5 runs): the paper's setting, not ours; compare directions, "
                  "not values.", "", md_table(["method"] + [f"{b} bits" for b in pbits], rows), ""]
    for name, col in (("Tie-averaged mAP", "map_tie_averaged"), ("kNN accuracy, k = 100",
                      "knn_accuracy"), ("Classifier-branch accuracy", "classifier_accuracy")):
        if not np.isnan(view.grid[col]).all():
            lines += [f"**{name} (%)**", "", _variant_table(view, col), ""]
    finding = "Table 2: sign of _D − base"
    same = [c for c in cells if np.sign(c[2]) == np.sign(c[3]) != 0]
    for label in dict.fromkeys(c[0] for c in cells):
        mine = [c for c in cells if c[0] == label]
        ctx.findings.append((finding, all(c in same for c in mine), f"{label}: " + "; ".join(
            f"{c[1]} bits {c[2]:+.2f} here vs {c[3]:+.1f} paper"
            + ("" if c in same else " (sign differs)") for c in mine)))
    if cells:
        ctx.findings.append((finding, None, f"same sign in {len(same)} of {len(cells)} cells; "
                             f"mean Δ {np.mean([c[2] for c in cells]):+.2f} points here vs "
                             f"{np.mean([c[3] for c in cells]):+.2f} in the paper"))
    return lines


def _variant_table(view: GridView, col: str) -> str:
    """Rows: each method's variants and a Δ row per _D variant; columns: bits. Methods without
    any value in `col` (e.g. no classifier branch) are left out."""
    bits = view.bits
    full = max(len(view.values(m, v, b, col)) for m, v, _ in view.variants for b in bits)
    rows = []
    for m in view.methods:
        if all(np.isnan(view.values(m, v, b, col)).all() for v in view.of(m) for b in bits):
            continue
        rows += [[view.label(m, v)] + [cell(view.values(m, v, b, col), full) for b in bits]
                 for v in view.of(m)]
        rows += [[f"Δ {view.label(m, v)} − {view.label(m, base)}"]
                 + [signed(100 * (view.mean(m, v, b, col) - view.mean(m, base, b, col)))
                    for b in bits] for base in view.of(m, False)[:1] for v in view.of(m, True)]
    return md_table(["method"] + [f"{b} bits" for b in bits], rows)


def curves_section(ctx: ReportContext) -> list[str]:
    view, curves, b = ctx.view, ctx.tables.curves, ctx.bits
    if view is None:
        return []
    lines = []
    if curves is not None:
        def mean(method, variant, name):  # x -> mean y (%) over the seeds' runs
            sel = np.isin(curves["run_id"], view.runs_of(method, variant, b))
            sel &= curves["curve"] == name
            return dict(zip(*group_mean(curves["x"][sel], 100 * curves["y"][sel])))

        def pr(method, variant):
            p, r = mean(method, variant, "pr_precision"), mean(method, variant, "pr_recall")
            radii = sorted(set(p) & set(r))
            return [r[x] for x in radii], [p[x] for x in radii]

        def pk(method, variant):
            k = mean(method, variant, "p_at_k")
            return sorted(k), [k[x] for x in sorted(k)]

        for name, series, title, xlabel, ylabel, caption in (
                (f"pr_{b}bits.png", pr, "Precision-recall over Hamming radii", "recall (%)",
                 "precision (%)", f"P-R curves at {b} bits. One point per Hamming radius r = "
                 "0..bits (items within distance r retrieved); precision and recall are "
                 "averaged over queries, then over seeds."),
                (f"p_at_k_{b}bits.png", pk, "Precision@K", "K (items retrieved)",
                 "precision@K (%)", f"P@K at {b} bits, for the K in curves.csv.")):
            panels = fig.method_panels(view, series)
            if panels:
                fig.panels_plot(panels, ctx.figdir / name, f"{title}, {b} bits (mean over seeds)",
                                xlabel, ylabel, view.style_labels())
                lines += ctx.image(name, caption)
        if not lines:
            lines += [f"curves.csv has no curves of the {b}-bit runs in grid.csv.", ""]
    panels = [fig.Panel(title, [fig.variant_line(view, m, v, view.bits, [
        100 * view.mean(m, v, x, col) for x in view.bits]) for m, v, _ in view.variants])
              for title, col in (("P@H<=2 (an empty ball scores 0)", "precision_h2"),
                                 ("Queries with an empty H<=2 ball", "empty_h2"))]
    fig.lines_plot(panels, ctx.figdir / "p_h2_vs_bits.png", "Retrieval within Hamming radius 2 "
                   "vs code length (mean over seeds)", "code length (bits)",
                   ["P@H<=2 (%)", "queries with an empty ball (%)"], xticks=view.bits)
    lines += ctx.image("p_h2_vs_bits.png", "P@H<=2 and the share of queries whose radius-2 ball "
                       "is empty, against code length (grid.csv).")
    return lines + ["**P@H<=2 (%)**", "", _variant_table(view, "precision_h2")]


def ratio_section(ctx: ReportContext) -> list[str]:
    view = ctx.view
    if view is None:
        return []
    grid, bits = view.grid, view.bits
    ratio, finite = grid["lb_ratio"], np.isfinite(grid["lb_ratio"])
    x, y = ratio[finite], 100 * grid["map"][finite]
    excluded = f"{int((~finite).sum())} run(s) with an infinite ratio (max D_intra = 0) left out"
    if len(x) < 3 or np.ptp(x) == 0:
        return [f"Too few distinct finite ratios for a regression ({len(x)} runs; {excluded})."]
    fit, rank = linear_fit(x, y), spearman(x, y)
    xs = np.linspace(x.min(), x.max(), 200)
    points = [fig.Point(r["lb_ratio"], 100 * r["map"], fig.color(view.methods.index(r["method"])),
                        not r["lbhash"], bits.index(r["bits"]))
              for r in view.runs.values() if math.isfinite(r["lb_ratio"])]
    note = (f"mAP = {fit.intercept:.2f} + {fit.slope:.2f} × ratio\nPearson r = {fit.r:.3f} "
            f"({pval(fit.p_value)})\nSpearman ρ = {num(rank.rho, 3)} ({pval(rank.p_value)})\n"
            f"n = {fit.n}")
    keys = fig.PointKeys([(view.label(m), fig.color(i)) for i, m in enumerate(view.methods)],
                         [f"{b} bits" for b in bits])
    fig.scatter_fit(points, fig.FitLine(xs, fit.intercept + fit.slope * xs, confidence_band(fit, xs), note), keys,
                    ctx.figdir / "map_vs_ratio.png", "mAP vs lower-bound ratio, all runs",
                    "lower-bound ratio min D_inter / max D_intra (database codes)", "mAP (%)")
    lines = ctx.image("map_vs_ratio.png", f"mAP against the lower-bound ratio, one point per "
                      f"run of grid.csv ({fit.n} points; {excluded}). Line: OLS fit; band: 95% "
                      f"confidence band of the mean response. The ratio's scale: {RATIO_SCALE}.")
    lines += [f"OLS over {fit.n} runs: slope {fit.slope:.3f} mAP points per unit of ratio (95% "
              f"CI {fit.slope_ci[0]:.3f} to {fit.slope_ci[1]:.3f}), intercept {fit.intercept:.3f} "
              f"(95% CI {fit.intercept_ci[0]:.3f} to {fit.intercept_ci[1]:.3f}); Pearson r = "
              f"{fit.r:.3f} ({pval(fit.p_value)}), r² = {fit.r2:.3f}; Spearman ρ = "
              f"{num(rank.rho, 3)} ({pval(rank.p_value)}).", ""]
    rows = []
    for b in bits:
        sel = finite & (grid["bits"] == b)
        if sel.sum() >= 3 and np.ptp(ratio[sel]) > 0:
            f, s = linear_fit(ratio[sel], grid["map"][sel]), spearman(ratio[sel], grid["map"][sel])
            rows.append([str(b), str(f.n), f"{f.r:.3f} ({pval(f.p_value)})",
                         f"{num(s.rho, 3)} ({pval(s.p_value)})"])
    lines += [md_table(["bits", "runs", "Pearson r", "Spearman ρ"], rows), ""] if rows else []
    finding = "Fig. 5: mAP vs ratio"
    ctx.findings.append((finding, fit.r > 0 and fit.p_value < 0.05, f"the paper's mAP rises with "
                         f"the ratio; here r = {fit.r:.3f} ({pval(fit.p_value)}), slope 95% CI "
                         f"{fit.slope_ci[0]:.2f} to {fit.slope_ci[1]:.2f}"))
    up = [view.mean(m, v, b, "lb_ratio") > view.mean(m, base, b, "lb_ratio") for m in view.methods
          for base in view.of(m, False)[:1] for v in view.of(m, True) for b in bits]
    if up:
        ctx.findings.append((finding, sum(up) > len(up) / 2, f"_D has the higher mean ratio in "
                             f"{sum(up)} of {len(up)} (method, bits) cells; the paper sees an "
                             "increase 'in most cases'"))
    return lines


def convergence_section(ctx: ReportContext) -> list[str]:
    epochs, view, b = ctx.tables.epochs, ctx.view, ctx.bits
    if epochs is None or view is None:
        return []
    evaluated = ~np.isnan(epochs["map"])

    def series(method, variant):
        sel = evaluated & np.isin(epochs["run_id"], view.runs_of(method, variant, b))
        return group_mean(epochs["epoch"][sel], 100 * epochs["map"][sel])

    panels = fig.method_panels(view, series)
    if not panels:
        return [f"epochs.csv has no evaluated epochs of the {b}-bit runs in grid.csv."]
    unknown = len(set(epochs["run_id"]) - set(view.runs))
    fig.panels_plot(panels, ctx.figdir / f"convergence_{b}bits.png", f"mAP per evaluated "
                    f"epoch, {b} bits (mean over seeds)", "epoch", "mAP (%)", view.style_labels(),
                    integer_x=True)
    return ctx.image(f"convergence_{b}bits.png", f"Convergence at {b} bits: mAP on the epochs "
                     "where it was evaluated." + (f" {unknown} run(s) of epochs.csv are not in "
                                                  "grid.csv and are left out." if unknown else ""))


def tsne_section(ctx: ReportContext) -> list[str]:
    runs = ctx.view.runs if ctx.view else {}
    codes = {r: v for r, v in (ctx.tables.codes or {}).items() if len(v[0]) >= 5}
    if not codes or ctx.tsne_pairs == 0:
        return []
    pairs = ctx.view.pairs(list(codes), ctx.bits) if ctx.view else []
    chosen = [r for p in pairs[:ctx.tsne_pairs] for r in p] or list(codes)[:2]
    panels, start = [], time.perf_counter()
    for run in chosen:
        xy, classes = tsne_embedding(*codes[run], max_points=ctx.tsne_points)
        row = runs.get(run)
        title = (f"{ctx.view.label(row['method'], row['variant'])}, {row['bits']} bits, seed "
                 f"{row['seed']}\nratio = {num(row['lb_ratio'], 4)}, n = {len(xy)}"
                 if row else f"{run}\nn = {len(xy)}")
        panels.append((title, xy, classes))
    seconds = time.perf_counter() - start
    fig.tsne_plot(panels, ctx.figdir / "tsne.png", "t-SNE of database codes, coloured by class")
    order = "base left, _D right" if pairs and ctx.tsne_pairs else "runs not paired via grid.csv"
    return ctx.image("tsne.png", f"t-SNE (scikit-learn, PCA init, random_state 0) of codes from "
                     f"codes_sample.npz ({order}); multi-label items take their first label. "
                     "The ratio is grid.csv's, over the whole database.") + [
        f"{len(panels)} embedding(s) took {seconds:.1f} s in all."]
