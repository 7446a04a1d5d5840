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
from lbhash.data.perceptual import PERCEPTUAL_BITS
from lbhash.data.views import ITEM_VIEW
from lbhash.errors import InputError
from lbhash.index import CodeIndex, table_bytes_per_item
from lbhash.index.storage import directory_bytes, read_manifest
from lbhash.index.writer_lock import writer_lock
from lbhash.instance import INSTANCE_BITS
from lbhash.indexes import index_inputs
from lbhash.instance import MARK_KEY, mark_summary
from lbhash.indexes.instance_codes import ITEM_VIEW_KEY, attach, fit_transform, index_transform, payload_of
from lbhash.indexes.instance_learning import COPIES, MAX_LEARN_PHOTOS, RunPhotos, held_photos, no_mark
from lbhash.indexes.origins import forget_sources, read_sources, record_class_names, record_sources


@dataclass(frozen=True)
class Built:
    """What `build_index` made (`embedding_dim` None: no float rows; `instance_bits` None: no instance
    codes; `searches`: how it searches)."""

    index: object
    count: int
    bits: int
    embedding_dim: int | None
    searches: str | None  # a FAISS index's `searches(index)`; None for Milvus
    instance_bits: int | None = None


@dataclass(frozen=True)
class IndexLocation:
    """Where an index is: a saved CodeIndex directory (`target`, backend "faiss"), or a Milvus
    collection named `target` at `uri` (backend "milvus"; None: Milvus's default)."""

    target: str | Path
    backend: str = "faiss"
    uri: str | None = None

    def open(self):
        """The index there (`open_index`)."""
        return open_index(self.target, self.backend, self.uri)


def open_index(target: str | Path, backend: str = "faiss", uri: str | None = None):
    """A saved CodeIndex directory, or an existing Milvus collection (at `uri`; None: its default)."""
    if backend == "milvus":
        from lbhash.index.milvus import MilvusIndex

        return MilvusIndex(None, collection=str(target), **_at(uri))
    return CodeIndex.load(target)


def saved_metadata(index_dir: str | Path) -> dict | None:
    """The metadata of a saved index directory, from its manifest alone (a missing or broken index is named)."""
    return read_manifest(Path(index_dir)).get("metadata")


@dataclass(frozen=True)
class IndexOptions:
    """What a new index keeps and how it searches: its `kind` and the kind's `params` (nlist, nprobe,
    nhash, nflip), its items' embeddings as `float_rows` ("float16" or "int8"; None: no float rows), and
    an `instance_bits`-bit instance code per item where there are embeddings (None or 0: none;
    lbhash.instance)."""

    kind: str = "flat"
    params: dict | None = None
    float_rows: str | None = "float16"
    instance_bits: int | None = INSTANCE_BITS
    instance_method: str | None = None  # "learned", "itq" or "pca"; None: learned for photos where it can be
    # the instance code's last PERCEPTUAL_BITS the photos' perceptual hashes (lbhash.data.perceptual); None: where
    # the code is learned from photos (measured better there: docs/results/copies.md)
    perceptual: bool | None = None


