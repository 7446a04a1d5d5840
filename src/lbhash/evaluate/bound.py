"""The lower-bound ratio min D_inter / max D_intra (paper Sec. 4, App. B)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lbhash.codes import as_packed, class_centers, hamming_distance
from lbhash.evaluate._inputs import check_percentile
from lbhash.labels import as_multihot
from lbhash.errors import InputError

# Rows of codes compared with the centers at once.
_ROWS = 1 << 16


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
