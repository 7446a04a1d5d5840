"""Asymmetric ranking: the database's codes ranked by their inner product with the query's
real-valued output (the head's raw u, or tanh of it) instead of the query's code (docs/evaluation.md).

The real output keeps each bit's confidence, so it orders inside Hamming ties. Rankings are by
descending score, ties by database index; the score is summed in float64 in one fixed order
(within each byte from its lowest bit up, then the bytes in order), so equal scores are equal bit
for bit and one lookup table per query and byte replaces eight multiply-adds by one gather.
Only the ranking metrics change (mAP@R, P@K / recall@K); P@H<=r does not depend on the order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lbhash.codes import as_packed, to_signs
from lbhash.errors import InputError
from lbhash.evaluate._inputs import Retrieval, check_ks, check_topk, for_query_ranges, prepare

CHUNK = 64  # queries per block: a (64, n_db) float64 score block


def check_query_real(query_real, n_query: int, bits: int, name: str = "query_real") -> np.ndarray:
    """Real-valued query outputs as float64 (n_query, bits): finite numbers. `name` is the
    argument or option the errors name."""
    arr = np.asarray(query_real)
    if arr.ndim != 2 or arr.shape != (n_query, bits):
        raise InputError(f"{name} must have shape ({n_query}, {bits}) (one row of real outputs per query), "
                         f"got {arr.shape}")
    if arr.dtype.kind not in "iuf" or arr.dtype == bool:
        raise InputError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        r = int(np.flatnonzero(~np.isfinite(arr).all(1))[0])
        raise InputError(f"{name} holds NaN or inf in row {r}")
    return arr


# _BYTE_SIGNS[v, k] = +1 if bit k of byte value v is set, else -1 (the FAISS bit layout)
_BYTE_SIGNS = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, 1.0, -1.0)


def asymmetric_scores(query_real: np.ndarray, db_packed: np.ndarray) -> np.ndarray:
    """(nq, n) scores sum_j r_qj * b_dj of packed database codes, in the fixed order above.

    A fixed order makes equal scores exactly equal (a BLAS product may sum in any order)."""
    nq, bits = query_real.shape
    padded = np.zeros((nq, -(-bits // 8) * 8))
    padded[:, :bits] = query_real  # padding bits score 0: they add exact zeros
    blocks = padded.reshape(nq, -1, 8)
    tables = np.zeros((nq, blocks.shape[1], 256))  # the partial score of every byte value
    for k in range(8):  # fixed order inside the byte: lowest bit first
        tables += blocks[:, :, k:k + 1] * _BYTE_SIGNS[:, k]
    scores = np.zeros((len(query_real), len(db_packed)))
    for t in range(db_packed.shape[1]):
        scores += np.take(tables[:, t], db_packed[:, t], axis=1)
    return scores


def asymmetric_order(scores: np.ndarray, top: int) -> np.ndarray:
    """Per row, the indices of the `top` highest scores, ties by ascending index."""
    # a stable sort of -score keeps equal scores in index order
    return np.argsort(-scores, axis=1, kind="stable")[:, :top]


def rank_asymmetric(query_real, db_codes, bits: int | None = None, topk: int | None = None) -> np.ndarray:
    """The database indices (nq, R) of each query's top R by asymmetric score (R = topk or all)."""
    packed, nbits = as_packed(db_codes, bits, "db_codes")
    real = check_query_real(query_real, len(np.asarray(query_real)), nbits)
    return asymmetric_order(asymmetric_scores(real, packed), check_topk(topk, len(packed)))


def asymmetric_metrics(inp: Retrieval, query_real: np.ndarray, top: int, ks: np.ndarray) -> dict[str, Any]:
    """mAP@top (ties by index) and P@K / recall@K under the asymmetric ranking."""
    cut = np.minimum(ks, inp.n_db)
    depth = max(top, int(cut.max()))
    ap = np.zeros(inp.n_query)
    hits_at = np.zeros((inp.n_query, len(cut)))
    totals = np.zeros(inp.n_query)
    db_labels = inp.db_labels.astype(np.float32)

    def work(a: int, b: int) -> None:
        for s in range(a, b, CHUNK):
            e = min(b, s + CHUNK)
            order = asymmetric_order(asymmetric_scores(query_real[s:e], inp.db_packed), depth)
            relevant = (inp.q_labels[s:e].astype(np.float32) @ db_labels.T) > 0   # (c, n)
            totals[s:e] = relevant.sum(1)
            ranked = np.take_along_axis(relevant, order, axis=1)
            hits = np.cumsum(ranked, axis=1)
            within = ranked[:, :top]
            found = hits[:, top - 1]
            precision = hits[:, :top] / np.arange(1, top + 1)
            ap[s:e] = np.where(found > 0, (precision * within).sum(1) / np.maximum(found, 1), 0.0)
            hits_at[s:e] = hits[:, cut - 1]

    for_query_ranges(inp.n_query, work)
    with_relevant = totals > 0
    recall = ((hits_at[with_relevant] / totals[with_relevant, None]).mean(0) if with_relevant.any()
              else np.full(len(cut), np.nan))
    return {"map": float(ap.mean()),
            "precision_at_k": {"k": ks.copy(), "precision": (hits_at / cut).mean(0), "recall": recall}}


def asymmetric_map(query_real, db_codes, query_labels, db_labels, bits: int | None = None,
                   topk: int | None = None) -> float:
    """mAP@R under the asymmetric ranking (ties by database index); R = topk or the whole database."""
    _, nbits = as_packed(db_codes, bits, "db_codes")
    real = check_query_real(query_real, len(np.asarray(query_real)), nbits)
    inp = prepare(to_signs(real, "query_real"), db_codes, query_labels, db_labels, bits)
    return asymmetric_metrics(inp, real, check_topk(topk, inp.n_db), check_ks([1]))["map"]
