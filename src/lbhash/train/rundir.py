"""A run directory: its files, its lock and manifest, and reading it back (config, split, log,
metrics, the trained model), and encoding data with it (`lbhash encode`).

A run's model is rebuilt by the same builder that trained it (lbhash.train.builder), from the
saved config.yaml and the normalisation statistics saved in its checkpoint. A finished run's
manifest.json holds the SHA-256 of every file; readers verify the files they use against it,
and, before a run finishes, the checkpoint against its own zip CRCs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import yaml

from lbhash._io import atomic_path, write_json
from lbhash.codes import pack, to_signs
from lbhash.codes_file import write_codes
from lbhash.data import load_data, load_split
from lbhash.data.input_form import InputForm, conform_dataset
from lbhash.errors import InputError
from lbhash.models import HashModel
from lbhash.train.config import LEGACY_VALUES, TrainConfig, make_config, parse_yaml

CONFIG, SPLIT, LOG, CHECKPOINT, CODES, METRICS, BEST = (
    "config.yaml", "split.npz", "log.jsonl", "checkpoint.pt", "codes.npz", "metrics.json", "best.pt")
MANIFEST, STATUS, LOCK = "manifest.json", "status.json", ".lock"
INPUT_FORM = "input.json"  # the input contract (lbhash.data.input_form)
CODES_SEEN = "codes_seen.npz"  # protocol unseen:K: the training classes' query and database
MANIFEST_FORMAT = "lbhash-run/1"
PARTS = ("all", "train", "query", "database")
logger = logging.getLogger("lbhash")


# --- the run directory's integrity -----------------------------------------------------------

@contextlib.contextmanager
def run_lock(out: Path, enabled: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on run directory `out` (created if needed) while the block runs.

    A second process asking for the same directory fails at once. Temporary files left in it
    by killed processes are removed. If the block fails before the run's config.yaml exists, a
    directory this call created is removed again, and otherwise the lock file.
    """
    if not enabled:
        yield
        return
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: is a file, not a run directory")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise InputError(f"--out {out}: a parent of it is a file, not a directory") from None
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InputError(f"{out} is in use by another lbhash process (it holds {out / LOCK})") from None
    try:
        for tmp in out.glob(".*.tmp"):  # under the lock every temporary is a leftover
            tmp.unlink()
        yield
    except BaseException:
        if not (out / CONFIG).exists():
            shutil.rmtree(out) if created else (out / LOCK).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(run_dir: Path) -> None:
    """manifest.json with the SHA-256 and size of every file of a finished run (written last)."""
    files = {p.name: {"sha256": sha256(p), "bytes": p.stat().st_size}
             for p in sorted(run_dir.iterdir()) if p.is_file() and not p.name.startswith(".")
             and p.name not in (MANIFEST, STATUS)}
    write_json(run_dir / MANIFEST, {"format": MANIFEST_FORMAT, "files": files})


def read_manifest(run_dir: Path) -> dict | None:
    """The files entry of manifest.json ({name: {"sha256", "bytes"}}), None without one."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        return None
    try:
        files = json.loads(path.read_text())["files"]
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InputError(f"{path}: not a readable run manifest") from None
    return files


def verify_finished_run(run_dir: Path) -> None:
    """Every file manifest.json lists must be present with its SHA-256 (a finished run)."""
    manifest = read_manifest(run_dir) or {}
    for name in manifest:
        if not (Path(run_dir) / name).is_file():
            raise InputError(f"{Path(run_dir) / name}: missing, but {MANIFEST} lists it")
    verify_files(run_dir, tuple(manifest))


def verify_files(run_dir: Path, names: tuple[str, ...]) -> None:
    """Check the files a reader is about to use: against manifest.json when the run has one,
    else checkpoints against their own zip CRCs. A mismatch is one line naming the file."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    for name in names:
        path = run_dir / name
        if not path.is_file():
            continue
        if manifest is not None and name in manifest:
            if sha256(path) != manifest[name].get("sha256"):
                raise InputError(f"{path}: its SHA-256 does not match {MANIFEST}; the file was changed or is corrupt")
        elif name.endswith(".pt"):
            verify_zip(path)


