"""Copies evaluated (`lbhash evaluate-copies`; docs/duplicates.md, "Finding the picture"): edited
copies of indexed photos (lbhash.data.edits) searched through the model that made the index, and how
often the original comes first, with the class precision of the same searches.

For each edit and each order, over the same sampled items:
- `recall@1`, `recall@10`: the share of copies whose original is the first hit, among the first 10;
- `class_p@10`: the share of the first 10 hits that share a label with the original;
- `map@100`: class mAP of the first 100 hits (AP over the relevant hits among them);
- `ms_per_query`: the searches' time per query (both k = 10 and k = 100 searches; the encoding apart);
- the same-picture mark (orders that rank by the instance codes, where the index has a calibrated mark):
  `mark_recall`, the share of copies whose first hit is their original and is marked; `mark_precision`,
  the share of marked first hits that are the original; `false_marks_absent`, the share of copies whose
  first hit is marked when their original is taken out of the index (in memory: the photo, for that
  search, is in no class of the index it was not in): every such mark is false, but for a real
  duplicate already in the data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lbhash.data.edits import EDITS, check_edits, edited
from lbhash.data.image_sources import decode_image
from lbhash.errors import InputError
from lbhash.index.blend import blended_search
from lbhash.index.hits import Queries
from lbhash.index.rescore import RESCORE_FACTOR
from lbhash.instance import MARK_KEY, learned_index
from lbhash.indexes.index_dir import bytes_per_item, open_index
from lbhash.indexes.instance_codes import default_looks_like, index_transform
from lbhash.indexes.origins import DataImages, read_sources

if TYPE_CHECKING:  # (the searcher, with the encoders, is imported where copies are encoded)
    from lbhash.serving.searcher import QueryModel

ORDERS = ("hamming", "codes", "blend")  # class code alone; both codes alone; the default ranking
DEFAULT_ITEMS = 200
K, MAP_K = 10, 100


@dataclass(frozen=True)
class Copies:
    """The sampled originals (`ids`, their class-id lists) and, per edit, the `Queries` of their copies."""

    ids: np.ndarray
    labels: list[list[int]]
    queries: dict[str, Queries]
    encode_seconds: float


def make_copies(index, encoder, items: int = DEFAULT_ITEMS, seed: int = 0, edits=tuple(EDITS)) -> Copies:
    """Edited copies of `items` indexed photos (a seeded sample of those whose source the index records),
    encoded by `encoder` (a `QueryEncoder`) with their embeddings and instance codes."""
    from lbhash.serving.searcher import QueryEncoder

    edits = check_edits(edits)
    if isinstance(items, bool) or not isinstance(items, int) or items < 1:
        raise InputError(f"--items must be a positive integer, got {items!r}")
    record = read_sources(index)
    if record is None:
        raise InputError("the index records no sources of its items (not built from a run on images): there are no "
                         "photos to edit")
    # the photos the index calibrated its mark on are left out: the mark's figures are then its own test
    calibrated = set(((index.metadata or {}).get(MARK_KEY) or {}).get("held") or ())
    held = np.array(sorted(i for i in index.ids().tolist() if record.source(i) is not None and i not in calibrated),
                    np.int64)
    if not len(held):
        raise InputError("the index records no sources of its items: there are no photos to edit")
    ids = np.sort(np.random.default_rng(seed).choice(held, min(items, len(held)), replace=False))
    reader = DataImages(record)
    originals = []
    for i in ids.tolist():
        blob = reader.read(i)
        originals.append(decode_image(blob, record.source(i)) if isinstance(blob, bytes) else np.asarray(blob))
    run = encoder if isinstance(encoder, QueryEncoder) else QueryEncoder(encoder, index.bits)
    transform = index_transform(index)
    start, queries = time.perf_counter(), {}
    for name in edits:
        copies = [edited(img, name) for img in originals]
        queries[name] = run.queries(copies, rank=True, floats=index.embedding_dim is not None, instance=transform)
    return Copies(ids, index.labels_of(ids), queries, time.perf_counter() - start)


def ranked_ids(index, queries: Queries, order: str, k: int, looks_like: float | None = None,
               factor: int = RESCORE_FACTOR) -> np.ndarray:
    """The ids (nq, k) of the queries' top k in `order` (ORDERS); `looks_like` None: the order's default."""
    if order == "hamming":
        return index.search(queries.codes, k).ids
    if queries.instance is None:
        raise InputError(f"order {order!r} ranks by instance codes, and the index keeps none")
    if order != "blend" or index.embedding_dim is None:  # the instance codes alone: no embeddings, no centre
        queries = Queries(queries.codes, instance=queries.instance)
    return blended_search(index, queries, k, None, factor, looks_like).ids


def ranked(index, queries: Queries, order: str, k: int, looks_like: float | None = None,
           factor: int = RESCORE_FACTOR) -> tuple[np.ndarray, np.ndarray]:
    """(ids (nq, k), same-picture marks (nq, k)) of the queries' top k in `order`: `ranked_ids` with the marks."""
    if order == "hamming":
        return index.search(queries.codes, k).ids, np.zeros((len(queries), k), bool)
    if order != "blend" or index.embedding_dim is None:
        queries = Queries(queries.codes, instance=queries.instance)
    got = blended_search(index, queries, k, None, factor, looks_like)
    return got.ids, got.same


