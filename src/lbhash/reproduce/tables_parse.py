"""Parsing single values of the result files, for `lbhash.reproduce.tables`.

A CSV column's kind is str, bool, int, float (finite), frac ([0, 1]), ratio (>= 0, inf allowed)
or topk ('all' or a positive integer); a trailing "?" lets a cell be empty. The parsers raise
ValueError saying what is wrong, and the caller adds the file and the column or line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from lbhash.errors import InputError


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None


def parse_number(value: Any) -> float:
    """A number from JSON: "inf" is +inf and null is NaN; anything else but a number is an error."""
    if value == "inf":
        return math.inf
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {value!r}")
    return float(value)


def parse_cell(cell: str, kind: str) -> Any:
    """One CSV cell parsed as `kind` (see the module docstring); ValueError says what is wrong."""
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if cell == "":
        if optional:
            return "" if kind == "str" else math.nan
        raise InputError("empty, expected a value")
    if kind == "str":
        return cell
    if kind == "bool":
        return _parse_bool(cell)
    if kind == "topk":
        return _parse_topk(cell)
    return _parse_numeric(cell, kind, optional)


def _parse_bool(cell: str) -> bool:
    if cell.lower() in ("true", "1"):
        return True
    if cell.lower() in ("false", "0"):
        return False
    raise InputError(f"cannot parse {cell!r} as True/False")


def _parse_topk(cell: str) -> str:
    if cell.lower() == "all":
        return "all"
    if not cell.isdigit() or int(cell) <= 0:
        raise InputError(f"cannot parse {cell!r} as 'all' or a positive integer")
    return cell


def _parse_numeric(cell: str, kind: str, optional: bool) -> int | float:
    """int, float, frac or ratio; a non-empty optional frac may be NaN."""
    try:
        number = float(cell)
    except ValueError:
        raise InputError(f"cannot parse {cell!r} as a number") from None
    if kind == "int":
        if not number.is_integer():
            raise InputError(f"cannot parse {cell!r} as an integer")
        return int(number)
    if kind == "ratio" and not (number >= 0):  # +inf allowed, NaN and negatives not
        raise InputError(f"{cell!r} is not a ratio >= 0 (inf allowed)")
    if kind == "float" and not math.isfinite(number):
        raise InputError(f"{cell!r} is not a finite number")
    if kind == "frac" and not (0 <= number <= 1 or (optional and math.isnan(number))):
        raise InputError(f"{cell!r} is not a fraction in [0, 1]")
    return number


def column_array(values: list, kind: str) -> np.ndarray:
    """A column's parsed values as one array: object for str and topk, else bool, int or float."""
    kind = kind.rstrip("?")
    if kind in ("str", "topk"):
        return np.array(values, dtype=object)
    return np.array(values, dtype={"bool": bool, "int": np.int64}.get(kind, np.float64))

