"""Class centers: C codewords of `bits` bits with a large minimum Hamming distance (paper App. F; docs/centers.md).

    centers = generate_centers(64, 100)            # kind="auto": best of the generators below
    centers, kind = select_centers(48, 100)        # ... and which kind won
    center_report(centers, kind)                   # min / mean distance, Plotkin bound

Kinds: hadamard, bch, reed_solomon (codes built in numpy, `_fields`), random and auto; results
are cached on disk (`cache_dir`). A run's options of them are a `CenterOptions`.
"""

from typing import Literal

from lbhash.centers._algebraic import bch_centers, reed_solomon_centers
from lbhash.centers._cache import cache_dir
from lbhash.centers._generate import (AUTO_ORDER, CENTER_KINDS, CenterReport, center_report, generate_centers,
                                      plotkin_bound, select_centers)
from lbhash.centers._simple import hadamard_centers, random_centers
from lbhash.options import Options, option


class CenterOptions(Options):
    """The center generator and whether the seed relabels its set."""

    centers: Literal[CENTER_KINDS] = option("auto", "Center generator.", f"one of {', '.join(CENTER_KINDS)}")
    canonical_centers: bool = option(False, "Use the generator's canonical center set instead of a seeded "
                                            "relabelling of it.", "true or false")


__all__ = [
    "AUTO_ORDER", "CENTER_KINDS", "CenterOptions", "CenterReport", "bch_centers", "cache_dir", "center_report",
    "generate_centers", "hadamard_centers", "plotkin_bound", "random_centers", "reed_solomon_centers", "select_centers",
]