def verify_zip(path: Path) -> None:
    """A torch checkpoint is a zip archive: every member's CRC-32 must match."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise InputError(f"{path}: not a readable lbhash checkpoint ({err})") from None
    if bad is not None:
        raise InputError(f"{path}: corrupt (the CRC of {bad} does not match; the file changed on disk)")


def run_status(run_dir: Path) -> dict | None:
    """status.json of a run that failed ({"state": "failed", "error": ...}), else None."""
    path = Path(run_dir) / STATUS
    return json.loads(path.read_text()) if path.is_file() else None


def mark_failed(run_dir: Path, error: str) -> None:
    write_json(Path(run_dir) / STATUS, {"state": "failed", "error": error})


def check_not_failed(run_dir: Path) -> None:
    status = run_status(run_dir)
    if status is not None:
        raise InputError(f"{run_dir} is a failed run ({status.get('error')}); start a new run with other settings")


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The resolved config a run saved."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise InputError(f"{run_dir}: not a run directory (no {CONFIG})")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read ({err})") from None
    values = parse_yaml(text, str(path))
    if not isinstance(values, dict):
        raise InputError(f"{path}: not a run config (expected a mapping of option: value)")
    return make_config({**LEGACY_VALUES, **values}, str(path))


def save_run_config(run_dir: Path, cfg: TrainConfig) -> None:
    """config.yaml, atomically (its presence marks a run)."""
    with atomic_path(Path(run_dir) / CONFIG) as tmp:
        tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def reopen_run(run_dir: Path) -> None:
    """Make a run that finished (or finished training) a run that is still training: first
    manifest.json goes (the run stops being finished), then the results that training writes
    again at its end (codes, metrics). A kill at any point leaves a run that `--resume`
    continues: with the old config it finishes again, with the new one it trains on."""
    run_dir = Path(run_dir)
    for name in (MANIFEST, CODES, CODES_SEEN, METRICS):
        (run_dir / name).unlink(missing_ok=True)


def read_metrics(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / METRICS).read_text())


def load_input_form(run_dir: str | Path, cfg: TrainConfig) -> InputForm:
    """The run's input contract; runs written before it existed get the form their config
    implies (no stored dtype: float rows as they are; a dequantised run refuses integer rows)."""
    path = Path(run_dir) / INPUT_FORM
    if path.is_file():
        verify_files(Path(run_dir), (INPUT_FORM,))
        try:
            values = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: not readable JSON ({err})") from None
        return InputForm.from_dict(values if isinstance(values, dict) else {}, str(path))
    summary = Path(run_dir) / "data.json"
    dequantized = summary.is_file() and bool(json.loads(summary.read_text()).get("dequantized"))
    return InputForm(cfg.input_kind, "float32" if dequantized else None, cfg.input_dim,
                     normalize=cfg.normalize if cfg.input_kind == "features" else None,
                     image_size=cfg.image_size, channels=3 if cfg.input_kind == "images" else None)


def load_run_model(run_dir: str | Path) -> tuple[HashModel, TrainConfig]:
    """The trained hash model of a run (its last checkpoint) and the run's config."""
    from lbhash.train.builder import build_model

    run_dir = Path(run_dir)
    check_not_failed(run_dir)
    verify_files(run_dir, (CONFIG, CHECKPOINT, BEST))
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
               accelerator: str = "cpu", precision: str = "32-true", devices: int = 1,
               progress: bool = True, real: bool = False) -> dict[str, np.ndarray] | None:
    """Codes of a data set (default: the run's own) with a trained run's model.

    `part` selects the run's train/query/database items and needs the run's own data. Other
    data goes through the run's input contract (lbhash.data.input_form) and needs no labels.
    Returns the fields of a codes-file part (lbhash.codes_file): packed `codes`, `ids` (item
    positions), `labels` (None without), `sources` (None for feature rows) and, with real=True,
    `real` (float32 (n, bits), whose signs are the codes); plus `bits` and `topk`, the R of the
    run's protocol. On a GPU the model runs in float32 by default, as training made the run's
    codes, or under autocast in `precision` ("bf16-mixed", "16-mixed"): faster, but about 1% of
    items then differ from the run's codes by a bit or two.
    With devices > 1 the items are shared out over that many processes (Lightning Fabric, or
    torchrun's); rank 0 returns everything, the other ranks None.
    """
    from lbhash.train.builder import evaluation_topk, input_options
    from lbhash.train.encoder import encode_sharded
    from lbhash.train.loop import leave_process_group, make_fabric
    from lbhash.train.run import stored_labels

    run_dir = Path(run_dir)
    if part not in PARTS:
        raise InputError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    if accelerator not in ("cpu", "gpu"):
        raise InputError(f"accelerator must be cpu or gpu, got {accelerator!r}")
    check_accelerator(accelerator)
    model, cfg = load_run_model(run_dir)
    form = load_input_form(run_dir, cfg)
    own = data is None or data == cfg.data
    if part != "all" and not own:
        raise InputError(f"--part {part} selects items of the run's split, so it needs the run's own data "
                         f"({cfg.data}), not {data}")
    split = load_split(run_dir / SPLIT)
    dataset = conform_dataset(form, load_data(cfg.data if own else data, labels_required=False),
                              cfg.data if own else data)
    index = np.arange(len(dataset)) if part == "all" else getattr(split, part)
    fabric = make_fabric(accelerator, devices, "32-true")
    model.to(fabric.device)  # image models keep their channels-last layout
    out = encode_sharded(fabric, model, dataset, index, input_options(cfg),
                         _autocast(fabric.device, precision), progress, real=real)
    leave_process_group(fabric)
    if out is None:
        return None
    if out.shape[1] != cfg.bits:
        raise InputError(f"the model gives {out.shape[1]} bits but the run has {cfg.bits}")
    codes = to_signs(out) if real else out  # one forward pass: the codes are the signs
    labelled = dataset.num_classes > 0
    return {"codes": pack(codes), "bits": cfg.bits, "ids": np.asarray(index, np.int64),
            "labels": stored_labels(dataset.multi_label, dataset.labels[index]) if labelled else None,
            "sources": dataset.item_sources(index), "real": out if real else None,
            "topk": evaluation_topk(cfg, split)}


