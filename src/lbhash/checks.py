"""The integer checks every layer shares, and the one spelling of "the whole database" in files.

In memory the whole database is `None` (topk=None); in files it is the string "all" (config.yaml, metrics.json,
codes.npz, split.npz). Files written before this rule hold -1, which still reads as the whole database.
"""

from __future__ import annotations

import os

import numpy as np

from lbhash.errors import InputError

WHOLE_DATABASE = "all"


def is_int(value) -> bool:
    """An int or NumPy integer, and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def positive_int_env(name: str, unit: str = "") -> int | None:
    """The positive integer in environment variable `name` (None: unset or empty), else one line naming it."""
    text = os.environ.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise InputError(f"{name} must be a positive integer{f' ({unit})' if unit else ''}, got {text!r}")
    return value


def positive_int(value, name: str) -> int:
    if not is_int(value) or value <= 0:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def non_negative_int(value, name: str) -> int:
    if not is_int(value) or value < 0:
        raise InputError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def parse_int_list(text: str, name: str, allow_empty: bool = False) -> list[int]:
    """Comma-separated integers of an option or form field (`name` in its errors)."""
    try:
        items = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{name} must be comma-separated integers, got {text!r}") from None
    if not items and not allow_empty:
        raise InputError(f"{name} must list at least one integer, got {text!r}")
    return items


def topk_to_file(topk: int | None) -> int | str:
    """The R of mAP@R as files hold it: a positive integer, or "all"."""
    return WHOLE_DATABASE if topk is None else int(topk)


def topk_from_file(value, where: str) -> int | None:
    """The R a file holds ("all", a positive integer, or the older -1) -> None or the integer."""
    value = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if value == WHOLE_DATABASE or (is_int(value) and value == -1):
        return None
    if is_int(value) and value > 0:
        return int(value)
    raise InputError(f"{where}: 'topk' must be a positive integer or 'all' (the whole database), got {value!r}")
