"""The FAISS side of each index kind, in the positions and ids that `CodeIndex` keeps.

`CodeIndex` holds the items sorted by ascending external id (`Rows`). Positional engines (flat,
multihash) store codes in exactly that order, so a FAISS position maps to an id by
`rows.ids[position]`; the IVF engine (`_ivf`) stores external ids itself (lists reorder items
anyway). Engines return candidates; `CodeIndex` sorts them by (distance, id) and pads.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from lbhash.errors import InputError
from lbhash.index.backend import PAD_DISTANCE

SMALL_SCAN = 1 << 14  # codes x queries that a flat search scans with numpy (FlatEngine.knn)


@dataclass
class Rows:
    """Every item of an index, sorted by ascending id: ids (n,), codes (n, bytes)."""

    ids: np.ndarray
    codes: np.ndarray


def positions_to_ids(rows: Rows, positions: np.ndarray) -> np.ndarray:
    if positions.size and positions.min() >= 0:  # the common case: nothing padded
        return rows.ids[positions]
    return np.where(positions >= 0, rows.ids[np.maximum(positions, 0)] if len(rows.ids) else -1, -1)


@contextmanager
def threads_for(num_queries: int):
    """FAISS's OpenMP threads (the calling thread's setting, restored after): one for a lone query,
    whose parallel scan costs more in synchronisation than it saves on a busy machine; all for a batch."""
    if num_queries != 1:
        yield
        return
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def search_on_this_thread() -> None:
    """Every later search of this thread (FAISS's and `FlatEngine.ranked_knn`'s) runs on it alone: for a
    caller that keeps a search in flight per core itself (the service's batcher)."""
    faiss.omp_set_num_threads(1)


def read_faiss(file: Path, bits: int, flags: int = 0):
    """The FAISS binary index in `file`, refused in one line unless it holds `bits`-bit codes."""
    try:
        index = faiss.read_index_binary(str(file), flags)
    except RuntimeError as err:
        raise InputError(f"{file}: not a readable FAISS binary index ({str(err).splitlines()[0]})") from None
    if index.d != bits:  # before any reshape by the manifest's bits
        raise InputError(f"{file}: holds {index.d}-bit codes, the manifest says {bits}")
    return index


def ids_to_positions(rows: Rows, ids: np.ndarray) -> np.ndarray:
    """Positions of ids known to be in rows (ids < 0, FAISS's padding, give -1)."""
    pos = np.searchsorted(rows.ids, ids)
    return np.where(ids >= 0, pos, -1)


def word_type(width: int):
    """The widest unsigned type whose size divides a code's width in bytes (the scan's word)."""
    return next(t for t in (np.uint64, np.uint32, np.uint16, np.uint8) if width % np.dtype(t).itemsize == 0)


def small_scan(codes: np.ndarray, queries: np.ndarray, k: int, allowed: np.ndarray | None):
    """(distances int32 (nq, k), positions int64 (nq, k)) of the k nearest `codes` by numpy, as FAISS
    gives them (position -1 at PAD_DISTANCE past the `allowed`); it holds nq x n x code bytes at once."""
    dist = np.bitwise_count(queries[:, None, :] ^ codes[None, :, :]).sum(axis=2, dtype=np.int32)
    if allowed is not None:
        dist[:, ~np.asarray(allowed, bool)] = PAD_DISTANCE
    pos = np.argsort(dist, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(dist, pos, axis=1)
    pos[top == PAD_DISTANCE] = -1
    return top, pos


def keep_in_range(lims, dist, keys, keep):
    """Drop range results where `keep` is False, keeping lims consistent."""
    lims = lims.astype(np.int64)
    qidx = np.repeat(np.arange(len(lims) - 1), np.diff(lims))
    counts = np.bincount(qidx[keep], minlength=len(lims) - 1)
    return np.concatenate([[0], np.cumsum(counts)]), dist[keep], keys[keep]


def range_to_ids(rows: Rows, lims, dist, keys, positional: bool):
    """FAISS range results (keys: positions or ids) as int64 lims, int32 distances, int64 ids."""
    ids = rows.ids[keys] if positional and len(keys) else keys.astype(np.int64)
    return lims.astype(np.int64), dist.astype(np.int32), ids


class Engine:
    kind = ""
    exact = True
    positional = True

    def __init__(self, bits: int, params: dict):
        self.bits = bits
        self.params = params

    # --- candidate search with an allowed-positions mask: over-fetch and post-filter -------

    def _raw_knn(self, rows: Rows, queries: np.ndarray, k: int, level: int):
        raise NotImplementedError

    def _max_level(self) -> int:
        return 0

    def faiss_index(self):
        return self.index

    def rebuilt(self, rows: Rows) -> "Engine":
        """A new engine of the same kind and parameters holding `rows` (O(n))."""
        engine = type(self)(self.bits, dict(self.params))
        engine.reset(rows)
        return engine

    def folded(self, rows: Rows, removed_ids: np.ndarray, added_ids: np.ndarray, added_codes: np.ndarray):
        """A new engine holding `rows`: this one's items less `removed_ids`, plus the added
        ones. This engine is not changed (searches may be reading it). By default a rebuild."""
        return self.rebuilt(rows)

    def filtered_knn(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray):
        """Top-k candidates among allowed items: fetch more until k pass the mask, or the
        engine has nothing more to give at its widest setting."""
        nq, n = len(queries), len(rows.ids)
        dist = np.full((nq, k), -1, np.int32)
        ids = np.full((nq, k), -1, np.int64)
        todo = np.arange(nq)
        fetch, level = min(n, max(4 * k, 64)), 0
        for _ in range(64):  # each round grows `fetch` 4x or widens a level: far fewer rounds
            if not len(todo) or n == 0:
                break
            d, i = self._raw_knn(rows, queries[todo], fetch, level)
            pos = i if self.positional else ids_to_positions(rows, i)
            pos_ok = (i >= 0) & (pos < n)
            keep = pos_ok & allowed[np.where(pos_ok, pos, 0)]
            counts = keep.sum(axis=1)
            exhausted = (i[:, -1] < 0) | (fetch >= n)  # nothing more at this level
            at_widest = level >= self._max_level()
            done = (counts >= k) | (exhausted & at_widest)
            keep_done, i_done, d_done = keep[done], i[done], d[done]
            for row, q in enumerate(todo[done]):
                sel = np.flatnonzero(keep_done[row])[:k]
                found = i_done[row, sel]
                ids[q, :len(sel)] = rows.ids[found] if self.positional else found
                dist[q, :len(sel)] = d_done[row, sel]
            todo = todo[~done]
            if len(todo):
                if exhausted[~done].any() and not at_widest:
                    level += 1
                else:
                    fetch = min(n, fetch * 4)
        if len(todo):
            raise RuntimeError(f"filtered search did not converge for {len(todo)} queries")
        return dist, ids


class FlatEngine(Engine):
    """Exact scan. FAISS keeps, among equal distances, the lowest position (its scan only
    replaces a kept item by a strictly closer one), and positions follow ids."""

    kind = "flat"
    compiled_scan_loaded = False  # per process: set by the first ranked_knn

    def __init__(self, bits: int, params: dict):
        super().__init__(bits, params)
        self.index = faiss.IndexBinaryFlat(bits)
        self.mapped = False  # searching a memory-mapped index.faiss (see from_file)

    @staticmethod
    def defaults(bits: int) -> dict:
        return {}

    def reset(self, rows: Rows) -> None:
        self.index = faiss.IndexBinaryFlat(self.bits)  # a new one: a mapped index cannot be cleared
        self.mapped = False
        if len(rows.ids):
            self.index.add(rows.codes)

    def on_append(self, rows: Rows, codes: np.ndarray, ids: np.ndarray) -> None:
        if self.mapped:  # FAISS cannot grow a mapped file: the first append copies it in (O(n) once)
            self.reset(rows)
        else:
            self.index.add(codes)

    def knn(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        """The exact top-k (FAISS's result): numpy's `small_scan` for at most SMALL_SCAN codes x
        queries, so a one-shot search of a small index loads no numba (about 1 s); `ranked_knn`
        otherwise, and for every size once it is loaded (0.05 ms where numpy takes 1 ms)."""
        n, nq = len(rows.ids), len(queries)
        k = min(k, n)
        if k == 0 or nq == 0:
            return np.empty((nq, k), np.int32), np.empty((nq, k), np.int64)
        if n * nq <= SMALL_SCAN and not FlatEngine.compiled_scan_loaded:
            dist, pos = small_scan(rows.codes, queries, k, allowed)
            return dist, positions_to_ids(rows, pos)
        return self.ranked_knn(rows, queries, k, allowed)

    def ranked_knn(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        """lbhash.ranking's counting-sort scan (FAISS's result, ties by position, in a fraction of its
        time), up to 32 queries per pass; 1 <= k <= len(rows.ids) and a query at least, as `knn` gives."""
        dist, pos = self.nearest_positions(rows, queries, k, allowed)
        return dist, positions_to_ids(rows, pos)

    def nearest_positions(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        """`ranked_knn` with positions in `rows` (int64, -1 padding) in place of ids."""
        # numba loads with the first search, not with the index (`index info` and `build` need none)
        from lbhash.ranking import SHARED_PASS, for_query_ranges, nearest_rows_chunk

        FlatEngine.compiled_scan_loaded = True

        nq = len(queries)
        dist, pos = np.empty((nq, k), np.int32), np.empty((nq, k), np.int64)
        word = word_type(rows.codes.shape[1])
        db, q = np.ascontiguousarray(rows.codes).view(word), np.ascontiguousarray(queries).view(word)
        mask = np.empty(0, bool) if allowed is None else np.ascontiguousarray(allowed, bool)

        def work(a: int, b: int) -> None:
            nearest_rows_chunk(q[a:b], db, mask, self.bits + 1, pos[a:b], dist[a:b])

        for_query_ranges(nq, work, faiss.omp_get_max_threads() if nq > 1 else 1, SHARED_PASS)
        return dist, pos

    def range(self, rows: Rows, queries: np.ndarray, radius: int, allowed: np.ndarray | None):
        bitmap = None if allowed is None else np.packbits(allowed, bitorder="little")  # outlives the search
        params = None if bitmap is None else faiss.SearchParameters(sel=faiss.IDSelectorBitmap(bitmap))
        with threads_for(len(queries)):
            lims, dist, pos = self.index.range_search(queries, radius + 1, params=params)  # FAISS: d < radius
        return range_to_ids(rows, lims, dist, pos, True)

    @classmethod
    def from_faiss(cls, bits: int, params: dict, index, ids: np.ndarray):
        engine = cls(bits, params)
        if not isinstance(index, faiss.IndexBinaryFlat):
            raise InputError(f"index.faiss holds a {type(index).__name__}, not the IndexBinaryFlat of a flat index")
        engine.index = index
        codes = faiss.vector_to_array(index.xb).reshape(index.ntotal, bits // 8)
        return engine, codes

    @classmethod
    def from_file(cls, bits: int, params: dict, file: Path, ids: np.ndarray):
        """Map index.faiss: FAISS searches its pages in place and the codes are a read-only numpy map
        of the code vector, which ends the file; nothing is copied until the first append."""
        index = read_faiss(file, bits, faiss.IO_FLAG_MMAP_IFC)
        if not isinstance(index, faiss.IndexBinaryFlat):
            return cls.from_faiss(bits, params, index, ids)  # which names the index type
        code_size, n = bits // 8, index.ntotal
        offset = file.stat().st_size - n * code_size
        length = np.fromfile(file, dtype="<u8", count=1, offset=offset - 8) if offset >= 8 else None
        if length is None or int(length[0]) != n * code_size:
            raise InputError(f"{file}: the code vector does not end the file (not an IndexBinaryFlat as FAISS writes it)")
        codes = np.memmap(file, np.uint8, "r", offset, (n, code_size)) if n else np.empty((0, code_size), np.uint8)
        if n and not (np.array_equal(codes[0], index.reconstruct(0)) and np.array_equal(codes[-1], index.reconstruct(n - 1))):
            raise InputError(f"{file}: the mapped codes differ from FAISS's reading of them")
        engine = cls(bits, params)
        engine.index, engine.mapped = index, True
        return engine, codes


class MultiHashEngine(Engine):
    """Multi-index hashing (docs/indexes.md): `nhash` substrings of b = min(64, bits // nhash) bits, each
    probed within `nflip` flips, so search is exact up to G = nhash * (nflip + 1) - 1 (range search
    past G scans). A range search probes only radius // nhash flips; FAISS reads the flip count from
    the index object, so calls that change it hold a lock.
    """

    kind = "multihash"
    exact = False

    def __init__(self, bits: int, params: dict):
        super().__init__(bits, params)
        self.nhash, self.nflip = params["nhash"], params["nflip"]
        self.hash_bits = min(64, bits // self.nhash)
        if self.hash_bits < 1:
            raise InputError(f"nhash={self.nhash} is larger than bits={bits}")
        self.index = self._new_index()
        self._flips = threading.Lock()

    def _with_flips(self, nflip: int, call, *args):
        with self._flips:
            self.index.nflip = nflip
            try:
                with threads_for(len(args[0])):  # args[0]: the queries
                    return call(*args)
            finally:
                self.index.nflip = self.nflip

    @staticmethod
    def defaults(bits: int) -> dict:
        return {"nhash": max(1, bits // 16), "nflip": 2}

    def set_search_param(self, name: str, value: int) -> None:
        with self._flips:
            self.nflip = self.params["nflip"] = value
            self.index.nflip = value

    @property
    def guaranteed_radius(self) -> int:
        return self.nhash * (self.nflip + 1) - 1

    def _new_index(self):
        index = faiss.IndexBinaryMultiHash(self.bits, self.nhash, self.hash_bits)
        index.nflip = self.nflip
        return index

    def reset(self, rows: Rows) -> None:
        self.index = self._new_index()
        if len(rows.ids):
            self.index.add(rows.codes)

    def on_append(self, rows: Rows, codes: np.ndarray, ids: np.ndarray) -> None:
        self.index.add(codes)

    def _raw_knn(self, rows, queries, k, level):
        return self._with_flips(self.nflip, self.index.search, queries, k)

    def knn(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        n = len(rows.ids)
        if allowed is None:
            dist, pos = self._with_flips(self.nflip, self.index.search, queries, min(k, n))
            ids = positions_to_ids(rows, pos)
        else:
            dist, ids = self.filtered_knn(rows, queries, min(k, n), allowed)
        # where the k-th distance is within G, every tie at it is reachable: collect them all
        # (one range search per distinct k-th distance) and keep the k smallest (distance, id)
        kth = dist[:, -1]
        exact = (ids[:, -1] >= 0) & (kth <= self.guaranteed_radius)
        for value in np.unique(kth[exact]):
            members = np.flatnonzero(exact & (kth == value))
            lims, d, i = self.range(rows, queries[members], int(value), allowed)
            for row, q in enumerate(members):
                a, b = lims[row], lims[row + 1]
                order = np.lexsort((i[a:b], d[a:b]))[:ids.shape[1]]
                dist[q], ids[q] = d[a:b][order], i[a:b][order]
        return dist, ids

    def range(self, rows: Rows, queries: np.ndarray, radius: int, allowed: np.ndarray | None):
        if radius <= self.guaranteed_radius:
            lims, dist, pos = self._with_flips(radius // self.nhash, self.index.range_search, queries, radius + 1)
        else:  # past the pigeonhole radius buckets can miss items: scan the storage instead
            with threads_for(len(queries)):
                lims, dist, pos = self.index.storage.range_search(queries, radius + 1)
        if allowed is not None:
            lims, dist, pos = keep_in_range(lims, dist, pos, allowed[pos])
        return range_to_ids(rows, lims, dist, pos, True)

    @classmethod
    def from_faiss(cls, bits: int, params: dict, index, ids: np.ndarray):
        engine = cls(bits, params)
        if not isinstance(index, faiss.IndexBinaryMultiHash):
            raise InputError(f"index.faiss holds a {type(index).__name__}, not the IndexBinaryMultiHash of a multihash index")
        if index.nhash != engine.nhash or index.b != engine.hash_bits:
            raise InputError(f"index.faiss has nhash={index.nhash}, b={index.b}, but the manifest says "
                             f"nhash={engine.nhash}, b={engine.hash_bits}")
        index.nflip = engine.nflip
        engine.index = index
        codes = faiss.vector_to_array(index.storage.xb).reshape(index.ntotal, bits // 8)
        return engine, codes
