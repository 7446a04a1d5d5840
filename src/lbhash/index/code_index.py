"""`CodeIndex`: top-k and range search over packed binary codes with external ids and labels.

Results come by ascending Hamming distance, ties by ascending id (docs/search.md); short top-k rows
are padded with `PAD_ID` and `PAD_DISTANCE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash.checks import non_negative_int, positive_int
from lbhash.errors import Conflict, InputError, NotFound
from lbhash.index import _checks
from lbhash.index._engines import FlatEngine, Rows, positions_to_ids
from lbhash.index._lookup import both_candidates, tables_of
from lbhash.index._ivf import ENGINES, KINDS
from lbhash.index.backend import Backend, Candidates, FloatQueries, InRange, TopK
from lbhash.index._segments import (InstanceView, Segment, codes_at, empty_embeddings, empty_instance, folded,
                                    fragment_limit, labels_at, query_groups, range_over, topk_over)
from lbhash.index.rescore import embedding_dtype as dtype_named
from lbhash.index.rescore import stored_embeddings
from lbhash.index.sparse_labels import SparseLabels
from lbhash.index.storage import load_index, save_index


@dataclass
class AddPlan:
    """A validated add: what `CodeIndex.apply_add` will do (the service logs it first)."""

    ids: np.ndarray
    codes: np.ndarray
    labels: SparseLabels | None
    upsert: bool
    embeddings: np.ndarray | None = None  # unit rows float16, as stored (lbhash.index.rescore)
    instance: np.ndarray | None = None    # packed instance codes uint8 (n, instance_bits // 8)


class CodeIndex(Backend):
    """Packed binary codes (uint8, FAISS bit layout, `bits` a multiple of 8) with int64 ids.

    kind="flat" (default) returns exactly the brute-force result, tie order included; "ivf" and
    "multihash" are approximate: ivf finds an item only if its list is among the nprobe scanned
    (exact until trained, at 39 * nlist codes), multihash is exact in range search and wherever
    the k-th distance <= nhash * (nflip + 1) - 1 (docs/indexes.md, `IVFEngine`, `MultiHashEngine`).

    Parameters
    ----------
    bits : int
        Code length in bits, a multiple of 8 (codes are `bits // 8` bytes).
    kind : {"flat", "ivf", "multihash"}
        The FAISS structure behind the index.
    **params
        The kind's parameters (ivf: nlist, nprobe; multihash: nhash, nflip).

    Returns
    -------
    `search` returns `TopK` and `range_search` `InRange`, as `lbhash.index.Backend` says. An index
    keeps one embedding per item when its first add gives them (or `embedding_dim` is given):
    `lbhash.index.blended_search` ranks by them; and one instance code per item (a second packed
    code, `instance_bits` long: lbhash.instance) when its first add gives them (or `instance_bits` is
    given): `instance_search` searches them, `lbhash.index.blended_search` ranks by both codes.
    `embedding_dtype` "int8" keeps the embeddings as int8 rows (`lbhash.index.rescore.quantized`),
    half the bytes of the default float16 unit rows.

    Examples
    --------
    >>> import numpy as np
    >>> from lbhash.index import CodeIndex
    >>> codes = np.array([[0b00000000], [0b00000011], [0b11111111]], dtype=np.uint8)
    >>> index = CodeIndex(bits=8)
    >>> index.add(codes, labels=[[0], [1], [1]])
    array([0, 1, 2])
    >>> distances, ids = index.search(codes[:1], k=2)
    >>> distances.tolist(), ids.tolist()
    ([[0, 2]], [[0, 1]])
    >>> index.search(codes[:1], k=2, labels=[[1]])[1].tolist()  # only items of class 1
    [[1, 2]]
    """

    def __init__(self, bits: int, kind: str = "flat", embedding_dim: int | None = None,
                 instance_bits: int | None = None, embedding_dtype: str = "float16", **params):
        self._bits = _checks.check_bits(bits)
        if kind not in ENGINES:
            raise InputError(f"unknown index kind {kind!r} (known: {', '.join(KINDS)})")
        defaults = ENGINES[kind].defaults(self._bits)
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            allowed = ", ".join(defaults) or "none"
            raise InputError(f"unknown parameter {unknown[0]!r} for a {kind} index (allowed: {allowed})")
        merged = {**defaults, **{name: _param(name, value) for name, value in params.items()}}
        self._kind, self._params = kind, merged
        # items by id in the kind's structure, and the changes not folded into it yet
        # (lbhash.index._segments: tombstones, and a small exact tail for ids below the largest)
        dim = None if embedding_dim is None else positive_int(embedding_dim, "embedding_dim")
        ibits = None if instance_bits is None else _checks.check_bits(instance_bits, "instance_bits")
        self._emb_dtype = dtype_named(embedding_dtype)
        self._main = Segment(ENGINES[kind](self._bits, merged), np.empty(0, np.int64),
                             np.empty((0, self._bits // 8), np.uint8), SparseLabels.empty(), ordered=True,
                             embeddings=empty_embeddings(dim, self._emb_dtype), instance=empty_instance(ibits))
        self._tail = Segment.empty_tail(self._bits, 0, dim, ibits, self._emb_dtype)
        self._next_id = 0
        self.metadata: dict = {}  # free-form, saved in the manifest (the service keeps its log position)

    @property
    def bits(self) -> int:
        return self._bits

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def params(self) -> dict:
        return dict(self._params)

    @property
    def ntotal(self) -> int:
        return self._main.alive + self._tail.alive

    @property
    def embedding_dim(self) -> int | None:
        emb = self._main.embeddings
        return None if emb is None else emb.shape[1]

    @property
    def embedding_dtype(self) -> str:
        """How the index keeps its embeddings, where it keeps them: "float16" or "int8"."""
        return self._emb_dtype.name

    @property
    def instance_bits(self) -> int | None:
        inst = self._main.instance
        return None if inst is None else inst.shape[1] * 8

    @property
    def num_classes(self) -> int:
        """One past the largest class id ever added (or the widest multi-hot rows added)."""
        return max(self._main.width, self._tail.width)

    @property
    def next_id(self) -> int:
        """The id a default-numbered add starts from: one past the largest id ever added."""
        return self._next_id

    @property
    def exact(self) -> bool:
        """Whether a search now returns exactly the brute-force result: flat always, and an
        ivf index until it is trained (its codes wait in an exact buffer)."""
        return self._main.engine.exact or not self.is_trained

    @property
    def is_trained(self) -> bool:
        return getattr(self._main.engine, "trained", True)

    @property
    def train_size(self) -> int | None:
        """How many codes an untrained ivf index trains at (39 x nlist); None once trained
        and for the other kinds."""
        return None if self.is_trained else self._main.engine.min_train

    def ids(self) -> np.ndarray:
        """Every id held, ascending (a new array)."""
        parts = [seg.rows.ids[seg.live()] if seg.ndead else seg.rows.ids for seg in (self._main, self._tail)]
        return np.sort(np.concatenate(parts))

    def contains(self, ids) -> np.ndarray:
        """Which of the given ids are in the index (bool per id)."""
        return self._present(_checks.item_ids(ids))

    def __repr__(self) -> str:
        return f"CodeIndex(bits={self._bits}, kind={self._kind!r}, ntotal={self.ntotal}, params={self._params})"

    def stats(self) -> dict:
        """The index as `lbhash index info` and the service's /stats describe it (each adds its own)."""
        return {"backend": "faiss", "bits": self._bits, "kind": self._kind, "params": self.params,
                "ntotal": self.ntotal, "num_classes": self.num_classes, "exact": self.exact,
                "trained": self.is_trained, "next_id": self.next_id, "embedding_dim": self.embedding_dim,
                **({"embedding_dtype": self.embedding_dtype} if self.embedding_dim is not None else {}),
                "instance_bits": self.instance_bits}

    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None, instance=None) -> np.ndarray:
        """Add packed codes; return their ids (by default numbered on from the largest id ever added).

        Labels are kept sparsely whatever their form (memory follows the labels held, not the
        largest class id); upsert=True replaces an item's code and labels (labels=None: none).
        `embeddings` (n, d) go with the codes exactly when the index keeps them (the first add to
        an empty index without `embedding_dim` decides); they are stored as float16 unit rows (or
        int8: `embedding_dtype`).
        `instance` (n, instance_bits // 8) packed instance codes, likewise.
        """
        plan = self.prepare_add(codes, ids, labels, upsert, embeddings, instance)
        self.apply_add(plan)
        return plan.ids.copy()

    def prepare_add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None,
                    instance=None) -> AddPlan:
        """Validate an add against the current state without changing anything."""
        codes = _checks.packed_codes(codes, self._bits)
        n = len(codes)
        held = bool(self.next_id or self.ntotal)
        units = stored_embeddings(embeddings, n, self.embedding_dim, held, self._emb_dtype)
        instance = _checks.instance_codes(instance, n, self.instance_bits, held)
        if ids is None:
            ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        else:
            ids = _checks.item_ids(ids, n)
        rows = None if labels is None else _checks.label_rows(labels, n)
        if not upsert and self.ntotal and n:
            present = self._present(ids)
            if present.any():
                raise Conflict(f"id {int(ids[present][0])} is already in the index (pass upsert=True to replace it)")
        return AddPlan(ids, codes, rows, bool(upsert), units, instance)

    def apply_add(self, plan: AddPlan) -> None:
        """Apply a validated add: ids above the largest held are appended to the main segment,
        the others (and every upsert's new copy) go to the tail; a replaced item dies.
        Costs O(added items) amortised (lbhash.index._segments)."""
        if not len(plan.ids):
            return
        ids, codes, labels, emb, inst = plan.ids, plan.codes, plan.labels, plan.embeddings, plan.instance
        starts = (emb is not None and self.embedding_dim is None, inst is not None and self.instance_bits is None)
        if any(starts):  # the first add with embeddings or instance codes: they are kept
            dim = emb.shape[1] if emb is not None else None
            ibits = inst.shape[1] * 8 if inst is not None else None
            self._main = self._main.with_payloads(dim, ibits, self._emb_dtype)
            self._tail = self._tail.with_payloads(dim, ibits, self._emb_dtype)
        if (ids[1:] <= ids[:-1]).any():  # (ids in order, as numbered by default, need no sorted copies)
            order = np.argsort(ids, kind="stable")
            ids, codes, labels = ids[order], codes[order], None if labels is None else labels.take(order)
            emb = None if emb is None else emb[order]
            inst = None if inst is None else inst[order]
        labels = SparseLabels.empty(len(ids)) if labels is None else labels
        # only ids up to the largest held can be held (the tail's are below it too): those are
        # looked up, replaced, and go to the tail; the rest are appended to the main segment
        below = int(np.searchsorted(ids, self._main.last_id, side="right"))
        if below:
            in_main, in_tail = self._main.positions(ids[:below]), self._tail.positions(ids[:below])
            self._main.kill(in_main[in_main >= 0])
            self._tail.kill(in_tail[in_tail >= 0])
            self._tail.append(ids[:below], codes[:below], labels.take(np.arange(below)),
                              None if emb is None else emb[:below], None if inst is None else inst[:below])
            labels = labels.take(np.arange(below, len(ids)))
        self._main.append(ids[below:], codes[below:], labels, None if emb is None else emb[below:],
                          None if inst is None else inst[below:])
        self._next_id = max(self._next_id, int(ids[-1]) + 1)
        if below:
            self._fold_if_fragmented()

    def prepare_remove(self, ids) -> np.ndarray:
        """Validated ids to remove (every one must be present)."""
        ids = _checks.item_ids(ids)
        self._find(ids)
        return ids

    def remove(self, ids) -> int:
        """Remove items by id; an unknown id is an error (nothing is removed then). The items
        die in place (O(removed) amortised) and leave the FAISS structure when the index folds."""
        ids = self.prepare_remove(ids)
        if not len(ids):
            return 0
        for segment in (self._main, self._tail):
            found = segment.positions(ids)  # (ids are unique: so are their positions)
            segment.kill(found[found >= 0])
        self._fold_if_fragmented()
        return len(ids)

    def set_search_params(self, **params) -> None:
        """Change what a search probes without rebuilding: nprobe (ivf), nflip (multihash)."""
        allowed = {"ivf": ("nprobe",), "multihash": ("nflip",)}.get(self._kind, ())
        for name, value in params.items():
            if name not in allowed:
                raise InputError(f"{name!r} is not a search parameter of a {self._kind} index "
                                 f"(search parameters: {', '.join(allowed) or 'none'})")
            self._main.engine.set_search_param(name, _param(name, value))
            self._params[name] = int(value)

    def train(self) -> None:
        """Train an ivf index now on the codes it holds (it trains itself at 39 * nlist codes)."""
        if self._kind != "ivf":
            raise InputError(f"a {self._kind} index needs no training")
        if not self.is_trained:
            self.apply_fold(self.prepare_fold())
            self._main.engine.train(self._main.rows)

    def get(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(codes (m, bits // 8), labels (m, num_classes) bool) of the given ids, in that order
        (`get_codes` and `labels_of` give the same without the m x num_classes matrix)."""
        found = self._find(_checks.item_ids(ids))
        labels = labels_at(self._main, self._tail, found, self.num_classes)
        return codes_at(self._main, self._tail, found), labels.to_dense(self.num_classes)

    def get_codes(self, ids) -> np.ndarray:
        return codes_at(self._main, self._tail, self._find(_checks.item_ids(ids)))

    def get_embeddings(self, ids) -> np.ndarray:
        if self.embedding_dim is None:
            raise InputError("the index keeps no embeddings")
        return codes_at(self._main, self._tail, self._find(_checks.item_ids(ids)), "embeddings")

    def get_instance_codes(self, ids) -> np.ndarray:
        if self.instance_bits is None:
            raise InputError("the index keeps no instance codes")
        return codes_at(self._main, self._tail, self._find(_checks.item_ids(ids)), "instance")

    def both_candidates(self, queries, instance, k: int, labels=None, floats: FloatQueries | None = None) -> Candidates:
        """`Backend.both_candidates`; compiled (lbhash.index._lookup.both_candidates) for a flat index whose
        items are one main segment with chunk tables, no tombstone, and no label filter, which scores float16
        rows for `floats` by their positions (no id read)."""
        main = self._main
        tables = None if labels is not None or self._kind != "flat" or self._tail.alive or main.ndead \
            else tables_of(main)
        if tables is None:
            return super().both_candidates(queries, instance, k, labels)
        queries, instance = self._query_pair(queries, instance)
        pos, dist, inst = both_candidates(main, tables, queries, instance, min(_checks.top_k(k), len(main)))
        rows = main.embeddings
        scored = None if floats is None or rows is None or rows.dtype != np.float16 else floats.cosines(rows, pos)
        return Candidates(positions_to_ids(main.rows, pos), dist, inst, scored)

    def instance_search(self, queries, k: int, labels=None) -> TopK:
        """Top-k by the Hamming distance of instance codes (`queries` packed, instance_bits long), by
        (distance, id), for every kind: an exact scan, except that a main segment of at least
        `_lookup.LOOKUP_MIN` items gives the top k of its chunk tables' candidates (lbhash.index._lookup);
        `labels` as in `search`."""
        if self.instance_bits is None:
            raise InputError("the index keeps no instance codes")
        k = _checks.top_k(k)
        queries = _checks.packed_codes(queries, self.instance_bits, "instance queries")
        filters = None if labels is None else _checks.label_rows(labels, len(queries), "query labels")
        views = [InstanceView(seg, self.instance_bits) for seg in (self._main, self._tail) if seg.alive] \
            if self.ntotal else []
        return TopK(*topk_over(views, queries, k, query_groups(filters, len(queries))))

    def warm(self) -> None:
        """Load the exact scan's compiled code (numba, about 1 s once per process) now, not in the
        first search that needs it (`FlatEngine.knn`), and build a large index's instance chunk tables
        (lbhash.index._lookup) with a first lookup."""
        code = np.zeros((1, self._bits // 8), np.uint8)
        FlatEngine(self._bits, {}).ranked_knn(Rows(np.zeros(1, np.int64), code), code, 1, None)
        if self.instance_bits is not None and self.ntotal:
            self.instance_search(np.zeros((1, self.instance_bits // 8), np.uint8), 1)

    def labels_of(self, ids) -> list[list[int]]:
        in_main, in_tail = self._find(_checks.item_ids(ids))
        if (in_main >= 0).all():  # (every item in the main segment: no merge of two segments' rows)
            return self._main.labels.lists_at(in_main)
        return labels_at(self._main, self._tail, (in_main, in_tail), self.num_classes).to_lists()

    def search(self, queries, k: int, labels=None) -> TopK:
        """Top-k by Hamming distance (`TopK`). `labels` (class ids (nq,), multi-hot rows (nq, C) or
        `SparseLabels`) keeps, per query, the items sharing a label with its row (none: nothing)."""
        k = _checks.top_k(k)
        segments, queries, groups = self._search_over(queries, labels)
        return TopK(*topk_over(segments, queries, k, groups))

    def range_search(self, queries, radius: int, labels=None) -> InRange:
        """Every item within `radius` (inclusive) of each query (`InRange`); `labels` as in `search`."""
        radius = _checks.radius_value(radius)
        segments, queries, groups = self._search_over(queries, labels)
        return InRange(*range_over(segments, queries, min(radius, self._bits), groups))

    def prepare_fold(self) -> Segment:
        """The live items as one main segment, without changing the index (O(n)): removed items
        leave the FAISS structure and the tail (ids added below the largest) joins it."""
        return folded(self._main, self._tail)

    def apply_fold(self, main: Segment) -> None:
        """Adopt what `prepare_fold` returned (O(1); no change may come between the two)."""
        dim = None if main.embeddings is None else main.embeddings.shape[1]
        ibits = None if main.instance is None else main.instance.shape[1] * 8
        self._main, self._tail = main, Segment.empty_tail(self._bits, main.width, dim, ibits, self._emb_dtype)

    def save(self, path: str | Path) -> None:
        """Write the index directory atomically (see `lbhash.index.storage`), folding pending
        changes first, so that the index searches as the saved one will."""
        if self._fragments:  # (otherwise nothing changes: a server saves while searching)
            self.apply_fold(self.prepare_fold())
        save_index(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "CodeIndex":
        """Read an index directory, verifying the checksum of every file."""
        return load_index(path, cls)

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(main positions, tail positions) of ids, -1 where not there; NotFound if in neither."""
        in_main, in_tail = self._main.positions(ids), self._tail.positions(ids)
        missing = (in_main < 0) & (in_tail < 0)
        if missing.any():
            raise NotFound(f"id {int(ids[missing][0])} is not in the index")
        return in_main, in_tail

    def _present(self, ids: np.ndarray) -> np.ndarray:
        return (self._main.positions(ids) >= 0) | (self._tail.positions(ids) >= 0)

    @property
    def _fragments(self) -> int:
        """Items a fold would change: the dead ones and the tail's."""
        return self._main.ndead + len(self._tail)

    def _fold_if_fragmented(self) -> None:
        if self._fragments > fragment_limit(self.ntotal):
            self.apply_fold(self.prepare_fold())

    def _search_over(self, queries, labels):
        """(the live segments, the checked queries, their `query_groups`) of a search."""
        queries = _checks.packed_codes(queries, self._bits, "queries")
        filters = None if labels is None else _checks.label_rows(labels, len(queries), "query labels")
        segments = [seg for seg in (self._main, self._tail) if seg.alive] if self.ntotal else []
        return segments, queries, query_groups(filters, len(queries))


def _param(name: str, value) -> int:
    """A checked index parameter: nflip may be 0, the others are positive."""
    return (non_negative_int if name == "nflip" else positive_int)(value, name)
