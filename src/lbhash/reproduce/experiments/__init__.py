"""Running the experiments of `lbhash reproduce`: their specs, the registry by name, and the
tidy tables they write (lbhash.reproduce.tables names them; the report reads only those).

- specs: the Context and the paper's experiments (grid, timing, centers, toy, bound)
- objective_study: studies of the _D objective (`reproduce study`)
- baselines: deep methods against the closed-form baselines on seen and unseen classes
- collect: grid.csv, curves.csv, epochs.csv and codes_sample.npz from finished runs
- registry: EXPERIMENTS by name, `configure` and `validate`
"""

from lbhash.reproduce.experiments.registry import EXPERIMENTS, configure, validate
from lbhash.reproduce.experiments.specs import (BoundSpec, CentersSpec, Context, GridSpec, TimingSpec,
                                                ToySpec, variant_name)

__all__ = ["EXPERIMENTS", "BoundSpec", "CentersSpec", "Context", "GridSpec", "TimingSpec", "ToySpec",
           "configure", "validate", "variant_name"]
