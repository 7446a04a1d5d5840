"""Model selection on the validation split: keep the epoch with the best validation mAP
(`select: best-val`), and stop after `patience` evaluations without a better one. The best
weights are a CPU copy, or go to the trainer's store (rank 0 only); the state travels in the checkpoint.
"""

from __future__ import annotations

import torch


class Selection:
    def __init__(self, select: str, patience: int, store=None):
        self.store, self.select, self.patience = store, select, patience  # store: save_best, load_best
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
        if self.store is not None:
            return self.store.save_best(best)
        best["model"] = {k: v.detach().to("cpu", copy=True) for k, v in best["model"].items()}
        self._best = best

    def state_dict(self) -> dict:
        return {"best_map": self.best_map, "best_epoch": self.best_epoch, "since_best": self.since_best,
                "stopped": self.stopped}

    def load_state_dict(self, state: dict) -> None:
        self.best_map, self.best_epoch = float(state["best_map"]), int(state["best_epoch"])
        self.since_best, self.stopped = int(state["since_best"]), bool(state["stopped"])

    def best(self) -> dict | None:
        """The best epoch's {"model", "epoch", "val_map"}, or None when nothing was kept."""
        return self._best if self.store is None else self.store.load_best()
