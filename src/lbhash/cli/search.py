"""`lbhash search`: query an index with codes, feature vectors or images."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from lbhash.cli.index import backend_options, open_index
from lbhash.limits import MAX_BATCH, MAX_CLASS_ID, MAX_K

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")


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
              help="Query image file or directory (repeatable); needs --run.")
@click.option("--run", "run_dir", type=click.Path(path_type=Path), help="Trained run whose model encodes the queries.")
@click.option("-k", "k", type=int, default=None, help=f"Results per query, at most {MAX_K}. [default: 10]")
@click.option("--radius", type=int, help="Return every item within this Hamming distance instead of top-k.")
@click.option("--filter-labels", help=f"Only items with at least one of these class ids (comma-separated, "
                                      f"0 to {MAX_CLASS_ID}).")
@click.option("--rerank-factor", type=int, help="Re-rank the Hamming top k x M by the queries' real outputs "
                                             "(--features or --images only; docs/search.md).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@backend_options
def search(index_dir: str, codes_path, features_path, image_paths, run_dir, k: int | None, radius: int | None,
           filter_labels: str | None, rerank_factor: int | None, as_json: bool, backend: str, uri: str) -> None:
    """Search INDEX_DIR; print each query's ids, distances and labels.

    Limits (docs/search.md): k at most 1000, class ids 0 to 65535; queries are searched in
    batches of 1024.
    """
    from lbhash.cli.common import parse_int_list
    from lbhash.errors import InputError
    from lbhash.limits import check_class_ids, check_k

    given = [name for name, value in (("--codes", codes_path), ("--features", features_path),
                                      ("--images", image_paths)) if value]
    if len(given) != 1:
        raise InputError("give exactly one of --codes, --features and --images")
    if given[0] != "--codes" and run_dir is None:
        raise InputError(f"{given[0]} needs --run RUN_DIR (the model that encodes the queries)")
    if k is not None and radius is not None:
        raise InputError(f"give either -k or --radius, not both (got -k {k} and --radius {radius})")
    if radius is None:
        k = check_k(10 if k is None else k, "-k")
    if rerank_factor is not None:
        if codes_path is not None or radius is not None:
            raise InputError("--rerank-factor needs --features or --images (their real outputs) and top-k, "
                             "not --codes or --radius")
        if rerank_factor < 1:
            raise InputError(f"--rerank-factor must be a positive integer, got {rerank_factor}")
    classes = None
    if filter_labels is not None:  # checked before the index is read
        classes = check_class_ids(parse_int_list(filter_labels, "--filter-labels"), "--filter-labels")
    index = open_index(index_dir, backend, uri)
    from lbhash.index.sparse_labels import SparseLabels  # lbhash.index loads FAISS: imported once it is needed
    names, queries = _queries(index, codes_path, features_path, image_paths, run_dir, rerank_factor is not None)
    rows = []
    for start in range(0, len(queries), MAX_BATCH):  # bounded memory for any number of queries
        batch = queries[start:start + MAX_BATCH]
        labels = None if classes is None else SparseLabels.from_lists([classes] * len(batch), "--filter-labels")
        if radius is not None:
            lims, dist, ids = index.range_search(batch, radius, labels)
            rows += [(dist[a:b], ids[a:b]) for a, b in zip(lims[:-1], lims[1:])]
        elif rerank_factor is not None:  # batch holds real outputs; distances are -score
            from lbhash.index.searcher import codes_of

            dist, ids = index.search(codes_of(batch), k, labels, rerank=batch, rerank_factor=rerank_factor)
            rows += [(d[i >= 0], i[i >= 0]) for d, i in zip(dist, ids)]
        else:
            dist, ids = index.search(batch, k, labels)
            rows += [(d[i >= 0], i[i >= 0]) for d, i in zip(dist, ids)]
    found = np.unique(np.concatenate([i for _, i in rows])) if rows else np.empty(0, np.int64)
    item_labels = dict(zip(found.tolist(), index.labels_of(found))) if len(found) else {}
    source_of = _hit_sources(index, found, run_dir, index_dir, backend)
    measure = "distances" if rerank_factor is None else "scores"  # re-ranked rows hold -score
    results = [{"query": q, "name": names[q], "ids": i.tolist(),
                measure: (d if rerank_factor is None else -d).tolist(),
                "labels": [item_labels[x] for x in i.tolist()],
                **({"sources": [source_of.get(x) for x in i.tolist()]} if source_of else {})}
               for q, (d, i) in enumerate(rows)]
    if as_json:
        click.echo(json.dumps(results, indent=1))
        return
    for result in results:
        click.echo(f"query {result['query']} ({result['name']}): {len(result['ids'])} results")
        sources = result.get("sources", [None] * len(result["ids"]))
        for rank, (i, d, lab, src) in enumerate(zip(result["ids"], result[measure], result["labels"], sources), 1):
            where = f"distance {d:<4d}" if rerank_factor is None else f"score {d:<10.4f}"
            click.echo(f"  {rank:4d}  id {i:<10d} {where} labels {','.join(map(str, lab)) or '-'}"
                       + (f"  {src}" if src else ""))


def _queries(index, codes_path, features_path, image_paths, run_dir, real: bool = False):
    """Names and packed codes of the queries (real=True: their real outputs instead)."""
    from lbhash.errors import InputError

    if codes_path is not None:
        from lbhash.codes_file import load_codes_file, only_part, part

        data = load_codes_file(codes_path, need=(), bits=index.bits)
        if data["bits"] != index.bits:
            raise InputError(f"{codes_path}: {data['bits']}-bit codes, but the index holds {index.bits}-bit codes")
        fields = part(data, only_part(data, "query", codes_path))
        return _names(fields), fields["codes"]
    from lbhash.data import load_data
    from lbhash.index import Searcher
    from lbhash.index.sources import load_encoder

    searcher = Searcher(index, load_encoder(run_dir))
    if features_path is not None:
        spec = features_path if features_path.startswith("features:") else f"features:{features_path}"
        queries = load_data(spec, labels_required=False)
        return [f"row {i}" for i in range(len(queries))], searcher.encode(queries, real)
    files = []
    for path in image_paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or directory")
    if not files:
        raise InputError("--images found no image files")
    return [str(f) for f in files], searcher.encode_image_files([f.read_bytes() for f in files],
                                                                [str(f) for f in files], real)


def _hit_sources(index, ids, run_dir, index_dir, backend: str) -> dict:
    """id -> the file, member or row it came from: the index's own record (lbhash.index.origins),
    else, for an index built from a run on image data whose run is given, that run's data."""
    from lbhash.index.origins import read_sources
    from lbhash.index.uploads import KeptImages, item_origin, media_dir_for

    record = read_sources(index) if len(ids) else None
    media = media_dir_for(index_dir) if backend == "faiss" else None
    kept = KeptImages(media, writer=False) if media is not None and media.is_dir() else None
    if record is not None or kept is not None:
        found = {i: item_origin(i, record, kept)[0] for i in ids.tolist()}
        return {i: s for i, s in found.items() if s is not None}
    data = getattr(index, "metadata", {}).get("data")
    if run_dir is None or data is None or not len(ids):
        return {}
    from lbhash.index.sources import item_sources, run_data

    if run_data(run_dir) != data:
        return {}
    found = item_sources(data, ids)
    return {i: s for i, s in zip(ids.tolist(), found) if s is not None}


def _names(fields: dict) -> list[str]:
    if fields["sources"] is not None:
        return [str(x) for x in fields["sources"]]
    return [f"row {i}" for i in range(len(fields["codes"]))]
