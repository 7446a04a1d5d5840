"""Retrieval and recognition metrics on hash codes (paper Sec. 6, App. C; docs/evaluation.md).

Every function takes +/-1 codes of shape (n, bits), or packed uint8 codes with `bits=`, and
labels as integer class ids or multi-hot rows. An item is relevant to a query when they share
a label. Rankings are by ascending Hamming distance with ties broken by database index, so
every number is deterministic. Work streams over query chunks in parallel threads.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import numpy as np

from lbhash.checks import non_negative_int, positive_int
from lbhash.evaluate import _ap_all, _kernels
from lbhash.labels import as_multihot
from lbhash.evaluate._inputs import Retrieval, check_ks, check_topk, for_query_ranges, prepare
from lbhash.errors import InputError

# Largest (queries x ranked items) block that top-k based metrics hold at once.
_BLOCK_ENTRIES = 1 << 22

DEFAULT_KS = tuple(range(100, 1001, 100))


class PRCurve(NamedTuple):
    """Precision and recall of the Hamming ball of each radius 0..bits, averaged over queries.

    precision[r] averages over the queries whose ball is non-empty (NaN if none is);
    recall[r] averages over the queries with at least one relevant item in the database;
    retrieved_fraction[r] is the share of queries whose ball is non-empty.
    """

    radius: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    retrieved_fraction: np.ndarray


class PrecisionAtK(NamedTuple):
    """precision[i] = mean of (relevant in top K) / K; recall[i] = mean of (relevant in top K)
    / (relevant in the database), over queries that have any. K is capped at the database size."""

    ks: np.ndarray
    precision: np.ndarray
    recall: np.ndarray


class RadiusPrecision(NamedTuple):
    """Precision inside the Hamming ball (empty balls score 0, as in HashNet), and the share
    of queries whose ball is empty."""

    precision: float
    empty_fraction: float


def average_precision(query_codes, db_codes, query_labels, db_labels, topk=None,
                      tie_averaged: bool = False, bits: int | None = None) -> np.ndarray:
    """AP@topk of every query (the per-query form of `mean_average_precision`)."""
    inp = prepare(query_codes, db_codes, query_labels, db_labels, bits)
    ap_index, ap_average = average_precisions(inp, topk, tie_averaged=tie_averaged)
    return ap_average if tie_averaged else ap_index


def average_precisions(inp: Retrieval, topk, tie_averaged: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-query AP with ties by index, and tie-averaged AP (empty unless tie_averaged)."""
    if not isinstance(tie_averaged, (bool, np.bool_)):  # a string would pass as True
        raise InputError(f"tie_averaged must be True or False, got {tie_averaged!r}")
    top = check_topk(topk, inp.n_db)
    ap_index = np.empty(inp.n_query)
    ap_average = np.empty(inp.n_query if tie_averaged else 0)

    def work(a: int, b: int) -> None:
        if top == inp.n_db:  # R = all: nothing ordered
            _ap_all.average_precision_all_chunk(
                inp.q_words[a:b], inp.db_t, inp.q_label_words[a:b], inp.db_label_words_t,
                inp.q_class[a:b], inp.db_class, np.empty(_ap_all.BLOCK, _ap_all.key_dtype(inp.bits)),
                ap_index[a:b], ap_average[a:b])
        else:
            _kernels.average_precision_chunk(
                inp.q_words[a:b], inp.db_t, inp.q_label_words[a:b], inp.db_label_words, top,
                ap_index[a:b], ap_average[a:b])

    for_query_ranges(inp.n_query, work)
    return ap_index, ap_average


def mean_average_precision(query_codes, db_codes, query_labels, db_labels, topk=None,
                           tie_averaged: bool = False, bits: int | None = None) -> float:
    """mAP@R (docs/evaluation.md): AP over the top R = `topk` items (None: the whole database).

    AP = mean over the relevant items within the top R of (relevant so far / rank); a query
    with none scores 0 and still counts. Tied items are ranked by database index;
    tie_averaged=True gives the exact expectation over random orders inside each tie instead.
    """
    return float(np.mean(average_precision(query_codes, db_codes, query_labels, db_labels,
                                           topk=topk, tie_averaged=tie_averaged, bits=bits)))


