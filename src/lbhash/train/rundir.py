"""Reading a run directory: its config, split, log, metrics and trained model, and encoding
data with it (`lbhash encode`).

A run's model is rebuilt by the same builder that trained it (lbhash.train.builder), from the
saved config.yaml and the normalisation statistics saved in its checkpoint.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import torch

from lbhash._io import save_npz
from lbhash.codes import pack
from lbhash.data import load_data, load_split
from lbhash.errors import InputError
from lbhash.models import HashModel
from lbhash.train.config import TrainConfig, make_config, parse_yaml

CONFIG, SPLIT, LOG, CHECKPOINT, CODES, METRICS, BEST = (
    "config.yaml", "split.npz", "log.jsonl", "checkpoint.pt", "codes.npz", "metrics.json", "best.pt")
PARTS = ("all", "train", "query", "database")


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The resolved config a run saved."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise InputError(f"{run_dir}: not a run directory (no {CONFIG})")
    values = parse_yaml(path.read_text(), str(path))
    if not isinstance(values, dict):
        raise InputError(f"{path}: not a run config (expected a mapping of option: value)")
    return make_config(values, str(path))


def read_metrics(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / METRICS).read_text())


def load_run_model(run_dir: str | Path) -> tuple[HashModel, TrainConfig]:
    """The trained hash model of a run (its last checkpoint) and the run's config."""
    from lbhash.train.builder import build_model

    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    if cfg.input_kind is None:
        raise InputError(f"{run_dir / CONFIG}: no input_kind; the run was written by an older lbhash")
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise InputError(f"{run_dir}: no {CHECKPOINT} (the run has not finished an epoch)")
    try:
        if cfg.select == "best-val" and (run_dir / BEST).is_file():  # the model the run selected
            path = run_dir / BEST
            weights = torch.load(path, map_location="cpu", weights_only=True)["model"]
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)["learner"]
            weights = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    except Exception as err:  # a truncated or foreign file
        raise InputError(f"{path}: not a readable lbhash checkpoint ({type(err).__name__})") from None
    normalization = None
    if cfg.input_kind == "features" and cfg.normalize == "zscore":
        if "backbone.mean" not in weights or "backbone.std" not in weights:
            raise InputError(f"{path}: no normalisation statistics, but {CONFIG} says normalize: zscore")
        normalization = (weights["backbone.mean"], weights["backbone.std"])
    model = build_model(cfg, normalization, pretrained=False)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise InputError(f"{path}: the weights do not fit the model of {CONFIG} "
                         f"({str(err).splitlines()[0]})") from None
    return model.eval(), cfg


def encode_run(run_dir: str | Path, data: str | None = None, part: str = "all",
               accelerator: str = "cpu", precision: str = "bf16-mixed", devices: int = 1,
               progress: bool = True) -> dict[str, np.ndarray] | None:
    """Codes of a data set (default: the run's own) with a trained run's model.

    `part` selects the run's train/query/database items and needs the run's own data.
    Returns packed codes, bits, ids (item indices, or file paths where the data has them) and
    labels. On a GPU the model runs under autocast in `precision` ("32-true": none). With
    devices > 1 the items are shared out over that many processes (Lightning Fabric, or the
    processes of torchrun); rank 0 returns everything, the other ranks None.
    """
    from lbhash.train.builder import input_options
    from lbhash.train.encoder import encode_sharded
    from lbhash.train.loop import leave_process_group, make_fabric
    from lbhash.train.run import stored_labels

    run_dir = Path(run_dir)
    if part not in PARTS:
        raise InputError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    if accelerator not in ("cpu", "gpu"):
        raise InputError(f"accelerator must be cpu or gpu, got {accelerator!r}")
    model, cfg = load_run_model(run_dir)
    own = data is None or data == cfg.data
    if part != "all" and not own:
        raise InputError(f"--part {part} selects items of the run's split, so it needs the run's own data "
                         f"({cfg.data}), not {data}")
    dataset = load_data(cfg.data if own else data)
    index = np.arange(len(dataset)) if part == "all" else getattr(load_split(run_dir / SPLIT), part)
    fabric = make_fabric(accelerator, devices, "32-true")
    channels_last = fabric.device.type == "cuda" and cfg.input_kind == "images"
    model.to(fabric.device, memory_format=torch.channels_last) if channels_last else model.to(fabric.device)
    codes = encode_sharded(fabric, model, dataset, index, input_options(cfg, channels_last),
                           _autocast(fabric.device, precision), progress)
    leave_process_group(fabric)
    if codes is None:
        return None
    if codes.shape[1] != cfg.bits:
        raise InputError(f"the model gives {codes.shape[1]} bits but the run has {cfg.bits}")
    return {"codes": pack(codes), "bits": np.int64(cfg.bits), "ids": dataset.item_ids(index),
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


__all__ = ["CONFIG", "SPLIT", "LOG", "CHECKPOINT", "CODES", "METRICS", "BEST", "PARTS", "encode_run",
           "load_run_config", "load_run_model", "read_metrics", "save_encoded"]
