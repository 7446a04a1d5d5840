"""A trained run's hash model, rebuilt from its saved config and checkpoint, and used to
encode new data (`lbhash encode`)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch

from lbhash._io import save_npz
from lbhash.codes import pack
from lbhash.data import load_data, load_split
from lbhash.models import HashModel, create_feature_model
from lbhash.train.experiment import encode_items
from lbhash.train.loop import CHECKPOINT
from lbhash.train.run import SPLIT, load_run_config, stored_labels

PARTS = ("all", "train", "query", "database")


def load_model(run_dir: str | Path) -> tuple[HashModel, object]:
    """The trained hash model of a run (its last checkpoint) and the run's config."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"{run_dir}: no {CHECKPOINT} (the run has not finished an epoch)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)["learner"]
    except Exception as err:  # a truncated or foreign file
        raise ValueError(f"{path}: not a readable lbhash checkpoint ({type(err).__name__})") from None
    weights = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    if cfg.backbone is None:  # features: the head's sizes come from the weights
        first = weights["head.net.0.weight"]
        norm = "backbone.mean" in weights
        zeros = torch.zeros(first.shape[1])
        model = create_feature_model(first.shape[1], cfg.bits, cfg.hidden, cfg.head_dropout,
                                     zeros if norm else None, torch.ones_like(zeros) if norm else None)
    else:
        from lbhash.models import create_image_model

        model = create_image_model(cfg.backbone, cfg.bits, hidden=cfg.hidden, pretrained=None,
                                   freeze_backbone=cfg.freeze_backbone, dropout=cfg.head_dropout)
    model.load_state_dict(weights)
    return model.eval(), cfg


def encode_run(run_dir: str | Path, data: str | None = None, part: str = "all",
               accelerator: str = "cpu", precision: str = "bf16-mixed",
               progress: bool = True) -> dict[str, np.ndarray]:
    """Codes of a data set (default: the run's own) with a trained run's model.

    `part` selects the run's train/query/database items and needs the run's own data.
    Returns packed codes, bits, ids (item indices, or file paths where the data has them) and
    labels. On a GPU the model runs under autocast in `precision` ("32-true": none).
    """
    run_dir = Path(run_dir)
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    model, cfg = load_model(run_dir)
    own = data is None or data == cfg.data
    dataset = load_data(cfg.data if own else data)
    if part != "all" and not own:
        raise ValueError(f"--part {part} selects items of the run's split, so it needs the run's own data "
                         f"({cfg.data}), not {data}")
    index = np.arange(len(dataset)) if part == "all" else getattr(load_split(run_dir / SPLIT), part)
    if accelerator not in ("cpu", "gpu"):
        raise ValueError(f"accelerator must be cpu or gpu, got {accelerator!r}")
    device = torch.device("cuda" if accelerator == "gpu" else "cpu")
    channels_last = device.type == "cuda" and cfg.backbone is not None
    model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    codes = encode_items(cfg, dataset, model, index, device, _autocast(device, precision),
                         channels_last, progress)
    if codes.shape[1] != cfg.bits:
        raise ValueError(f"the model gives {codes.shape[1]} bits but the run has {cfg.bits}")
    # image data: each item's file (or TARBALL:MEMBER); features: its row in the file
    ids = np.array([dataset.where(i) for i in index]) if hasattr(dataset, "where") else index
    return {"codes": pack(codes), "bits": np.int64(cfg.bits), "ids": ids,
            "labels": stored_labels(dataset.multi_label, dataset.labels[index])}


def save_encoded(path: str | Path, encoded: dict[str, np.ndarray]) -> None:
    save_npz(path, **encoded)


def _autocast(device: torch.device, precision: str):
    """Mixed precision on a GPU (bf16 by default); the CPU always computes in float32."""
    if device.type == "cuda" and "bf16" in precision:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cuda" and precision.startswith("16"):
        return lambda: torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext


__all__ = ["load_model", "encode_run", "save_encoded", "PARTS"]
