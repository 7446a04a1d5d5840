"""All metrics of a query/database pair at once, as a JSON-ready dict (the table the CLI prints
is lbhash.evaluate.formatting's), with the two that are not rankings: the lower-bound ratio
min D_inter / max D_intra (paper Sec. 4, App. B) and the chance level, the mAP of a random ranking
(docs/evaluation.md). For a query with m relevant items among N, a uniformly random ranking has
expected AP

    E[AP] = (H_N + (m - 1) (N - H_N) / (N - 1)) / N,     H_N = 1 + 1/2 + ... + 1/N,

about m/N; a query with no relevant item has AP 0, as in `mean_average_precision`.

`python -m lbhash.evaluate.report` (which `make install` runs) compiles the numba kernels of the
metrics once, into numba's cache beside the package, so that the first metric a user (or a test)
computes does not wait seconds for the compiler; without it the first call compiles.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from lbhash.checks import non_negative_int, positive_int
from lbhash.codes import as_packed, class_centers, hamming_distance
from lbhash.errors import InputError
from lbhash.evaluate._inputs import check_ks, check_percentile, check_topk, prepare
from lbhash.evaluate.asymmetric import asymmetric_metrics, check_query_real
from lbhash.evaluate.retrieval import (DEFAULT_KS, average_precisions, knn_vote_accuracy, pr_curve,
                                      precision_recall_at_k, radius_precision)
from lbhash.labels import as_multihot, as_multihot_pair

# Rows of codes compared with the centers at once.
_ROWS = 1 << 16


def evaluate_codes(query_codes, db_codes, query_labels, db_labels, bits: int | None = None,
                   topk: int | None = None, ks: Sequence[int] = DEFAULT_KS, radius: int = 2,
                   knn: int = 100, percentile: float = 99.9, tie_averaged: bool = False,
                   query_real=None) -> dict[str, Any]:
    """Every metric of docs/evaluation.md for one query/database pair; the lower bound is on the
    database. The tie-averaged mAP is computed only with `tie_averaged=True`. With `query_real`
    (the queries' real-valued outputs, (n_query, bits)), `asymmetric` also holds mAP@R and
    P@K of the asymmetric ranking (lbhash.evaluate.asymmetric).

    Floats that JSON cannot hold are stored as strings ("inf") or null (NaN).
    """
    ks_arr = check_ks(ks)
    radius = non_negative_int(radius, "radius")
    check_percentile(percentile)
    inp = prepare(query_codes, db_codes, query_labels, db_labels, bits)
    if radius > inp.bits:
        raise InputError(f"radius must be at most bits={inp.bits}, got {radius}")
    top = check_topk(topk, inp.n_db)
    knn = positive_int(knn, "knn")
    real = None if query_real is None else check_query_real(query_real, inp.n_query, inp.bits)
    ap_index, ap_average = average_precisions(inp, top, tie_averaged=tie_averaged)
    at_k = precision_recall_at_k(inp, ks_arr)
    curve = pr_curve(inp)
    ball = radius_precision(curve, radius)
    bound = lower_bound(inp.db_packed, inp.db_labels, percentile, inp.bits)
    metrics = {
        "bits": inp.bits,
        "n_query": inp.n_query,
        "n_db": inp.n_db,
        "topk": "all" if topk is None else int(topk),
        "map": float(ap_index.mean()),
        "chance_map": chance_map(inp.q_labels, inp.db_labels),  # mAP@all of a random ranking
        **({"map_tie_averaged": float(ap_average.mean())} if tie_averaged else {}),
        "precision_at_k": {"k": at_k.ks, "precision": at_k.precision, "recall": at_k.recall},
        "precision_within_radius": {"radius": int(radius), "precision": ball.precision,
                                    "empty_fraction": ball.empty_fraction},
        "knn_accuracy": {"k": knn, "accuracy": knn_vote_accuracy(inp, knn)},
        "lower_bound": {"percentile": float(percentile), "min_inter": bound.min_inter,
                        "max_intra": bound.max_intra, "ratio": bound.ratio},
        "pr_curve": {"radius": curve.radius, "precision": curve.precision,
                     "recall": curve.recall, "retrieved_fraction": curve.retrieved_fraction},
    }
    if real is not None:
        metrics["asymmetric"] = asymmetric_metrics(inp, real, top, ks_arr)
    return jsonable(metrics)


def jsonable(obj: Any) -> Any:
    """Arrays to lists, NaN to None, infinities to "inf"/"-inf"."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in (obj.tolist() if isinstance(obj, np.ndarray) else obj)]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
    return obj


class LowerBound(NamedTuple):
    """min_inter: the (100 - percentile)-th percentile of distances between class centers;
    max_intra: the percentile-th percentile of distances of codes to their own centers;
    ratio: min_inter / max_intra (+inf when max_intra is 0 and the centers differ)."""

    min_inter: float
    max_intra: float
    ratio: float


def lower_bound(codes, labels, percentile: float = 99.9, bits: int | None = None) -> LowerBound:
    """Inter-class distinctiveness over intra-class compactness of a set of codes.

    Centers are the bitwise majority of each class's codes (ties -> +1). A multi-label item
    belongs to each of its labels' classes. Classes without items are left out. With
    percentile=100 the exact min and max are used; the paper uses 99.9 against outliers.
    """
    check_percentile(percentile)
    packed, bits = as_packed(codes, bits, "codes")
    onehot = as_multihot(labels, "labels")
    if len(onehot) != len(packed):
        raise InputError(f"labels has {len(onehot)} rows but codes has {len(packed)}")
    centers, counts = class_centers(packed, onehot, bits)
    present = np.flatnonzero(counts > 0)
    if len(present) < 2:
        raise InputError(f"lower_bound needs at least 2 classes with items, got {len(present)}")
    center_dist = hamming_distance(centers[present], centers[present])
    inter = center_dist[np.triu_indices(len(present), k=1)]
    intra = []
    for start in range(0, len(packed), _ROWS):
        d = hamming_distance(packed[start:start + _ROWS], centers[present], bits)
        intra.append(d[onehot[start:start + _ROWS][:, present]])
    intra = np.concatenate(intra)
    min_inter = float(np.percentile(inter, 100.0 - percentile))
    max_intra = float(np.percentile(intra, percentile))
    if min_inter == 0:
        ratio = 0.0  # two centers coincide: no separation, whatever the spread
    elif max_intra == 0:
        ratio = float("inf")
    else:
        ratio = min_inter / max_intra
    return LowerBound(min_inter, max_intra, ratio)


def chance_map(query_labels, db_labels) -> float:
    """Expected mAP@all of a random ranking of the database for these queries (relevant: a
    shared label). Exact, and O(patterns) in memory: queries and items are grouped by their
    label rows."""
    ql, dl = as_multihot_pair(query_labels, db_labels, ("query_labels", "db_labels"))
    n = len(dl)
    if not len(ql) or not n:
        return 0.0
    q_rows, q_count = np.unique(ql, axis=0, return_counts=True)
    d_rows, d_count = np.unique(dl, axis=0, return_counts=True)
    shared = (q_rows.astype(np.int64) @ d_rows.T.astype(np.int64)) > 0   # (query patterns, item patterns)
    relevant = shared.astype(np.int64) @ d_count                          # m per query pattern
    harmonic = float(np.sum(1.0 / np.arange(1, n + 1)))
    spread = (n - harmonic) / (n - 1) if n > 1 else 0.0
    expected = np.where(relevant > 0, (harmonic + (relevant - 1) * spread) / n, 0.0)
    return float((expected * q_count).sum() / q_count.sum())


def warm_kernels() -> None:
    """Run every metric of `lbhash evaluate` once on a few random codes: single- and
    multi-label, at R and at all, symmetric and asymmetric, and the lower bound."""
    rng = np.random.default_rng(0)
    for bits in (16, 96):
        q, db = rng.choice([-1, 1], (8, bits)), rng.choice([-1, 1], (40, bits))
        single = rng.integers(0, 3, 8), rng.integers(0, 3, 40)
        multi = rng.integers(0, 2, (8, 3)).astype(np.uint8), rng.integers(0, 2, (40, 3)).astype(np.uint8)
        for labels in (single, multi):
            for topk in (None, 10):
                evaluate_codes(q, db, *labels, bits=bits, topk=topk, query_real=q.astype(np.float32))


if __name__ == "__main__":
    warm_kernels()
