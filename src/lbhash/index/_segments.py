"""The two segments of a `CodeIndex`, so that a change costs what it changes.

The main segment holds the items in ascending id order in the kind's FAISS structure (adds above
its largest id are appended); removals are tombstones and other adds go to the tail, a small
exact flat segment. Both are merged by (distance, id) and folded back into one main segment once
they pass `fragment_limit(n)`, so a change costs O(changed items) amortised. A search runs over
the live segments (`topk_over`, `range_over`), one group of queries per label row (`query_groups`).
"""

from __future__ import annotations

import numpy as np

from lbhash.codes import hamming_distance
from lbhash.index._engines import FlatEngine, Rows
from lbhash.index._lookup import LookupEngine, tables_of
from lbhash.index.backend import PAD_DISTANCE, PAD_ID
from lbhash.index.sparse_labels import SparseLabels

FRAGMENT_SHARE = 16           # fold once dead + tail items pass n / 16 ...
FRAGMENT_MIN = 1024           # ... but not before 1024 (small indexes would fold on every change)
FRAGMENT_MAX = 262_144        # ... nor after 262,144 (the tail is scanned in full by each search)


def fragment_limit(n: int) -> int:
    """How many dead and tail items an index of n live items carries before it folds them."""
    return int(min(max(n // FRAGMENT_SHARE, FRAGMENT_MIN), FRAGMENT_MAX))


class GrowingArray:
    """An array that appends in amortised O(added): capacity doubles, `view` is the filled part.
    A read-only start (a file map) is copied into owned memory by the first append."""

    def __init__(self, start: np.ndarray):
        if isinstance(start, np.memmap):  # a plain view of the same pages: np.memmap's slicing runs Python code
            start = start.view(np.ndarray)
        self._buf, self._n = start, len(start)

    @property
    def view(self) -> np.ndarray:
        return self._buf[:self._n]

    def __len__(self) -> int:
        return self._n

    def extend(self, values: np.ndarray) -> None:
        need = self._n + len(values)
        if need > len(self._buf) or not self._buf.flags.writeable:
            grown = np.empty((max(need, 2 * len(self._buf), 16),) + self._buf.shape[1:], self._buf.dtype)
            grown[:self._n] = self._buf[:self._n]
            self._buf = grown
        self._buf[self._n:need] = values
        self._n = need


class Segment:
    """Items of one FAISS structure in insertion order: ids, codes, sparse labels, tombstones and,
    where the index keeps them, unit embeddings and instance codes (lbhash.instance). `ordered` segments (the main one) hold ascending
    ids, found by binary search; the tail holds ids in arrival order, found through a dict."""

    def __init__(self, engine, ids: np.ndarray, codes: np.ndarray, labels: SparseLabels, ordered: bool,
                 embeddings: np.ndarray | None = None, instance: np.ndarray | None = None):
        self.engine, self.ordered = engine, ordered
        self._ids, self._codes = GrowingArray(ids), GrowingArray(codes)
        self._emb = None if embeddings is None else GrowingArray(embeddings)
        self._inst = None if instance is None else GrowingArray(instance)
        self._indptr, self._indices = GrowingArray(labels.indptr), GrowingArray(labels.indices)
        self.width = labels.width
        self._dead: GrowingArray | None = None  # bool per item, made by the first removal
        self.ndead = 0
        self.ascending = True  # ids arrived in ascending order: FAISS's tie order is then the id order
        self._where = None if ordered else {int(i): p for p, i in enumerate(ids.tolist())}
        self.lookup_tables = None  # the instance codes' chunk tables, once a search needs them (lbhash.index._lookup)

    @classmethod
    def empty_tail(cls, bits: int, width: int = 0, dim: int | None = None,
                   instance_bits: int | None = None, dtype=np.float16) -> "Segment":
        return cls(FlatEngine(bits, {}), np.empty(0, np.int64), np.empty((0, bits // 8), np.uint8),
                   SparseLabels.empty(0, width), ordered=False, embeddings=empty_embeddings(dim, dtype),
                   instance=empty_instance(instance_bits))

    def with_payloads(self, dim: int | None, instance_bits: int | None, dtype=np.float16) -> "Segment":
        """This empty segment keeping embeddings of width `dim` (as `dtype`) and instance codes of
        `instance_bits` (None: none), for the first add that brings them."""
        if len(self):  # CodeIndex checks first: a bug otherwise
            raise RuntimeError("only an empty segment starts keeping embeddings or instance codes")
        return Segment(self.engine, self.rows.ids, self.rows.codes, self.labels, self.ordered,
                       empty_embeddings(dim, dtype), empty_instance(instance_bits))

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def alive(self) -> int:
        return len(self) - self.ndead

    @property
    def rows(self) -> Rows:
        return Rows(self._ids.view, self._codes.view)

    @property
    def embeddings(self) -> np.ndarray | None:
        """Embeddings as stored (len, d) by position (unit float16 rows, or int8); None where the index keeps none."""
        return None if self._emb is None else self._emb.view

    @property
    def instance(self) -> np.ndarray | None:
        """Packed instance codes uint8 (len, instance_bits // 8) by position; None where the index keeps none."""
        return None if self._inst is None else self._inst.view

    @property
    def labels(self) -> SparseLabels:
        return SparseLabels(self._indptr.view, self._indices.view, self.width)

    @property
    def last_id(self) -> int:
        return int(self._ids.view[-1]) if len(self) else -1

    def live(self) -> np.ndarray:
        """Bool (len,): which positions hold live items (a new array)."""
        return np.ones(len(self), bool) if self._dead is None else ~self._dead.view

    @property
    def dead(self) -> np.ndarray | None:
        """Bool (len,): which positions hold removed items (its own array; None before a removal)."""
        return None if self._dead is None else self._dead.view

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """The position of each id's live item here, -1 where it has none."""
        if not len(self) or not len(ids):
            return np.full(len(ids), -1, np.int64)
        if not self.ordered:
            where = self._where
            return np.fromiter((where.get(i, -1) for i in ids.tolist()), np.int64, len(ids))
        held = self._ids.view
        first = held[0]
        if held[-1] - first == len(held) - 1:  # consecutive ids (ascending, distinct): the position is the offset
            pos = np.clip(ids - first, 0, len(held) - 1)  # (a binary search of 1M ids cost a ranked search 0.1 ms)
        else:
            pos = np.minimum(np.searchsorted(held, ids), len(held) - 1)
        found = held[pos] == ids
        if self._dead is not None:
            found &= ~self._dead.view[pos]
        return np.where(found, pos, -1)

    def append(self, ids: np.ndarray, codes: np.ndarray, labels: SparseLabels,
               embeddings: np.ndarray | None = None, instance: np.ndarray | None = None) -> None:
        """Add items (ids ascending within the call; above `last_id` for an ordered segment), with
        their unit embeddings and instance codes exactly when the segment keeps them."""
        if not len(ids):
            return
        if (embeddings is None) != (self._emb is None) or (instance is None) != (self._inst is None):
            raise RuntimeError("codes, embeddings and instance codes must be added together")  # CodeIndex checks first
        if len(self) and ids[0] <= self.last_id:
            self.ascending = False
        start = len(self)
        offset = self._indptr.view[-1]
        self._ids.extend(ids)
        self._codes.extend(codes)
        if self._emb is not None:
            self._emb.extend(embeddings)
        if self._inst is not None:
            self._inst.extend(instance)
        self._indptr.extend(labels.indptr[1:] + offset if offset else labels.indptr[1:])  # (no temporary)
        self._indices.extend(labels.indices)
        self.width = max(self.width, labels.width)
        if self._dead is not None:
            self._dead.extend(np.zeros(len(ids), bool))
        if self._where is not None:
            self._where.update(zip(ids.tolist(), range(start, start + len(ids))))
        self.engine.on_append(self.rows, codes, ids)

    def kill(self, positions: np.ndarray) -> None:
        """Mark live items dead; the FAISS structure keeps them until the index folds."""
        if not len(positions):
            return
        if self._dead is None:
            self._dead = GrowingArray(np.zeros(len(self), bool))
        self._dead.view[positions] = True
        self.ndead += len(positions)
        if self._where is not None:
            for i in self._ids.view[positions].tolist():
                del self._where[i]


# --- what `CodeIndex` does with segments ---------------------------------------------------

def folded(main: Segment, tail: Segment) -> Segment:
    """One ordered segment of the live items of both (a new one; neither is changed): O(n)."""
    if not main.ndead and not len(tail):
        return main  # nothing to fold
    keep_main, keep_tail = np.flatnonzero(main.live()), np.flatnonzero(tail.live())
    ids = np.concatenate([main.rows.ids[keep_main], tail.rows.ids[keep_tail]])
    order = np.argsort(ids, kind="stable")
    codes = np.concatenate([main.rows.codes[keep_main], tail.rows.codes[keep_tail]])[order]
    labels = SparseLabels.concat([main.labels.take(keep_main), tail.labels.take(keep_tail)]).take(order)
    payloads = [None if main_rows is None else np.concatenate([main_rows[keep_main], tail_rows[keep_tail]])[order]
                for main_rows, tail_rows in ((main.embeddings, tail.embeddings), (main.instance, tail.instance))]
    rows = Rows(ids[order], codes)
    removed = main.rows.ids[main.dead] if main.ndead else np.empty(0, np.int64)
    engine = main.engine.folded(rows, removed, tail.rows.ids[keep_tail], tail.rows.codes[keep_tail])
    return Segment(engine, rows.ids, rows.codes, labels, ordered=True, embeddings=payloads[0], instance=payloads[1])


def empty_embeddings(dim: int | None, dtype=np.float16) -> np.ndarray | None:
    """No embeddings of width `dim` and `dtype`, as a segment starts (None: the index keeps none)."""
    return None if dim is None else np.empty((0, dim), dtype)


def empty_instance(bits: int | None) -> np.ndarray | None:
    """No instance codes of `bits` bits, as a segment starts (None: the index keeps none)."""
    return None if bits is None else np.empty((0, bits // 8), np.uint8)


FIELDS = ("codes", "embeddings", "instance")


def codes_at(main: Segment, tail: Segment, found: tuple[np.ndarray, np.ndarray], field: str = "codes"
             ) -> np.ndarray:
    """Codes (or stored embeddings, or instance codes: `field`) of the items at `found` = (main
    positions, tail positions), -1 where an item is not in that segment (every item is in one)."""
    arrays = [seg.rows.codes if field == "codes" else getattr(seg, field) for seg in (main, tail)]
    if (found[0] >= 0).all():
        return arrays[0][found[0]]
    out = np.empty((len(found[0]), arrays[0].shape[1]), arrays[0].dtype)
    for rows, pos in zip(arrays, found):
        out[pos >= 0] = rows[pos[pos >= 0]]
    return out


def labels_at(main: Segment, tail: Segment, found: tuple[np.ndarray, np.ndarray], width: int) -> SparseLabels:
    """Labels of the items at `found` (as in `codes_at`), `width` classes wide."""
    in_main, in_tail = found
    if (in_main >= 0).all():
        labels = main.labels.take(in_main)
        return SparseLabels(labels.indptr, labels.indices, max(labels.width, width))
    parts = [seg.labels.take(pos[pos >= 0]) for seg, pos in ((main, in_main), (tail, in_tail))]
    source = np.concatenate([np.flatnonzero(in_main >= 0), np.flatnonzero(in_main < 0)])
    return SparseLabels.concat(parts, width).take(np.argsort(source, kind="stable"))


class InstanceView:
    """A segment seen through its instance codes: what `segment_knn` reads (rows, tombstones,
    labels), with an exact scan over the instance codes as its engine, or for a large segment a
    lookup in their chunk tables (lbhash.index._lookup)."""

    def __init__(self, segment: Segment, bits: int):
        tables = tables_of(segment)
        self._segment = segment
        self.engine = ScanEngine(bits, {}) if tables is None else LookupEngine(bits, tables)
        self.ordered, self.ascending = segment.ordered, segment.ascending
        self.ndead, self.dead, self.labels = segment.ndead, segment.dead, segment.labels

    def __len__(self) -> int:
        return len(self._segment)

    @property
    def rows(self) -> Rows:
        return Rows(self._segment.rows.ids, self._segment.instance)

    def live(self) -> np.ndarray:
        return self._segment.live()


class ScanEngine(FlatEngine):
    """An exact scan of rows it does not copy (`FlatEngine.knn` reads only the rows); range by numpy."""

    def range(self, rows: Rows, queries: np.ndarray, radius: int, allowed: np.ndarray | None):
        dist = hamming_distance(queries, rows.codes, self.bits)
        keep = dist <= radius
        if allowed is not None:
            keep &= allowed[None, :]
        q, pos = np.nonzero(keep)
        lims = np.concatenate([[0], np.cumsum(np.bincount(q, minlength=len(queries)))]).astype(np.int64)
        return lims, dist[q, pos].astype(np.int32), rows.ids[pos].astype(np.int64)


def allowed_items(segment: Segment, classes) -> np.ndarray | None:
    """The positions a search may return (live, and holding one of `classes` when given);
    None when every position may be returned."""
    if classes is None:
        return segment.live() if segment.ndead else None
    allowed = segment.labels.any_of(classes)
    return allowed & segment.live() if segment.ndead else allowed


def segment_knn(segment: Segment, queries: np.ndarray, k: int, classes) -> tuple[np.ndarray, np.ndarray]:
    """The segment's top-k (distances, ids) for each query, -1 ids where it has fewer."""
    rows, k = segment.rows, min(k, len(segment))
    if classes is None and segment.ndead and segment.ordered:  # ordered: ascending, no ties to redo
        return _knn_past_dead(segment, queries, k)
    allowed = allowed_items(segment, classes)
    if allowed is not None and not allowed.any():
        return np.full((len(queries), 0), -1, np.int32), np.full((len(queries), 0), -1, np.int64)
    dist, ids = segment.engine.knn(rows, queries, k, allowed)
    if not segment.ascending and ids.shape[1]:  # FAISS broke ties by position: redo the k-th's ties by id
        for q in np.flatnonzero(ids[:, -1] >= 0):
            _, d, i = segment.engine.range(rows, queries[q:q + 1], int(dist[q, -1]), allowed)
            order = np.lexsort((i, d))[:ids.shape[1]]
            dist[q], ids[q] = d[order], i[order]
    return dist, ids


def _knn_past_dead(segment: Segment, queries: np.ndarray, k: int):
    """Top-k of the live items of an ordered segment with tombstones: a few more fetched without a
    filter (which costs a full scan) less the dead; a row left short searches again, filtered."""
    rows, dead = segment.rows, segment.dead
    fetch = min(len(segment), k + min(segment.ndead, max(k, 32)))
    dist, ids = segment.engine.knn(rows, queries, fetch, None)
    gave_all = ids[:, -1] >= 0
    ok = (ids >= 0) & ~dead[np.minimum(np.searchsorted(rows.ids, np.maximum(ids, 0)), len(dead) - 1)]
    if ok[:, :k].all():  # the common case: no dead item among the first k
        return dist[:, :k], ids[:, :k]
    first = np.argsort(~ok, axis=1, kind="stable")[:, :k]  # the live ones, in their order
    dist, ids, ok = (np.take_along_axis(a, first, 1) for a in (dist, ids, ok))
    ids = np.where(ok, ids, -1)
    short = np.flatnonzero(~ok[:, -1] & gave_all) if fetch < len(segment) else np.empty(0, np.int64)
    if len(short):
        d, i = segment.engine.knn(rows, queries[short], k, ~dead)
        dist[short], ids[short] = -1, -1
        dist[short, :d.shape[1]], ids[short, :i.shape[1]] = d, i
    return dist, ids


def merged_topk(parts: list[tuple[np.ndarray, np.ndarray]], nq: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of several (distances, ids) results merged into the k smallest by (distance, id)."""
    parts = [p for p in parts if p[0].shape[1]]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.empty((nq, 0), np.int32), np.empty((nq, 0), np.int64)
    dist = np.concatenate([p[0] for p in parts], axis=1).astype(np.int64)
    ids = np.concatenate([p[1] for p in parts], axis=1)
    dist[ids < 0] = np.iinfo(np.int64).max
    order = np.lexsort((ids, dist), axis=1)[:, :k]
    dist = np.take_along_axis(dist, order, 1)
    ids = np.take_along_axis(ids, order, 1)
    return np.where(ids < 0, -1, dist).astype(np.int32), ids


def query_groups(filters: SparseLabels | None, nq: int):
    """(query numbers, class ids) per distinct label row (one group, classes None, if none).
    An item passes when it holds at least one of the row's classes."""
    return [(np.arange(nq), None)] if filters is None else [(members, c) for c, members in filters.groups()]


def topk_over(segments: list[Segment], queries: np.ndarray, k: int, groups) -> tuple[np.ndarray, np.ndarray]:
    """(distances int32 (nq, k), ids int64 (nq, k)) of the live segments' top k per query, by
    (distance, id), padded with PAD_DISTANCE / PAD_ID; `groups`: `query_groups`."""
    dist = np.full((len(queries), k), PAD_DISTANCE, np.int32)
    ids = np.full((len(queries), k), PAD_ID, np.int64)
    if not segments or not len(queries):
        return dist, ids
    for members, classes in groups:
        d, i = merged_topk([segment_knn(seg, queries[members], k, classes) for seg in segments], len(members), k)
        dist[members, :d.shape[1]], ids[members, :i.shape[1]] = d, i
    dist[ids < 0] = PAD_DISTANCE
    # engines return rows by distance; re-sort only rows where a tie is out of id order
    unsorted = ((dist[:, 1:] < dist[:, :-1])
                | ((dist[:, 1:] == dist[:, :-1]) & (ids[:, 1:] < ids[:, :-1]))).any(axis=1)
    rows = np.flatnonzero(unsorted)
    if len(rows):
        order = np.lexsort((ids[rows], dist[rows]), axis=1)
        dist[rows] = np.take_along_axis(dist[rows], order, 1)
        ids[rows] = np.take_along_axis(ids[rows], order, 1)
    return dist, ids


def range_over(segments: list[Segment], queries: np.ndarray, radius: int, groups
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lims, distances, ids) of every live item within `radius` of each query, FAISS's layout,
    each query's run by (distance, id); `groups`: `query_groups`."""
    nq = len(queries)
    parts_q, parts_d, parts_i = [np.empty(0, np.int64)], [np.empty(0, np.int32)], [np.empty(0, np.int64)]
    if segments and nq:
        for members, classes in groups:
            for seg in segments:
                allowed = allowed_items(seg, classes)
                if allowed is not None and not allowed.any():
                    continue
                lims, d, i = seg.engine.range(seg.rows, queries[members], radius, allowed)
                parts_q.append(np.repeat(members, np.diff(lims)))
                parts_d.append(d)
                parts_i.append(i)
    qidx, dist, ids = (np.concatenate(p) for p in (parts_q, parts_d, parts_i))
    order = np.lexsort((ids, dist, qidx))
    lims = np.concatenate([[0], np.cumsum(np.bincount(qidx, minlength=nq))]).astype(np.int64)
    return lims, dist[order].astype(np.int32), ids[order].astype(np.int64)