def build_index(source: Path, where: IndexLocation, options: IndexOptions = IndexOptions(), part: str | None = None,
                data: str | None = None, overwrite: bool = False, skip_bad_images: bool = False) -> Built:
    """Index the codes of `source`, `where` says, as `options` say: a run directory (its database, or
    every item with part="all"; `data`: the run's data where it moved since) or a codes file
    (lbhash.codes_file). From a run the index keeps each item's embedding, from a codes file the ones
    it holds (`lbhash encode --embeddings`); the instance codes' transform is fitted on the run's
    training items (a codes file: on its items). `skip_bad_images`: a run's unreadable images are
    left out of the items encoded anew."""
    source, params = Path(source), dict(options.params or {})
    kind, float_rows, instance_bits = options.kind, options.float_rows, options.instance_bits
    out, backend = str(where.target), where.backend
    if backend != "milvus":  # refused before minutes of work (the photos' copies), and again before the write
        _check_out(out, overwrite)
    spec = None
    if source.is_dir():
        part = index_inputs.run_part(source, part)
        spec = index_inputs.run_data(source, data, part)  # the run's data, found from here (None: not a run)
    elif part is not None or data is not None:
        raise InputError(f"{'--part' if part is not None else '--data'} applies to a run directory, not to a codes file")
    _refuse_perceptual(options, source, spec)
    items = index_inputs.run_codes(source, part, spec, skip_bad_images) if source.is_dir() else \
        index_inputs.codes_file(source)
    ids = items["ids"] if items["ids"] is not None else np.arange(len(items["codes"]))
    # the run's model, identified once (a checkpoint's SHA-256): its embeddings, and the index's record of it
    model = index_inputs.run_model(source) if source.is_dir() else None
    emb, train_emb = items["embeddings"], None
    # photos' embeddings, from a run or `lbhash encode --embeddings`, hold their blurred views' (lbhash.data.views)
    photos = items["sources"] is not None or (spec is not None and index_inputs.has_sources(spec))
    if spec is not None and emb is None:  # a run's codes.npz: its items' embeddings, from the pass that made their codes
        # one pass, which also gives the training items the instance transform is fitted on where the
        # index lacks them (a second pass would decode the images and run the backbone again)
        train = _outside_training_items(source, ids, instance_bits)
        both = index_inputs.run_embeddings(source, np.concatenate([ids, train]), spec)
        emb, train_emb = both[:len(ids)], both[len(ids):] if len(train) else None
    transform, fitted_on, mark, hashes = _instance(source, spec, ids, emb, options, photos and model is not None,
                                                   train_emb)
    instance, emb, mark = _kept(transform, mark, emb, float_rows, hashes)
    dim = None if emb is None else emb.shape[1]
    if backend == "milvus":
        if float_rows not in (None, "float16"):
            raise InputError(f"--embedding-dtype {float_rows}: the milvus backend keeps its embeddings as float16 "
                             "(a FLOAT16_VECTOR field)")
        index = _new_milvus(where, items["bits"], kind, params, overwrite, dim,
                            None if transform is None else transform.bits)
    else:
        _check_out(out, overwrite)
        index = CodeIndex(items["bits"], kind, embedding_dtype=float_rows or "float16", **params)
    if transform is not None:
        attach(index, transform, fitted_on)
        index.metadata[MARK_KEY] = mark
    if photos and (transform is not None or emb is not None):
        index.metadata[ITEM_VIEW_KEY] = ITEM_VIEW
    _record_origins(index, source, spec, ids, model)
    if backend == "milvus":  # the record first: a collection whose items came without it would search in Hamming order
        index.save_record()
        index.add(items["codes"], ids=ids, labels=items["labels"], embeddings=emb, instance=instance)
        return Built(index, len(ids), items["bits"], dim, None, index.instance_bits)
    index.add(items["codes"], ids=ids, labels=items["labels"], embeddings=emb, instance=instance)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(out, "lbhash index build"):  # no server or other writer changes it meanwhile
        if Path(out).exists() and not overwrite:  # made by another writer since the check above
            raise InputError(f"{out} exists: choose another --out to keep it, or pass --overwrite to replace it")
        index.save(out)
    return Built(index, len(ids), items["bits"], dim, searches(index), index.instance_bits)


def _refuse_perceptual(options: IndexOptions, source: Path, spec: str | None) -> None:
    """`--perceptual` where it cannot be, refused before any work: too few instance bits to leave any beside the
    hashes, or a source without pixels (a run of feature rows, a codes file)."""
    if not options.perceptual:
        return
    if (options.instance_bits or 0) <= PERCEPTUAL_BITS:
        raise InputError(f"--perceptual: the instance code's {options.instance_bits or 0} bits leave none beside the "
                         f"photos' {PERCEPTUAL_BITS} hash bits; give --instance-bits {2 * PERCEPTUAL_BITS} or more")
    if not source.is_dir():
        raise InputError(f"--perceptual: {source} is a codes file, with no pixels to hash: index the run of photos")
    if spec is None or not index_inputs.has_sources(spec):
        raise InputError(f"--perceptual: {source} is not a run of photos, so there are no pixels to hash")


