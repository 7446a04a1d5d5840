"""`lbhash duplicates`: the groups of copies inside an index; `lbhash evaluate-copies`: how often an edited
copy of an indexed photo finds its original (docs/duplicates.md, "Finding the picture")."""

from __future__ import annotations

import csv
import json
import sys

import click

from lbhash.cli.common import StatedDefault
from lbhash.cli.search import LOOKS_LIKE_STATED, encoder_options, model_source
from lbhash.errors import InputError


@click.command()
@click.argument("path")
@click.option("--threshold", type=float, default=None,
              help="The score a pair must reach, in (0, 1]: for an index, in the measure of its mark (the pair's "
                   "margin over its neighbours, a cosine of the float rows, or the share of the instance bits that "
                   "may differ; a mark by the margin or the instance distance: the margin alone); for a folder, the "
                   "margin of the pair over its neighbours. [default: the index's calibrated mark; the folder's own]")
@click.option("--min-group", type=int, default=2, show_default=True, help="Show groups of at least this many items.")
@click.option("--json", "as_json", is_flag=True, help='Print JSON: {"groups": [{"items", "sources", "pairs"}], ...}.')
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV: group, item, source (one row per item).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Report progress on stderr.")
def duplicates(path: str, threshold: float | None, min_group: int, as_json: bool, as_csv: bool,
               progress: bool) -> None:
    """Find the groups of copies in PATH, an index or a folder of photos: largest groups first.

    An index: every item is searched against the others with what the index keeps of it (no model
    runs), and a pair passes the same-picture mark the index calibrated (or --threshold). A folder
    with no run: its photos, less their one-colour margins, are embedded by the pretrained
    efficientnet_lite0, their own instance code learned from edited copies of them, and a pair
    passes when it stands out of both photos' neighbours by the folder's own threshold (or
    --threshold). The pairs are grouped by connected components; each group lists its items (id
    and photo) and the pairs that joined them, with their scores.
    """
    from lbhash.indexes.duplicates import find_duplicates

    if as_json and as_csv:
        raise InputError("give at most one of --json and --csv")

    def report(done: int, total: int) -> None:
        click.echo(f"duplicates: {done:,}/{total:,} items searched", err=True)

    found = find_duplicates(path, threshold, min_group, report if progress else None)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=1))
        return
    if as_csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["group", "item", "source"])
        for number, group in enumerate(found.groups, 1):
            for item, source in zip(group["items"], group["sources"]):
                writer.writerow([number, item, "" if source is None else source])
        return
    measure = {"cosine": "cosine >=", "margin": "margin >=", "margin_or_instance": "margin >="}.get(
        found.measure, "instance bits differing <=") + f" {found.threshold:.4g}"
    if found.instance_threshold is not None:
        measure += f" or instance bits differing <= {found.instance_threshold:.4g}"
    if found.perceptual_threshold is not None:
        measure += f" or perceptual hash bits differing <= {found.perceptual_threshold:.4g}"
    click.echo(f"{found.items:,} items read, {found.pairs:,} pairs at {measure}; "
               f"{len(found.groups):,} groups of {min_group} or more")
    for number, group in enumerate(found.groups, 1):
        click.echo(f"group {number}: {len(group['items'])} items")
        for item, source in zip(group["items"], group["sources"]):
            click.echo(f"  id {item:<10d}" + ("" if source is None else f" {source}"))
        click.echo("  pairs: " + ", ".join(f"{a}-{b} {s:.3f}" for a, b, s in group["pairs"]))


@click.command()
@click.argument("index_dir")
@encoder_options
@click.option("--items", type=int, default=None, help="Indexed photos to edit (a seeded sample).", cls=StatedDefault,
              stated=lambda: str(_evaluation_default("items")))
@click.option("--seed", type=int, default=None, help="Seed of the sample.", cls=StatedDefault,
              stated=lambda: str(_evaluation_default("seed")))
@click.option("--edits", default=None, cls=StatedDefault, stated=lambda: ",".join(_evaluation_default("edits")),
              help="Comma-separated edits (docs/instance-codes.md, \"The edit family\").")
