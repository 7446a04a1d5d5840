"""Mini-batches of in-memory arrays, shuffled from an explicit seed."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch


class ArrayBatches:
    """Yields (x, labels, index) batches of an in-memory training set.

    index is each sample's stable position in the training set (memory banks use it). Data
    live on `device` once; a batch is a gather, not a per-item Python call.
    """

    def __init__(self, x: np.ndarray, labels: np.ndarray, batch_size: int, device="cpu",
                 rank: int = 0, world_size: int = 1):
        self.x = torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32), device=device)
        self.labels = labels
        self.y = torch.as_tensor(labels, dtype=torch.float32, device=device)
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size

    def __len__(self) -> int:
        per_rank = -(-len(self.x) // self.world_size)
        return -(-per_rank // self.batch_size)

    def epoch(self, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        order = np.random.default_rng(seed).permutation(len(self.x))
        order = torch.as_tensor(order[self.rank::self.world_size], device=self.x.device)
        for start in range(0, len(order), self.batch_size):
            index = order[start:start + self.batch_size]
            yield self.x[index], self.y[index], index
