"""`lbhash index build|add|remove|info`: search indexes over packed codes (docs/indexes.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from lbhash.cli.common import StatedDefault, shown
from lbhash.errors import InputError
from lbhash.indexes.defaults import index_default_text
from lbhash.indexes.instance_codes import INSTANCE_BITS

BACKENDS = ("faiss", "milvus")
DEFAULT_URI = "http://127.0.0.1:19530"


def backend_options(func):
    func = click.option("--uri", default=DEFAULT_URI, show_default=True,
                        help="Milvus server (with --backend milvus).")(func)
    return click.option("--backend", type=click.Choice(BACKENDS), default="faiss", show_default=True,
                        help="faiss: an index directory; milvus: INDEX names a collection on --uri.")(func)


def read_ids(value: str | None, path: Path | None) -> np.ndarray:
    from lbhash import _io
    from lbhash.checks import parse_int_list
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
              help="flat: exact; ivf, multihash: approximate (docs/indexes.md).")
@click.option("--part", type=click.Choice(["database", "all"]), default=None,
              help="With a run directory: its database codes (codes.npz) or all items encoded anew. [default: "
                   "database; all for a run of protocol all-train, which has no database]")
@click.option("--data", "data_spec", help="With a run directory: the run's data at its new location, when it moved "
                                          "since training (a data spec, e.g. images:PATH).")
@click.option("--nlist", type=int, help="ivf: number of lists.", cls=StatedDefault,
              stated=lambda: index_default_text("ivf", "nlist"))
@click.option("--nprobe", type=int, help="ivf: lists scanned per query.", cls=StatedDefault,
              stated=lambda: index_default_text("ivf", "nprobe"))
@click.option("--nhash", type=int, help="multihash: number of hash tables.", cls=StatedDefault,
              stated=lambda: index_default_text("multihash", "nhash"))
@click.option("--nflip", type=int, help="multihash: bit flips probed per table.", cls=StatedDefault,
              stated=lambda: index_default_text("multihash", "nflip"))
@click.option("--overwrite", is_flag=True, help="Replace an existing index (atomically).")
@click.option("--skip-bad-images", is_flag=True, help="With a run directory: leave its unreadable images out of the "
                                                      "items encoded anew (as `lbhash train --skip-bad-images`).")
@click.option("--no-embeddings", is_flag=True, help="Keep codes only, not each item's embedding (searches then come "
                                                    "in Hamming order; docs/search.md).")
@click.option("--embedding-dtype", type=click.Choice(["float16", "int8"]), default="float16", show_default=True,
              help="How the embeddings are kept: float16 unit rows, or int8 rows at half the bytes "
                   "(docs/instance-codes.md, \"Floats optional\").")
@click.option("--instance-bits", type=int, default=INSTANCE_BITS, cls=StatedDefault, stated=lambda: str(INSTANCE_BITS),
              help="Length of the instance code kept beside each class code, made from the item's embedding "
                   "(a multiple of 8, at most the embedding's width: the default is cut to it; 0: none; "
                   "docs/instance-codes.md, \"Instance codes\").")
@click.option("--instance-method", type=click.Choice(["learned", "itq", "pca"]), default=None, cls=StatedDefault,
              stated=lambda: "learned for a run of photos, else itq",
              help="How the instance code is made: learned from edited copies of the run's photos, or the "
                   "ITQ (or PCA) projection of the embedding (docs/instance-codes.md, \"The learned instance code\").")
@click.option("--perceptual/--no-perceptual", default=None, cls=StatedDefault,
              stated=lambda: "for a run of photos with a learned code",
              help="Give the instance code's last 128 bits to each photo's perceptual hashes (pHash of the photo and "
                   "of it less its one-colour margins), made from its pixels (docs/instance-codes.md, \"Perceptual "
                   "bits\").")
@backend_options
def build(source: Path, out: str, kind: str, part: str | None, data_spec: str | None, nlist, nprobe, nhash, nflip,
          overwrite: bool, skip_bad_images: bool, no_embeddings: bool, embedding_dtype: str, instance_bits: int,
          instance_method: str | None, perceptual: bool | None, backend: str, uri: str) -> None:
    """Index the codes of SOURCE: a run directory, or an .npz from `lbhash encode`.

    Ids are the items' positions in the data set (or the file's integer `ids`); labels come
    along for filtering. A run's data is found from any working directory (the run records its
    absolute path); data that moved since is given with --data. From a run, the index also keeps
    each item's embedding (the backbone's pooled features, or the input features), by which
    searches re-score their Hamming candidates; from a codes file, the embeddings it holds
    (`lbhash encode --embeddings`). --no-embeddings leaves them out; --embedding-dtype int8 keeps them
    at one byte a value. Where there are embeddings, the
    index also keeps an instance code per item (--instance-bits): for a run of photos one learned from
    edited copies of its training photos, else the ITQ code of the embeddings (--instance-method), and a
    same-picture mark calibrated on copies of its own photos: searches then rank by both codes
    (docs/instance-codes.md, "Instance codes").
    """
    from lbhash.indexes.index_dir import IndexLocation, IndexOptions, build_index

    given = {k: v for k, v in dict(nlist=nlist, nprobe=nprobe, nhash=nhash, nflip=nflip).items() if v is not None}
    if no_embeddings and embedding_dtype != "float16":
        raise InputError(f"--embedding-dtype {embedding_dtype}: --no-embeddings keeps no embeddings to store so")
    options = IndexOptions(kind, given, None if no_embeddings else embedding_dtype, instance_bits, instance_method,
                           perceptual)
    built = build_index(source, IndexLocation(out, backend, uri), options, part, data_spec, overwrite, skip_bad_images)
    if backend == "faiss" and not built.index.is_trained:
        click.echo(f"note: the ivf index searches {built.searches}", err=True)
    every = " (every item of the run: --part all)" if source.is_dir() and part == "all" else ""
    kept = f", with their {built.embedding_dim}-dimensional embeddings" if built.embedding_dim else ""
    kept += f" ({embedding_dtype})" if built.embedding_dim and embedding_dtype != "float16" else ""
    kept += f", with {built.instance_bits}-bit instance codes" if built.instance_bits else ""
    click.echo(f"indexed {built.count} {built.bits}-bit codes ({backend} {kind}) into {shown(out)}{every}{kept}")


@index.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("codes_file", type=click.Path(path_type=Path))
@click.option("--upsert", is_flag=True, help="Replace items whose id is already present.")
def add(index_dir: Path, codes_file: Path, upsert: bool) -> None:
    """Add the codes of CODES_FILE (an `lbhash encode` .npz) to INDEX_DIR, atomically.

    An index that keeps embeddings takes them from the file (`lbhash encode --embeddings`), so
    that every item can be re-scored; a file without them is refused there."""
    from lbhash.indexes.index_dir import IndexDirectory

    ids, ntotal = IndexDirectory(index_dir).add(codes_file, upsert)
    click.echo(f"added {len(ids)} codes to {shown(index_dir)} ({ntotal} in all)")


@index.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--ids", "ids_text", help="Comma-separated ids.")
@click.option("--ids-file", type=click.Path(path_type=Path), help=".npy array or text file, one id per line.")
def remove(index_dir: Path, ids_text: str | None, ids_file: Path | None) -> None:
    """Remove items by id from INDEX_DIR, atomically.

    An id that is not in the index is an error (exit status 2), as everywhere: nothing is
    removed then.
    """
    from lbhash.indexes.index_dir import IndexDirectory

    removed, left = IndexDirectory(index_dir).remove(read_ids(ids_text, ids_file))
    click.echo(f"removed {removed} item{'s' * (removed != 1)} from {shown(index_dir)} ({left} left)")


@index.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@backend_options
def info(index_dir: Path, as_json: bool, backend: str, uri: str) -> None:
    """Describe an index (its files' checksums are verified on the way).

    `exact` says whether searches now return the brute-force result; `searches` says how and
    why: an ivf index searches exactly until it holds 39 x nlist codes and trains.
    """
    from lbhash.indexes.index_dir import IndexDirectory, open_index

    summary = open_index(str(index_dir), backend, uri).stats() if backend == "milvus" else \
        IndexDirectory(index_dir).describe()
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            click.echo(f"{key:14} {value}")
