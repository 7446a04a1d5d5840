"""Public names of a package imported on first use (PEP 562): the package maps each name to its
module, and `lazy_names` gives it the module-level `__getattr__` and `__dir__` that import them."""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_names(package: str, homes: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """(`__getattr__`, `__dir__`) for `package`, whose public name N lives in the module
    `package.homes[N]`; a name, once imported, is kept in `namespace` (the package's globals())."""

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *homes})

    return __getattr__, __dir__
