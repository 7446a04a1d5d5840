"""The `per-class=` option of the `images:` and `cifar10:` data specs: a small part of a folder
or tarball, N images of each class or a fraction of each, chosen from the labels alone before
any image is read (docs/reference/formats.md, "A part of each class").

The choice is deterministic: the first images of each class in data-set order (by path in a
class-folder tree, by row in CIFAR-10 pickles), taken separately in the train and the test part
when the source has them, so that the parts' own split stays.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from lbhash.errors import InputError, LbhashWarning

_LISTED = 5  # classes named in the warning about classes taken whole


class FewerImagesWarning(LbhashWarning):
    """`per-class=N` met classes with fewer than N images: they were taken whole."""


@dataclass(frozen=True)
class PerClass:
    """At most `count` images of each class, or `fraction` of each (rounded up, so at least one)."""

    text: str
    count: int | None = None
    fraction: Fraction | None = None

    def quota(self, size: int) -> int:
        if self.count is not None:
            return min(self.count, size)
        return math.ceil(self.fraction * size)


def parse_per_class(value: str, where: str) -> PerClass:
    """`N` (a whole number >= 1) or `F` (a decimal fraction, 0 < F < 1), as written in a spec."""
    text = value.strip()
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return PerClass(text, count=int(text))
    try:
        fraction = Fraction(text) if "." in text and "/" not in text else None
    except ValueError:
        fraction = None
    if fraction is None or not 0 < fraction < 1:
        raise InputError(f"{where}: option per-class must be a whole number of images (1 or more) or a "
                         f"fraction between 0 and 1 such as 0.1, got {value!r}")
    return PerClass(text, fraction=fraction)


def per_class_positions(class_ids: np.ndarray, is_test: np.ndarray | None, rule: PerClass,
                        class_names: list[str], where: str) -> np.ndarray:
    """Positions (ascending) of the items `rule` keeps: in each group of one class (and one part
    when `is_test` is given), the first `rule.quota(group size)` items. A class with fewer than
    N images is taken whole, and one FewerImagesWarning names such classes."""
    ids = np.asarray(class_ids, np.int64)
    width = int(ids.max(initial=0)) + 1
    group = ids if is_test is None else np.asarray(is_test, np.int64) * width + ids
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.r_[True, group[order][1:] != group[order][:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    quotas = np.array([rule.quota(int(s)) for s in sizes], np.int64)
    rank = np.arange(len(order)) - np.repeat(starts, sizes)
    kept = np.sort(order[rank < np.repeat(quotas, sizes)])
    if rule.count is not None and (sizes < rule.count).any():
        short = [f"{class_names[g % width]}{'' if is_test is None else (' train', ' test')[g // width]} ({s})"
                 for g, s in zip(group[order][starts], sizes) if s < rule.count]
        more = f" and {len(short) - _LISTED} more" if len(short) > _LISTED else ""
        warnings.warn(f"{where}: per-class={rule.text}: {len(short)} class(es) have fewer images and are "
                      f"taken whole: {', '.join(short[:_LISTED])}{more}", FewerImagesWarning, stacklevel=2)
    return kept
