"""The one forward loop over data items, in eval mode under `torch.inference_mode`: +/-1 codes
(`encode`, exactly `lbhash.codes.to_signs` of `embed`'s outputs), the hash head's real outputs
(`embed`), or those and each item's embedding (`embed_with_features`); `encode_sharded` and
`embed_sharded` split the items over a process group's ranks and gather them in order on rank 0.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch
from torch import nn

from lbhash.codes import to_signs
from lbhash.data import HashDataset, InputOptions
from lbhash.data.base import ForwardPass, check_indices


def encode(model: nn.Module, dataset: HashDataset, indices=None, options: InputOptions = InputOptions(),
           how: ForwardPass = ForwardPass()) -> np.ndarray:
    """+/-1 int8 codes (len(indices), bits) of the items (default: all)."""
    return _forward(model, dataset, indices, options, how, to_signs)


def embed(model: nn.Module, dataset: HashDataset, indices=None, options: InputOptions = InputOptions(),
          how: ForwardPass = ForwardPass()) -> np.ndarray:
    """The model's real outputs u, float32 (len(indices), bits), whose signs are `encode`'s codes."""
    return _forward(model, dataset, indices, options, how, torch.Tensor.float)


def embed_with_features(model: nn.Module, dataset: HashDataset, indices=None, options: InputOptions = InputOptions(),
                        how: ForwardPass = ForwardPass()) -> tuple[np.ndarray, np.ndarray]:
    """(real outputs float32 (n, bits), embeddings float32 (n, d)) of the items, from one forward
    pass (`HashModel.forward_embedded`: an image model's pooled backbone features, a feature
    model's input features): what a search index keeps per item and re-scores with."""
    return _forward(model, dataset, indices, options, how, torch.Tensor.float, embedded=True)


@torch.inference_mode()
def _forward(model: nn.Module, dataset: HashDataset, indices, options: InputOptions, how: ForwardPass, per_batch,
             embedded: bool = False):
    """The forward loop of `encode` and `embed`; `per_batch` turns each batch's outputs into
    what they return, on the device (codes cross to the CPU as int8; float32 holds bf16/fp16
    outputs exactly, so their signs are the codes'). `embedded`: also each item's embedding
    (`HashModel.forward_embedded`), returned second."""
    was_training = model.training
    model.eval()
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    out, emb = [], []
    exact = how.autocast is contextlib.nullcontext and torch.device(how.device).type == "cuda"
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if exact:  # float32 means float32: TF32 products would move outputs near 0 across the sign
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        for x in dataset.encode_batches(check_indices(dataset, indices), options, how.device, how.progress,
                                        how.batch_size):
            with how.autocast():
                if embedded:
                    u, e = model.forward_embedded(x.to(dtype))
                    emb.append(e.float().cpu().numpy())
                else:
                    u = model(x.to(dtype))
            out.append(per_batch(u).cpu().numpy())
    finally:
        model.train(was_training)
        if exact:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    if not out:  # no items: an empty array of the dtype the batches would have had
        out.append(per_batch(torch.empty((0, getattr(model, "bits", 0)))).numpy())
        emb.append(np.empty((0, 1), np.float32))
    return (np.concatenate(out), np.concatenate(emb)) if embedded else np.concatenate(out)


def all_gather(fabric, tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's `tensor` (same shape on all), stacked: (world_size, *shape); no gradient.

    torch.distributed.all_gather itself: Fabric's all_gather goes through
    torch.distributed.nn.functional.all_gather (autograd-aware), which torch deprecates and
    which warns on every call."""
    import torch.distributed as dist

    if fabric.world_size == 1 or not dist.is_initialized():
        return tensor.unsqueeze(0)
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(fabric.world_size)]
    dist.all_gather(parts, tensor)
    return torch.stack(parts)


def encode_sharded(fabric, model: nn.Module, dataset: HashDataset, indices=None,
                   options: InputOptions = InputOptions(), autocast=contextlib.nullcontext,
                   progress: bool = False) -> np.ndarray | None:
    """`encode` split over the processes of `fabric`: rank 0 returns all codes in item order, the others None."""
    return _sharded(encode, fabric, model, dataset, indices, options, ForwardPass(fabric.device, autocast, progress))


def embed_sharded(fabric, model: nn.Module, dataset: HashDataset, indices=None,
                  options: InputOptions = InputOptions(), autocast=contextlib.nullcontext,
                  progress: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """`embed_with_features` split as `encode_sharded` splits `encode`."""
    return _sharded(embed_with_features, fabric, model, dataset, indices, options,
                    ForwardPass(fabric.device, autocast, progress))


def _sharded(run, fabric, model: nn.Module, dataset: HashDataset, indices, options: InputOptions, how: ForwardPass):
    """`run` of this rank's share, gathered on rank 0 (a progress bar on rank 0 alone)."""
    idx = check_indices(dataset, indices)
    shares = np.array_split(idx, fabric.world_size)
    mine = run(model, dataset, shares[fabric.global_rank], options,
               dataclasses.replace(how, progress=how.progress and fabric.is_global_zero))
    if fabric.world_size == 1:
        return mine
    gathered = tuple(_gathered(fabric, part, shares) for part in mine) if isinstance(mine, tuple) \
        else _gathered(fabric, mine, shares)
    return gathered if fabric.is_global_zero else None


def _gathered(fabric, mine: np.ndarray, shares: list[np.ndarray]) -> np.ndarray:
    """Every rank's rows of one array, in item order (on every rank)."""
    longest = max(len(s) for s in shares)
    padded = torch.zeros((longest, mine.shape[1]), dtype=torch.from_numpy(mine).dtype)
    padded[:len(mine)] = torch.from_numpy(mine)
    gathered = all_gather(fabric, padded.to(fabric.device)).cpu().numpy()  # (world, longest, width)
    return np.concatenate([gathered[r, :len(s)] for r, s in enumerate(shares)])
