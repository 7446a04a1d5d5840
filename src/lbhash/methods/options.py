"""The method choice (method, _D or not, code length, defaults profile, the method's constants), the training recipe's
options, and a method's defaults under a profile (`method_defaults`).

Profiles (docs/methods.md): "recommended" (the default: what our validation study supports, per method), "paper" (the
paper-faithful recipe and _D objective) and "benchmark" (the DeepHash-pytorch benchmark's optimizers). A class's recipes
are partial (what they change in base.PAPER_RECIPE, by RecipeOptions' names); `method_defaults` checks them.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import field_validator

from lbhash.errors import InputError
from lbhash.limits import MAX_BITS
from lbhash.methods.base import PAPER_LBHASH, PAPER_RECIPE, RECOMMENDED_RECIPE, method_class
from lbhash.options import Options, option

PROFILES = ("recommended", "paper", "benchmark")


class MethodOptions(Options):
    """The method, its _D variant, the code length, the defaults profile and its constants."""

    method: str = option("csq", "Hashing method (see `lbhash methods`).", "a method name")
    defaults: Literal[PROFILES] = option(
        "recommended", "Defaults profile: 'recommended' (chosen by our validation study), 'paper' (the "
                       "paper-faithful recipe and _D objective) or 'benchmark' (the DeepHash benchmark's recipe).",
        f"one of {', '.join(PROFILES)}")
    lbhash: bool = option(False, "Train the method's _D variant (the paper's objective).", "true or false")
    bits: int = option(64, f"Code length, at most {MAX_BITS} bits.", f"an integer from 1 to {MAX_BITS}", ge=1,
                       le=MAX_BITS)
    method_options: dict[str, bool | int | float | str] = option(
        {}, "The method's constants, NAME=VALUE (e.g. quantization=1e-4).", "a mapping of constant names to values",
        shown="the method's", cli=False)

    @field_validator("method")
    @classmethod
    def _known_method(cls, value):
        return method_class(value).name  # unknown names: InputError with the list


MAX_SEED = 2 ** 63 - 1  # torch's and numpy's int64 seeds


class RecipeOptions(Options):
    """How the hash model trains and which epoch a run keeps. None: the method's default under
    the run's profile (lbhash.train.resolve)."""

    seed: int = option(0, "Seeds the split, centers, initialisation and every epoch's randomness.",
                       "an integer from 0 to 2^63 - 1", ge=0, le=MAX_SEED)
    epochs: int | None = option(None, "Training epochs.", "a positive integer", shown="the method's", ge=1)
    batch_size: int | None = option(None, "Batch size.", "a positive integer", shown="the method's", ge=1)
    optimizer: Literal["adam", "adamw", "sgd", "rmsprop"] | None = option(
        None, "Optimizer of the hash model.", "one of adam, adamw, sgd, rmsprop", shown="the method's")
    lr: float | None = option(None, "Learning rate of the hash model (eta_2).", "a positive number",
                              shown="the method's", gt=0)
    weight_decay: float | None = option(None, "Weight decay of the hash model.", "a number >= 0",
                                        shown="the method's", ge=0)
    lr_step: int | None = option(None, "Decay the learning rates every N epochs (0: never).",
                                 "a non-negative integer", shown="the method's", ge=0)
    lr_gamma: float | None = option(None, "Learning-rate decay factor of the step schedule.", "a positive number",
                                    shown="the method's", gt=0)
    schedule: Literal["step", "cosine"] | None = option(
        None, "Learning-rate schedule of both optimizers: step (x lr_gamma every lr_step epochs) or cosine "
              "(to 0 at the last epoch).", "one of step, cosine", shown="the method's")
    warmup_epochs: int | None = option(None, "Epochs of linear learning-rate warm-up before the schedule.",
                                       "a non-negative integer", shown="the method's", ge=0)
    probe_epochs: int | None = option(
        None, "Fine-tuning: the first N of the epochs train the head alone on the frozen backbone's cached features "
              "(a linear probe, seconds per epoch); the backbone trains from epoch N + 1.", "a non-negative integer",
        shown="the fine-tuning recipe's (docs/models.md) for a pretrained backbone that trains, else 0", ge=0)
    backbone_lr_scale: float | None = option(
        None, "The backbone's learning rate as a multiple of --lr (the head's).", "a positive number",
        shown="the fine-tuning recipe's for a pretrained backbone, else 1", gt=0)
    eval_every: int | None = option(
        None, "Evaluate every N epochs (0: only at the end).", "a non-negative integer",
        shown=f"the profile's (recommended: {RECOMMENDED_RECIPE['eval_every']}; paper, benchmark: "
              f"{PAPER_RECIPE['eval_every']})", ge=0)
    validation: float | None = option(
        None, "Share of the training items (per class) held out as a validation split.", "a number in [0, 0.5)",
        shown=f"the profile's (recommended: {RECOMMENDED_RECIPE['validation']:g} for trained methods; paper, "
              f"benchmark: {PAPER_RECIPE['validation']:g})", ge=0, lt=0.5)
    select: Literal["last", "best-val"] | None = option(
        None, "The model a run keeps: the last epoch's, or the epoch with the best validation mAP.",
        "one of last, best-val", shown="best-val with a validation split, else last")
    patience: int = option(0, "Stop after this many validation evaluations without a better mAP (0: never).",
                           "an integer from 0 to 2^63 - 1", ge=0, le=MAX_SEED)
    test: bool = option(True, "Encode and evaluate the query and database at the end (off: a validation-only "
                              "run, as the studies use).", "true or false")
    topk: int | Literal["all"] | None = option(None, "R of mAP@R: a positive integer or 'all'.",
                                               "a positive integer or 'all'", shown="the protocol's", cli=False)

    @field_validator("topk")
    @classmethod
    def _positive_topk(cls, value):
        if isinstance(value, int) and value < 1:
            raise ValueError("not positive")
        return value


