"""`lbhash methods`: the registered methods with their defaults under a profile."""

from __future__ import annotations

import click

from lbhash.runs.train_options import methods_markdown, methods_text, option_schema

PROFILE = option_schema()["defaults"]  # the profiles are the choices of the `defaults` option


@click.command()
@click.option("--defaults", "profile", type=click.Choice(PROFILE.choices), default=PROFILE.default,
              show_default=True, help="Which defaults profile to show.")
@click.option("--markdown", is_flag=True, help="Print the defaults as a markdown table.")
def methods(profile: str, markdown: bool) -> None:
    """List the hashing methods, their training defaults, _D objective options and constants."""
    click.echo(methods_markdown(profile) if markdown else methods_text(profile))
