"""`lbhash methods`: the registered methods with their defaults."""

from __future__ import annotations

import click


def defaults_rows(profile: str) -> list[tuple[str, ...]]:
    """One row per method: name, optimizer, lr, weight decay, decay, epochs, batch, _D mode, constants."""
    from lbhash.methods import available_methods
    from lbhash.methods.defaults import method_defaults

    rows = []
    for name in available_methods():
        d = method_defaults(name, profile)
        decay = f"x{d.lr_gamma:g} / {d.lr_step} ep" if d.lr_step else "none"
        constants = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in d.constants.items())
        rows.append((name, d.optimizer, f"{d.lr:g}", f"{d.weight_decay:g}", decay, str(d.epochs),
                     str(d.batch_size), d.lbhash_mode, constants or "-"))
    return rows


HEADER = ("method", "optimizer", "lr", "weight decay", "lr decay", "epochs", "batch", "_D mode",
          "constants")


def markdown_table(profile: str) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in defaults_rows(profile)]
    return "\n".join(lines)


@click.command()
@click.option("--defaults", "profile", type=click.Choice(["paper", "benchmark"]), default="paper",
              show_default=True, help="Which defaults profile to show.")
@click.option("--markdown", is_flag=True, help="Print the defaults as a markdown table.")
def methods(profile: str, markdown: bool) -> None:
    """List the hashing methods, their training defaults and constants."""
    from lbhash.methods import method_class

    if markdown:
        click.echo(markdown_table(profile))
        return
    click.echo(f"defaults profile: {profile} (every method also trains as <method>_D with --lbhash)\n")
    for name, opt, lr, wd, decay, epochs, batch, mode, constants in defaults_rows(profile):
        click.echo(f"{name}: {method_class(name).description}")
        click.echo(f"    {opt} lr {lr}, weight decay {wd}, lr decay {decay}, {epochs} epochs, "
                   f"batch {batch}; _D mode {mode}")
        click.echo(f"    constants: {constants}")
