"""On-disk cache of generated center sets, keyed by (kind, bits, classes, seed)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from lbhash import _io

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


def load(kind: str, bits: int, classes: int, seed: int, valid_kinds,
         asked: str | None = None) -> tuple[np.ndarray, str] | None:
    """The cached (centers, kind that made them), or None when absent, unreadable or invalid.

    `kind` names the cache entry; `asked` is the generator kind it must have come from
    (default: `kind`; "auto" accepts any)."""
    asked = kind if asked is None else asked
    path = cache_file(kind, bits, classes, seed)
    if not path.is_file():
        return None
    try:
        data = _io.load_npz(path)
    except ValueError:
        return None
    centers, made_by = data.get("centers"), data.get("kind")
    if centers is None or made_by is None or made_by.shape != () or made_by.dtype.kind != "U":
        return None
    made_by = str(made_by)
    if made_by not in valid_kinds or (asked != "auto" and made_by != asked):
        return None
    if centers.dtype != np.int8 or centers.shape != (classes, bits):
        return None
    if not np.all((centers == 1) | (centers == -1)) or len(np.unique(centers, axis=0)) != classes:
        return None
    return centers, made_by


def store(kind: str, bits: int, classes: int, seed: int, centers: np.ndarray, made_by: str) -> None:
    """Write atomically; a cache that cannot be written only costs a warning."""
    path = cache_file(kind, bits, classes, seed)
    try:
        _io.save_npz(path, centers=centers, kind=np.array(made_by))
    except OSError as err:
        warnings.warn(f"could not cache centers in {path}: {err}", RuntimeWarning, stacklevel=3)
