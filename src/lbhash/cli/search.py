"""`lbhash search`: query an index with codes, feature vectors or images."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from lbhash.checks import parse_int_list
from lbhash.cli.index import backend_options
from lbhash.cli.query_encoder import check_model, encoder_options, load_query_encoder, model_source
from lbhash.errors import InputError
from lbhash.limits import MAX_CLASS_ID, MAX_K

IMAGE_ARRAY_SUFFIXES = (".npz", ".npy", ".mat")  # --images: an image array, read as image-array:PATH


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
@click.option("-k", "k", type=int, default=None, help=f"Results per query, at most {MAX_K}. [default: 10]")
@click.option("--radius", type=int, help=f"Return every item within this Hamming distance instead of top-k (at most "
                                        f"{MAX_K} per query, as -k: more is refused).")
@click.option("--filter-labels", help=f"Only items with at least one of these class ids (comma-separated, "
                                      f"0 to {MAX_CLASS_ID}).")
@click.option("--rescore-factor", type=int, help="Re-score the Hamming top k x M by cosine similarity of the "
                                                "embeddings (--features or --images, an index keeping embeddings; "
                                                "docs/search.md). [default: 16]")
@click.option("--no-rescore", is_flag=True, help="Hamming order only, even where the index keeps embeddings.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--force", is_flag=True, help="Encode with --run (or --encoder) even when its model did not make the "
                                           "index's codes.")
@backend_options
def search(index_dir: str, codes_path, features_path, image_paths, run_dir, export_path, k: int | None, radius: int | None,
           filter_labels: str | None, rescore_factor: int | None, no_rescore: bool, as_json: bool, force: bool,
           backend: str, uri: str) -> None:
    """Search INDEX_DIR; print each query's ids, distances and labels.

    Where the index keeps embeddings and the queries are --features or --images, the Hamming
    top k x --rescore-factor are re-scored by cosine similarity of the embeddings (each hit shows
    its similarity and its Hamming distance); --no-rescore keeps the Hamming order.

    Limits (docs/search.md): k at most 1000, and at most 1000 items per query within --radius;
    class ids 0 to 65535; queries are searched in batches of 1024.
    """
    from lbhash.index.hits import Spelling, check_classes, plan_search, search_hits  # loads FAISS: once needed
    from lbhash.runs.index_dir import open_index

    _check_query_options(codes_path, features_path, image_paths, model_source(run_dir, export_path),
                         rescore_factor, no_rescore)
    spelling = Spelling(k="-k", radius="--radius", factor="--rescore-factor", rescore="--rescore-factor",
                        classes="--filter-labels")
    plan_search(k, radius, rescore=rescore_factor is not None, factor=rescore_factor, spelling=spelling)  # (checks)
    classes = (None if filter_labels is None  # checked before the index is read
               else check_classes([parse_int_list(filter_labels, "--filter-labels")], "--filter-labels")[0])
    index = open_index(index_dir, backend, uri)
    if codes_path is None:
        check_model(index.metadata, run_dir, export_path, index_dir, force)
    encoder = None if codes_path is not None else load_query_encoder(run_dir, export_path)
    rescore = _rescores(index, encoder, radius, rescore_factor, no_rescore)
    plan = plan_search(k, radius, rescore=rescore, factor=rescore_factor, spelling=spelling)
    names, queries, query_labels = _queries(index, codes_path, features_path, image_paths, encoder, rescore)
    hits = search_hits(index, queries, plan, None if classes is None else [classes] * len(queries))
    found = np.array(sorted({i for h in hits for i in h.ids}), np.int64)
    from lbhash.runs.origins import read_sources

    record = read_sources(index)  # sources and class names, parsed once
    source_of = _hit_sources(index, record, found, run_dir, index_dir, backend)
    results = [{"query": q, "name": names[q], "ids": h.ids, "distances": h.distances,
                **({"scores": h.scores} if rescore else {}),
                "labels": h.labels, **({"sources": [source_of.get(x) for x in h.ids]} if source_of else {}),
                **({"query_labels": query_labels[q]} if query_labels is not None else {})}
               for q, h in enumerate(hits)]
    if as_json:
        click.echo(json.dumps(results, indent=1))
    else:
        _print_results(results, (record.class_names or None) if record is not None else None)


def _rescores(index, encoder, radius, factor, no_rescore: bool) -> bool:
    """Whether the search re-scores: by default where the index keeps embeddings and the queries
    have theirs (--features, --images through an encoder that gives them) for a top k;
    --rescore-factor asks for it."""
    if no_rescore:
        return False
    if index.embedding_dim is None:
        if factor is not None:
            raise InputError("--rescore-factor: the index keeps no embeddings, so it cannot re-score; build it with "
                             "its embeddings (`lbhash index build` keeps them by default) or leave out --rescore-factor")
        return False
    if factor is not None:
        return True  # (an encoder without embeddings then says so in one line)
    from lbhash.runs.searcher import QueryEncoder

    return encoder is not None and radius is None and QueryEncoder(encoder, index.bits).gives_embeddings


def _check_query_options(codes_path, features_path, image_paths, model, factor, no_rescore: bool) -> None:
    """Exactly one query source; a model to encode features or images; embeddings to re-score by."""
    given = [name for name, value in (("--codes", codes_path), ("--features", features_path),
                                      ("--images", image_paths)) if value]
    if len(given) != 1:
        raise InputError("give exactly one of --codes, --features and --images")
    if given[0] != "--codes" and model is None:
        raise InputError(f"{given[0]} needs --run RUN_DIR or --encoder EXPORT (the model that encodes the queries)")
    if factor is not None and no_rescore:
        raise InputError("give --rescore-factor or --no-rescore, not both")
    if factor is not None and codes_path is not None:
        raise InputError("--rescore-factor needs --features or --images (their embeddings), not --codes")


def _print_results(results: list[dict], class_names: list[str] | None) -> None:
    """Each query (with its label when known) and its hits; class ids with their names when the
    index records them; a hit that shares no label with a labelled query is marked `x`."""
    def named(labels) -> str:
        return ",".join(f"{c} {class_names[c]}" if class_names and c < len(class_names) else str(c)
                        for c in labels) or "-"

    for result in results:
        own = result.get("query_labels")
        label = "" if own is None else f", label {named(own)}"
        click.echo(f"query {result['query']} ({result['name']}{label}): {len(result['ids'])} results")
        sources = result.get("sources", [None] * len(result["ids"]))
        scores = result.get("scores", [None] * len(result["ids"]))
        for rank, (i, d, s, lab, src) in enumerate(zip(result["ids"], result["distances"], scores, result["labels"],
                                                       sources), 1):
            where = f"distance {d:<4d}" + ("" if s is None else f" similarity {s:<7.4f}")
            other = "x" if own and not set(own) & set(lab) else " "
            click.echo(f"  {rank:4d} {other} id {i:<10d} {where} labels {named(lab)}" + (f"  {src}" if src else ""))
    if any(r.get("query_labels") for r in results):
        click.echo("x: a hit of another class than its query")


def _queries(index, codes_path, features_path, image_paths, encoder, rescore: bool):
    """The queries' names, `Queries` (with embeddings when rescore=True) and class-id lists (None: no labels)."""
    from lbhash.index.hits import Queries

    if codes_path is not None:
        names, codes, labels = _code_queries(index, codes_path)
        return names, Queries(codes), labels
    from lbhash.data import load_data
    from lbhash.runs.searcher import QueryEncoder

    run = QueryEncoder(encoder, index.bits)
    _check_query_kind(run.input_kind, features_path, image_paths)
    if features_path is not None:
        spec = features_path if features_path.startswith("features:") else f"features:{features_path}"
        inputs = load_data(spec, labels_required=False)
        names, labels = [f"row {i}" for i in range(len(inputs))], _label_lists(inputs.labels)
    else:
        names, inputs = _image_queries(run, image_paths)
        labels = None
    return names, run.queries(inputs, rescore=rescore), labels


