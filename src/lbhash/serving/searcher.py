"""Raw inputs (feature vectors or images) through an encoder: `QueryEncoder` makes a search's
`Queries` (what `lbhash search` and the service both search with), `Searcher` searches a backend
with them, and `search_index` is the search of an index with queries from files (`lbhash search`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash.codes import pack, to_signs
from lbhash.data.image_sources import decode_image, is_image_name
from lbhash.data.perceptual import perceptual_codes
from lbhash.data.views import ITEM_VIEW, item_embedding, item_views
from lbhash.encoders import INPUT_KINDS, Encoder
from lbhash.errors import InputError
from lbhash.index.backend import Backend, InRange, TopK
from lbhash.index.blend import Blended, blended_search
from lbhash.index.hits import Queries, SearchOptions, Spelling, check_classes, plan_search, search_hits
from lbhash.index.rescore import RESCORE_FACTOR
from lbhash.instance import InstanceTransform, mark_why
from lbhash.indexes import index_inputs
from lbhash.indexes.index_dir import IndexLocation
from lbhash.indexes.instance_codes import index_transform
from lbhash.indexes.origins import read_sources

IMAGE_ARRAY_SUFFIXES = (".npz", ".npy", ".mat")  # images: an image array, read as image-array:PATH


def ranked_queries(codes: np.ndarray, embeddings: np.ndarray, floats: bool,
                   transform: InstanceTransform | None, perceptual=None) -> Queries:
    """The `Queries` of a ranked search from the queries' packed `codes` and `embeddings`: the
    embeddings where the index keeps its own (`floats`), and where it keeps instance codes
    (`transform`), the queries' instance codes (with the photos' `perceptual` codes where the transform
    keeps them) and the cosine's centre (with floats)."""
    if transform is None:
        return Queries(codes, embeddings if floats else None)
    # the cosine's rows: those of the transform's learned space (already centred), or the embeddings centred
    # on the transform's mean
    rows, center = (transform.rows(embeddings, "query embeddings"), None) if transform.maps_floats else \
        (embeddings, transform.mean)
    return Queries(codes, rows if floats else None, transform.apply(embeddings, "query embeddings", perceptual),
                   center if floats else None)