class MethodDefaults(NamedTuple):
    """A method's defaults under a profile: its training recipe (every option of PAPER_RECIPE, as the profile sets it),
    how its _D objective combines with it, the _D objective's options (PAPER_LBHASH's names) and its constants."""

    recipe: RecipeOptions
    lbhash_mode: str
    lbhash: dict
    constants: dict

    @property
    def options(self) -> dict:
        """Every option these defaults fill (a config's None), flat: the recipe's, then the _D objective's."""
        return {**{k: getattr(self.recipe, k) for k in PAPER_RECIPE}, "lbhash_mode": self.lbhash_mode, **self.lbhash}


def method_defaults(name: str, profile: str = "recommended") -> MethodDefaults:
    """The defaults of a registered method under a profile (see the module docstring)."""
    cls = method_class(name)  # unknown names fail with the list of methods
    if profile not in PROFILES:
        raise InputError(f"defaults profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    recipe = {"recommended": cls.recommended_recipe, "paper": cls.recipe, "benchmark": cls.benchmark_recipe}[profile]
    try:
        full = RecipeOptions(**{**PAPER_RECIPE, **recipe})
    except InputError as err:
        raise InputError(f"method {cls.name}: its {profile} recipe: {err}") from None
    recommended = profile == "recommended"
    return MethodDefaults(full, cls.lbhash_mode, {**PAPER_LBHASH, **(cls.recommended_lbhash if recommended else {})},
                          {**cls.constants(), **(cls.recommended_constants if recommended else {})})


def schedule_text(recipe) -> str:
    """A recipe's (or config's) learning-rate schedule in a few words, e.g. 'x0.1 / 10 ep'."""
    if recipe.schedule == "cosine":
        text = "cosine"
    else:
        text = f"x{recipe.lr_gamma:g} / {recipe.lr_step} ep" if recipe.lr_step else "constant"
    return text + (f", warm-up {recipe.warmup_epochs} ep" if recipe.warmup_epochs else "")


__all__ = ["PROFILES", "MethodDefaults", "MethodOptions", "RecipeOptions", "method_defaults", "schedule_text"]
