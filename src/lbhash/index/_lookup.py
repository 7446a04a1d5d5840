"""Instance candidates of a large segment without a full scan (docs/instance-codes.md, "Cost at scale").

An exact scan of 256-bit instance codes reads 32 bytes an item, four times a 64-bit class code's scan,
and would make the default search of a large index cost several class searches. A segment of at least
`LOOKUP_MIN` items therefore keeps chunk tables (multi-index hashing, Norouzi et al. 2012): the
instance code cut into 16-bit chunks, one table per chunk that lists the segment's positions by the
chunk's value. A query's candidates are the items one of whose chunks is within one bit of the
query's same chunk (17 buckets a table), together with the items appended since the tables were
built; they are ranked by the whole instance code's Hamming distance, then position (the id order
of the main segment). It holds every item within 31 bits of a 256-bit query (a miss differs in two bits
at least in each of its 16 chunks), and, on validation copies (studies/item_views.py), the original
of 87.5-99.5% of edited copies by edit (docs/instance-codes.md, "Cost at scale"); a smaller
segment is scanned exactly. The tables live in memory only (4 bytes an item per table), built by the
first search that needs them (or `CodeIndex.warm`).
"""

from __future__ import annotations

import faiss
import numpy as np

from lbhash.index._engines import Rows, positions_to_ids, word_type

LOOKUP_MIN = 262_144   # a segment with this many items searches its instance codes through chunk tables
MIN_TABLES = 4         # ... when its codes hold this many 16-bit chunks (64 bits) at least
KEYS = 1 << 16
FLIPS = np.concatenate([[0], 1 << np.arange(16)]).astype(np.int64)  # a chunk's bucket and its 16 one-bit neighbours
STALE_SHARE = 16       # rebuilt once the items appended since pass covered / 16 (they are scanned meanwhile)


def chunk_key(codes: np.ndarray, t: int) -> np.ndarray:
    """Chunk t's 16-bit values int64 (n,) of packed codes (n, width): bytes 2t and 2t + 1."""
    return codes[:, 2 * t].astype(np.int64) | (codes[:, 2 * t + 1].astype(np.int64) << 8)


class ChunkTables:
    """Per 16-bit chunk of the first `covered` codes: their positions by chunk value (`order`, int32)
    and where each value's run starts (`offsets`, KEYS + 1 per table)."""

    def __init__(self, codes: np.ndarray):
        n, width = codes.shape
        tables = width // 2
        self.covered = n
        self.order = np.empty((tables, n), np.int32)
        self.offsets = np.zeros((tables, KEYS + 1), np.int64)
        for t in range(tables):  # one table at a time: temporaries of n values, not n x width
            key = chunk_key(codes, t).astype(np.uint16)
            self.order[t] = np.argsort(key, kind="stable")  # (a radix sort: O(n) for 16-bit keys)
            np.cumsum(np.bincount(key, minlength=KEYS), out=self.offsets[t, 1:])


def uses_tables(n: int, width: int) -> bool:
    """Whether a segment of `n` instance codes `width` bytes wide is searched through chunk tables."""
    return n >= LOOKUP_MIN and width // 2 >= MIN_TABLES and n < 1 << 31  # (int32 positions)


def table_bytes_per_item(n: int, instance_bits: int | None) -> int:
    """What the chunk tables of a segment of `n` items cost in memory per item (0: it is scanned)."""
    if instance_bits is None or not uses_tables(n, instance_bits // 8):
        return 0
    return 4 * (instance_bits // 16)


def tables_of(segment) -> ChunkTables | None:
    """The segment's chunk tables, built (or rebuilt when stale) now; None where it is scanned."""
    codes = segment.instance
    if codes is None or not uses_tables(len(codes), codes.shape[1]):
        return None
    tables = segment.lookup_tables
    if tables is None or len(codes) - tables.covered > tables.covered // STALE_SHARE:
        tables = segment.lookup_tables = ChunkTables(codes)
    return tables


class LookupEngine:
    """The knn of an `InstanceView` over chunk tables (the `FlatEngine.knn` signature and result: top
    k (distances int32, ids int64) by (distance, position), padded with -1 ids)."""

    def __init__(self, bits: int, tables: ChunkTables):
        self.bits, self.tables = bits, tables

    def knn(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        dist, pos = self.nearest_positions(rows, queries, k, allowed)
        return dist, positions_to_ids(rows, pos)

    def nearest_positions(self, rows: Rows, queries: np.ndarray, k: int, allowed: np.ndarray | None):
        """`knn` with positions in `rows` (int64, -1 padding) in place of ids."""
        from lbhash.index._lookup_kernel import lookup_knn  # (numba loads with the first search)
        from lbhash.ranking import for_query_ranges

        nq, k = len(queries), min(k, len(rows.ids))
        dist, pos = np.empty((nq, k), np.int32), np.empty((nq, k), np.int64)
        if nq and k:
            mask = np.empty(0, bool) if allowed is None else np.ascontiguousarray(allowed, bool)
            word = word_type(queries.shape[1])
            queries = np.ascontiguousarray(queries)
            db, q = np.ascontiguousarray(rows.codes).view(word), queries.view(word)

            def work(a: int, b: int) -> None:
                lookup_knn(q[a:b], queries[a:b], self.tables.offsets, self.tables.order, db, self.tables.covered,
                           mask, FLIPS, pos[a:b], dist[a:b])

            # a batch's queries on the search's threads, as the class scan takes them (the kernel frees the GIL)
            for_query_ranges(nq, work, faiss.omp_get_max_threads() if nq > 1 else 1)
        return dist, pos


def both_candidates(segment, tables: ChunkTables, queries: np.ndarray, instance: np.ndarray, k: int):
    """`Backend.both_candidates` of one ordered segment with its chunk `tables`, no tombstone and no label filter,
    compiled: its class codes' top k by the exact scan (`FlatEngine`), its instance codes' by the tables,
    and the union's two distances by one kernel (numpy's calls were most of a search's cost at 1M items:
    docs/results/search-benchmarks.md, "The candidates in compiled code"). Returns positions int64 (nq, 2k),
    ascending, -1 padding last, and the class and instance distances int32 (nq, 2k)."""
    from lbhash.index._lookup_kernel import union_distances

    rows = segment.rows
    _, class_pos = segment.engine.nearest_positions(rows, queries, k, None)
    inst_rows = Rows(rows.ids, segment.instance)
    _, inst_pos = LookupEngine(instance.shape[1] * 8, tables).nearest_positions(inst_rows, instance, k, None)
    candidates = np.concatenate([class_pos, inst_pos], axis=1)
    pos, dist = np.empty(candidates.shape, np.int64), np.empty((2, *candidates.shape), np.int32)
    words = [np.ascontiguousarray(a).view(word_type(a.shape[1])) for a in (queries, rows.codes, instance, segment.instance)]
    union_distances(*words, candidates, pos, dist)
    return pos, dist[0], dist[1]
