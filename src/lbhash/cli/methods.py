"""`lbhash methods`: the registered methods with their defaults under a profile."""

from __future__ import annotations

import click

from lbhash.methods.options import PROFILES, schedule_text

HEADER = ("method", "optimizer", "lr", "weight decay", "schedule", "epochs", "batch", "_D mode",
          "_D objective", "constants")


def _objective(options: dict) -> str:
    """The _D options in a short form, e.g. 'lambda 1, sum, 0 flips, contiguous
    blocks, average target, sum over labels'."""
    text = (f"lambda {options['lbhash_weight']:g}, {options['lbhash_reduction']}, "
            f"{options['surrogate_flips']} flips, {options['block_assignment']} blocks, "
            f"{options['multilabel_target']} target, {options['multilabel_theta']} over labels")
    if options["surrogate_weight_decay"]:
        text += f", surrogate wd {options['surrogate_weight_decay']:g}"
    return text


def defaults_rows(profile: str) -> list[tuple[str, ...]]:
    """One row per method: its recipe, _D mode and options, and constants."""
    from lbhash.methods import available_methods, method_class, method_defaults

    rows = []
    for name in available_methods():
        d = method_defaults(name, profile)
        constants = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.constants.items())
        if method_class(name).closed_form:  # one fit: no optimizer, schedule or _D variant
            rows.append((name, "closed form", "-", "-", "-", "1", "-", "-", "-", constants or "-"))
            continue
        r = d.recipe
        rows.append((name, r.optimizer, f"{r.lr:g}", f"{r.weight_decay:g}", schedule_text(r), str(r.epochs),
                     str(r.batch_size), d.lbhash_mode, _objective(d.lbhash), constants or "-"))
    return rows


def markdown_table(profile: str) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in defaults_rows(profile)]
    return "\n".join(lines)


@click.command()
@click.option("--defaults", "profile", type=click.Choice(PROFILES), default=PROFILES[0],
              show_default=True, help="Which defaults profile to show.")
@click.option("--markdown", is_flag=True, help="Print the defaults as a markdown table.")
def methods(profile: str, markdown: bool) -> None:
    """List the hashing methods, their training defaults, _D objective options and constants."""
    from lbhash.methods import method_class

    if markdown:
        click.echo(markdown_table(profile))
        return
    click.echo(f"defaults profile: {profile} (every deep method also trains as <method>_D with --lbhash)\n")
    for name, opt, lr, wd, schedule, epochs, batch, mode, objective, constants in defaults_rows(profile):
        cls = method_class(name)
        click.echo(f"{name}: {cls.description}")
        if cls.closed_form:
            click.echo(f"    fitted in closed form in one pass ({'supervised' if cls.needs_labels else 'no labels'}); "
                       "no _D variant")
        else:
            click.echo(f"    {opt} lr {lr}, weight decay {wd}, lr schedule {schedule}, {epochs} epochs, batch {batch}")
            click.echo(f"    _D: {mode} L_theta; {objective}")
        click.echo(f"    constants: {constants}")
