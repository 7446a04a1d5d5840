"""Shared CLI plumbing: one error path, and the parsers of list-valued options.

User mistakes (lbhash.errors.InputError, a missing or unreadable file, a full disk, an option click cannot parse) print
one line, `error: ...`, and exit with status 2. Every other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import importlib

import click

from lbhash.errors import InputError

USER_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)


def shown(name) -> str:
    """A file name or path as one piece of a text line: as it is where it is printable, else
    quoted with its control characters escaped (Python's repr), so that a newline in a name
    cannot split a line that scripts read line by line."""
    text = str(name)
    return text if text.isprintable() else repr(text)


class OneLineError(click.ClickException):
    """Printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


class LbhashGroup(click.Group):
    """Turns user mistakes into a one-line message with exit 2 (see the module docstring)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, OneLineError):
            raise
        except Exception as err:  # noqa: BLE001 - re-raised unless it is a user mistake
            if isinstance(err, InputError):
                message = str(err)
            elif isinstance(err, click.UsageError):
                where = f" (see `{err.ctx.command_path} --help`)" if err.ctx is not None else ""
                message = err.format_message().replace("\n", " ") + where
            elif isinstance(err, OSError) and (isinstance(err, USER_OS_ERRORS)
                                               or err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)):
                name = err.filename if err.filename is not None else ""
                message = f"{name}: {err.strerror or err}" if name else str(err.strerror or err)
            else:
                raise
            raise OneLineError(message) from None


class LazyGroup(LbhashGroup):
    """A group whose commands are imported when used. `commands_table` maps a command's name to (module under
    lbhash.cli, function name, the one line `--help` lists), so listing the commands imports none of them."""

    def __init__(self, *args, commands_table: dict[str, tuple[str, str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.commands_table = commands_table

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands_table, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.commands_table:
            module, function, _ = self.commands_table[cmd_name]
            self.add_command(getattr(importlib.import_module(f"lbhash.cli.{module}"), function), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = [(name, short_line(self.commands_table[name][2], width)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class StatedDefault(click.Option):
    """An option left out by default (None: the code applies its own value) whose help ends with
    `[default: ...]` as `stated()` gives it when the help is shown: read from the constant the code
    uses, so that a changed constant cannot leave the help stale (tests/cli/test_help_defaults.py)."""

    def __init__(self, *args, stated, **kwargs):
        super().__init__(*args, **kwargs)
        self.stated = stated

    def get_help_record(self, ctx: click.Context):
        record = super().get_help_record(ctx)
        if record is None:
            return None
        return record[0], f"{record[1]}  [default: {self.stated()}]".lstrip()


def short_line(text: str, width: int) -> str:
    """`text` cut at a word to fit `width`, with "..." when cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 2)].rsplit(" ", 1)[0].rstrip(" ,;:") + "..."  # a whole last word only


def parse_topk(value: str) -> int | None:
    """'all' (the whole database) or a positive integer."""
    if value.lower() == "all":
        return None
    try:
        topk = int(value)
    except ValueError:
        topk = 0
    if topk <= 0:
        raise InputError(f"--topk must be a positive integer or 'all', got {value!r}")
    return topk
