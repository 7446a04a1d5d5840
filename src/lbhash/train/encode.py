"""Codes from a trained model: batched, no gradient, autocast where the run uses it."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm


def _signs(u: torch.Tensor) -> np.ndarray:
    return torch.where(u >= 0, 1, -1).to(torch.int8).cpu().numpy()  # bin(0) = +1


def _input_dtype(model: nn.Module) -> torch.dtype:
    param = next(model.parameters(), None)
    return param.dtype if param is not None and param.is_floating_point() else torch.float32


@torch.no_grad()
def encode_array(model: nn.Module, x: np.ndarray, batch_size: int = 1024, device="cpu",
                 autocast=contextlib.nullcontext) -> np.ndarray:
    """+/-1 int8 codes (n, bits) of the rows of x."""
    was_training = model.training
    model.eval()
    dtype = _input_dtype(model)
    out = []
    try:
        for start in range(0, len(x), batch_size):
            batch = torch.as_tensor(np.ascontiguousarray(x[start:start + batch_size]), device=device)
            with autocast():
                out.append(_signs(model(batch.to(dtype))))
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.empty((0, 0), dtype=np.int8)


@torch.no_grad()
def encode_dataset(model: nn.Module, dataset: Dataset, batch_size: int = 256, device="cpu",
                   num_workers: int = 0, autocast=contextlib.nullcontext, channels_last: bool = False,
                   progress: bool = True, desc: str = "encoding") -> np.ndarray:
    """+/-1 int8 codes of every item of a Dataset of (image, labels, position) items, in order."""
    was_training = model.training
    model.eval()
    dtype = _input_dtype(model)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=str(device).startswith("cuda"))
    out = []
    try:
        for x, _, _ in tqdm(loader, desc=desc, leave=False, disable=not progress):
            x = x.to(device, dtype, non_blocking=True)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast():
                out.append(_signs(model(x)))
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.empty((0, 0), dtype=np.int8)
