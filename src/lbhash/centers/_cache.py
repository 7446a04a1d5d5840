"""On-disk cache of generated center sets, keyed by (kind, bits, classes, seed)."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import numpy as np

from lbhash import _io

logger = logging.getLogger("lbhash")

# Bump when a generator changes its output, so that older cached sets are not reused.
CACHE_VERSION = 2


def cache_dir() -> Path:
    """$LBHASH_CACHE_DIR/centers, else $XDG_CACHE_HOME/lbhash/centers, else ~/.cache/lbhash/centers."""
    root = os.environ.get("LBHASH_CACHE_DIR")
    if root:
        return Path(root) / "centers"
    xdg = os.environ.get("XDG_CACHE_HOME")  # an empty value counts as unset (XDG spec)
    return Path(xdg or Path.home() / ".cache") / "lbhash" / "centers"


def cache_file(kind: str, bits: int, classes: int, seed: int) -> Path:
    return cache_dir() / f"{kind}-b{bits}-c{classes}-s{seed}-v{CACHE_VERSION}.npz"


def load(kind: str, bits: int, classes: int, seed: int, valid_kinds, asked: str) -> tuple[np.ndarray, str] | None:
    """The cached (centers, kind that made them), or None when absent, unreadable or invalid;
    a damaged entry is named in a warning (it is then generated and written again).
    `kind` names the cache entry; `asked` is the generator kind it must have come from ("auto": any)."""
    path = cache_file(kind, bits, classes, seed)
    if not path.is_file():
        return None
    try:
        data = _io.load_npz(path)
    except ValueError as err:
        return _damaged(path, str(err).removeprefix(f"{path}: "))
    centers, made_by = data.get("centers"), data.get("kind")
    if centers is None or made_by is None or made_by.shape != () or made_by.dtype.kind != "U":
        return _damaged(path, f"not a center set (keys: {', '.join(data) or 'none'})")
    made_by = str(made_by)
    if made_by not in valid_kinds or (asked != "auto" and made_by != asked):
        return _damaged(path, f"made by {made_by!r}, expected {asked!r}")
    if centers.dtype != np.int8 or centers.shape != (classes, bits):
        return _damaged(path, f"holds {centers.dtype} {centers.shape}, expected int8 {(classes, bits)}")
    if not np.all((centers == 1) | (centers == -1)) or len(np.unique(centers, axis=0)) != classes:
        return _damaged(path, "holds values other than +/-1 or repeated centers")
    return centers, made_by


def _damaged(path: Path, reason: str) -> None:
    logger.warning("%s: damaged center cache (%s); generating the centers again", path, reason)
    return None


def store(kind: str, bits: int, classes: int, seed: int, centers: np.ndarray, made_by: str) -> None:
    """Write atomically; a cache that cannot be written only costs a warning."""
    path = cache_file(kind, bits, classes, seed)
    try:
        _io.save_npz(path, centers=centers, kind=np.array(made_by))
    except OSError as err:
        warnings.warn(f"could not cache centers in {path}: {err}", RuntimeWarning, stacklevel=3)