def _check_query_kind(kind: str, features_path, image_paths) -> None:
    """--features for a run on features, --images for a run on images: one line otherwise."""
    given, wanted = ("--features" if features_path is not None else "--images"), \
        ("--features" if kind == "features" else "--images")
    if given != wanted:
        what = features_path if features_path is not None else " ".join(map(str, image_paths))
        forms = {"--features": ("feature rows", "a .npy or feature file"),
                 "--images": ("images", "image files, folders of them or an image array")}
        raise InputError(f"{given} {what}: {given} takes {forms[given][0]}, but the run encodes {kind}; give "
                         f"its queries with {wanted} ({forms[wanted][1]})")


def _image_queries(run, image_paths) -> tuple[list[str], list[np.ndarray]]:
    """The names and uint8 (H, W, 3) images of --images: files, the image files of
    directories, and the rows of image arrays (named `FILE row N`, as an index names them)."""
    from lbhash.data import load_data

    names, images = [], []
    for path in image_paths:
        if str(path).startswith("image-array:") or path.suffix.lower() in IMAGE_ARRAY_SUFFIXES:
            spec = str(path) if str(path).startswith("image-array:") else f"image-array:{path}"
            data = load_data(spec, labels_required=False)
            names += [str(s) for s in data.item_sources(None)]
            images += list(data.pixels)
        else:
            files = _image_files([path])
            names += [str(f) for f in files]
            images += run.decode_images([f.read_bytes() for f in files], [str(f) for f in files])
    return names, images


