"""Training time per epoch of several configurations, their epochs alternating so that all see the
same machine state; nothing is written. Used by `lbhash reproduce timing` and
benchmarks/bench_overhead.py.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lbhash.train.builder import build_experiment
from lbhash.train.config import TrainConfig
from lbhash.train.loop import Trainer


class EpochTimes(NamedTuple):
    seconds: list[float]      # per epoch, in order
    steps_per_epoch: int

    def median(self, skip_first: bool = True) -> float:
        """Median seconds per epoch; the first epoch (warm-up) is left out when there are others."""
        values = self.seconds[1:] if skip_first and len(self.seconds) > 1 else self.seconds
        return float(np.median(values))


def epoch_times(configs: dict[str, TrainConfig], epochs: int) -> dict[str, EpochTimes]:
    """Seconds of each of `epochs` epochs for every labelled configuration (learning-rate
    schedules off, no evaluation, no checkpoints)."""
    trainers = {label: Trainer(build_experiment(cfg.replace(epochs=epochs, lr_step=0, progress=False)))
                for label, cfg in configs.items()}  # in memory: nothing written
    seconds: dict[str, list[float]] = {label: [] for label in trainers}
    for epoch in range(1, epochs + 1):
        for label, trainer in trainers.items():
            seconds[label].append(trainer.train_epoch(epoch)["seconds"])
    return {label: EpochTimes(seconds[label], len(trainers[label].batches)) for label in trainers}
