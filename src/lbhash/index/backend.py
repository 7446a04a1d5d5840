"""`Backend`: the one interface of a search backend (`CodeIndex` on FAISS, `MilvusIndex`), as
FAISS has one base class for its indexes; and the shapes of its results.

`search` returns `TopK` (distances, ids) and `range_search` `InRange` (lims, distances, ids),
named tuples of FAISS's own arrays, so `dist, ids = index.search(q, k)` reads as with FAISS. An
id not held is `NotFound`; one already held, added without upsert, is `Conflict` (lbhash.errors).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from lbhash.errors import InputError
from lbhash.index import _checks

# how a top-k row shorter than k is padded, by every backend and by re-ranking: FAISS's own
# padding distance (the int32 maximum, which no real distance can reach)
PAD_ID = -1
PAD_DISTANCE = int(np.iinfo(np.int32).max)


class TopK(NamedTuple):
    """Each query's top k: distances int32 (nq, k) and ids int64 (nq, k), by (distance, id),
    padded with `PAD_DISTANCE` and `PAD_ID`."""

    distances: np.ndarray
    ids: np.ndarray


class Candidates(NamedTuple):
    """Each query's candidates for a ranking (lbhash.index.blend): ids int64 (nq, c), each once, padded
    with `PAD_ID`, with their class `distances` and `instance_distances` int32 (nq, c), `PAD_DISTANCE`
    where padded (and throughout where the search reads no instance codes), and `similarities` float64
    (nq, c), their float rows' `FloatQueries.cosines`, where the backend scored them as it found them
    (None: the ranking reads their rows by id)."""

    ids: np.ndarray
    distances: np.ndarray
    instance_distances: np.ndarray
    similarities: np.ndarray | None = None


class FloatQueries(NamedTuple):
    """A ranked search's queries as float rows score them: `vectors` float64 (nq, d), each the unit row
    of its query's embedding less `center` (d,), or where `center` is None the query's unit float16 row."""

    vectors: np.ndarray
    center: np.ndarray | None

    def cosines(self, rows: np.ndarray, where: np.ndarray) -> np.ndarray:
        """float64 (nq, c): for candidate j of query i, row where[i, j] of `rows` (float16 unit rows as
        stored, n x d, mapped or in memory; -1: padding, 0), as blend's module says: the cosine of the
        row less `center` with the query, or without a centre the row's dot product with the query. One
        compiled kernel scores every backend's rows (lbhash.index._blend_kernel): a pair scores alike
        whatever else is scored with it."""
        from lbhash.index._blend_kernel import candidate_cosines  # (numba loads with the first ranking)

        rows = np.asarray(rows)
        if rows.dtype != np.float16:  # (a bug, not input: the roads hand over float16 rows as stored)
            raise TypeError(f"FloatQueries.cosines scores float16 rows, got {rows.dtype}")
        out = np.empty(where.shape, np.float64)
        centred = self.center is not None
        center = self.center if centred else np.zeros(self.vectors.shape[1])  # (no centre: its products unused)
        candidate_cosines(rows.view(np.uint16), np.ascontiguousarray(where, np.int64),
                          np.ascontiguousarray(self.vectors, np.float64), center, centred, out)
        return out

    def __getitem__(self, rows: slice) -> "FloatQueries":
        """The queries of `rows` (the centre is shared)."""
        return FloatQueries(self.vectors[rows], self.center)


class InRange(NamedTuple):
    """Every item within a radius: query i's results are distances[lims[i]:lims[i+1]] and
    ids[lims[i]:lims[i+1]] (lims int64 (nq + 1,)), by (distance, id)."""

    lims: np.ndarray
    distances: np.ndarray
    ids: np.ndarray


class Backend(ABC):
    """Packed binary codes with int64 ids and labels, searched by Hamming distance.

    Codes are uint8 (n, bits // 8) in the FAISS bit layout; ids non-negative int64; labels class
    ids (n,), multi-hot rows (n, C) or `SparseLabels`; a label filter keeps, per query, the items
    sharing a label with its row (docs/search.md, "Concepts"). `metadata`: a free-form record of
    where the codes came from (on Milvus: in a companion collection). A backend may keep one embedding per item
    (`embedding_dim`, `get_embeddings`) and one instance code per item (`instance_bits`,
    `get_instance_codes`, `instance_search`), added and removed with its code.
    """

    metadata: dict

    @property
    def embedding_dim(self) -> int | None:
        """The width of the embeddings kept beside the codes; None when none are kept."""
        return None

    @property
    def embedding_dtype(self) -> str:
        """How the embeddings are kept: "float16" unit rows, or "int8" (lbhash.index.rescore.quantized)."""
        return "float16"

    def get_embeddings(self, ids) -> np.ndarray:
        """Stored embeddings (m, embedding_dim) of the given ids, in that order, as kept (`embedding_dtype`)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no embeddings")

    @property
    def instance_bits(self) -> int | None:
        """The length of the instance codes kept beside the class codes (lbhash.instance); None when none are kept."""
        return None

    def get_instance_codes(self, ids) -> np.ndarray:
        """Packed instance codes uint8 (m, instance_bits // 8) of the given ids, in that order."""
        raise NotImplementedError(f"{type(self).__name__} keeps no instance codes")

    def instance_search(self, queries, k: int, labels=None) -> TopK:
        """Top-k by the Hamming distance of instance codes, by (distance, id), as `search` pads."""
        raise NotImplementedError(f"{type(self).__name__} keeps no instance codes")

    def both_candidates(self, queries, instance, k: int, labels=None, floats: FloatQueries | None = None) -> Candidates:
        """The union of each query's class-code top k (`search`) and instance-code top k (`instance_search`),
        ids ascending, padding last, with both Hamming distances of each; `queries` and `instance` packed;
        `labels` as in `search`. A backend may list the same candidates faster (`CodeIndex`'s compiled lookup),
        and score their float rows for `floats` as it finds them (`Candidates.similarities`); this road
        leaves that to the ranking."""
        queries, instance = self._query_pair(queries, instance)
        ids = merged_ids(self.search(queries, k, labels).ids, self.instance_search(instance, k, labels).ids)
        ok = ids >= 0
        out = [np.full(ids.shape, PAD_DISTANCE, np.int32) for _ in range(2)]
        if ok.any():
            found = np.unique(ids[ok])
            where = np.searchsorted(found, np.where(ok, ids, found[0]))
            for d, q, rows in zip(out, (queries, instance), (self.get_codes(found), self.get_instance_codes(found))):
                d[ok] = hamming_rows(q, np.asarray(rows)[where])[ok]
        return Candidates(ids, *out)

    def _query_pair(self, queries, instance) -> tuple[np.ndarray, np.ndarray]:
        """`both_candidates`'s queries checked: packed class and instance codes, as many of each."""
        if self.instance_bits is None:
            raise InputError("the index keeps no instance codes")
        queries = _checks.packed_codes(queries, self.bits, "queries")
        instance = _checks.packed_codes(instance, self.instance_bits, "instance queries")
        if len(instance) != len(queries):
            raise InputError(f"there are {len(queries)} queries but {len(instance)} instance queries")
        return queries, instance

    @property
    @abstractmethod
    def bits(self) -> int:
        """Code length in bits (a multiple of 8)."""

    @property
    @abstractmethod
    def kind(self) -> str:
        """The structure behind the index ("flat", "ivf", "multihash")."""

    @property
    @abstractmethod
    def exact(self) -> bool:
        """Whether a search now returns exactly the brute-force result."""

    @property
    @abstractmethod
    def ntotal(self) -> int:
        """Items held."""

    def __len__(self) -> int:
        return self.ntotal

    @abstractmethod
    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None, instance=None) -> np.ndarray:
        """Add codes (and their embeddings and instance codes, where the backend keeps them); return
        their ids. An id held is `Conflict` unless upsert=True."""

    @abstractmethod
    def remove(self, ids) -> int:
        """Remove items by id; return how many. An id not held is `NotFound`, and nothing is removed."""

    @abstractmethod
    def search(self, queries, k: int, labels=None) -> TopK:
        """Top-k by Hamming distance."""

    @abstractmethod
    def range_search(self, queries, radius: int, labels=None) -> InRange:
        """Every item within `radius` (inclusive) of each query."""

    @abstractmethod
    def get(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(codes (m, bits // 8), multi-hot labels (m, C) bool) of the given ids, in that order."""

    @abstractmethod
    def get_codes(self, ids) -> np.ndarray:
        """Codes (m, bits // 8) of the given ids, in that order."""

    @abstractmethod
    def labels_of(self, ids) -> list[list[int]]:
        """The class ids of each given item (ascending Python ints), in the order of `ids`."""

    def check_k(self, k, name: str = "k") -> int:
        """A number of results one search may return (a backend that caps them, as Milvus
        does, refuses more); `blended_search` asks before it fetches its candidates."""
        return _checks.top_k(k)


def merged_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's ids of `a` and `b` (nq, *; PAD_ID: padding), each once, ascending, padding last."""
    ids = np.sort(np.concatenate([a, b], axis=1), axis=1)
    ids[:, 1:][ids[:, 1:] == ids[:, :-1]] = PAD_ID  # a repeat (or padding after padding)
    ids = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    ids = np.sort(ids, axis=1)
    return np.where(ids == np.iinfo(np.int64).max, PAD_ID, ids)


def hamming_rows(query_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Hamming distances int32 (nq, c) of packed `query_rows` (nq, b) and candidate `rows` (nq, c, b)."""
    return np.bitwise_count(rows ^ query_rows[:, None, :]).sum(axis=2, dtype=np.int32)