def precision_recall_curve(query_codes, db_codes, query_labels, db_labels,
                           bits: int | None = None) -> PRCurve:
    """Precision/recall of the Hamming ball of radius r = 0..bits (see `PRCurve`)."""
    return pr_curve(prepare(query_codes, db_codes, query_labels, db_labels, bits))


def pr_curve(inp: Retrieval) -> PRCurve:
    nbins = inp.bits + 1
    prec_sum = np.zeros(nbins)
    rec_sum = np.zeros(nbins)
    nonempty = np.zeros(nbins)
    with_relevant = 0
    for hist, rhist in _radius_counts(inp):
        retrieved = np.cumsum(hist, axis=1)
        hits = np.cumsum(rhist, axis=1)
        total = hits[:, -1]
        has = retrieved > 0
        prec_sum += np.where(has, hits / np.maximum(retrieved, 1), 0.0).sum(axis=0)
        nonempty += has.sum(axis=0)
        rel = total > 0
        with_relevant += int(rel.sum())
        rec_sum += (hits[rel] / total[rel, None]).sum(axis=0)
    with np.errstate(invalid="ignore"):
        precision = np.where(nonempty > 0, prec_sum / np.maximum(nonempty, 1), np.nan)
    recall = rec_sum / with_relevant if with_relevant else np.full(nbins, np.nan)
    return PRCurve(np.arange(nbins), precision, recall, nonempty / inp.n_query)


def precision_within_radius(query_codes, db_codes, query_labels, db_labels, radius: int = 2,
                            bits: int | None = None) -> RadiusPrecision:
    """P@H<=radius: precision among items within Hamming distance `radius` of the query."""
    radius = non_negative_int(radius, "radius")
    curve = pr_curve(prepare(query_codes, db_codes, query_labels, db_labels, bits))
    return radius_precision(curve, radius)


def radius_precision(curve: PRCurve, radius: int) -> RadiusPrecision:
    """P@H<=radius from the P-R curve: the curve averages precision over non-empty balls, so
    scaling by the non-empty share scores empty balls 0."""
    r = min(int(radius), len(curve.radius) - 1)
    filled = float(curve.retrieved_fraction[r])
    precision = float(curve.precision[r]) * filled if filled > 0 else 0.0
    return RadiusPrecision(precision, 1.0 - filled)


def precision_at_k(query_codes, db_codes, query_labels, db_labels,
                   ks: Sequence[int] = DEFAULT_KS, bits: int | None = None) -> PrecisionAtK:
    """P@K (and recall@K) at each rank cut-off K of `ks` (see `PrecisionAtK`)."""
    return precision_recall_at_k(prepare(query_codes, db_codes, query_labels, db_labels, bits), check_ks(ks))


def precision_recall_at_k(inp: Retrieval, ks_arr: np.ndarray) -> PrecisionAtK:
    cut = np.minimum(ks_arr, inp.n_db)
    totals = _relevant_totals(inp)
    prec_sum = np.zeros(len(cut))
    rec_sum = np.zeros(len(cut))
    for a, b, index, _ in _top_ranked(inp, int(cut.max())):
        relevant = ((inp.q_label_words[a:b, None, :] & inp.db_label_words[index]) != 0).any(axis=2)
        hits = np.cumsum(relevant, axis=1)[:, cut - 1]
        prec_sum += (hits / cut).sum(axis=0)
        rel = totals[a:b] > 0
        rec_sum += (hits[rel] / totals[a:b][rel, None]).sum(axis=0)
    with_relevant = int((totals > 0).sum())
    recall = rec_sum / with_relevant if with_relevant else np.full(len(cut), np.nan)
    return PrecisionAtK(ks_arr.copy(), prec_sum / inp.n_query, recall)


