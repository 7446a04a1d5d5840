"""The experiments of `lbhash reproduce` by name, each a spec with its default values, and the
checks that run before any of them creates a file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from lbhash.errors import InputError
from lbhash.reproduce.experiments.baselines import BaselinesSpec
from lbhash.reproduce.experiments.objective_study import StudySpec
from lbhash.reproduce.experiments.specs import (BoundSpec, CentersSpec, Context, GridSpec, TimingSpec,
                                                ToySpec)

EXPERIMENTS: dict[str, Any] = {"grid": GridSpec(), "timing": TimingSpec(), "centers": CentersSpec(),
                               "toy": ToySpec(), "bound": BoundSpec(), "study": StudySpec(),
                               "baselines": BaselinesSpec()}


def validate(spec, ctx: Context) -> None:
    """Every check of an experiment before it creates anything: its data spec (the file must
    exist), its options, and the config of every run it would train."""
    from lbhash.data.protocols import parse_protocol
    from lbhash.data.spec import DATA_KINDS, parse_data_spec
    from lbhash.train import make_config

    if ctx.data:
        parsed = parse_data_spec(ctx.data)
        if DATA_KINDS[parsed.kind].takes_path and not Path(parsed.path).expanduser().exists():
            raise InputError(f"--data {ctx.data}: {parsed.path}: no such file or directory")
    for values in spec.configs(ctx):
        cfg = make_config(values, "a run of this experiment")
        if cfg.dataset.protocol:  # its form, which the run would check only after the first write
            parse_protocol(cfg.dataset.protocol)


def configure(name: str, **values) -> Any:
    """The named experiment's spec with some fields replaced (unknown fields are an error)."""
    if name not in EXPERIMENTS:
        raise InputError(f"unknown experiment {name!r}; available: {', '.join(EXPERIMENTS)}")
    spec = EXPERIMENTS[name]
    fields = {f.name for f in dataclasses.fields(spec)}
    unknown = set(values) - fields
    if unknown:
        raise InputError(f"experiment {name} has no option(s) {', '.join(sorted(unknown))} "
                         f"(it has {', '.join(sorted(fields))})")
    return dataclasses.replace(spec, **values)
