"""Shared CLI plumbing: one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import click


class InputError(click.ClickException):
    """Bad input: printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


class LbhashGroup(click.Group):
    """Turns ValueError (the library's bad-input error) into a one-line message, exit 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ValueError as err:
            raise InputError(str(err)) from None
        except FileNotFoundError as err:
            raise InputError(f"{err.filename}: no such file") from None


def parse_topk(value: str) -> int | None:
    """'all' (the whole database) or a positive integer."""
    if value.lower() == "all":
        return None
    try:
        topk = int(value)
    except ValueError:
        raise ValueError(f"--topk must be a positive integer or 'all', got {value!r}") from None
    if topk <= 0:
        raise ValueError(f"--topk must be a positive integer or 'all', got {value!r}")
    return topk


def parse_int_list(value: str, name: str) -> list[int]:
    try:
        items = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated integers, got {value!r}") from None
    if not items:
        raise ValueError(f"{name} must list at least one integer, got {value!r}")
    return items
