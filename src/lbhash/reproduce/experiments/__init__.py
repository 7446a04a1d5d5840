"""Running the experiments of `lbhash reproduce`: `specs` (the Context, the paper's experiments
and the tables of finished runs), `objective_study`, `baselines` and `registry`; the tidy tables
they write are named by lbhash.reproduce.tables.
"""

from lbhash.reproduce.experiments.registry import EXPERIMENTS, configure, validate
from lbhash.reproduce.experiments.specs import (BoundSpec, CentersSpec, Context, GridSpec, TimingSpec,
                                                ToySpec, variant_name)

__all__ = ["EXPERIMENTS", "BoundSpec", "CentersSpec", "Context", "GridSpec", "TimingSpec", "ToySpec",
           "configure", "validate", "variant_name"]
