"""Compile the numba kernels of the metrics once, into numba's cache beside the package, so
that the first metric a user (or a test) computes does not wait seconds for the compiler.
`make install` runs `python -m lbhash.evaluate.warm`; without it the first call compiles.
"""

from __future__ import annotations

import numpy as np


def warm_kernels() -> None:
    """Run every metric of `lbhash evaluate` once on a few random codes: single- and
    multi-label, at R and at all, symmetric and asymmetric, and the lower bound."""
    from lbhash.evaluate import evaluate_codes

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
