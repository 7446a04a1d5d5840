"""What the re-scoring studies share: the AP of one ranking (DeepHash's: the mean of the
precision at each relevant item of the ranking given)."""

from __future__ import annotations

import numpy as np


def average_precision(relevant: np.ndarray) -> float:
    """AP of a ranking's relevance flags (0 when none is relevant)."""
    relevant = np.asarray(relevant, bool)
    if not relevant.any():
        return 0.0
    hits = np.cumsum(relevant)
    return float((hits[relevant] / (np.flatnonzero(relevant) + 1)).mean())
