"""`write_report`: a markdown report with PNG figures, written from the result tables alone.

Each section appears only when its table is there; numbers are aggregated here, the paper's come
from `lbhash.reproduce.paper`, and "Agreement with the paper" is phrased from the numbers. This
module writes the header and that last section; the others are in `grid_sections` and
`experiment_sections`, with `context` holding what they share.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from lbhash._io import atomic_path
from lbhash.errors import InputError
from lbhash.reproduce import paper
from lbhash.reproduce.meta import DEFAULT_PROTOCOL, NO_EXPERIMENT, SETTINGS
from lbhash.reproduce.report.context import FIGURES_DIR, GridView, ReportContext, md_table
from lbhash.reproduce.report.experiment_sections import (baselines_section, bound_section, centers_section,
                                                         study_section, timing_section, toy_section)
from lbhash.reproduce.report.grid_sections import (convergence_section, curves_section, grid_section,
                                                   ratio_section, tsne_section)
from lbhash.reproduce.tables import EXPERIMENT_FILES, load_tables

SECTIONS = {
    "setup": "Setup", "grid": "Retrieval mAP (paper Table 2)",
    "curves": "Retrieval curves (paper App. G: P-R, P@K, P@H<=2)",
    "ratio": "mAP vs lower-bound ratio (paper Fig. 5)", "convergence": "Convergence (paper Fig. 2)",
    "tsne": "t-SNE of codes (paper Fig. 4)", "bound": "Lower bound along training (paper Fig. 1)",
    "timing": "Training time (paper Table 1)", "centers": "Class centers (paper Table 5)",
    "toy": "MVB toy (paper Fig. Toy and Fig. Sanity16)", "study": "Studies: when does the objective help?",
    "baselines": "Baselines on seen and unseen classes (beyond the paper)",
    "agreement": "Agreement with the paper",
}
# (SECTIONS key, builder) in report order; "setup" and "agreement" are written here
_BUILDERS = (("grid", grid_section), ("curves", curves_section), ("ratio", ratio_section),
             ("convergence", convergence_section), ("tsne", tsne_section),
             ("bound", bound_section), ("timing", timing_section),
             ("centers", centers_section), ("toy", toy_section), ("study", study_section),
             ("baselines", baselines_section))


def write_report(directory: str | Path, out: str | Path | None = None, bits: int | None = None,
                 tsne_pairs: int = 1, tsne_points: int = 5000) -> Path:
    """Write DIR/report.md (or `out`) and its PNG figures in a `figures` folder beside it.

    bits: bit length of the curves, convergence and t-SNE sections (default: the largest in
    grid.csv); tsne_pairs: base/_D pairs to embed; tsne_points: codes per embedding at most.
    """
    tables = load_tables(directory)
    out = Path(out) if out is not None else tables.directory / "report.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    # figures go to a temporary folder that replaces `figures` only when the report is written
    staging = Path(tempfile.mkdtemp(prefix=".figures.", suffix=".tmp", dir=out.parent))
    try:
        ctx = ReportContext(tables, staging, bits, tsne_pairs, tsne_points)
        _index_grid(ctx)
        body: list[str] = []
        for key, build in _BUILDERS:
            lines = build(ctx)
            if lines:
                body += [f"## {SECTIONS[key]}", "", *lines, ""]
        text = "\n".join(_header(ctx, out) + body + _agreement(ctx)).rstrip() + "\n"
        figures = out.parent / FIGURES_DIR
        if any(staging.iterdir()):
            shutil.rmtree(figures, ignore_errors=True)
            staging.rename(figures)
        with atomic_path(out) as tmp:
            tmp.write_text(text)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def method_names(methods) -> dict[str, str]:
    """Display names (the methods' own) in the paper's row order; unknown methods keep their key."""
    from lbhash.methods import available_methods, method_class

    known = set(available_methods())
    return {m: method_class(m).display_name if m in known else m for m in paper.method_order(methods)}


def _index_grid(ctx: ReportContext) -> None:
    grid = ctx.tables.grid
    if grid is None:
        return
    if len(set(zip(grid["data"], grid["protocol"]))) > 1:  # one data set per report: the grid's
        experiments = ctx.tables.meta.experiments
        wanted = experiments.get("grid", experiments.get(NO_EXPERIMENT, {}))
        if "data" not in wanted:
            raise InputError("grid.csv holds several data/protocol pairs and meta.json records no "
                             "grid experiment to choose one")
        keep = grid["data"] == wanted["data"]
        if wanted.get("protocol", DEFAULT_PROTOCOL) != DEFAULT_PROTOCOL:
            keep &= grid["protocol"] == wanted["protocol"]
        if not keep.any():
            raise InputError(f"grid.csv holds several data/protocol pairs, none of them "
                             f"meta.json's grid {wanted['data']}/{wanted.get('protocol')}")
        ctx.notes.append(f"grid.csv: {int((~keep).sum())} runs on other data are left out.")
        grid = ctx.tables.grid = grid.select(keep)
    ctx.view = GridView(grid, method_names(grid.unique("method")))
    if ctx.bits is None:
        ctx.bits = int(max(ctx.view.bits))
    elif ctx.bits not in ctx.view.bits:
        raise InputError(f"bits={ctx.bits} is not in grid.csv (it has "
                         f"{', '.join(map(str, ctx.view.bits))})")


def _header(ctx: ReportContext, out: Path) -> list[str]:
    meta, source = ctx.tables.meta, ctx.tables.directory
    files = ", ".join(f"`{f}`" for f in ctx.tables.files)
    beside = out.parent.resolve() == source.resolve()  # report written next to its tables
    where = "this directory" if beside else f"`{source.as_posix()}`"
    command = f"lbhash report {source.as_posix()}" + ("" if beside else f" --out {out.as_posix()}")
    lines = ["# lbhash reproduction report", "",
             f"Every number and figure below is computed from the result tables in "
             f"{where} ({files}); nothing was retrained or re-evaluated to write it. Values "
             "labelled *paper* are copied from the paper (A Lower Bound of Hash Codes' "
             "Performance, NeurIPS 2022).", "", f"## {SECTIONS['setup']}", ""]
    if meta.experiments:
        lines += ["Each experiment's own settings, as meta.json records them (— : not a setting of "
                  "that experiment, or not recorded).", "",
                  md_table(["experiment", *SETTINGS], [[key, *(_setting(e, k) for k in SETTINGS)]
                                                       for key, e in meta.experiments.items()]), ""]
    lines += [f"Tables last written {meta.created or '(not recorded)'}.", "", "**Software**", "",
              md_table(["package", "version"], [[k, str(v)] for k, v in meta.software.items()]), ""]
    commands = {k: e["command"] for k, e in meta.experiments.items() if "command" in e}
    if commands:
        lines += ["**Commands that produced the tables**", "",
                  md_table(["table", "command"], [[k, f"`{v}`"] for k, v in commands.items()]
                           + [["this report", f"`{command}`"]]), ""]
    lines.append("mAP, accuracies and precisions are stored as fractions and shown in %. "
                 "\"mean ± std\" is over seeds (sample standard deviation, ddof = 1); a cell "
                 "with fewer seeds than the others says how many (n).")
    notes = ctx.notes + [f"{name} has no rows; its section is left out."
                         for name in ctx.tables.empty] + _absent_tables(ctx)
    return lines + [f"\n*Note: {n}*" for n in notes] + [""]


def _setting(record: dict, key: str) -> str:
    value = record.get(key)
    if value is None:
        return "—"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _absent_tables(ctx: ReportContext) -> list[str]:
    """A note per experiment meta.json records whose table is not in the directory."""
    notes = []
    for key in ctx.tables.meta.experiments:
        name = EXPERIMENT_FILES.get(key.partition(":")[0])
        if name and name not in ctx.tables.files:
            notes.append(f"meta.json records the {key} experiment, but {name} is not here: no data "
                         "for its section.")
    return notes


def _agreement(ctx: ReportContext) -> list[str]:
    if not ctx.findings:
        return []
    lines = [f"## {SECTIONS['agreement']}", "",
             "Generated from the numbers above: ✔ our tables show what the paper reports, ✘ "
             "they do not, · for information. Our setting differs from the paper's (see each "
             "section), so agreement is about direction and order, not size.", ""]
    for experiment in dict.fromkeys(e for e, _, _ in ctx.findings):
        rows = [(ok, text) for e, ok, text in ctx.findings if e == experiment]
        score = [ok for ok, _ in rows if ok is not None]
        head = f"**{experiment}**" + (f" ({sum(score)} of {len(score)} agree)" if score else "")
        lines += [head, "", *[f"- {'·' if ok is None else '✔' if ok else '✘'} {text}"
                              for ok, text in rows], ""]
    return lines