def check_accelerator(accelerator: str) -> None:
    """A GPU accelerator needs a GPU torch can use."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise InputError(f"--accelerator {accelerator}: no GPU is available to torch (torch.cuda.is_available() "
                         "is False); use --accelerator cpu")


def save_encoded(path: str | Path, encoded: dict) -> None:
    """Write `encode_run`'s result as a codes file of one part."""
    fields = {k: v for k, v in encoded.items() if k not in ("bits", "topk")}
    write_codes(path, encoded["bits"], {"items": fields}, topk=encoded["topk"])


def _autocast(device: torch.device, precision: str):
    """Mixed precision on a GPU (bf16 by default); the CPU always computes in float32."""
    if device.type == "cuda" and "bf16" in precision:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cuda" and precision.startswith("16"):
        return lambda: torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext


__all__ = ["INPUT_FORM", "load_input_form", "CONFIG", "SPLIT", "LOG", "CHECKPOINT", "CODES", "CODES_SEEN", "METRICS",
           "BEST", "MANIFEST", "STATUS", "PARTS", "check_accelerator", "encode_run", "load_run_config",
           "load_run_model", "read_metrics", "reopen_run", "run_lock", "save_encoded", "save_run_config",
           "verify_files", "verify_finished_run", "write_manifest"]
