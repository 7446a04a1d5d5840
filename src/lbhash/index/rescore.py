"""The embeddings an index keeps, and the candidates a ranked search scores by them (lbhash.index.blend;
docs/search.md, "Re-scoring").

Embeddings are kept as float16 unit rows (`unit_rows`): cosine similarity is a dot product and
equal items score equally bit for bit. An index may keep them as int8 instead (`quantized`: each
unit row scaled so that its largest value is +/-127, then rounded), half the bytes; its rows are
scored as the unit float16 rows of their directions (`scoring_rows`). A ranked search takes the
Hamming top `k * factor`, widened to every item tied with the last (`with_boundary_ties`) where no
instance codes give candidates.
"""

from __future__ import annotations

import numpy as np

from lbhash.errors import InputError
from lbhash.index import _checks
from lbhash.index.backend import PAD_DISTANCE, PAD_ID, Backend
from lbhash.limits import MAX_RESCORE_CANDIDATES

RESCORE_FACTOR = 4  # Hamming candidates per result when a search re-scores (docs/search.md, "Measuring it")
EMBEDDING_DTYPE = np.dtype(np.float16)
# how an index may keep its float rows (docs/instance-codes.md, "Floats optional")
EMBEDDING_DTYPES = {"float16": EMBEDDING_DTYPE, "int8": np.dtype(np.int8)}
MAX_EMBEDDING_DIM = 65_536
# (query, item) pairs a ranked search holds at once, whatever its number of queries: the queries
# go through all stages (candidates, the boundary's ties, the scores) in groups of PAIRS //
# max(k * factor, MAX_RESCORE_CANDIDATES) (one at least), and the ties are range-searched in
# groups of PAIRS // ntotal (one at least), sized before the work. Before it, 256 queries on a
# class of 200,000 items sharing one code range-searched 51.2 million pairs at once (3.4 GB).
PAIRS = 1 << 20


def check_embeddings(x, n: int, dim: int | None = None, name: str = "embeddings") -> np.ndarray:
    """Embeddings as float64 (n, d): 2-D real numbers, all finite, `dim` wide when given."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf" or arr.ndim != 2 or not 1 <= arr.shape[1] <= MAX_EMBEDDING_DIM:
        raise InputError(f"{name} must be a 2-D array of real numbers (n, d) with 1 <= d <= {MAX_EMBEDDING_DIM}, "
                         f"got {arr.dtype} with shape {arr.shape}")
    if len(arr) != n:
        raise InputError(f"{name} has {len(arr)} rows but there are {n} codes")
    if dim is not None and arr.shape[1] != dim:
        raise InputError(f"{name} are {arr.shape[1]}-dimensional but the index keeps {dim}-dimensional embeddings")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"{name} holds {arr[r, c]} at row {r}, column {c}; only finite numbers are allowed")
    return arr


def embedding_dtype(name: str, where: str = "embedding_dtype") -> np.dtype:
    """The dtype of float rows named `name` ("float16" or "int8"), or one line naming `where`."""
    if name not in EMBEDDING_DTYPES:
        raise InputError(f"{where} must be one of {', '.join(EMBEDDING_DTYPES)}, got {name!r}")
    return EMBEDDING_DTYPES[name]


def stored_embeddings(embeddings, n: int, dim: int | None, held: bool,
                      dtype: np.dtype = EMBEDDING_DTYPE) -> np.ndarray | None:
    """An add's embeddings as an index stores them (unit float16 rows, or their int8 `quantized`
    form for an index of `dtype` int8), checked against what it keeps: `dim` (None: none), `held`
    (it has held items, so it can no longer start keeping them)."""
    if embeddings is None:
        if dim is not None and n:
            raise InputError(f"the index keeps a {dim}-dimensional embedding per item: give the items' embeddings "
                             "with their codes")
        return None
    if dim is None and held:
        raise InputError("the index keeps no embeddings (its first items came without them): add codes alone, "
                         "or build a new index with embeddings")
    units = unit_rows(check_embeddings(embeddings, n, dim))
    return quantized(units) if dtype == np.int8 else units


def quantized(units: np.ndarray) -> np.ndarray:
    """int8 rows of unit rows: each scaled so that its largest magnitude is 127, then rounded (an
    all-zero row stays zero). Quantizing the unit row of a quantized row gives it back: the float16
    rounding moves a value by at most 127 * 2^-10, well under the 0.5 that would change its integer."""
    x = np.asarray(units, np.float64)
    peak = np.abs(x).max(axis=1, keepdims=True) if x.size else np.ones((len(x), 1))
    peak[peak == 0] = 1.0
    return np.rint(x * (127.0 / peak)).astype(np.int8)


def scoring_rows(rows: np.ndarray) -> np.ndarray:
    """Stored rows as the unit float16 rows that scoring multiplies: float16 rows as they are, int8
    rows as the unit rows of their directions."""
    rows = np.asarray(rows)
    return unit_rows(rows) if rows.dtype == np.int8 else rows.astype(EMBEDDING_DTYPE, copy=False)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float64 arithmetic; an all-zero row stays zero), as stored:
    float16. A value too large for float64's square is scaled down first, so no row overflows."""
    x = np.asarray(x, np.float64)
    peak = np.abs(x).max(axis=1, keepdims=True) if x.size else np.ones((len(x), 1))
    peak[peak == 0] = 1.0
    scaled = x / peak
    norm = np.sqrt((scaled * scaled).sum(axis=1, keepdims=True))
    norm[norm == 0] = 1.0
    return (scaled / norm).astype(EMBEDDING_DTYPE)


