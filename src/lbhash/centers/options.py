"""The class centers' options: which generator, and whether its set is relabelled by the seed."""

from __future__ import annotations

from typing import Literal

from lbhash.centers._generate import CENTER_KINDS
from lbhash.options import Options, option


class CenterOptions(Options):
    """The center generator and whether the seed relabels its set."""

    centers: Literal[CENTER_KINDS] = option("auto", "Center generator.", f"one of {', '.join(CENTER_KINDS)}")
    canonical_centers: bool = option(False, "Use the generator's canonical center set instead of a seeded "
                                            "relabelling of it.", "true or false")


__all__ = ["CenterOptions"]
