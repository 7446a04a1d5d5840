"""Typed option sets: each part of lbhash declares the options it reads beside itself, and
`lbhash.train.config.TrainConfig` holds one of each. Every field carries its help text, what it
accepts and how its default is shown: the CLI flags and the docs' option table come from them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lbhash.errors import InputError


def option(default: Any, help: str, expect: str, shown: str | None = None, cli: bool = True, **constraints) -> Any:
    """A field: its default, help text, what it accepts (for messages) and the default as the
    command line shows it (None: the default itself)."""
    extra = {"expect": expect, "cli": cli}
    if shown is not None:
        extra["shown"] = shown
    return Field(default, description=help, json_schema_extra=extra, **constraints)


class Options(BaseModel):
    """An option set: strict types (no string for a number), finite numbers, unknown keys refused,
    frozen; a bad value is one InputError line naming the option and the value."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)

    def __init__(self, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise InputError(error_line(type(self), err, values)) from None


def error_line(cls: type[BaseModel], err: ValidationError, values: dict[str, Any]) -> str:
    """The first error of `err` as one line: an unknown option with the known ones, a check's
    own words, or `NAME must be EXPECTED, got VALUE`."""
    first = err.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "extra_forbidden":
        return f"unknown option {name!r} (known: {', '.join(cls.model_fields)})"
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, InputError) or name not in cls.model_fields:  # a check with its own words
        return str(cause) if cause is not None else first["msg"]
    expect = cls.model_fields[name].json_schema_extra["expect"]
    return f"{name} must be {expect}, got {values.get(name, first.get('input'))!r}"


__all__ = ["Options", "error_line", "option"]