def knn_accuracy(query_codes, db_codes, query_labels, db_labels, k: int = 100,
                 bits: int | None = None) -> float:
    """Accuracy of a k-nearest-neighbour vote in Hamming space (docs/evaluation.md: the vote and its ties)."""
    k = positive_int(k, "k")
    return knn_vote_accuracy(prepare(query_codes, db_codes, query_labels, db_labels, bits), k)


def knn_vote_accuracy(inp: Retrieval, k: int) -> float:
    top = min(k, inp.n_db)
    # votes dominate; among equal votes the smaller summed distance gives the larger key
    scale = top * inp.bits + 1
    correct = 0
    for a, b, index, dist in _top_ranked(inp, top, per_entry=inp.db_labels.shape[1]):
        voters = inp.db_labels[index]  # (b - a, top, C)
        votes = voters.sum(axis=1, dtype=np.int64)
        spread = (voters * dist[:, :, None].astype(np.int64)).sum(axis=1)
        pred = np.argmax(votes * scale - spread, axis=1)  # first max = smallest class id
        voted = votes.max(axis=1) > 0  # neighbours without labels predict nothing
        correct += int((inp.q_labels[np.arange(a, b), pred] & voted).sum())
    return correct / inp.n_query


def classifier_accuracy(scores, labels) -> float:
    """Recognition accuracy of a classifier branch: its top-scoring class is correct if the
    item has that label (class ids or multi-hot rows)."""
    scores = np.asarray(scores)
    onehot = as_multihot(labels, "labels", scores.shape[1] if scores.ndim == 2 else None)
    if scores.ndim != 2 or len(scores) != len(onehot):
        raise InputError(f"scores must have shape ({len(onehot)}, classes), got {scores.shape}")
    if not np.isfinite(scores).all():
        raise InputError("scores contain NaN or inf")
    pred = scores.argmax(axis=1)
    return float(onehot[np.arange(len(pred)), pred].mean())


# --- streaming helpers ----------------------------------------------------------------------

def _top_ranked(inp: Retrieval, top: int, per_entry: int = 1) -> Iterator[tuple]:
    """Yield (start, stop, index, distance) of the top-ranked items for blocks of queries."""
    block = max(1, _BLOCK_ENTRIES // (top * max(1, per_entry)))
    for a in range(0, inp.n_query, block):
        b = min(inp.n_query, a + block)
        index = np.empty((b - a, top), dtype=np.int64)
        dist = np.empty((b - a, top), dtype=np.uint16)

        def work(s: int, e: int) -> None:
            _kernels.top_ranked_chunk(inp.q_words[a + s:a + e], inp.db_t, top,
                                      index[s:e], dist[s:e])

        for_query_ranges(b - a, work)
        yield a, b, index, dist


def _radius_counts(inp: Retrieval) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield per-query counts of all and of relevant items at each distance 0..bits."""
    nbins = 64 * inp.q_words.shape[1] + 1
    block = max(1, _BLOCK_ENTRIES // nbins)
    for a in range(0, inp.n_query, block):
        b = min(inp.n_query, a + block)
        hist = np.empty((b - a, nbins), dtype=np.int64)
        rhist = np.empty((b - a, nbins), dtype=np.int64)

        def work(s: int, e: int) -> None:
            _kernels.radius_counts_chunk(inp.q_words[a + s:a + e], inp.db_t,
                                         inp.q_label_words[a + s:a + e], inp.db_label_words_t,
                                         hist[s:e], rhist[s:e])

        for_query_ranges(b - a, work)
        yield hist[:, : inp.bits + 1], rhist[:, : inp.bits + 1]


def _relevant_totals(inp: Retrieval) -> np.ndarray:
    """Number of relevant database items per query, via the distinct database label sets."""
    patterns, counts = np.unique(inp.db_label_words, axis=0, return_counts=True)
    totals = np.zeros(inp.n_query, dtype=np.int64)
    step = max(1, _BLOCK_ENTRIES // max(1, len(patterns)))
    for a in range(0, inp.n_query, step):
        shares = (inp.q_label_words[a:a + step, None, :] & patterns[None]) != 0
        totals[a:a + step] = shares.any(axis=2) @ counts
    return totals
