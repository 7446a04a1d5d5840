"""Model selection on the validation split: keep the epoch with the best validation mAP
(`select: best-val`), and stop after `patience` evaluations without a better one.

The best model's weights go to best.pt (written atomically, rank 0), so a resumed run keeps
the same choice; the selection's own state travels in the checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from lbhash.train.rundir import BEST


class Selection:
    def __init__(self, run_dir: Path, select: str, patience: int):
        self.path, self.select, self.patience = Path(run_dir) / BEST, select, patience
        self.best_map, self.best_epoch, self.since_best, self.stopped = -1.0, 0, 0, False

    def update(self, epoch: int, val_map: float, model: torch.nn.Module, is_writer: bool) -> bool:
        """Record a validation mAP; True when it is the best so far (then best.pt is rewritten)."""
        improved = val_map > self.best_map
        if improved:
            self.best_map, self.best_epoch, self.since_best = float(val_map), epoch, 0
            if self.select == "best-val" and is_writer:
                tmp = self.path.with_name(f".{BEST}.{os.getpid()}.tmp")
                torch.save({"model": model.state_dict(), "epoch": epoch, "val_map": float(val_map)}, tmp)
                os.replace(tmp, self.path)
        else:
            self.since_best += 1
            self.stopped = bool(self.patience) and self.since_best >= self.patience
        return improved

    def state_dict(self) -> dict:
        return {"best_map": self.best_map, "best_epoch": self.best_epoch, "since_best": self.since_best,
                "stopped": self.stopped}

    def load_state_dict(self, state: dict) -> None:
        self.best_map, self.best_epoch = float(state["best_map"]), int(state["best_epoch"])
        self.since_best, self.stopped = int(state["since_best"]), bool(state["stopped"])

    def best_weights(self) -> dict[str, torch.Tensor]:
        return torch.load(self.path, map_location="cpu", weights_only=True)["model"]
