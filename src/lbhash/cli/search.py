"""`lbhash search`: query an index with codes, feature vectors or images; and the options, shared with
`lbhash serve`, of the model that encodes queries: a trained run (`--run`, its torch model) or an
export (`--encoder`, ONNX Runtime and numpy, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lbhash.checks import parse_int_list
from lbhash.cli.common import StatedDefault, shown
from lbhash.cli.index import backend_options
from lbhash.errors import InputError
from lbhash.limits import MAX_CLASS_ID, MAX_K
from lbhash.indexes.defaults import search_default
from lbhash.indexes.instance_codes import (LOOKS_LIKE, LOOKS_LIKE_APART, LOOKS_LIKE_CODES, LOOKS_LIKE_CODES_LEARNED,
                                           LOOKS_LIKE_LEARNED)

# the --looks-like default as help prints it: it depends on what the index keeps
LOOKS_LIKE_STATED = (f"{LOOKS_LIKE_LEARNED} with float rows of a learned instance code, {LOOKS_LIKE} with other "
                     f"float rows, {LOOKS_LIKE_CODES_LEARNED} with a learned instance code alone, {LOOKS_LIKE_CODES} with "
                     f"another, raised query by query up to {LOOKS_LIKE_APART} where a query's look-alikes do not share "
                     "its class code")


def encoder_options(func):
    func = click.option("--encoder", "export_path", type=click.Path(path_type=Path),
                        help="An export (lbhash export) whose ONNX model encodes the feature or image queries, "
                             "without torch: the export directory, or a run directory holding one (RUN_DIR/export).")(func)
    return click.option("--run", "run_dir", type=click.Path(path_type=Path),
                        help="Trained run whose model encodes the feature or image queries (through its own export, "
                             "RUN_DIR/export, without torch, where that was made from the run's weights as they "
                             "are: docs/export.md).")(func)


def model_source(run_dir: Path | None, export_path: Path | None) -> Path | None:
    """The run or export given (at most one of them)."""
    if run_dir is not None and export_path is not None:
        raise InputError("give at most one of --run and --encoder (an export of the run)")
    return run_dir if run_dir is not None else export_path


@click.command()
@click.argument("index_dir")
@click.option("--codes", "codes_path", type=click.Path(path_type=Path),
              help="Query codes: a codes file (lbhash encode's output, or a run's codes.npz: its queries), "
                   "or a .npy of packed uint8 or +/-1 codes.")
@click.option("--features", "features_path",
              help="Query feature file (.npz/.npy/.mat, read as training reads it: a features:PATH data spec "
                   "may add options); labels are not needed. Rows go through the run's input contract "
                   "(docs/data.md). Needs --run.")
@click.option("--images", "image_paths", multiple=True, type=click.Path(path_type=Path),
              help="Query image file, folder of image files (its subfolders too: a class-folder tree), or image "
                   "array (a .npz/.npy/.mat file of uint8 images, or an image-array:PATH data spec) (repeatable); "
                   "needs --run or --encoder.")
@encoder_options
@click.option("-k", "k", type=int, default=None, help=f"Results per query, at most {MAX_K}.", cls=StatedDefault,
              stated=lambda: search_default("k"))
@click.option("--radius", type=int, help=f"Return every item within this Hamming distance instead of top-k (at most "
                                        f"{MAX_K} per query, as -k: more is refused).")
@click.option("--filter-labels", help=f"Only items with at least one of these class ids (comma-separated, "
                                      f"0 to {MAX_CLASS_ID}).")
@click.option("--rescore-factor", type=int, help="Rank the top k x M candidates of each code (--features or --images, "
                                                "an index keeping embeddings or instance codes; docs/search.md, "
                                                "\"Ranking\").", cls=StatedDefault,
              stated=lambda: search_default("rescore_factor"))
@click.option("--no-rescore", is_flag=True, help="Hamming order only, even where the index keeps embeddings or "
                                                "instance codes.")
@click.option("--looks-like", type=float, default=None,
              help="The ranking's parameter, from 0 (same class first) to 1 (looks like first) (docs/search.md, "
                   "\"Ranking\"); the default is 1 where the index keeps no instance codes.", cls=StatedDefault,
              stated=lambda: LOOKS_LIKE_STATED)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--force", is_flag=True, help="Encode with --run (or --encoder) even when its model did not make the "
                                           "index's codes.")
@backend_options
def search(index_dir: str, codes_path, features_path, image_paths, run_dir, export_path, k: int | None, radius: int | None,
           filter_labels: str | None, rescore_factor: int | None, no_rescore: bool, looks_like: float | None,
           as_json: bool, force: bool, backend: str, uri: str) -> None:
    """Search INDEX_DIR; print each query's ids, distances and labels.

    Where the index keeps instance codes or embeddings and the queries are --features or --images,
    the top k x --rescore-factor candidates of the class code and of the instance code are ranked by
    one score (--looks-like; each hit shows its score, its distances, and `=` when it is the same
    picture as the query); --no-rescore keeps the Hamming order.

    Limits (docs/indexes.md, "Limits"): k at most 1000, and at most 1000 items per query within --radius;
    class ids 0 to 65535; queries are searched in batches of 1024.
    """
    # (these load FAISS: once needed)
    from lbhash.indexes.index_dir import IndexLocation
    from lbhash.serving.searcher import Names, QueryModel, QuerySource, SearchOptions, search_index

    _check_query_options(codes_path, features_path, image_paths, model_source(run_dir, export_path),
                         rescore_factor, no_rescore, looks_like)
    names = Names(k="-k", radius="--radius", factor="--rescore-factor", rescore="--rescore-factor",
                  classes="--filter-labels", looks_like="--looks-like", features="--features", images="--images")
    found = search_index(IndexLocation(index_dir, backend, uri), QuerySource(codes_path, features_path, image_paths),
                         QueryModel(run_dir, export_path, force), SearchOptions(k, radius, rescore_factor, looks_like),
                         classes=None if filter_labels is None else parse_int_list(filter_labels, "--filter-labels"),
                         rescore=not no_rescore, names=names)
    if as_json:
        click.echo(json.dumps(found.results, indent=1))
    else:
        _print_results(found.results, found.class_names)
        if found.no_mark:
            click.echo(f"no hit is marked the same picture: {found.no_mark}")


def _check_query_options(codes_path, features_path, image_paths, model, factor, no_rescore: bool,
                         looks_like: float | None) -> None:
    """Exactly one query source; a model to encode features or images; embeddings to re-score by."""
    given = [name for name, value in (("--codes", codes_path), ("--features", features_path),
                                      ("--images", image_paths)) if value]
    if len(given) != 1:
        raise InputError("give exactly one of --codes, --features and --images")
    if given[0] != "--codes" and model is None:
        raise InputError(f"{given[0]} needs --run RUN_DIR or --encoder EXPORT (the model that encodes the queries)")
    if factor is not None and no_rescore:
        raise InputError("give --rescore-factor or --no-rescore, not both")
    if looks_like is not None and no_rescore:
        raise InputError("give --looks-like or --no-rescore, not both")
    if factor is not None and codes_path is not None:
        raise InputError("--rescore-factor needs --features or --images (their embeddings), not --codes")
    if looks_like is not None and codes_path is not None:
        raise InputError("--looks-like needs --features or --images (their embeddings), not --codes")


def _print_results(results: list[dict], class_names: list[str] | None) -> None:
    """Each query (with its label when known) and its hits; class ids with their names when the
    index records them; a hit that shares no label with a labelled query is marked `x`."""
    def named(labels) -> str:
        return ",".join(f"{c} {class_names[c]}" if class_names and c < len(class_names) else str(c)
                        for c in labels) or "-"

    for result in results:
        own = result.get("query_labels")
        label = "" if own is None else f", label {named(own)}"
        click.echo(f"query {result['query']} ({shown(result['name'])}{label}): {len(result['ids'])} results")
        sources = result.get("sources", [None] * len(result["ids"]))
        scores = result.get("scores", [None] * len(result["ids"]))
        inst = result.get("instance_distances", [None] * len(result["ids"]))
        same = result.get("same", [False] * len(result["ids"]))
        for rank, (i, d, s, di, eq, lab, src) in enumerate(zip(result["ids"], result["distances"], scores, inst, same,
                                                               result["labels"], sources), 1):
            where = f"distance {d:<4d}" if s is None else f"score {s:<7.4f} distance {d:<4d}"
            where += "" if di is None else f" instance {di:<4d}"
            other = "x" if own and not set(own) & set(lab) else " "
            mark = "=" if eq else " "
            click.echo(f"  {rank:4d} {other}{mark} id {i:<10d} {where} labels {named(lab)}" + (f"  {shown(src)}" if src else ""))
    if any(r.get("query_labels") for r in results):
        click.echo("x: a hit of another class than its query")
    if any(any(r.get("same") or ()) for r in results):
        click.echo("=: the same picture as its query (an edited copy or a duplicate; docs/search.md)")
    if any("scores" in r for r in results):
        click.echo("score: (1 - looks_like) x class agreement + looks_like x similarity^3 (docs/search.md, "
                   "\"Ranking\"): hits come by score, not by Hamming distance")
