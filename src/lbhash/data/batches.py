"""Training batches: in-memory feature arrays, decoded pixel stores, or image data sets
through a DataLoader (images of different sizes, decoded and transformed one by one).

All yield (x, labels, index) with index the sample's stable position in the training set
(memory banks use it), shuffle from an explicit per-epoch seed, and shard the epoch across
ranks with equal batch counts (padding by wrapping around), which DDP needs.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from lbhash.data.base import EpochShard

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def shard_order(n: int, seed: int, rank: int, world_size: int) -> np.ndarray:
    """This rank's share of a seeded permutation of range(n), padded so that all ranks get
    the same number of items."""
    order = np.random.default_rng(seed).permutation(n)
    per_rank = -(-n // world_size)
    if per_rank * world_size > n:
        order = np.concatenate([order, order[: per_rank * world_size - n]])
    return order[rank::world_size]


def augmentation_generator(seed: int, rank: int, device) -> torch.Generator:
    """The generator of an epoch's random crops and flips on one rank: seeded by (epoch seed,
    rank) alone, so a resumed run, and the cached frozen stages (lbhash.train.prefix_cache),
    draw the same ones."""
    gen = torch.Generator(device)
    gen.manual_seed(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))
    return gen


class _Sharded:
    """Batches of `n` items, each epoch's order sharded across ranks (shard_order)."""

    def __init__(self, n: int, shard: EpochShard):
        self.n, self.batch_size, self.rank, self.world_size = n, shard.batch_size, shard.rank, shard.world_size

    def __len__(self) -> int:
        return -(-len(shard_order(self.n, 0, self.rank, self.world_size)) // self.batch_size)


class ArrayBatches(_Sharded):
    """Batches of an in-memory training set (float32 features, as ArrayDataset holds them); data
    live on `device` once, a batch is a gather."""

    def __init__(self, x: np.ndarray, labels: np.ndarray, shard: EpochShard, device="cpu"):
        self.x = torch.as_tensor(x, device=device)
        self.y = torch.as_tensor(labels, dtype=torch.float32, device=device)
        super().__init__(len(self.x), shard)

    def epoch(self, seed: int) -> Iterator[Batch]:
        order = torch.as_tensor(shard_order(self.n, seed, self.rank, self.world_size), device=self.x.device)
        for start in range(0, len(order), self.batch_size):
            index = order[start:start + self.batch_size]
            yield self.x[index], self.y[index], index


def _pixel_tensor(pixels: np.ndarray, device) -> torch.Tensor | None:
    """The whole store on an accelerator when it takes at most a quarter of its free memory
    (gathers then stay on the device), else None (batches are gathered on the host)."""
    device = torch.device(device)
    if device.type != "cuda" or isinstance(pixels, np.memmap):
        return None
    free, _ = torch.cuda.mem_get_info(device)
    if pixels.nbytes > free // 4:
        return None
    return torch.from_numpy(np.ascontiguousarray(pixels)).to(device)


def _host_batch(pixels: np.ndarray, rows: np.ndarray, device) -> torch.Tensor:
    """uint8 images at `rows` of a (memory-mapped) store, on `device`."""
    batch = torch.from_numpy(np.take(pixels, rows, axis=0))
    if torch.device(device).type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch


class PixelBatches(_Sharded):
    """Batches of a decoded uint8 pixel store (n, H, W, 3): a gather of the batch's rows, then the training
    transform (lbhash.data.augment) on the whole batch, its draws from `augmentation_generator`."""

    def __init__(self, pixels: np.ndarray, indices: np.ndarray, labels: np.ndarray, transform, shard: EpochShard,
                 device="cpu", channels_last: bool = True):
        self.pixels, self.indices = pixels, np.asarray(indices, np.int64)
        self.device, self.transform, self.channels_last = torch.device(device), transform, channels_last
        self.on_device = _pixel_tensor(pixels, self.device)
        self.y = torch.as_tensor(labels, dtype=torch.float32, device=self.device)
        super().__init__(len(self.indices), shard)

    def epoch(self, seed: int) -> Iterator[Batch]:
        order = shard_order(self.n, seed, self.rank, self.world_size)
        gen = augmentation_generator(seed, self.rank, self.device)
        index_all = torch.as_tensor(order, device=self.device)
        for start in range(0, len(order), self.batch_size):
            positions = order[start:start + self.batch_size]
            index = index_all[start:start + self.batch_size]
            x = self.transform(self._images(self.indices[positions]), gen)
            if not self.channels_last:
                x = x.contiguous()
            yield x, self.y[index], index

    def _images(self, rows: np.ndarray) -> torch.Tensor:
        if self.on_device is not None:
            return self.on_device[torch.as_tensor(rows, device=self.device)]
        return _host_batch(self.pixels, rows, self.device)


def pixel_inputs(pixels: np.ndarray, indices: np.ndarray, transform, batch_size: int, device="cpu",
                 channels_last: bool = True, progress: bool = False) -> Iterator[torch.Tensor]:
    """The evaluation inputs of a pixel store's items at `indices`, in order, on `device`."""
    from tqdm import tqdm

    indices = np.asarray(indices, np.int64)
    for start in tqdm(range(0, len(indices), batch_size), desc="encoding", unit="batch", leave=False,
                      disable=not progress):
        x = transform(_host_batch(pixels, indices[start:start + batch_size], device))
        yield x if channels_last else x.contiguous()


class LoaderBatches(_Sharded):
    """Batches of a torch Dataset of (image, labels, position) items through a DataLoader."""

    def __init__(self, dataset: Dataset, shard: EpochShard, device="cpu", num_workers: int = 0,
                 channels_last: bool = False):
        super().__init__(len(dataset), shard)
        self.dataset, self.device, self.num_workers, self.channels_last = dataset, device, num_workers, channels_last

    def epoch(self, seed: int) -> Iterator[Batch]:
        order = shard_order(self.n, seed, self.rank, self.world_size).tolist()
        # worker seeds come from torch's RNG, which the loop seeds per epoch: deterministic
        loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=order,
                            num_workers=self.num_workers, pin_memory=str(self.device).startswith("cuda"))
        for x, y, index in loader:
            x = x.to(self.device, non_blocking=True)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, y.to(self.device, torch.float32), index.to(self.device)


def array_inputs(x: np.ndarray, batch_size: int, device="cpu") -> Iterator[torch.Tensor]:
    """Rows of an in-memory array, in order, as tensors on `device`."""
    for start in range(0, len(x), batch_size):
        yield torch.as_tensor(np.ascontiguousarray(x[start:start + batch_size]), device=device)


def loader_inputs(dataset: Dataset, batch_size: int, device="cpu", num_workers: int = 0,
                  channels_last: bool = False, progress: bool = False) -> Iterator[torch.Tensor]:
    """The inputs of a Dataset of (input, labels, position) items, in order, on `device`."""
    from tqdm import tqdm

    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=str(device).startswith("cuda"))
    for x, _, _ in tqdm(loader, desc="encoding", leave=False, disable=not progress):
        x = x.to(device, non_blocking=True)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        yield x
