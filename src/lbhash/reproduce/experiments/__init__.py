"""Running the experiments of `lbhash reproduce`: `specs` (the Context, the paper's experiments
and the tables of finished runs), `objective_study`, `baselines` and `registry`; the tidy tables
they write are named by lbhash.reproduce.tables.
"""

from lbhash.reproduce.experiments.registry import EXPERIMENTS, configure, validate
from lbhash.reproduce.experiments.specs import Context, GridSpec

__all__ = ["EXPERIMENTS", "Context", "GridSpec", "configure", "validate"]