def _kept(transform, mark, emb, float_rows, hashes=None):
    """(the items' instance codes, the float rows the index keeps, its same-picture record): the calibration's
    copies meet the float rows the index keeps (or its instance codes alone). `hashes`: the items' perceptual
    codes, where the transform keeps them."""
    if transform is None:
        return None, emb if float_rows else None, None
    instance, kept = transform.apply(emb, perceptual=hashes), transform.rows(emb) if float_rows else None
    return instance, kept, mark(instance, kept)


def _check_out(out: str, overwrite: bool) -> None:
    refuse_inside_run(out, "--out")
    if Path(out).exists() and not overwrite:
        raise InputError(f"{out} exists: choose another --out to keep it, or pass --overwrite to replace it")


def _outside_training_items(source: Path, ids: np.ndarray, bits: int | None) -> np.ndarray:
    """The run's training items, where its instance transform needs them and the index holds fewer
    than 2 of them (`_instance_transform`); else none."""
    if not bits:
        return np.zeros(0, np.int64)
    train = index_inputs.run_training_items(source)
    return train if np.isin(train, ids).sum() < 2 else np.zeros(0, np.int64)


def _instance(source: Path, spec, ids: np.ndarray, emb, options: IndexOptions, photos: bool, train_emb=None):
    """(the instance transform of a new index, what it was made from, a function of (its instance codes, its
    float rows) to its same-picture record, the items' perceptual codes where the transform keeps them), or
    (None, None, None, None) for none. A run of photos learns it from edited copies of its training photos
    (lbhash.indexes.instance_learning) unless `options` say itq or pca, or it has too few (a warning says so);
    anything else fits the ITQ (or PCA) code (`_instance_transform`). Its last bits are the photos' perceptual
    hashes as `options.perceptual` says (`_perceptual`)."""
    bits, method = options.instance_bits, options.instance_method
    run_photos = RunPhotos(source, spec) if photos and spec is not None and emb is not None and bits else None
    held = held_photos(ids) if run_photos is not None else None
    transform, fitted_on = None, None
    if method == "learned" and run_photos is None and bits and emb is not None:
        raise InputError(f"--instance-method learned: {source} is not a run of photos, so there are no photos to "
                         "edit and learn an instance code on; use itq or pca")
    if run_photos is not None and method in (None, "learned") and _default_bits(bits, emb.shape[1]):
        transform, fitted_on = _learned(run_photos, source, ids, emb, _default_bits(bits, emb.shape[1]), held)
    if transform is None:
        transform, fitted_on = _instance_transform(source, spec, ids, emb, bits, train_emb, method or "itq")
    if transform is None:
        return None, None, None, None
    if _perceptual(options, transform, run_photos is not None):
        transform = transform.with_perceptual(PERCEPTUAL_BITS)
        fitted_on += f", then {PERCEPTUAL_BITS} bits of each photo's perceptual hashes"
    hashes = run_photos.perceptual(ids) if transform.perceptual_bits else None
    if run_photos is not None:
        return transform, fitted_on, lambda codes, floats: run_photos.calibrate(ids, held, transform, codes, floats), \
            hashes
    why = ("the index was built from a codes file, without the model that made it: there are no copies to calibrate "
           "a same-picture mark on") if spec is None else \
        "the index's items are not photos: there are no edited copies to calibrate a same-picture mark on"
    return transform, fitted_on, lambda codes, floats: no_mark(why), None