class QueryEncoder:
    """The encoder that made an index's `bits`-bit codes (a run's torch model or an export); its
    methods take feature rows, an image batch or a list of images of any sizes (the encoder checks them)."""

    def __init__(self, encoder: Encoder, bits: int):
        kind = getattr(encoder, "input_kind_", None)
        if kind not in INPUT_KINDS:
            raise InputError(f"the encoder's input_kind_ must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
        if int(encoder.bits_) != bits:
            raise InputError(f"the encoder makes {encoder.bits_}-bit codes but the index holds {bits}-bit codes")
        self.encoder, self.bits = encoder, bits

    @property
    def input_kind(self) -> str:
        return self.encoder.input_kind_

    @property
    def gives_embeddings(self) -> bool:
        """Whether the encoder gives embeddings (`outputs`; an image export's graph does not)."""
        return self.encoder.no_embeddings_ is None

    def encode(self, inputs, json_numbers: bool = False) -> np.ndarray:
        """Packed codes uint8 (n, bits // 8) of the inputs; json_numbers: they came from JSON."""
        return self.encoder.encode(inputs, json_numbers=json_numbers)

    def embed(self, inputs, json_numbers: bool = False) -> np.ndarray:
        """The encoder's real outputs float32 (n, bits), whose signs are the codes."""
        return self.encoder.embed(inputs, json_numbers=json_numbers)

    def embeddings(self, inputs, json_numbers: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(packed codes, embeddings float32 (n, d)) of the inputs, from one forward pass."""
        real, emb = self.encoder.outputs(inputs, json_numbers=json_numbers)
        return pack(to_signs(real, "real outputs")), emb

    def item_embeddings(self, images: list[np.ndarray], view: str = ITEM_VIEW) -> tuple[np.ndarray, np.ndarray]:
        """(packed codes, embeddings float32 (n, d)) of photos to add to an index that records the item
        view `view` (lbhash.data.views): the codes of the photos, and `item_embedding` of the photos'
        embeddings and of their views' (a forward pass each)."""
        views = item_views(view)  # (an unknown view refused before any pass)
        codes, emb = self.embeddings(images)
        return codes, item_embedding(emb, [self.embeddings([see(img) for img in images])[1] for see, _ in views], view)

    def queries(self, inputs, *, rank: bool, json_numbers: bool = False, floats: bool = True,
                instance: InstanceTransform | None = None) -> Queries:
        """The `Queries` of the inputs: their codes and, for a ranked search (rank=True), what it
        needs from the same forward pass (`ranked_queries`: `floats`, the index keeps embeddings;
        `instance`, its instance transform, and the photos' perceptual codes where it keeps them)."""
        if not rank:
            return Queries(self.encode(inputs, json_numbers))
        hashes = self.perceptual(inputs, instance)
        return ranked_queries(*self.embeddings(inputs, json_numbers), floats, instance, hashes)

    def perceptual(self, inputs, transform: InstanceTransform | None) -> np.ndarray | None:
        """The packed perceptual codes of image `inputs` where the instance `transform` keeps them, else None
        (feature rows have no pixels: the transform then refuses them in one line)."""
        if transform is None or not transform.perceptual_bits or self.input_kind != "images":
            return None
        return perceptual_codes(list(inputs))

    def decode_images(self, blobs: list[bytes], names: list[str]) -> list[np.ndarray]:
        """uint8 (H, W, 3) images of encoded image files; `names` appear in errors."""
        if self.input_kind != "images":
            raise InputError("this run encodes feature vectors, not images")
        return [decode_image(blob, name) for blob, name in zip(blobs, names)]


class Searcher(QueryEncoder):
    """A `Backend` and the encoder that made its codes: searches raw inputs, as the backend's searches return."""

    def __init__(self, index: Backend, encoder: Encoder):
        if not isinstance(index, Backend):
            raise TypeError(f"a Searcher searches a lbhash.index.Backend, not {type(index).__name__}")
        super().__init__(encoder, index.bits)
        self.index = index

    def search(self, inputs, k: int, labels=None) -> TopK:
        """`index.search` of the inputs' codes: the Hamming order (ranked: `blended_search`)."""
        return self.index.search(self.encode(inputs), k, labels)

    def blended_search(self, inputs, k: int, labels=None, factor: int = RESCORE_FACTOR,
                       looks_like: float | None = None) -> Blended:
        """`lbhash.index.blended_search` of the inputs: candidates from their class codes and, where
        the index keeps them, their instance codes, scored with the cosine of their embeddings where
        the index keeps them (one forward pass gives all; docs/search.md, "Ranking")."""
        floats, transform = self.index.embedding_dim is not None, index_transform(self.index)
        queries = self.queries(inputs, rank=True, floats=floats, instance=transform)
        return blended_search(self.index, queries, k, labels, factor, looks_like)

    def range_search(self, inputs, radius: int, labels=None) -> InRange:
        return self.index.range_search(self.encode(inputs), radius, labels)


@dataclass(frozen=True)
class Names(Spelling):
    """How the caller names the search options and the query sources in its messages."""

    features: str = "features"
    images: str = "images"


@dataclass(frozen=True)
class QuerySource:
    """Where a search's queries come from, one of: a codes file (`codes`), feature rows
    (`features`: a file or a features:PATH data spec) or `images` (files, folders, image arrays)."""

    codes: Path | None = None
    features: str | None = None
    images: Sequence[str | Path] = ()


@dataclass(frozen=True)
class QueryModel:
    """The model that encodes feature or image queries: a trained run's (`run_dir`) or an export
    (`export_path`), at most one; `force`: encode even where it did not make the index's codes (warned)."""

    run_dir: Path | None = None
    export_path: Path | None = None
    force: bool = False

    def check(self, metadata: dict | None, index_dir) -> None:
        """`index_inputs.check_index_model`: refused (or warned) where it did not make the index's codes."""
        index_inputs.check_index_model(metadata, index_dir, self.run_dir, self.export_path, self.force)

    def encoder(self):
        """Its encoder (lbhash.encoders.Encoder); None where neither is given."""
        return index_inputs.query_encoder(self.run_dir, self.export_path)


@dataclass(frozen=True)
class Found:
    """`search_index`'s answer: per query a dict (query, name, ids, distances, scores when re-scored,
    labels, sources when known, query_labels when known); the index's class names (None: unnamed)."""

    results: list[dict]
    class_names: list[str] | None
    no_mark: str | None = None  # why no hit can be marked the same picture, where the search ranked by instance codes


def search_index(location: IndexLocation, source: QuerySource, model: QueryModel = QueryModel(),
                 options: SearchOptions = SearchOptions(), *, classes: list[int] | None = None, rescore: bool = True,
                 names: Names = Names()) -> Found:
    """Search a saved index (or Milvus collection) at `location` with the queries of one `source`, feature
    rows and images encoded by the run or export (`model`) that made the index's codes (another is
    refused; its `force`: warned); `classes`: the class ids an item must share one of.
    The options are checked before the index is read. A top k is ranked by default (lbhash.index.blend)
    where the index keeps embeddings or instance codes and the queries have embeddings; a factor or
    looks_like among the `options` asks for it, rescore=False never (the Hamming order)."""
    plan_search(options, options.asks_ranking, names)  # (checks)
    classes = None if classes is None else check_classes([classes], names.classes)[0]
    index = location.open()
    if source.codes is None:
        model.check(index.metadata, location.target)
    encoder = None if source.codes is not None else model.encoder()
    transform = index_transform(index)
    rank = _ranks(index, transform, encoder, options.radius, options.asks_ranking, rescore, names)
    plan = plan_search(options, rank, names)
    query_names, queries, query_labels = _queries(index, source, encoder, rank, names, transform)
    hits = search_hits(index, queries, plan, None if classes is None else [classes] * len(queries))
    found = np.array(sorted({i for h in hits for i in h.ids}), np.int64)
    record = read_sources(index)  # sources and class names, parsed once
    source_of = _hit_sources(index, record, found, model.run_dir, location)
    results = [{"query": q, "name": query_names[q], "ids": h.ids, "distances": h.distances,
                **({"scores": h.scores} if h.scores is not None else {}),
                **({"instance_distances": h.instance_distances} if h.instance_distances is not None else {}),
                **({"same": h.same} if h.same is not None else {}),
                "labels": h.labels, **({"sources": [source_of.get(x) for x in h.ids]} if source_of else {}),
                **({"query_labels": query_labels[q]} if query_labels is not None else {})}
               for q, h in enumerate(hits)]
    no_mark = mark_why(index.metadata) if rank and transform is not None else None
    return Found(results, (record.class_names or None) if record is not None else None, no_mark)


def _ranks(index, transform, encoder, radius, asked: bool, rescore: bool, names: Names) -> bool:
    """Whether the search is ranked (lbhash.index.blend): by default where the index keeps embeddings
    or instance codes and the queries have embeddings (feature rows, images through an encoder that
    gives them) for a top k; `asked` (a factor or looks_like given) asks for it; rescore=False never."""
    if not rescore:
        return False
    if index.embedding_dim is None and transform is None:
        if asked:
            raise InputError(f"{names.factor}, {names.looks_like}: the index keeps neither embeddings nor instance "
                             "codes, so it cannot rank; build it with them (`lbhash index build` keeps both by "
                             f"default) or leave out {names.factor} and {names.looks_like}")
        return False
    if asked:
        return True  # (an encoder without embeddings then says so in one line)
    return encoder is not None and radius is None and QueryEncoder(encoder, index.bits).gives_embeddings


def _queries(index, source: QuerySource, encoder, rank: bool, names: Names, transform: InstanceTransform | None = None):
    """The names, `Queries` (what a ranked search needs where rank=True: `ranked_queries`) and
    class-id lists (None: no labels) of the queries of `source`."""
    if source.codes is not None:
        query_names, packed, labels = _code_queries(index, source.codes)
        return query_names, Queries(packed), labels
    from lbhash.data import load_data

    run = QueryEncoder(encoder, index.bits)
    features = source.features
    _check_query_kind(run.input_kind, features, source.images, names)
    if features is not None:
        spec = features if features.startswith("features:") else f"features:{features}"
        inputs = load_data(spec, labels_required=False)
        query_names, labels = [f"row {i}" for i in range(len(inputs))], _label_lists(inputs.labels)
    else:
        query_names, inputs = _image_queries(run, source.images, names)
        labels = None
    floats = index.embedding_dim is not None
    return query_names, run.queries(inputs, rank=rank, floats=floats, instance=transform if rank else None), labels


def _check_query_kind(kind: str, features, images, names: Names) -> None:
    """Feature rows for a run on features, images for a run on images: one line otherwise."""
    given, wanted = (names.features if features is not None else names.images), \
        (names.features if kind == "features" else names.images)
    if given != wanted:
        what = features if features is not None else " ".join(map(str, images))
        forms = {names.features: ("feature rows", "a .npy or feature file"),
                 names.images: ("images", "image files, folders of them or an image array")}
        raise InputError(f"{given} {what}: {given} takes {forms[given][0]}, but the run encodes {kind}; give "
                         f"its queries with {wanted} ({forms[wanted][1]})")


def _image_queries(run, images, names: Names) -> tuple[list[str], list[np.ndarray]]:
    """The names and uint8 (H, W, 3) images of `images`: files, the image files of directories,
    and the rows of image arrays (named `FILE row N`, as an index names them)."""
    from lbhash.data import load_data

    query_names, pixels = [], []
    for path in map(Path, images):
        if str(path).startswith("image-array:") or path.suffix.lower() in IMAGE_ARRAY_SUFFIXES:
            spec = str(path) if str(path).startswith("image-array:") else f"image-array:{path}"
            data = load_data(spec, labels_required=False)
            query_names += [str(s) for s in data.item_sources(None)]
            pixels += list(data.pixels)
        else:
            files = _image_files([path], names)
            query_names += [str(f) for f in files]
            pixels += run.decode_images([f.read_bytes() for f in files], [str(f) for f in files])
    return query_names, pixels


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


def _image_files(images, names: Names) -> list[Path]:
    """Image files, and the image files under folders: a class-folder tree of photos is searched
    whole, by path (hidden files and folders left out, as training leaves them out)."""
    files = []
    for path in images:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if is_image_name(p.name) and p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or directory")
    if not files:
        raise InputError(f"{names.images} {' '.join(map(str, images))}: no image files there")
    return files


def _hit_sources(index, record, ids, run_dir, location: IndexLocation) -> dict:
    """id -> the file, member or row it came from: the index's own `record` (lbhash.indexes.origins),
    else, for an index built from a run on image data whose run is given, that run's data."""
    from lbhash.serving.uploads import KeptImages, item_origin, media_dir_for

    record = record if len(ids) else None
    media = media_dir_for(location.target) if location.backend == "faiss" else None
    kept = KeptImages(media, writer=False) if media is not None and media.is_dir() else None
    if record is not None or kept is not None:
        found = {i: item_origin(i, record, kept)[0] for i in ids.tolist()}
        return {i: s for i, s in found.items() if s is not None}
    data = index.metadata.get("data")
    if run_dir is None or not isinstance(data, str) or not len(ids) or not index_inputs.has_sources(data) or \
            index_inputs.run_data(run_dir) != data:  # (feature rows have no file: the run is not read)
        return {}
    found = index_inputs.item_sources(data, ids)
    return {i: s for i, s in zip(ids.tolist(), found) if s is not None}
