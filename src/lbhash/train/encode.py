"""Codes from a trained model: batched, no gradient."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


@torch.no_grad()
def encode_array(model: nn.Module, x: np.ndarray, batch_size: int = 1024, device="cpu") -> np.ndarray:
    """+/-1 int8 codes (n, bits) of the rows of x; bin(0) = +1."""
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(x), batch_size):
            batch = torch.as_tensor(np.ascontiguousarray(x[start:start + batch_size], dtype=np.float32),
                                    device=device)
            u = model(batch)
            out.append(torch.where(u >= 0, 1, -1).to(torch.int8).cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.empty((0, 0), dtype=np.int8)
