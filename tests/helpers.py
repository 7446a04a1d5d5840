"""Random test data with many tied distances."""

import numpy as np


def tied_codes(rng, n, bits, pool=8, flip=0.08):
    """Codes drawn from a small pool with a few flipped bits: many equal distances."""
    base = rng.choice(np.array([-1, 1], dtype=np.int8), size=(pool, bits))
    which = rng.integers(0, pool, n)
    codes = base[which]
    flips = rng.random((n, bits)) < flip
    return np.where(flips, -codes, codes).astype(np.int8), which


def labels_for(rng, which, classes, multilabel):
    """Labels that follow the pool index most of the time."""
    n = len(which)
    first = np.where(rng.random(n) < 0.7, which % classes, rng.integers(0, classes, n))
    if not multilabel:
        return first
    out = np.zeros((n, classes), dtype=np.uint8)
    out[np.arange(n), first] = 1
    extra = rng.random((n, classes)) < 0.15
    out |= extra.astype(np.uint8)
    out[rng.random(n) < 0.05] = 0  # some items without labels: nothing is relevant to them
    return out
