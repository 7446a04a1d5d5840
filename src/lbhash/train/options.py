"""The training recipe's options (seed, optimizer, schedule, epochs, validation and selection)
and the runtime's (accelerator, processes, precision, logging)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from lbhash.options import Options, option

Optimizer = Literal["adam", "adamw", "sgd", "rmsprop"]
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")


class RecipeOptions(Options):
    """How the hash model trains and which epoch a run keeps. None: the method's default under
    the run's profile (lbhash.train.resolve)."""

    seed: int = option(0, "Seeds the split, centers, initialisation and every epoch's randomness.",
                       "a non-negative integer", ge=0)
    epochs: int | None = option(None, "Training epochs.", "a positive integer", shown="the method's", ge=1)
    batch_size: int | None = option(None, "Batch size.", "a positive integer", shown="the method's", ge=1)
    optimizer: Optimizer | None = option(None, "Optimizer of the hash model.", "one of adam, adamw, sgd, rmsprop",
                                         shown="the method's")
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
    eval_every: int | None = option(None, "Evaluate every N epochs (0: only at the end).", "a non-negative integer",
                                     shown="the profile's (recommended: 5; paper, benchmark: 10)", ge=0)
    validation: float | None = option(
        None, "Share of the training items (per class) held out as a validation split.", "a number in [0, 0.5)",
        shown="the profile's (recommended: 0.1 for trained methods; paper, benchmark: 0)", ge=0, lt=0.5)
    select: Literal["last", "best-val"] | None = option(
        None, "The model a run keeps: the last epoch's, or the epoch with the best validation mAP.",
        "one of last, best-val", shown="best-val with a validation split, else last")
    patience: int = option(0, "Stop after this many validation evaluations without a better mAP (0: never).",
                           "a non-negative integer", ge=0)
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


class RuntimeOptions(Options):
    """Where and how the training runs: accelerator, processes, precision, progress and logging."""

    logger: Literal["none", "tensorboard"] = option(
        "none", "Also log the per-epoch records to TensorBoard (needs the tensorboard extra).",
        "one of none, tensorboard")
    accelerator: Literal["cpu", "gpu", "cuda", "auto"] = option("cpu", "cpu or gpu.", "one of cpu, gpu, cuda, auto")
    devices: int = option(1, "Processes (devices) to train on.", "a positive integer", ge=1)
    precision: Literal[PRECISIONS] = option("32-true", "Lightning precision, e.g. 32-true, bf16-mixed.",
                                            f"one of {', '.join(PRECISIONS)}")
    progress: bool = option(True, "Show a progress bar.", "true or false")


__all__ = ["PRECISIONS", "RecipeOptions", "RuntimeOptions"]
