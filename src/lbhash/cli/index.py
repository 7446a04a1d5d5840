"""`lbhash index build|add|remove|info`: search indexes over packed codes (docs/search.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

BACKENDS = ("faiss", "milvus")
DEFAULT_URI = "http://127.0.0.1:19530"


def backend_options(func):
    func = click.option("--uri", default=DEFAULT_URI, show_default=True,
                        help="Milvus server (with --backend milvus).")(func)
    return click.option("--backend", type=click.Choice(BACKENDS), default="faiss", show_default=True,
                        help="faiss: an index directory; milvus: INDEX names a collection on --uri.")(func)


def open_index(target: str, backend: str, uri: str):
    """A saved CodeIndex directory, or an existing Milvus collection."""
    if backend == "milvus":
        from lbhash.index.milvus import MilvusIndex

        return MilvusIndex(None, collection=str(target), uri=uri)
    from lbhash.index import CodeIndex

    return CodeIndex.load(target)


def read_ids(value: str | None, path: Path | None) -> np.ndarray:
    from lbhash import _io
    from lbhash.cli.common import parse_int_list
    from lbhash.errors import InputError
    from lbhash.limits import check_ids

    if (value is None) == (path is None):
        raise InputError("give exactly one of --ids and --ids-file")
    if value is not None:
        ids, where = np.array(check_ids(parse_int_list(value, "--ids"), "--ids"), np.int64), "--ids"
    elif path.suffix == ".npy":
        ids, where = _io.load_npy(path), f"{path}: ids"  # its dtype and range are checked by the index
    else:
        try:
            values = [int(line) for line in path.read_text().split()]
        except ValueError:
            raise InputError(f"{path}: must hold one integer id per line") from None
        ids, where = np.array(check_ids(values, f"{path}: ids"), np.int64), f"{path}: ids"
    if ids.ndim == 1 and ids.dtype.kind in "iu" and len(ids) > 1:
        uniq, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            raise InputError(f"{where} holds id {int(uniq[counts > 1][0])} more than once")
    return ids


@click.group("index")
def index() -> None:
    """Build and change search indexes over packed codes.

    build, add and remove hold the index's writer lock while they write: one writer per index
    (a running `lbhash serve` included); a second one stops with exit status 2."""


@index.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--out", required=True, help="Index directory to write (milvus: the collection name).")
@click.option("--kind", type=click.Choice(["flat", "ivf", "multihash"]), default="flat", show_default=True,
              help="flat: exact; ivf, multihash: approximate (docs/search.md).")
@click.option("--part", type=click.Choice(["database", "all"]), default=None,
              help="With a run directory: its database codes (codes.npz) or all items encoded anew. [default: "
                   "database; all for a run of protocol all-train, which has no database]")
@click.option("--data", "data_spec", help="With a run directory: the run's data at its new location, when it moved "
                                          "since training (a data spec, e.g. images:PATH).")
@click.option("--nlist", type=int, help="ivf: number of lists. [default: 1024]")
@click.option("--nprobe", type=int, help="ivf: lists scanned per query. [default: 16]")
@click.option("--nhash", type=int, help="multihash: number of hash tables. [default: bits // 16]")
@click.option("--nflip", type=int, help="multihash: bit flips probed per table. [default: 2]")
@click.option("--overwrite", is_flag=True, help="Replace an existing index (atomically).")
@click.option("--no-embeddings", is_flag=True, help="Keep codes only, not each item's embedding (searches then come "
                                                    "in Hamming order; docs/search.md).")
@backend_options
def build(source: Path, out: str, kind: str, part: str | None, data_spec: str | None, nlist, nprobe, nhash, nflip,
          overwrite: bool, no_embeddings: bool, backend: str, uri: str) -> None:
    """Index the codes of SOURCE: a run directory, or an .npz from `lbhash encode`.

    Ids are the items' positions in the data set (or the file's integer `ids`); labels come
    along for filtering. A run's data is found from any working directory (the run records its
    absolute path); data that moved since is given with --data. From a run, the index also keeps
    each item's embedding (the backbone's pooled features, or the input features), by which
    searches re-score their Hamming candidates; from a codes file, the embeddings it holds
    (`lbhash encode --embeddings`). --no-embeddings leaves them out.
    """
    from lbhash.errors import InputError
    from lbhash.runs import index_inputs

    spec = None
    if source.is_dir():
        part = index_inputs.run_part(source, part)
        spec = index_inputs.run_data(source, data_spec, part)  # the run's data, found from here (None: not a run)
        data = index_inputs.run_codes(source, part, spec)
    elif part is not None or data_spec is not None:
        raise InputError(f"{'--part' if part is not None else '--data'} applies to a run directory, not to a codes file")
    else:
        data = index_inputs.codes_file(source)
    ids = data["ids"] if data["ids"] is not None else np.arange(len(data["codes"]))
    given = {k: v for k, v in dict(nlist=nlist, nprobe=nprobe, nhash=nhash, nflip=nflip).items() if v is not None}
    emb = data["embeddings"] if spec is None else _run_embeddings(source, ids, spec)
    emb = None if no_embeddings else emb
    dim = None if emb is None else emb.shape[1]
    if backend == "milvus":
        index = _new_milvus(out, uri, data["bits"], kind, given, overwrite, dim)
    else:
        from lbhash.index import CodeIndex

        from lbhash._io import refuse_inside_run

        refuse_inside_run(out, "--out")
        if Path(out).exists() and not overwrite:
            raise InputError(f"{out} exists: choose another --out to keep it, or pass --overwrite to replace it")
        index = CodeIndex(data["bits"], kind, **given)
    index.add(data["codes"], ids=ids, labels=data["labels"], embeddings=emb)
    if backend == "faiss":
        from lbhash.index.writer_lock import writer_lock

        model = index_inputs.run_model(source) if source.is_dir() else None
        if model is not None:  # the model whose codes these are: searches with --run check it
            index.metadata[index_inputs.MODEL_KEY] = model
        if spec is not None:  # ids are positions in this data
            index.metadata["data"] = spec
            if index_inputs.has_sources(spec):
                _record_sources(index, spec, ids)
            else:  # feature rows: no sources, but the run may have recorded its classes' names
                from lbhash.runs.origins import record_class_names

                record_class_names(index, spec, index_inputs.run_class_names(source))
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with writer_lock(out, "lbhash index build"):  # no server or other writer changes it meanwhile
            if Path(out).exists() and not overwrite:  # made by another writer since the check above
                raise InputError(f"{out} exists: choose another --out to keep it, or pass --overwrite to replace it")
            index.save(out)
        if not index.is_trained:
            click.echo(f"note: the ivf index searches {searches(index)}", err=True)
    every = " (every item of the run: --part all)" if source.is_dir() and part == "all" else ""
    kept = f", with their {dim}-dimensional embeddings" if dim else ""
    click.echo(f"indexed {len(ids)} {data['bits']}-bit codes ({backend} {kind}) into {out}{every}{kept}")


def _run_embeddings(run_dir: Path, ids, spec: str):
    """The embeddings the index keeps of a run's items (lbhash.runs.codes.item_embeddings),
    passed in to the index; None for a directory of codes without a trained run."""
    from lbhash.runs import index_inputs

    if index_inputs.run_model(run_dir) is None:
        return None
    from lbhash.runs.codes import item_embeddings

    return item_embeddings(run_dir, ids, spec)


def _record_sources(index, data: str, ids) -> None:
    """Record each item's file, member or row (lbhash.runs.origins: thumbnails, `lbhash search`);
    image data that cannot be read is one line naming the fix, before anything is written."""
    from lbhash.errors import InputError
    from lbhash.runs.origins import record_sources

    try:
        record_sources(index, data, ids)
    except InputError as err:
        raise InputError(f"cannot record where the items came from ({err}); if the data moved, give its new "
                         "location with --data") from None


def _new_milvus(name: str, uri: str, bits: int, kind: str, given: dict, overwrite: bool, dim: int | None = None):
    from lbhash.errors import InputError
    from lbhash.index.milvus import MilvusIndex

    if set(given) - {"nlist", "nprobe"}:
        raise InputError(f"--{sorted(set(given) - {'nlist', 'nprobe'})[0]} does not apply to the milvus backend")
    index = MilvusIndex(bits, collection=name, uri=uri, kind=kind, **given, embedding_dim=dim)
    if index.ntotal and not overwrite:
        raise InputError(f"Milvus collection {name!r} already holds {index.ntotal} items: choose another --out to "
                         "keep them, or pass --overwrite to replace them")
    if index.ntotal or index.bits != bits or index.embedding_dim != dim:
        index.drop()
        index = MilvusIndex(bits, collection=name, uri=uri, kind=kind, **given, embedding_dim=dim)
    return index


@index.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("codes_file", type=click.Path(path_type=Path))
@click.option("--upsert", is_flag=True, help="Replace items whose id is already present.")
def add(index_dir: Path, codes_file: Path, upsert: bool) -> None:
    """Add the codes of CODES_FILE (an `lbhash encode` .npz) to INDEX_DIR, atomically.

    An index that keeps embeddings takes them from the file (`lbhash encode --embeddings`), so
    that every item can be re-scored; a file without them is refused there."""
    from lbhash.errors import InputError
    from lbhash.index import CodeIndex
    from lbhash.runs import index_inputs
    from lbhash.runs.origins import forget_sources
    from lbhash.index.writer_lock import writer_lock

    with writer_lock(index_dir, "lbhash index add"):  # read, change and save with no other writer
        index = CodeIndex.load(index_dir)
        data = index_inputs.codes_file(codes_file)
        if data["bits"] != index.bits:
            raise InputError(f"{codes_file} holds {data['bits']}-bit codes but {index_dir} holds {index.bits}-bit codes")
        if index.embedding_dim is not None and data["embeddings"] is None and len(data["codes"]):
            raise InputError(f"{index_dir} keeps a {index.embedding_dim}-dimensional embedding per item but "
                             f"{codes_file} holds none: encode with `lbhash encode --embeddings`")
        ids = index.add(data["codes"], ids=data["ids"], labels=data["labels"], upsert=upsert,
                        embeddings=data["embeddings"])
        forget_sources(index, ids)  # a replaced item's recorded image is no longer its own
        index.save(index_dir)
    click.echo(f"added {len(ids)} codes to {index_dir} ({index.ntotal} in all)")


@index.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--ids", "ids_text", help="Comma-separated ids.")
@click.option("--ids-file", type=click.Path(path_type=Path), help=".npy array or text file, one id per line.")
def remove(index_dir: Path, ids_text: str | None, ids_file: Path | None) -> None:
    """Remove items by id from INDEX_DIR, atomically.

    An id that is not in the index is an error (exit status 2), as everywhere: nothing is
    removed then.
    """
    from lbhash.index import CodeIndex
    from lbhash.runs.origins import forget_sources
    from lbhash.index.writer_lock import writer_lock

    with writer_lock(index_dir, "lbhash index remove"):  # read, change and save with no other writer
        index = CodeIndex.load(index_dir)
        ids = read_ids(ids_text, ids_file)
        removed = index.remove(ids)  # NotFound for an id not in the index: nothing removed, nothing saved
        forget_sources(index, ids)
        if removed:
            index.save(index_dir)
    click.echo(f"removed {removed} item{'s' * (removed != 1)} from {index_dir} ({index.ntotal} left)")


def searches(index) -> str:
    """How a CodeIndex searches now, and why (`index build` and `index info` say the same)."""
    if index.train_size is not None:
        nlist = index.params["nlist"]
        return (f"exactly until trained (it trains its lists once it holds {index.train_size} codes = "
                f"{index.train_size // nlist} x nlist {nlist}, and holds {index.ntotal}), then approximately")
    return "exactly" if index.exact else "approximately"


@index.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@backend_options
def info(index_dir: Path, as_json: bool, backend: str, uri: str) -> None:
    """Describe an index (its files' checksums are verified on the way).

    `exact` says whether searches now return the brute-force result; `searches` says how and
    why: an ivf index searches exactly until it holds 39 x nlist codes and trains.
    """
    if backend == "milvus":
        summary = open_index(str(index_dir), backend, uri).stats()
    else:
        from lbhash.index.storage import directory_bytes

        index = open_index(index_dir, backend, uri)
        summary = {"backend": "faiss", "path": str(index_dir), "bits": index.bits, "kind": index.kind,
                   "params": index.params, "ntotal": index.ntotal, "num_classes": index.num_classes,
                   "exact": index.exact, "trained": index.is_trained, "searches": searches(index),
                   "next_id": index.next_id, "embedding_dim": index.embedding_dim,
                   "bytes_on_disk": directory_bytes(index_dir)}
        from lbhash.runs.origins import read_sources

        record = read_sources(index)
        summary["sources"] = f"{len(record)} items of {record.data}" if record else "none recorded"
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            click.echo(f"{key:14} {value}")
