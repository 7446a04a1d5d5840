"""The error type for bad user input.

`InputError` is raised at the edges (files, options, values a user gives). The command line
prints it as one line and exits with status 2; every other exception is a bug and keeps its
traceback. It subclasses ValueError, so `except ValueError` keeps working for callers.
"""


class InputError(ValueError):
    """Bad input from a user: a file, an option or a value. The message names it."""
