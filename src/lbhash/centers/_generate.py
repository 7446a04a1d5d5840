"""Choosing, seeding, caching and reporting center sets."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from lbhash.centers import _cache
from lbhash.centers._simple import hadamard_centers, pairwise_distance_stats, random_centers
from lbhash.errors import InputError
from lbhash.limits import MAX_BITS

CENTER_KINDS = ("auto", "hadamard", "bch", "reed_solomon", "random")
# Order in which `auto` tries the kinds; on equal min distance the earlier one wins.
AUTO_ORDER = ("hadamard", "bch", "reed_solomon", "random")


class CenterReport(NamedTuple):
    """Quality of a center set: its min and mean pairwise Hamming distance, and the Plotkin
    bound floor(bits*C / (2*(C-1))), an upper bound on the min distance of any C codewords."""

    kind: str | None
    bits: int
    classes: int
    min_distance: int
    mean_distance: float
    plotkin_bound: int


def generate_centers(bits: int, num_classes: int, kind: str = "auto", seed: int = 0,
                     cache: bool = True, canonical: bool = False) -> np.ndarray:
    """(num_classes, bits) int8 +/-1 class centers with a large minimum Hamming distance (see `select_centers`)."""
    return select_centers(bits, num_classes, kind, seed, cache, canonical)[0]


def select_centers(bits: int, num_classes: int, kind: str = "auto", seed: int = 0,
                   cache: bool = True, canonical: bool = False) -> tuple[np.ndarray, str]:
    """Like `generate_centers`, also returning the kind that made the set (for kind="auto", the winner
    among AUTO_ORDER by min pairwise distance, ties to the earlier kind).

    Deterministic for a given seed. `random` draws with the seed; the other kinds build one canonical
    set and relabel it by a seeded isometry (rows, bit positions and bit signs permuted/flipped), which
    keeps every pairwise distance; `canonical=True` keeps the canonical set (whose Hadamard rows, for
    instance, repeat one 8-bit pattern in every byte). cache=True reads and writes `cache_dir()`."""
    bits, classes, seed = _check_args(bits, num_classes, kind, seed)
    name = f"{kind}-canonical" if canonical else kind
    if cache:
        hit = _cache.load(name, bits, classes, seed, CENTER_KINDS[1:], kind)
        if hit is not None:
            return hit
    centers, made_by = _build(kind, bits, classes, seed, cache, canonical)
    if cache:
        _cache.store(name, bits, classes, seed, centers, made_by)
    return centers, made_by


def center_report(centers, kind: str | None = None) -> CenterReport:
    """Min / mean pairwise distance of a +/-1 (C, bits) set, with the Plotkin bound."""
    arr = np.asarray(centers)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 1:
        raise InputError(f"centers must have shape (classes >= 2, bits >= 1), got {arr.shape}")
    classes, bits = arr.shape
    min_dist, mean_dist = pairwise_distance_stats(arr)
    return CenterReport(kind, bits, classes, min_dist, mean_dist, plotkin_bound(bits, classes))


def plotkin_bound(bits: int, classes: int) -> int:
    """floor(bits*C / (2*(C-1))), an upper bound on the min distance of any C codewords: a bit separates at
    most C^2/4 of the C(C-1)/2 pairs, so the mean distance is at most bits*C / (2*(C-1))."""
    return bits * classes // (2 * (classes - 1))


def _check_args(bits, classes, kind, seed) -> tuple[int, int, int]:
    for name, value, low in (("bits", bits, 1), ("classes", classes, 2), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    if bits > MAX_BITS:  # checked before any work: far longer codes run for minutes, then out of memory
        raise InputError(f"bits must be an integer from 1 to {MAX_BITS}, got {bits!r}")
    if kind not in CENTER_KINDS:
        raise InputError(f"kind must be one of {', '.join(CENTER_KINDS)}, got {kind!r}")
    if (classes - 1).bit_length() > bits:  # classes > 2^bits, without a float that overflows
        raise InputError(f"classes must be <= 2^bits for distinct centers, "
                         f"got bits={bits}, classes={classes}")
    return int(bits), int(classes), int(seed)


def _build(kind: str, bits: int, classes: int, seed: int, cache: bool, canonical: bool) -> tuple[np.ndarray, str]:
    if kind == "random":
        return random_centers(bits, classes, seed), kind
    if kind != "auto":
        centers = hadamard_centers(bits, classes) if kind == "hadamard" else _algebraic_set(kind, bits, classes).copy()
        if not canonical:  # a seeded distance-preserving relabelling
            rng = np.random.default_rng(seed)
            flips = np.where(rng.random(bits) < 0.5, -1, 1).astype(np.int8)
            centers = np.ascontiguousarray(centers[rng.permutation(classes)][:, rng.permutation(bits)] * flips)
        return centers, kind
    best, best_kind, best_dist, reasons = None, None, -1, []
    for candidate in AUTO_ORDER:
        try:
            centers, _ = select_centers(bits, classes, candidate, seed, cache, canonical)
        except ValueError as err:  # this kind does not apply to (bits, classes)
            reasons.append(str(err))
            continue
        dist = pairwise_distance_stats(centers)[0]
        if dist > best_dist:
            best, best_kind, best_dist = centers, candidate, dist
    if best is None:
        raise InputError(f"auto: no center kind applies to bits={bits}, classes={classes} "
                         f"({'; '.join(reasons)})")
    return best, best_kind


@functools.lru_cache(maxsize=32)
def _algebraic_set(kind: str, bits: int, classes: int) -> np.ndarray:
    """The canonical BCH or Reed-Solomon set, built once per process: its search over codes
    can take seconds, and a process that trains with several seeds or cache directories asks
    for it again (the on-disk cache holds the seeded sets)."""
    from lbhash.centers import _algebraic

    make = _algebraic.bch_centers if kind == "bch" else _algebraic.reed_solomon_centers
    centers = make(bits, classes)
    centers.flags.writeable = False
    return centers
