"""A method's training defaults under a profile, read from the method's class.

Profiles:
- "paper" (the default): what the paper used for every method, "Adam with default
  configuration", lr 1e-3, batch 64, 100 epochs, lr x0.1 every 10 epochs (its App. G);
- "benchmark": the optimizer settings of the DeepHash-pytorch benchmark the paper took the
  baselines from (RMSprop lr 1e-5 for most methods, SGD for GreedyHash, 150-200 epochs).
The method constants are the same in both: the defaults of the method's constructor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from lbhash.errors import InputError
from lbhash.methods.base import Recipe, method_class

PROFILES = ("paper", "benchmark")


@dataclass(frozen=True)
class MethodDefaults(Recipe):
    lbhash_mode: str = "add"   # how the _D objective combines with the method's loss
    constants: dict = field(default_factory=dict)


def method_defaults(name: str, profile: str = "paper") -> MethodDefaults:
    """The defaults of a registered method under a profile ("paper" or "benchmark")."""
    cls = method_class(name)  # unknown names fail with the list of methods
    if profile not in PROFILES:
        raise InputError(f"defaults profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    recipe = cls.benchmark_recipe if profile == "benchmark" else cls.recipe
    return MethodDefaults(**dataclasses.asdict(recipe), lbhash_mode=cls.lbhash_mode,
                          constants=cls.constants())
