"""Optimizers and learning-rate schedules of a run (the same schedule for both parameter sets)."""

from __future__ import annotations

import math

import torch

from lbhash.errors import InputError


def make_optimizer(kind: str, params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=0.9, fused=True)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=weight_decay, foreach=True)
    raise InputError(f"unknown optimizer {kind!r}")


def make_scheduler(optimizer: torch.optim.Optimizer, cfg) -> torch.optim.lr_scheduler.LRScheduler:
    """Stepped once per epoch. `step`: x lr_gamma every lr_step epochs (0: constant); `cosine`:
    from the base rate to 0 over the epochs after the warm-up; a warm-up of w epochs rises
    linearly, epoch e (0-based) at (e + 1) / w of the base rate."""
    if cfg.schedule == "step" and not cfg.warmup_epochs:
        # StepLR itself, so that runs without warm-up keep exactly their learning rates
        return torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_step or cfg.epochs + 1, cfg.lr_gamma)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: lr_factor(epoch, cfg))


def lr_factor(epoch: int, cfg) -> float:
    """The learning-rate multiplier of 0-based epoch `epoch`."""
    warm = cfg.warmup_epochs or 0
    if epoch < warm:
        return (epoch + 1) / warm
    if cfg.schedule == "cosine":
        span = max(1, cfg.epochs - warm)
        return 0.5 * (1 + math.cos(math.pi * min(epoch - warm, span) / span))
    return cfg.lr_gamma ** ((epoch - warm) // cfg.lr_step) if cfg.lr_step else 1.0
