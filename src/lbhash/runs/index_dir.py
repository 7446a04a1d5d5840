"""An index directory (or a Milvus collection) as the application layer owns it: built, opened,
changed and described, which is `lbhash index`; the search engine below (lbhash.index) knows only
arrays. Every change holds the index's writer lock (lbhash.index.writer_lock): one writer per index,
a running `lbhash serve` included.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash._io import refuse_inside_run
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.index.storage import directory_bytes, read_manifest
from lbhash.index.writer_lock import writer_lock
from lbhash.runs import index_inputs
from lbhash.runs.origins import forget_sources, read_sources, record_class_names, record_sources


@dataclass(frozen=True)
class Built:
    """What `build_index` made (`embedding_dim` None: codes only; `searches`: how it searches)."""

    index: object
    count: int
    bits: int
    embedding_dim: int | None
    searches: str | None  # a FAISS index's `searches(index)`; None for Milvus


def open_index(target: str | Path, backend: str = "faiss", uri: str | None = None):
    """A saved CodeIndex directory, or an existing Milvus collection (at `uri`; None: its default)."""
    if backend == "milvus":
        from lbhash.index.milvus import MilvusIndex

        return MilvusIndex(None, collection=str(target), **_at(uri))
    return CodeIndex.load(target)


def saved_metadata(index_dir: str | Path) -> dict | None:
    """The metadata of a saved index directory, from its manifest alone (a missing or broken index is named)."""
    return read_manifest(Path(index_dir)).get("metadata")


def build_index(source: Path, out: str, kind: str = "flat", part: str | None = None, data: str | None = None,
                params: dict | None = None, overwrite: bool = False, embeddings: bool = True,
                backend: str = "faiss", uri: str | None = None, skip_bad_images: bool = False) -> Built:
    """Index the codes of `source`: a run directory (its database, or every item with part="all";
    `data`: the run's data where it moved since) or a codes file (lbhash.codes_file). From a run
    the index keeps each item's embedding, from a codes file the ones it holds
    (`lbhash encode --embeddings`); embeddings=False keeps codes only. `params`: the kind's.
    `skip_bad_images`: a run's unreadable images are left out of the items encoded anew."""
    source, params = Path(source), dict(params or {})
    spec = None
    if source.is_dir():
        part = index_inputs.run_part(source, part)
        spec = index_inputs.run_data(source, data, part)  # the run's data, found from here (None: not a run)
        items = index_inputs.run_codes(source, part, spec, skip_bad_images)
    elif part is not None or data is not None:
        raise InputError(f"{'--part' if part is not None else '--data'} applies to a run directory, not to a codes file")
    else:
        items = index_inputs.codes_file(source)
    ids = items["ids"] if items["ids"] is not None else np.arange(len(items["codes"]))
    # the run's model, identified once (a checkpoint's SHA-256): its embeddings, and the index's record of it
    model = index_inputs.run_model(source) if source.is_dir() else None
    emb = items["embeddings"]
    if spec is not None:  # a run (so `model` is known): its items' embeddings, from the pass that made their codes
        from lbhash.runs.codes import item_embeddings

        emb = item_embeddings(source, ids, spec)
    emb = emb if embeddings else None
    dim = None if emb is None else emb.shape[1]
    if backend == "milvus":
        index = _new_milvus(out, uri, items["bits"], kind, params, overwrite, dim)
        index.add(items["codes"], ids=ids, labels=items["labels"], embeddings=emb)
        return Built(index, len(ids), items["bits"], dim, None)
    refuse_inside_run(out, "--out")
    if Path(out).exists() and not overwrite:
        raise InputError(f"{out} exists: choose another --out to keep it, or pass --overwrite to replace it")
    index = CodeIndex(items["bits"], kind, **params)
    index.add(items["codes"], ids=ids, labels=items["labels"], embeddings=emb)
    _record_origins(index, source, spec, ids, model)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(out, "lbhash index build"):  # no server or other writer changes it meanwhile
        if Path(out).exists() and not overwrite:  # made by another writer since the check above
            raise InputError(f"{out} exists: choose another --out to keep it, or pass --overwrite to replace it")
        index.save(out)
    return Built(index, len(ids), items["bits"], dim, searches(index))


class IndexDirectory:
    """A saved CodeIndex directory, changed under its writer lock and saved atomically."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def add(self, codes_file: str | Path, upsert: bool = False) -> tuple[np.ndarray, int]:
        """Add the items of a codes file (`lbhash encode`): (their ids, the index's count after).
        An index that keeps embeddings takes them from the file; a file without them is refused."""
        with writer_lock(self.path, "lbhash index add"):  # read, change and save with no other writer
            index = CodeIndex.load(self.path)
            items = index_inputs.codes_file(codes_file)
            if items["bits"] != index.bits:
                raise InputError(f"{codes_file} holds {items['bits']}-bit codes but {self.path} holds "
                                 f"{index.bits}-bit codes")
            if index.embedding_dim is not None and items["embeddings"] is None and len(items["codes"]):
                raise InputError(f"{self.path} keeps a {index.embedding_dim}-dimensional embedding per item but "
                                 f"{codes_file} holds none: encode with `lbhash encode --embeddings`")
            ids = index.add(items["codes"], ids=items["ids"], labels=items["labels"], upsert=upsert,
                            embeddings=items["embeddings"])
            forget_sources(index, ids)  # a replaced item's recorded image is no longer its own
            index.save(self.path)
        return ids, index.ntotal

    def remove(self, ids: np.ndarray) -> tuple[int, int]:
        """Remove items by id: (how many, the index's count after). An id not in the index is
        NotFound, and nothing is removed or saved."""
        with writer_lock(self.path, "lbhash index remove"):  # read, change and save with no other writer
            index = CodeIndex.load(self.path)
            removed = index.remove(ids)
            forget_sources(index, ids)
            if removed:
                index.save(self.path)
        return removed, index.ntotal

    def describe(self) -> dict:
        """What `lbhash index info` prints: kind, size, how it searches, embeddings, bytes on disk
        and the sources it records (its files' checksums verified on the way)."""
        index = CodeIndex.load(self.path)
        record = read_sources(index)
        stats = index.stats()
        return {"backend": stats.pop("backend"), "path": str(self.path), **stats, "searches": searches(index),
                "bytes_on_disk": directory_bytes(self.path),
                "sources": f"{len(record)} items of {record.data}" if record else "none recorded"}


def searches(index) -> str:
    """How a CodeIndex searches now, and why (`index build` and `index info` say the same)."""
    if index.train_size is not None:
        nlist = index.params["nlist"]
        return (f"exactly until trained (it trains its lists once it holds {index.train_size} codes = "
                f"{index.train_size // nlist} x nlist {nlist}, and holds {index.ntotal}), then approximately")
    return "exactly" if index.exact else "approximately"


def _record_origins(index, source: Path, spec: str | None, ids, model: dict | None) -> None:
    """The model that made a run's codes (searches with --run check it), the data its ids are
    positions in, and where each item came from (or the classes' names of feature rows)."""
    if model is not None:
        index.metadata[index_inputs.MODEL_KEY] = model
    if spec is None:
        return
    index.metadata["data"] = spec
    if not index_inputs.has_sources(spec):  # feature rows: no sources, but the run may have named its classes
        record_class_names(index, spec, index_inputs.run_class_names(source))
        return
    try:
        record_sources(index, spec, ids)
    except InputError as err:  # image data that cannot be read: one line naming the fix, before any write
        raise InputError(f"cannot record where the items came from ({err}); if the data moved, give its new "
                         "location with --data") from None


def _at(uri: str | None) -> dict:
    return {} if uri is None else {"uri": uri}


def _new_milvus(name: str, uri: str | None, bits: int, kind: str, given: dict, overwrite: bool,
                dim: int | None = None):
    from lbhash.index.milvus import MilvusIndex

    if set(given) - {"nlist", "nprobe"}:
        raise InputError(f"--{sorted(set(given) - {'nlist', 'nprobe'})[0]} does not apply to the milvus backend")
    index = MilvusIndex(bits, collection=name, **_at(uri), kind=kind, **given, embedding_dim=dim)
    if index.ntotal and not overwrite:
        raise InputError(f"Milvus collection {name!r} already holds {index.ntotal} items: choose another --out to "
                         "keep them, or pass --overwrite to replace them")
    if index.ntotal or index.bits != bits or index.embedding_dim != dim:
        index.drop()
        index = MilvusIndex(bits, collection=name, **_at(uri), kind=kind, **given, embedding_dim=dim)
    return index
