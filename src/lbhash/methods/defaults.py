"""A method's training defaults under a profile, read from the method's class.

Profiles:
- "recommended" (the default): the recipe and _D options our validation study supports
  (docs/methods.md, "When to use --lbhash"); each method may set its own (`recommended_recipe`,
  `recommended_lbhash` on its class); so far its _D objective is the paper's (the mean of
  L_theta over a multi-label sample's labels, measured against the paper's sum, was no better);
- "paper": the paper-faithful setting: "Adam with default configuration", lr 1e-3, batch 64,
  100 epochs, lr x0.1 every 10 epochs (its App. G), and the _D objective as the paper's text
  reads (L_theta summed over blocks with weight 1, no bit flips, contiguous blocks, and summed
  over a multi-label sample's positive labels: "the sum of multiple losses");
- "benchmark": the optimizer settings of the DeepHash-pytorch benchmark the paper took the
  baselines from (RMSprop lr 1e-5 for most methods, SGD for GreedyHash, 150-200 epochs), with
  the paper-faithful _D objective.
The method constants are the defaults of the method's constructor in all, except that the
recommended profile takes a method's `recommended_constants` (the constants its recommended
recipe was validated with: DBDH's clamp, docs/methods.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from lbhash.errors import InputError
from lbhash.methods.base import PAPER_LBHASH, Recipe, method_class

PROFILES = ("recommended", "paper", "benchmark")
LBHASH_OPTIONS = tuple(PAPER_LBHASH)
# The recommended profile's _D options for every method where they differ from the paper's (a
# method's recommended_lbhash may override them): none, so far (docs/methods.md).
RECOMMENDED_LBHASH: dict = {}


@dataclass(frozen=True)
class MethodDefaults(Recipe):
    lbhash_mode: str = "add"   # how the _D objective combines with the method's loss
    lbhash: dict = field(default_factory=lambda: dict(PAPER_LBHASH))  # the _D objective's options
    constants: dict = field(default_factory=dict)


def method_defaults(name: str, profile: str = "recommended") -> MethodDefaults:
    """The defaults of a registered method under a profile (see the module docstring)."""
    cls = method_class(name)  # unknown names fail with the list of methods
    if profile not in PROFILES:
        raise InputError(f"defaults profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    recipe = {"recommended": cls.recommended_recipe, "paper": cls.recipe, "benchmark": cls.benchmark_recipe}[profile]
    lbhash = {**PAPER_LBHASH, **({**RECOMMENDED_LBHASH, **cls.recommended_lbhash} if profile == "recommended" else {})}
    return MethodDefaults(**dataclasses.asdict(recipe), lbhash_mode=cls.lbhash_mode, lbhash=lbhash,
                          constants={**cls.constants(),
                                     **(cls.recommended_constants if profile == "recommended" else {})})


def schedule_text(recipe) -> str:
    """A recipe's (or config's) learning-rate schedule in a few words, e.g. 'x0.1 / 10 ep'."""
    if recipe.schedule == "cosine":
        text = "cosine"
    else:
        text = f"x{recipe.lr_gamma:g} / {recipe.lr_step} ep" if recipe.lr_step else "constant"
    return text + (f", warm-up {recipe.warmup_epochs} ep" if recipe.warmup_epochs else "")