def _perceptual(options: IndexOptions, transform, photos: bool) -> bool:
    """Whether the instance code's last PERCEPTUAL_BITS are the photos' perceptual hashes: as `options` say (a
    source without pixels was refused by `_refuse_perceptual`), by default where the code is learned from photos
    (measured better there: the codes alone, and the same-picture mark with float rows too; docs/results/copies.md,
    "Perceptual bits in the instance code", "The mark by the perceptual hashes too")."""
    if options.perceptual is None:
        return photos and transform.method == "learned" and transform.bits > PERCEPTUAL_BITS
    if options.perceptual and transform.bits <= PERCEPTUAL_BITS:  # (the default length cut to a narrow embedding)
        raise InputError(f"--perceptual: the instance code's {transform.bits} bits (the embeddings' width) leave none "
                         f"beside the photos' {PERCEPTUAL_BITS} hash bits")
    return bool(options.perceptual)


def _learned(run_photos, source: Path, ids: np.ndarray, emb, bits: int, held):
    """(the learned transform, what it learned from), or (None, None) with a warning where the index holds too
    few of the run's training photos; the photos `held` out for the mark are not learned from."""
    train = index_inputs.run_training_items(source)
    # the training photos the index holds (not an unreadable one it skipped), but those held out for the mark
    train = train[np.isin(train, ids) & ~np.isin(train, held)]
    order = np.argsort(ids, kind="stable")
    train_emb = np.asarray(emb)[order[np.searchsorted(ids[order], train)]]
    transform, why = run_photos.learn(train, train_emb, bits)
    if transform is None:
        import warnings

        from lbhash.errors import LbhashWarning

        warnings.warn(why, LbhashWarning, stacklevel=4)
        return None, None
    used = min(len(train), MAX_LEARN_PHOTOS)
    return transform, f"learned from {used} of the run's training photos and {COPIES} edited copies of each"


def _default_bits(bits: int, width: int) -> int:
    """The default length cut to the embeddings' width (at most one bit per dimension)."""
    return width // 8 * 8 if bits == INSTANCE_BITS and width < bits else bits


def _instance_transform(source: Path, spec: str | None, ids: np.ndarray, emb, bits: int | None, train_emb=None,
                        method: str = "itq"):
    """(the instance transform of a new index, what it was fitted on), or (None, None) for none:
    `bits` None or 0, or no embeddings to make them from (a codes file without them: only the
    default is left out quietly; an explicit length is refused). The default length is cut to the
    embeddings' width where that is less. `train_emb`: the training items' embeddings where the
    caller's pass computed them."""
    if not bits:
        return None, None
    if emb is None:
        if bits != INSTANCE_BITS:
            raise InputError(f"--instance-bits {bits}: {source} holds no embeddings to make instance codes from "
                             "(encode with `lbhash encode --embeddings`)")
        return None, None
    bits = _default_bits(bits, emb.shape[1])
    if not bits:
        return None, None
    if spec is None:  # a codes file: its own items are all there is
        return fit_transform(emb, bits, method=method), f"the {len(emb)} items of {source.name}"
    train = index_inputs.run_training_items(source)
    inside = np.isin(train, ids)
    if inside.sum() >= 2:  # the training items the index holds (an image skipped as unreadable is not read again)
        order = np.argsort(ids, kind="stable")
        rows = order[np.searchsorted(ids[order], train[inside])]
        return (fit_transform(np.asarray(emb)[rows], bits, method=method),
                f"the run's {int(inside.sum())} training items in the index")
    if train_emb is None:  # an index of other items: the training items' own pass
        train_emb = index_inputs.run_embeddings(source, train, spec)
    return fit_transform(train_emb, bits, method=method), f"the run's {len(train)} training items"

