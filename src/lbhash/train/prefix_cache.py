"""The frozen prefix's activations, computed once: training batches for a run that trains only
the backbone's last stages (`train_stages`) without random crops.

The frozen stages run in eval mode, so with augment `flip` or `none` a training image is one of
two inputs (itself or its mirror), whose prefix is computed once; flips are drawn as
`lbhash.data.batches.PixelBatches` draws them, so an epoch sees the same mirrors. Random crops
give a new input every epoch: nothing is cached.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from tqdm import tqdm

from lbhash.data import HashDataset, InputOptions
from lbhash.data.base import EpochShard
from lbhash.data.batches import augmentation_generator, shard_order
from lbhash.models import HashModel, StageInputs

# the activations one run keeps in memory at most; a larger cache is not built (the line says so)
MAX_PREFIX_CACHE_BYTES = 4 << 30


def prefix_cacheable(transform: str | None, augment: str, fixed_stages: int) -> bool:
    """Whether a training input is a fixed function of its image (no random crop) and some
    stages never train: then their activations can be computed once."""
    return fixed_stages > 0 and (transform == "cifar" or augment != "crop-flip")


class PrefixBatches:
    """Training batches (StageInputs, labels, position) of the cached prefix activations of the
    items at `indices`: the same shuffling, sharding and flips as the pixel batches."""

    def __init__(self, activations: list[torch.Tensor], start: int, labels: np.ndarray, shard: EpochShard,
                 device, channels_last: bool = True):
        self.activations, self.start = activations, start  # one tensor, or (as is, mirrored)
        self.y = torch.as_tensor(labels, dtype=torch.float32, device=device)
        self.n, self.device = len(labels), torch.device(device)
        self.batch_size, self.rank, self.world_size = shard.batch_size, shard.rank, shard.world_size
        self.channels_last = channels_last

    def __len__(self) -> int:
        return -(-len(shard_order(self.n, 0, self.rank, self.world_size)) // self.batch_size)

    def epoch(self, seed: int) -> Iterator:
        order = shard_order(self.n, seed, self.rank, self.world_size)
        gen = augmentation_generator(seed, self.rank, self.device)
        index_all = torch.as_tensor(order, device=self.device)
        for start in range(0, len(order), self.batch_size):
            index = index_all[start:start + self.batch_size]
            x = self.activations[0][index]
            if len(self.activations) == 2:
                flip = torch.rand((len(index),), generator=gen, device=self.device) < 0.5
                x = torch.where(flip[:, None, None, None], self.activations[1][index], x)
            if self.channels_last and x.ndim == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            yield StageInputs(x, self.start), self.y[index], index


def cache_prefix(model: HashModel, dataset: HashDataset, indices: np.ndarray, options: InputOptions,
                 shard: EpochShard, device, progress: bool = False) -> PrefixBatches | str:
    """PrefixBatches of the items at `indices` (their evaluation-pipeline images, and mirrored
    unless the run never flips), on `device` and in this rank's `shard` of each epoch, or why none
    were built (a one-line reason)."""
    flips = options.transform != "cifar" and options.augment == "flip"
    parts: list[list[torch.Tensor]] = [[], []] if flips else [[]]
    done, limit = 0, None
    bar = tqdm(total=len(indices), desc="caching the frozen stages", unit="image", leave=False, disable=not progress)
    for x in dataset.encode_batches(indices, options, device):
        x = x.float()
        parts[0].append(model.fixed_prefix(x))
        if flips:
            parts[1].append(model.fixed_prefix(x.flip(3)))
        done += len(x)
        bar.update(len(x))
        if limit is None:  # the first batch tells the size of the whole cache
            per_item = sum(p[0][0].numel() * p[0].element_size() for p in parts)
            limit = per_item * len(indices)
            if limit > MAX_PREFIX_CACHE_BYTES:
                bar.close()
                return (f"the frozen stages' activations would take {limit / 2**30:.1f} GiB (at most "
                        f"{MAX_PREFIX_CACHE_BYTES / 2**30:.0f}): computed every step")
    bar.close()
    activations = [torch.cat(p) if p else torch.empty(0) for p in parts]
    labels = dataset.labels[np.asarray(indices)]
    return PrefixBatches(activations, model.fixed_stages, labels, shard, device, options.channels_last)
