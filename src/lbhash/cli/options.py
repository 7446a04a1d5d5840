"""Command-line options generated from the options of TrainConfig (lbhash.runs.train_options.option_schema): each
becomes `--field-name` with its type, help text and default as the config shows it, so the two cannot drift apart."""

from __future__ import annotations

import click

from lbhash.runs.train_options import option_schema


def shown_default(name: str) -> str:
    """The default of a config field as help texts show it."""
    return option_schema()[name].default


def cli_fields() -> list[str]:
    return [name for name, info in option_schema().items() if info.cli]


def config_options(func):
    """Decorator: one click option per command-line field of TrainConfig, default None
    (not given), so that a config file's values and the defaults show through."""
    for name in reversed(cli_fields()):
        info, flag = option_schema()[name], "--" + name.replace("_", "-")
        help_text = f"{info.help} " + ("[required]" if info.default == "required" else f"[default: {info.default}]")
        if info.kind is bool:
            option = click.option(f"{flag}/--no-{flag[2:]}", name, default=None, help=help_text)
        else:
            kind = {int: click.INT, float: click.FLOAT}.get(info.kind, str)
            option = click.option(flag, name, type=click.Choice(info.choices) if info.choices else kind, default=None,
                                  help=help_text)
        func = option(func)
    return func


# The --help section of each option set of the config (lbhash train groups its options by them).
SECTION_TITLES = {"dataset": "Data", "hashing": "Method", "recipe": "Training recipe", "class_centers": "Class centers",
                  "neighbourhood": "Neighbourhood term", "objective": "The _D objective (--lbhash)",
                  "surrogate": "The surrogate P_pi (--lbhash)", "model": "Model", "runtime": "Runtime and output"}


def config_sections(fields_of: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(title, parameter names) of each option set, in the config's field order: its command-line fields, and the
    parameters `fields_of` maps to one of its fields (`lbhash train`'s own --method-option, --hidden and --topk)."""
    schema = option_schema()
    sections: dict[str, list[str]] = {info.owner: [] for info in schema.values()}
    for param, field in [*((name, name) for name in cli_fields()), *fields_of.items()]:
        sections[schema[field].owner].append(param)
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
    rows = ["| option | default | meaning | set |", "|---|---|---|---|"]
    for name, info in option_schema().items():
        rows.append(f"| `{name}` | {info.default} | {info.help} | `{info.owner}`: `{info.declared_by[0]}` "
                    f"({info.declared_by[1]}) |")
    return "\n".join(rows)
