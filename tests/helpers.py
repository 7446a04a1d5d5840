"""Shared test helpers: random codes with many tied distances, and kill-and-resume runs."""

import numpy as np
import pytest


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


class Killed(Exception):
    """Stands in for a process killed at the end of an epoch."""


def assert_resume_matches(run, cfg, root, kill_at=2):
    """Train cfg uninterrupted and killed after epoch kill_at then resumed (with run, e.g.
    lbhash.train.train); assert both give the same codes and return the two run directories."""
    from lbhash.codes import load_codes_file

    full, cut = root / "full", root / "cut"
    run(cfg, full)

    def die(epoch):
        if epoch == kill_at:
            raise Killed

    with pytest.raises(Killed):
        run(cfg, cut, on_epoch_end=die)
    assert not (cut / "codes.npz").exists()
    run(None, cut, resume=True)
    a, b = load_codes_file(full / "codes.npz"), load_codes_file(cut / "codes.npz")
    np.testing.assert_array_equal(a["db_codes"], b["db_codes"])
    np.testing.assert_array_equal(a["query_codes"], b["query_codes"])
    return full, cut