def measure(index, copies: Copies, order: str, looks_like: float | None = None, factor: int = RESCORE_FACTOR,
            absent=None) -> dict:
    """Per edit: recall@1, recall@10, class_p@10, map@100 and ms_per_query of `order` (the module's list), and
    the mark's figures where it ranks by the instance codes; `absent`: the index without the originals
    (`without_originals`), for `false_marks_absent`."""
    out = {}
    for name, queries in copies.queries.items():
        start = time.perf_counter()
        top, marks = ranked(index, queries, order, K, looks_like, factor)
        wide = ranked_ids(index, queries, order, MAP_K, looks_like, factor)
        seconds = time.perf_counter() - start
        label_of = dict(zip(*_labels(index, np.concatenate([top.ravel(), wide.ravel()]))))
        relevant = np.array([[bool(set(label_of.get(h, ())) & set(own)) for h in row]
                             for row, own in zip(top, copies.labels)])
        out[name] = {"recall@1": float(np.mean(top[:, 0] == copies.ids)),
                     "recall@10": float(np.mean((top == copies.ids[:, None]).any(axis=1))),
                     "class_p@10": float(relevant.mean()),
                     "map@100": float(np.mean([_ap([bool(set(label_of.get(h, ())) & set(own)) for h in row])
                                               for row, own in zip(wide, copies.labels)])),
                     "ms_per_query": 1000 * seconds / (2 * len(copies.ids))}
        if order != "hamming":
            first_ok, first_marked = top[:, 0] == copies.ids, marks[:, 0]
            out[name].update({"mark_recall": float(np.mean(first_ok & first_marked)),
                              "mark_precision": float(np.mean(first_ok[first_marked])) if first_marked.any() else None})
            if absent is not None:
                out[name]["false_marks_absent"] = float(np.mean(ranked(absent, queries, order, 1, looks_like, factor)[1][:, 0]))
    return out


def without_originals(index_dir, ids: np.ndarray):
    """The index of `index_dir` loaded again and, in memory only, without the items `ids`."""
    absent = open_index(index_dir)
    absent.remove(ids)
    return absent


def _labels(index, ids: np.ndarray):
    found = np.unique(ids[ids >= 0])
    return found.tolist(), index.labels_of(found)


def _ap(relevant: list[bool]) -> float:
    """AP of one ranked list over the relevant hits in it (0 when none)."""
    hits = np.cumsum(relevant)
    rel = np.asarray(relevant, bool)
    return float((hits[rel] / (np.flatnonzero(rel) + 1)).mean()) if rel.any() else 0.0


def evaluate_copies(index_dir, model: QueryModel, items: int = DEFAULT_ITEMS, seed: int = 0, edits=tuple(EDITS),
                        looks_like: float | None = None, factor: int = RESCORE_FACTOR) -> dict:
    """`lbhash index duplicates`: the report of every order the index can rank by (ORDERS), per edit,
    with the bytes per item each order reads, its `looks_like` (None given: each order's default) and
    the encoding time per query; the copies are encoded by `model`, which must have made the index's codes."""
    index = open_index(index_dir)
    model.check(index.metadata, index_dir)
    copies = make_copies(index, model.encoder(), items, seed, edits)
    sizes = bytes_per_item(index)
    orders = [o for o in ORDERS if o == "hamming" or index.instance_bits is not None]
    if index.embedding_dim is None and "blend" in orders:
        orders.remove("blend")  # (the same as "codes" without float rows)
    report = {"items": len(copies.ids), "seed": seed, "edits": list(copies.queries), "looks_like": looks_like,
              "factor": factor, "encode_ms_per_query": 1000 * copies.encode_seconds / (len(copies.ids) * len(copies.queries)),
              "orders": {}}
    absent = without_originals(index_dir, copies.ids) if index.instance_bits is not None else None
    report["mark"] = (index.metadata or {}).get(MARK_KEY)
    for order in orders:
        code_bytes = index.bits // 8 + (0 if order == "hamming" else (index.instance_bits or 0) // 8)
        floats = sizes["float_bytes_per_item"] if order == "blend" else 0
        ranking = None if order == "hamming" else \
            looks_like if looks_like is not None else \
            default_looks_like(True, order == "blend", learned_index(index.metadata))
        report["orders"][order] = {"bytes_per_item": code_bytes + floats, "in_memory": code_bytes,
                                   "looks_like": ranking, "edits": measure(index, copies, order, ranking, factor, absent)}
    return report