def _label_lists(labels) -> list[list[int]] | None:
    """Class-id lists of (n, C) multi-hot rows; None when there are no label columns."""
    rows = np.asarray(labels) if labels is not None else None
    if rows is None or rows.ndim != 2 or rows.shape[1] == 0:
        return None
    return [np.flatnonzero(row).tolist() for row in rows]


def _code_queries(index, codes_path) -> tuple[list[str], np.ndarray, list[list[int]] | None]:
    from lbhash.codes_file import load_codes_file, only_part, part
    from lbhash.labels import as_multihot

    data = load_codes_file(codes_path, need=(), bits=index.bits)
    if data["bits"] != index.bits:
        raise InputError(f"{codes_path}: {data['bits']}-bit codes, but the index holds {index.bits}-bit codes")
    fields = part(data, only_part(data, "query", codes_path))
    labels = fields.get("labels")
    multi_hot = None if labels is None else as_multihot(labels, f"{codes_path}: query labels", keep_ids=True)
    sources = fields["sources"]
    names = [f"row {i}" for i in range(len(fields["codes"]))] if sources is None else [str(x) for x in sources]
    return names, fields["codes"], _label_lists(multi_hot)


def _image_files(image_paths) -> list[Path]:
    """Image files, and the image files under folders: a class-folder tree of photos is searched
    whole, by path (hidden files and folders left out, as training leaves them out)."""
    from lbhash.data.image_sources import is_image_name

    files = []
    for path in image_paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if is_image_name(p.name) and p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or directory")
    if not files:
        raise InputError(f"--images {' '.join(map(str, image_paths))}: no image files there")
    return files


def _hit_sources(index, record, ids, run_dir, index_dir, backend: str) -> dict:
    """id -> the file, member or row it came from: the index's own `record` (lbhash.runs.origins),
    else, for an index built from a run on image data whose run is given, that run's data."""
    from lbhash.runs.uploads import KeptImages, item_origin, media_dir_for

    record = record if len(ids) else None
    media = media_dir_for(index_dir) if backend == "faiss" else None
    kept = KeptImages(media, writer=False) if media is not None and media.is_dir() else None
    if record is not None or kept is not None:
        found = {i: item_origin(i, record, kept)[0] for i in ids.tolist()}
        return {i: s for i, s in found.items() if s is not None}
    data = index.metadata.get("data")
    if run_dir is None or data is None or not len(ids):
        return {}
    from lbhash.runs.index_inputs import item_sources, run_data

    if run_data(run_dir) != data:
        return {}
    found = item_sources(data, ids)
    return {i: s for i, s in zip(ids.tolist(), found) if s is not None}
