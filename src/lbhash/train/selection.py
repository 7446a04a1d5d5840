"""Model selection on the validation split: keep the epoch with the best validation mAP
(`select: best-val`), and stop after `patience` evaluations without a better one. The best
weights are a CPU copy, or best.pt written atomically by rank 0; the state travels in the checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


class Selection:
    def __init__(self, select: str, patience: int, path: Path | None = None):
        self.path, self.select, self.patience = None if path is None else Path(path), select, patience
        self.best_map, self.best_epoch, self.since_best, self.stopped = -1.0, 0, 0, False
        self._best: dict | None = None  # in memory (no path): the best epoch's weights

    def update(self, epoch: int, val_map: float, model: torch.nn.Module, is_writer: bool) -> bool:
        """Record a validation mAP; True when it is the best so far (then its weights are kept)."""
        improved = val_map > self.best_map
        if improved:
            self.best_map, self.best_epoch, self.since_best = float(val_map), epoch, 0
            if self.select == "best-val" and is_writer:
                self._keep({"model": model.state_dict(), "epoch": epoch, "val_map": float(val_map)})
        else:
            self.since_best += 1
            self.stopped = bool(self.patience) and self.since_best >= self.patience
        return improved

    def _keep(self, best: dict) -> None:
        if self.path is None:
            best["model"] = {k: v.detach().to("cpu", copy=True) for k, v in best["model"].items()}
            self._best = best
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        torch.save(best, tmp)
        os.replace(tmp, self.path)

    def state_dict(self) -> dict:
        return {"best_map": self.best_map, "best_epoch": self.best_epoch, "since_best": self.since_best,
                "stopped": self.stopped}

    def load_state_dict(self, state: dict) -> None:
        self.best_map, self.best_epoch = float(state["best_map"]), int(state["best_epoch"])
        self.since_best, self.stopped = int(state["since_best"]), bool(state["stopped"])

    def best(self) -> dict | None:
        """What best.pt holds ({"model", "epoch", "val_map"}), or None when nothing was kept."""
        if self.path is None:
            return self._best
        return torch.load(self.path, map_location="cpu", weights_only=True) if self.path.is_file() else None
