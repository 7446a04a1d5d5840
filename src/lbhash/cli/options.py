"""Command-line options generated from the fields of TrainConfig's option sets.

Each option marked for the command line becomes `--field-name` with the field's type (integers, numbers, choices, on/off
flags), its help text and its default as the config shows it, so the options and the config cannot drift apart.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import click


def _base_type(annotation):
    """The annotation without None: (python type or Literal, choices or None)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0] if len(args) == 1 else annotation
    if typing.get_origin(annotation) is Literal:
        return str, [str(a) for a in typing.get_args(annotation)]
    return annotation, None


def shown_default(name: str) -> str:
    """The default of a config field as help texts show it."""
    from lbhash.train.config import field_info

    field = field_info(name)
    if "shown" in field.json_schema_extra:
        return field.json_schema_extra["shown"]
    default = field.default
    if isinstance(default, bool):
        return "on" if default else "off"
    return "none" if default is None else str(default)


def cli_fields() -> list[str]:
    from lbhash.train.config import FIELDS, field_info

    return [name for name in FIELDS if field_info(name).json_schema_extra["cli"]]


def config_options(func):
    """Decorator: one click option per command-line field of TrainConfig, default None
    (not given), so that a config file's values and the defaults show through."""
    from lbhash.train.config import field_info

    for name in reversed(cli_fields()):
        field = field_info(name)
        flag = "--" + name.replace("_", "-")
        kind, choices = _base_type(field.annotation)
        shown = shown_default(name)
        help_text = f"{field.description} " + ("[required]" if shown == "required" else f"[default: {shown}]")
        if kind is bool:
            option = click.option(f"{flag}/--no-{flag[2:]}", name, default=None, help=help_text)
        else:
            click_type: Any = click.Choice(choices) if choices else {int: click.INT, float: click.FLOAT}.get(kind, str)
            option = click.option(flag, name, type=click_type, default=None, help=help_text)
        func = option(func)
    return func


# The --help section of each option set of the config (lbhash train groups its options by them).
SECTION_TITLES = {"dataset": "Data", "hashing": "Method", "recipe": "Training recipe", "class_centers": "Class centers",
                  "neighbourhood": "Neighbourhood term", "objective": "The _D objective (--lbhash)",
                  "surrogate": "The surrogate P_pi (--lbhash)", "model": "Model", "runtime": "Runtime and output"}


def config_sections(fields_of: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(title, parameter names) of each option set, in the config's field order: its command-line fields, and the
    parameters `fields_of` maps to one of its fields (`lbhash train`'s own --method-option, --hidden and --topk)."""
    from lbhash.train.config import OWNERS, SETS

    sections: dict[str, list[str]] = {key: [] for key in SETS}
    for param, field in [*((name, name) for name in cli_fields()), *fields_of.items()]:
        sections[OWNERS[field]].append(param)
    return [(SECTION_TITLES[key], names) for key, names in sections.items() if names]


class SectionedCommand(click.Command):
    """A command whose --help lists its options in titled sections instead of one long list:
    `sections` gives (title, parameter names), or a function returning them (called when help is
    shown); options in no section come last, under "Other options"."""

    def __init__(self, *args, sections=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        help_option = self.get_help_option(ctx)  # named "help" in sections, whatever click calls it
        records = {("help" if p is help_option else p.name): p.get_help_record(ctx) for p in self.get_params(ctx)}
        records = {name: record for name, record in records.items() if record is not None}
        sections = self.sections() if callable(self.sections) else self.sections
        placed: set[str] = set()
        for title, names in [*sections, ("Other options", [n for n in records])]:
            rows = [records[n] for n in names if n in records and n not in placed]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def options_markdown() -> str:
    """The config fields as a markdown table, with the option set that owns each: its field in
    the config, its class and module (docs/training.md shows it; a test compares)."""
    from lbhash.train.config import FIELDS, OWNERS, SETS, field_info

    rows = ["| option | default | meaning | set |", "|---|---|---|---|"]
    for name in FIELDS:
        field, base = field_info(name), SETS[OWNERS[name]]
        rows.append(f"| `{name}` | {shown_default(name)} | {field.description} | `{OWNERS[name]}`: "
                    f"`{base.__name__}` ({base.__module__.removeprefix('lbhash.')}) |")
    return "\n".join(rows)