class IndexDirectory:
    """A saved CodeIndex directory, changed under its writer lock and saved atomically."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def add(self, codes_file: str | Path, upsert: bool = False) -> tuple[np.ndarray, int]:
        """Add the items of a codes file (`lbhash encode`): (their ids, the index's count after).
        An index that keeps embeddings or instance codes takes them from the file's embeddings; a file
        without them is refused."""
        with writer_lock(self.path, "lbhash index add"):  # read, change and save with no other writer
            index = CodeIndex.load(self.path)
            items = index_inputs.codes_file(codes_file)
            if items["bits"] != index.bits:
                raise InputError(f"{codes_file} holds {items['bits']}-bit codes but {self.path} holds "
                                 f"{index.bits}-bit codes")
            if index.embedding_dim is not None and items["embeddings"] is None and len(items["codes"]):
                raise InputError(f"{self.path} keeps a {index.embedding_dim}-dimensional embedding per item but "
                                 f"{codes_file} holds none: encode with `lbhash encode --embeddings`")
            transform = index_transform(index, str(self.path))
            emb, instance = payload_of(transform, index, items["embeddings"], len(items["codes"]), str(codes_file))
            try:
                ids = index.add(items["codes"], ids=items["ids"], labels=items["labels"], upsert=upsert,
                                embeddings=emb, instance=instance)
            except InputError as err:  # (the engine names the field; the file is what the user gave)
                raise InputError(f"{codes_file}: {err}") from None
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
        """What `lbhash index info` prints: kind, size, how it searches, embeddings, instance codes,
        bytes per item, bytes on disk and the sources it records (its files' checksums verified on the way)."""
        index = CodeIndex.load(self.path)
        record = read_sources(index)
        transform = index_transform(index, str(self.path))
        stats = index.stats()
        return {"backend": stats.pop("backend"), "path": str(self.path), **stats, "searches": searches(index),
                "instance_transform": None if transform is None else index.metadata["instance"],
                "same_picture": None if transform is None else mark_summary(index.metadata),
                **bytes_per_item(index, self.path), "bytes_on_disk": directory_bytes(self.path),
                "sources": f"{len(record)} items of {record.data}" if record else "none recorded"}


def bytes_per_item(index, path: Path | None = None) -> dict:
    """What one item costs: `code_bytes_per_item` (its class and instance codes, searched in memory),
    `table_bytes_per_item` (the instance codes' chunk tables of a large index, in memory only: 0 below
    lbhash.index._lookup.LOOKUP_MIN items or on Milvus), `float_bytes_per_item` (its float16 or int8 embedding:
    mapped on disk, read for a search's final candidates only; 0 when the index keeps none) and, for a
    saved index, `bytes_per_item_on_disk` (every file, ids and labels included, over the items held)."""
    tables = table_bytes_per_item(index.ntotal, index.instance_bits) if isinstance(index, CodeIndex) else 0
    out = {"code_bytes_per_item": index.bits // 8 + (index.instance_bits or 0) // 8, "table_bytes_per_item": tables,
           "float_bytes_per_item": np.dtype(index.embedding_dtype).itemsize * (index.embedding_dim or 0)}
    if path is not None and index.ntotal:
        out["bytes_per_item_on_disk"] = round(directory_bytes(path) / index.ntotal, 1)
    return out


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


def _new_milvus(at: IndexLocation, bits: int, kind: str, given: dict, overwrite: bool, dim: int | None = None,
                instance_bits: int | None = None):
    """An empty Milvus collection `at` (its backend milvus) of this shape; one holding items is
    replaced only with `overwrite`."""
    from lbhash.index.milvus import MilvusIndex

    if set(given) - {"nlist", "nprobe"}:
        raise InputError(f"--{sorted(set(given) - {'nlist', 'nprobe'})[0]} does not apply to the milvus backend")
    name, shape = at.target, dict(kind=kind, **given, embedding_dim=dim, instance_bits=instance_bits)
    index = MilvusIndex(bits, collection=name, **_at(at.uri), **shape)
    if index.ntotal and not overwrite:
        raise InputError(f"Milvus collection {name!r} already holds {index.ntotal} items: choose another --out to "
                         "keep them, or pass --overwrite to replace them")
    if index.ntotal or index.bits != bits or index.embedding_dim != dim or index.instance_bits != instance_bits:
        index.drop()
        index = MilvusIndex(bits, collection=name, **_at(at.uri), **shape)
    index.metadata, index.attachments = {}, {}  # (an empty collection's old record is replaced)
    return index
