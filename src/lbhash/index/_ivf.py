"""The ivf kind: FAISS IndexBinaryIVF under `CodeIndex`'s ids, with an exact buffer until trained; and
`ENGINES`, every kind's engine by name, which `CodeIndex` and `storage` both look up."""

from __future__ import annotations

import faiss
import numpy as np

from lbhash.errors import InputError
from lbhash.index._engines import (Engine, FlatEngine, MultiHashEngine, Rows, ids_to_positions, keep_in_range,
                                   range_to_ids, threads_for)


class IVFEngine(Engine):
    """Inverted lists over `nlist` binary k-means centroids; a query scans its `nprobe` nearest lists
    (docs/indexes.md). It trains itself on the first append (or fold) that brings the index to
    39 * nlist codes; until then items wait in an exact flat buffer. Centroids are kept afterwards.
    """

    kind = "ivf"
    exact = False
    positional = False
    points_per_list = 39
    max_training_points_per_list = 256

    def __init__(self, bits: int, params: dict):
        super().__init__(bits, params)
        self.nlist, self.nprobe = params["nlist"], params["nprobe"]
        if self.nprobe > self.nlist:
            raise InputError(f"nprobe={self.nprobe} is larger than nlist={self.nlist}")
        # FAISS's Python layer keeps the quantizer alive as long as the IVF index
        self.index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, self.nlist)
        self.index.nprobe = self.nprobe
        self.buffer: FlatEngine | None = FlatEngine(bits, {})

    @staticmethod
    def defaults(bits: int) -> dict:
        return {"nlist": 1024, "nprobe": 16}

    def set_search_param(self, name: str, value: int) -> None:
        if value > self.nlist:
            raise InputError(f"nprobe={value} is larger than nlist={self.nlist}")
        self.nprobe = self.params["nprobe"] = value
        self.index.nprobe = value

    @property
    def trained(self) -> bool:
        return self.buffer is None

    @property
    def min_train(self) -> int:
        return self.points_per_list * self.nlist

    def _max_level(self) -> int:
        return int(np.ceil(np.log2(self.nlist / self.nprobe)))

    def _train_if_ready(self, rows: Rows) -> None:
        if self.buffer is not None and len(rows.ids) >= self.min_train:
            self.train(rows)

    def train(self, rows: Rows) -> None:
        if len(rows.ids) < self.nlist:
            raise InputError(f"training an ivf index with nlist={self.nlist} needs at least {self.nlist} codes, "
                             f"it holds {len(rows.ids)}")
        sample = rows.codes
        cap = self.max_training_points_per_list * self.nlist
        if len(sample) > cap:  # FAISS would sample too, after converting all codes to floats
            sample = sample[np.sort(np.random.default_rng(0).choice(len(sample), cap, replace=False))]
        self.index.train(np.ascontiguousarray(sample))
        self.index.reset()
        self.index.add_with_ids(rows.codes, rows.ids)
        self.buffer = None

    def reset(self, rows: Rows) -> None:
        if self.buffer is not None:
            self.buffer.reset(rows)
            self._train_if_ready(rows)
        else:
            self.index.reset()
            if len(rows.ids):
                self.index.add_with_ids(rows.codes, rows.ids)

    def on_append(self, rows: Rows, codes: np.ndarray, ids: np.ndarray) -> None:
        if self.buffer is not None:
            self.buffer.on_append(rows, codes, ids)
            self._train_if_ready(rows)
        else:
            self.index.add_with_ids(codes, ids)

    def folded(self, rows: Rows, removed_ids: np.ndarray, added_ids: np.ndarray, added_codes: np.ndarray):
        """A copy of the lists less the removed ids plus the added items: the centroids stay and
        only the added codes are assigned (a rebuild assigns every code: 1.3 s per million)."""
        if self.buffer is not None:
            return self.rebuilt(rows)
        engine = self._trained_copy()
        if len(removed_ids):
            engine.index.remove_ids(faiss.IDSelectorBatch(removed_ids.astype(np.int64)))
        if len(added_ids):
            engine.index.add_with_ids(np.ascontiguousarray(added_codes), added_ids.astype(np.int64))
        return engine

    def rebuilt(self, rows: Rows) -> "IVFEngine":
        """A new engine with the same parameters and centroids (if trained) holding `rows`."""
        if self.buffer is not None:
            return super().rebuilt(rows)
        engine = self._trained_copy()
        engine.reset(rows)
        return engine

    def _trained_copy(self) -> "IVFEngine":
        """A new engine with a copy of this trained one's centroids and lists (O(n))."""
        engine = type(self)(self.bits, dict(self.params))
        engine.index, engine.buffer = faiss.clone_binary_index(self.index), None
        return engine

    def _search(self, queries, k, nprobe):
        with threads_for(len(queries)):
            return self.index.search(queries, k, params=faiss.SearchParametersIVF(nprobe=nprobe))

    def _raw_knn(self, rows, queries, k, level):
        return self._search(queries, k, min(self.nlist, self.nprobe << level))

    def knn(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        if self.buffer is not None:
            return self.buffer.knn(rows, queries, k, allowed)
        if allowed is not None:
            return self.filtered_knn(rows, queries, min(k, len(rows.ids)), allowed)
        return self._search(queries, min(k, len(rows.ids)), self.nprobe)

    def range(self, rows: Rows, queries: np.ndarray, radius: int, allowed: np.ndarray | None):
        if self.buffer is not None:
            return self.buffer.range(rows, queries, radius, allowed)
        with threads_for(len(queries)):
            lims, dist, ids = self.index.range_search(queries, radius + 1)  # index.nprobe is set
        if allowed is not None:
            lims, dist, ids = keep_in_range(lims, dist, ids, allowed[ids_to_positions(rows, ids)])
        return range_to_ids(rows, lims, dist, ids, False)

    def faiss_index(self):
        return self.index if self.buffer is None else self.buffer.faiss_index()

    @classmethod
    def from_faiss(cls, bits: int, params: dict, index, ids: np.ndarray):
        engine = cls(bits, params)
        if isinstance(index, faiss.IndexBinaryFlat):  # saved before training: the buffer
            if index.ntotal >= engine.min_train:  # it would have trained: a flat index called ivf
                raise InputError(f"index.faiss holds a IndexBinaryFlat of {index.ntotal} codes, not an ivf index "
                                 f"(one of nlist={engine.nlist} trains at {engine.min_train} codes)")
            engine.buffer, codes = FlatEngine.from_faiss(bits, {}, index, ids)
            return engine, codes
        if not isinstance(index, faiss.IndexBinaryIVF):
            raise InputError(f"index.faiss holds a {type(index).__name__}, not the IndexBinaryIVF of an ivf index")
        if index.nlist != engine.nlist:
            raise InputError(f"index.faiss has nlist={index.nlist} but the manifest says {engine.nlist}")
        index.nprobe = engine.nprobe
        engine.index, engine.buffer = index, None
        return engine, _codes_by_id(index, bits // 8, ids)


def _codes_by_id(index, width: int, ids: np.ndarray) -> np.ndarray:
    """Every code of an IVF index's lists, in the order of `ids` (which must match its ids)."""
    lists = index.invlists
    all_ids, all_codes = [np.empty(0, np.int64)], [np.empty((0, width), np.uint8)]
    for list_no in range(index.nlist):
        size = lists.list_size(list_no)
        if size:
            all_ids.append(faiss.rev_swig_ptr(lists.get_ids(list_no), size).copy())
            all_codes.append(faiss.rev_swig_ptr(lists.get_codes(list_no), size * width).copy().reshape(size, width))
    found_ids, codes = np.concatenate(all_ids), np.concatenate(all_codes)
    order = np.argsort(found_ids, kind="stable")
    if not np.array_equal(found_ids[order], ids):
        raise InputError(f"index.faiss holds {len(found_ids)} ids that do not match ids.npy ({len(ids)} ids)")
    return codes[order]


ENGINES = {engine.kind: engine for engine in (FlatEngine, IVFEngine, MultiHashEngine)}
KINDS = tuple(ENGINES)
