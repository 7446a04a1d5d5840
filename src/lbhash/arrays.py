"""Feature rows as the model takes them: the one float32 conversion (`as_float32`) and the one
finite check (`first_nonfinite`), shared by the data sets (lbhash.data), the input contract
and `HashEncoder`. Each caller words its own error, naming what the user gave.
"""

from __future__ import annotations

import numpy as np

# rows per block of `first_nonfinite` over selected rows: a copy of at most about 64 MB
_BLOCK_BYTES = 64 << 20


def as_float32(x) -> np.ndarray:
    """x as a C-contiguous float32 array: a copy only when it is not one already (values beyond
    float32's range become infinite, which `first_nonfinite` then finds)."""
    return np.ascontiguousarray(x, dtype=np.float32)


def first_nonfinite(x: np.ndarray, rows: np.ndarray | None = None) -> tuple[int, int] | None:
    """(row, column) of the first NaN or infinity of a 2-D array, in the order of `rows` (default: every row), or None
    when all are finite. Row sums screen without copying the array (a sum is not finite wherever its row holds NaN or
    inf, and rarely by overflow); the rows they flag are confirmed value by value."""
    if rows is None:
        return _first_in(x, np.arange(len(x)))
    step = max(1, _BLOCK_BYTES // max(1, x[:1].nbytes))
    for start in range(0, len(rows), step):  # blocks: a selection of every row would copy the set
        block = rows[start:start + step]
        hit = _first_in(x[block], block)
        if hit is not None:
            return hit
    return None


def _first_in(block: np.ndarray, positions: np.ndarray) -> tuple[int, int] | None:
    with np.errstate(over="ignore", invalid="ignore"):
        flagged = np.flatnonzero(~np.isfinite(block.sum(axis=1, dtype=np.float32)))
    bad = np.argwhere(~np.isfinite(block[flagged]))
    if not len(bad):
        return None
    return int(positions[flagged[bad[0][0]]]), int(bad[0][1])
