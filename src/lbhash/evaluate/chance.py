"""The mAP of a random ranking: the chance level printed beside every mAP (docs/evaluation.md).

For a query with m relevant items among N, a uniformly random ranking has expected AP

    E[AP] = (H_N + (m - 1) (N - H_N) / (N - 1)) / N,     H_N = 1 + 1/2 + ... + 1/N,

about m/N; a query with no relevant item has AP 0, as in `mean_average_precision`.
"""

from __future__ import annotations

import numpy as np

from lbhash.labels import as_multihot_pair


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