def with_boundary_ties(index: Backend, queries: np.ndarray, dist: np.ndarray, ids: np.ndarray, labels=None,
                       cap: int = MAX_RESCORE_CANDIDATES) -> tuple[np.ndarray, np.ndarray]:
    """Each full row of candidates (dist, ids (nq, c)) widened to every item within its last
    distance (the same label filter), when those are at most `cap`; a row whose ties exceed the
    cap keeps its c candidates (the first by id). Rows come back padded to the longest, with
    PAD_DISTANCE and PAD_ID. An exact index finds them as the query's nearest cap + 1 (all of them
    when they are at most cap; else the last of those is within the distance too, and the row keeps its
    own): a search's cost whatever the number of ties, where a range search gives every tied item
    (200,000 of one code: 25 ms a query); an approximate one (`index.exact` false) by its own range
    search, whose items its search may not find. The searches go in groups of `PAIRS // (cap + 1)`
    queries, the range searches of `PAIRS // ntotal` (one at least), so that no more pairs are found at
    once."""
    full = ids[:, -1] >= 0
    if not full.any():
        return dist, ids
    rows = None if labels is None else _checks.label_rows(labels, len(queries), "query labels")
    wide: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if index.exact:
        reach = min(cap + 1, index.ntotal)
        todo, step = np.flatnonzero(full), max(1, PAIRS // reach)
        for members in (todo[s:s + step] for s in range(0, len(todo), step)):
            near = index.search(queries[members], reach, None if rows is None else rows.take(members))
            for j, q in enumerate(members):
                within = (near.ids[j] >= 0) & (near.distances[j] <= dist[q, -1])
                if ids.shape[1] < int(within.sum()) <= cap:
                    wide[int(q)] = near.distances[j][within].copy(), near.ids[j][within].copy()
            del near
    else:
        step = max(1, PAIRS // max(1, index.ntotal))
        for radius in np.unique(dist[full, -1]):
            same = np.flatnonzero(full & (dist[:, -1] == radius))
            for members in (same[s:s + step] for s in range(0, len(same), step)):
                found = index.range_search(queries[members], int(radius), None if rows is None else rows.take(members))
                for j, q in enumerate(members):
                    a, b = found.lims[j], found.lims[j + 1]
                    if ids.shape[1] < b - a <= cap:
                        wide[int(q)] = found.distances[a:b].copy(), found.ids[a:b].copy()  # (not views of all found)
                del found
    if not wide:
        return dist, ids
    width = max(len(i) for _, i in wide.values())
    out_d = np.full((len(ids), width), PAD_DISTANCE, np.int32)
    out_i = np.full((len(ids), width), PAD_ID, np.int64)
    out_d[:, :dist.shape[1]], out_i[:, :ids.shape[1]] = dist, ids
    for q, (d, i) in wide.items():
        out_d[q, :len(d)], out_i[q, :len(i)] = d, i
    return out_d, out_i
