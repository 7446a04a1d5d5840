"""Optimizers and learning-rate schedules of a run (the same schedule for both parameter sets).

The step schedule does not depend on the total epochs, so a run trained further (`--resume
--epochs N`) gets the rates of an N-epoch run; the cosine schedule's curve does, so a cosine run
is not trained further (`check_extension`).
"""

from __future__ import annotations

import math

import torch

from lbhash.errors import InputError


def make_optimizer(kind: str, params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """`params`: parameters, or parameter groups; a group's `lr_scale` sets its rate to lr times it."""
    params = list(params)
    if params and isinstance(params[0], dict):
        params = [{**g, "lr": lr * g["lr_scale"]} if "lr_scale" in g else g for g in params]
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=0.9, fused=True)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=weight_decay, foreach=True)
    raise InputError(f"unknown optimizer {kind!r}")


NEVER = 1 << 62  # the StepLR step of a constant rate (lr_step 0): no epoch reaches it


def make_scheduler(optimizer: torch.optim.Optimizer, recipe) -> torch.optim.lr_scheduler.LRScheduler:
    """Stepped once per epoch. `step`: x lr_gamma every lr_step epochs (0: constant); `cosine`:
    from the base rate to 0 over the epochs after the warm-up; a warm-up of w epochs rises
    linearly, epoch e (0-based) at (e + 1) / w of the base rate."""
    if recipe.schedule == "step" and not recipe.warmup_epochs:
        # StepLR itself, so that runs without warm-up keep exactly their learning rates
        return torch.optim.lr_scheduler.StepLR(optimizer, recipe.lr_step or NEVER, recipe.lr_gamma)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: lr_factor(epoch, recipe))


def load_scheduler_state(scheduler: torch.optim.lr_scheduler.LRScheduler, state: dict, recipe) -> None:
    """Continue `scheduler` from a checkpoint. The step of a constant StepLR comes from the
    config, not the checkpoint: older checkpoints stored epochs + 1 there, which would decay
    the rate of a run trained further."""
    scheduler.load_state_dict(state)
    if isinstance(scheduler, torch.optim.lr_scheduler.StepLR):
        scheduler.step_size = recipe.lr_step or NEVER


def check_extension(recipe, epochs: int, where: str) -> None:
    """A run of `recipe` may continue to `epochs` in total unless its schedule's shape depends on
    the total (cosine)."""
    if recipe.schedule == "cosine" and epochs != recipe.epochs:
        raise InputError(f"--epochs {epochs}: {where} uses the cosine schedule, whose curve is fixed by its "
                         f"{recipe.epochs} epochs (the rate falls to 0 at the end), so it cannot be trained "
                         f"further; train a new run with --epochs {epochs}")


def check_further(recipe, epochs: int, trained: int, stopped: bool, where: str) -> None:
    """A run that trained `trained` epochs (`stopped`: ended early by its patience) may be
    trained further to `epochs` in all only past what it trained, and not after an early stop."""
    if stopped:
        raise InputError(f"--epochs {epochs}: {where} stopped early at epoch {trained} (patience "
                         f"{recipe.patience}: no better validation mAP); training it further would change nothing")
    if epochs <= trained:
        raise InputError(f"--epochs {epochs}: {where} has trained {trained} epoch(s) already; "
                         f"--resume --epochs N trains it further, to N > {trained} epochs in all")


def lr_factor(epoch: int, recipe) -> float:
    """The learning-rate multiplier of 0-based epoch `epoch`."""
    warm = recipe.warmup_epochs or 0
    if epoch < warm:
        return (epoch + 1) / warm
    if recipe.schedule == "cosine":
        span = max(1, recipe.epochs - warm)
        return 0.5 * (1 + math.cos(math.pi * min(epoch - warm, span) / span))
    return recipe.lr_gamma ** ((epoch - warm) // recipe.lr_step) if recipe.lr_step else 1.0