@click.option("--looks-like", type=float, default=None, help="The ranking's parameter, from 0 (same class "
              "first) to 1 (looks like first).", cls=StatedDefault, stated=lambda: LOOKS_LIKE_STATED)
@click.option("--factor", type=int, default=None, help="Candidates per result from each of the two codes.",
              cls=StatedDefault, stated=lambda: str(_evaluation_default("factor")))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def evaluate_copies(index_dir: str, run_dir, export_path, items: int, seed: int, edits: str, looks_like: float,
                    factor: int, as_json: bool) -> None:
    """Edit indexed photos, search the copies, report how often the original comes first.

    Each of --items indexed photos is edited (JPEG at quality 50 and 30, mirrored, cropped,
    recoloured, resized, rotated, framed, letterboxed, grayscale, a logo), encoded by the run (or
    export) that made INDEX_DIR's codes, and searched in each order the index can rank by: `hamming`
    (the class code alone), `codes` (both codes, no float read) and `blend` (the default ranking, by
    cosine where the index keeps float rows). Per edit: recall@1 and recall@10 of the original, class
    P@10 and mAP@100, ms per query; bytes per item of each order; the same-picture mark's recall and
    precision on the first hit, and its false marks with the originals taken out of the index.
    """
    from lbhash.serving.copies_evaluation import evaluate_copies as evaluate
    from lbhash.serving.searcher import QueryModel

    if model_source(run_dir, export_path) is None:
        raise InputError("give --run RUN_DIR or --encoder EXPORT (the model that made the index's codes)")
    names = list(_evaluation_default("edits")) if edits is None else [e.strip() for e in edits.split(",") if e.strip()]
    items = _evaluation_default("items") if items is None else items
    seed = _evaluation_default("seed") if seed is None else seed
    factor = _evaluation_default("factor") if factor is None else factor
    report = evaluate(index_dir, QueryModel(run_dir, export_path), items, seed, names, looks_like, factor)
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    click.echo(f"{report['items']} photos x {len(report['edits'])} edits (seed {seed}), factor {factor}; "
               f"encoding {report['encode_ms_per_query']:.1f} ms a query")
    mark = report["mark"] or {}
    also = "".join(f", {key} {mark[key]:.4g}" for key in ("instance_threshold", "perceptual_threshold")
                   if mark.get(key) is not None)
    click.echo(f"same-picture mark: by {mark['mark']} at {mark['threshold']:.4g}{also}" if mark.get("mark") else
               f"same-picture mark: none ({mark.get('why', 'the index keeps no instance codes')})")
    click.echo(f"{'order':8s} {'edit':9s} {'recall@1':>8s} {'recall@10':>9s} {'class P@10':>10s} {'mAP@100':>8s} "
               f"{'ms/query':>8s} {'bytes/item':>10s} {'looks_like':>10s} {'mark rec':>8s} {'mark prec':>9s} "
               f"{'false':>6s}")
    for order, row in report["orders"].items():
        shown = "" if row["looks_like"] is None else f"{row['looks_like']:g}"
        for edit, m in row["edits"].items():
            marks = "" if "mark_recall" not in m else f" {m['mark_recall']:8.3f} {_or_dash(m['mark_precision']):>9s} " \
                f"{_or_dash(m.get('false_marks_absent')):>6s}"
            click.echo(f"{order:8s} {edit:9s} {m['recall@1']:8.3f} {m['recall@10']:9.3f} {m['class_p@10']:10.3f} "
                       f"{m['map@100']:8.4f} {m['ms_per_query']:8.2f} {row['bytes_per_item']:10d} {shown:>10s}{marks}")


def _or_dash(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _evaluation_default(name: str):
    """`evaluate_copies`' own default of `name` (read when asked: it loads the search engine)."""
    import inspect

    from lbhash.serving.copies_evaluation import evaluate_copies

    return inspect.signature(evaluate_copies).parameters[name].default
