"""The method choice: which method, its variant (_D or not), code length, defaults profile and
the method's own constants."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from lbhash.limits import MAX_BITS
from lbhash.methods.base import method_class
from lbhash.methods.defaults import PROFILES
from lbhash.options import Options, option


class MethodOptions(Options):
    """The method, its _D variant, the code length, the defaults profile and its constants."""

    method: str = option("csq", "Hashing method (see `lbhash methods`).", "a method name")
    defaults: Literal[PROFILES] = option(
        "recommended", "Defaults profile: 'recommended' (chosen by our validation study), 'paper' (the "
                       "paper-faithful recipe and _D objective) or 'benchmark' (the DeepHash benchmark's recipe).",
        f"one of {', '.join(PROFILES)}")
    lbhash: bool = option(False, "Train the method's _D variant (the paper's objective).", "true or false")
    bits: int = option(64, f"Code length, at most {MAX_BITS} bits.", f"an integer from 1 to {MAX_BITS}", ge=1,
                       le=MAX_BITS)
    method_options: dict[str, bool | int | float | str] = option(
        {}, "The method's constants, NAME=VALUE (e.g. quantization=1e-4).", "a mapping of constant names to values",
        shown="the method's", cli=False)

    @field_validator("method")
    @classmethod
    def _known_method(cls, value):
        return method_class(value).name  # unknown names: InputError with the list


__all__ = ["MethodOptions"]
