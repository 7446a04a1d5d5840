"""The error types for bad user input.

`InputError` (a ValueError) is raised at the edges; the command line prints it as one line and exits with status 2, and
every other exception is a bug that keeps its traceback. `NotFound`, `Conflict` and `TooLarge` are InputErrors the
service answers with 404, 409 and 413. `require_extra` names the extra of a missing optional dependency; `LbhashWarning`
is the base of lbhash's warnings about input it accepted but changed.
"""


class InputError(ValueError):
    """Bad input from a user: a file, an option or a value. The message names it."""


class NotFound(InputError):
    """An id that is not in the index (HTTP 404)."""


class Conflict(InputError):
    """An id that is already in the index, added without upsert (HTTP 409)."""


class TooLarge(InputError):
    """An input over a size budget, such as an upload's pixels (HTTP 413)."""


class LbhashWarning(UserWarning):
    """Input lbhash accepted but changed or doubts (a Python warning, so `warnings` filters and
    `catch_warnings` see it); the command line prints it as one line, `warning: ...`."""


def one_line(err: BaseException) -> str:
    """An exception's message on one line (its whitespace runs collapsed), or its type's name when it has none."""
    return " ".join(str(err).split()) or type(err).__name__


def require_extra(what: str, extra: str, *modules: str | tuple[str, ...]) -> None:
    """Check that the optional modules `what` needs can be imported, else one line naming the
    extra that installs them: `WHAT needs the 'EXTRA' extra: pip install 'lbhash[EXTRA]'`.
    A tuple of names is satisfied by any one of them (a package renamed across versions)."""
    import importlib

    for names in modules:
        names = (names,) if isinstance(names, str) else names
        missing = []
        for name in names:
            try:
                importlib.import_module(name)
                break
            except ModuleNotFoundError as err:
                missing.append(err.name or name)
        else:
            raise InputError(f"{what} needs the {extra!r} extra: pip install 'lbhash[{extra}]' "
                             f"(no module {' or '.join(missing)})")
