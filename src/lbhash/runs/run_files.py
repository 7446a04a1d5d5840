"""A run directory, every read and write of its files: its lock and manifest, config, log, input contract,
metrics, and the store that `lbhash.train.fit.fit` trains into (`DirectoryStore`: the first files, each
epoch's log line and checkpoint, a resumed run's checkpoint, and at the end its codes, metrics and manifest
from the arrays the fit hands it). Encoding data with a run is `RunDirectory.encode` (lbhash.runs.run_dir);
the run's model is read by lbhash.runs.encoder (`load_run_model`).

Readers verify the files they use against the manifest's SHA-256s (before a run finishes, the checkpoint
against its zip CRCs). The training stack (lbhash.train.loop, lbhash.train.fit) is named for types only:
a command that only reads a run does not import it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch
import yaml

from lbhash._io import atomic_path, file_sha256, save_npz, temporary_name, write_json
from lbhash.codes_file import load_codes_file
from lbhash.data import Split, load_split, save_split
from lbhash.data.input_form import InputForm
from lbhash.errors import InputError
from lbhash.runs.train_options import read_yaml_mapping
from lbhash.train.config import FIELDS, RunConfig, make_config
from lbhash.train.optim import check_further, load_scheduler_state
from lbhash.train.processes import process_rank
from lbhash.train.summary import DATA_SUMMARY

if TYPE_CHECKING:  # (the training stack: imported by whoever trains, not by a reader of a run)
    from lbhash.train.fit import Trained
    from lbhash.train.loop import Trainer

CONFIG, SPLIT, LOG, CHECKPOINT, CODES, METRICS, BEST = (
    "config.yaml", "split.npz", "log.jsonl", "checkpoint.pt", "codes.npz", "metrics.json", "best.pt")
MANIFEST, STATUS, LOCK = "manifest.json", "status.json", ".lock"
INPUT_FORM = "input.json"  # the input contract (lbhash.data.input_form)
CODES_SEEN = "codes_seen.npz"  # protocol unseen:K: the training classes' query and database
MANIFEST_FORMAT = "lbhash-run/1"
# The one upgrade of a saved config.yaml (every option of its run, resolved): the options added
# after runs were first saved, with the value those runs used, which a file that
# lacks one reads (its run loads, resumes and encodes as it did); a file lacking another option is
# refused, naming them. A new option adds its old value here (tests/train/test_train_run_files.py).
ADDED_OPTIONS = {"multilabel_theta": "mean", "csq_ties": "plus-one", "neighbourhood_weight": 0.0,
                 "neighbourhood_student": "tanh", "probe_epochs": 0, "backbone_lr_scale": 1.0, "freeze_bn": False,
                 "train_stages": 0, "backbone_precision": "fp32", "augment": "crop-flip"}
# The same for method constants added later: a saved run of the method that lacks one trained with this value.
ADDED_METHOD_CONSTANTS = {"dsdh": {"weighting": "mean"}}
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


def write_manifest(run_dir: Path) -> None:
    """manifest.json with the SHA-256 and size of every file of a finished run (written last)."""
    files = {p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size}
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
            if file_sha256(path) != manifest[name].get("sha256"):
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


def mark_failed(run_dir: Path, error: str) -> None:
    write_json(Path(run_dir) / STATUS, {"state": "failed", "error": error})


def check_not_failed(run_dir: Path) -> None:
    """Refuse a run whose status.json says it failed ({"state": "failed", "error": ...})."""
    path = Path(run_dir) / STATUS
    if path.is_file():
        status = json.loads(path.read_text())
        raise InputError(f"{run_dir} is a failed run ({status.get('error')}); start a new run with other settings")


def load_run_config(run_dir: str | Path) -> RunConfig:
    """The resolved config a run saved."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise InputError(f"{run_dir}: not a run directory (no {CONFIG})")
    values = read_yaml_mapping(path, "not a run config (expected a mapping of option: value)")
    if not values:  # an empty file: a run always saves its options
        raise InputError(f"{path}: not a run config (expected a mapping of option: value)")
    if "input_kind" not in values:
        raise InputError(f"{path}: no input_kind; the run was written by an older lbhash")
    values = {**ADDED_OPTIONS, **values}
    added = ADDED_METHOD_CONSTANTS.get(values.get("method"))
    if added and isinstance(values.get("method_options"), dict):
        values["method_options"] = {**added, **values["method_options"]}
    missing = [name for name in (*FIELDS, "input_dim") if name not in values]
    if missing:
        raise InputError(f"{path}: lacks the options {', '.join(missing)}; a run's {CONFIG} records every "
                         "option (add them with the values the run used)")
    return make_config(values, str(path), kind=RunConfig)


def save_run_config(run_dir: Path, cfg: RunConfig) -> None:
    """config.yaml, atomically (its presence marks a run)."""
    with atomic_path(Path(run_dir) / CONFIG) as tmp:
        tmp.write_text(plain_yaml(cfg.to_dict()))


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # parse_yaml refuses aliases: a value met twice is written twice
        return True


def plain_yaml(values: dict) -> str:
    """`values` as YAML without anchors or aliases, in their order (what parse_yaml reads back)."""
    return yaml.dump(values, Dumper=_PlainDumper, sort_keys=False)


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


def read_log(path: Path) -> list[dict]:
    """The records of a run's log.jsonl, one per finished epoch ([] when there is none).

    A torn last line (a write cut short by a kill) is dropped with a warning naming the file;
    a bad line before it is an error naming the file and the line.
    """
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise InputError(f"{path}:{number}: not a JSON log record") from None
            logger.warning("%s: dropped a torn last line (%d bytes)", path, len(line))
    return records


def truncate_log(path: Path, last_epoch: int) -> list[dict]:
    """Drop log lines of epochs after the checkpoint (written just before a kill), and a torn
    one; return the records kept."""
    kept = [r for r in read_log(path) if r["epoch"] <= last_epoch]
    write_log(path, kept)
    return kept


def write_log(path: Path, records: list[dict]) -> None:
    """log.jsonl holding `records`, one line each, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r, allow_nan=False) + "\n" for r in records))


def load_input_form(run_dir: str | Path, cfg: RunConfig) -> InputForm:
    """The run's input contract; runs written before it existed get the form their config
    implies (no stored dtype: float rows as they are; a dequantised run refuses integer rows)."""
    path = Path(run_dir) / INPUT_FORM
    if path.is_file():
        return InputForm.from_dict(_read_checked_json(run_dir, INPUT_FORM), str(path))
    summary = Path(run_dir) / "data.json"
    dequantized = summary.is_file() and bool(json.loads(summary.read_text()).get("dequantized"))
    return InputForm(cfg.input_kind, "float32" if dequantized else None, cfg.input_dim,
                     normalize=cfg.dataset.normalize if cfg.input_kind == "features" else None,
                     image_size=cfg.dataset.image_size, channels=3 if cfg.input_kind == "images" else None)


def read_data_summary(run_dir: str | Path) -> dict:
    """data.json, what the run loaded (train.summary.data_summary), checked; {} for a run without one."""
    return _read_checked_json(run_dir, "data.json") if (Path(run_dir) / "data.json").is_file() else {}


def _read_checked_json(run_dir: str | Path, name: str) -> dict:
    """A JSON object of the run, checked against the manifest ({} for another JSON value)."""
    path = Path(run_dir) / name
    verify_files(Path(run_dir), (name,))
    try:
        values = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not readable JSON ({err})") from None
    return values if isinstance(values, dict) else {}


def run_data_spec(run_dir: str | Path, cfg: RunConfig | None = None) -> str:
    """The data spec that loads a run's data from any working directory: the spec with absolute
    paths that data.json records (`resolved`, runs since issue 60), else config.yaml's spec as
    it was typed (relative paths then resolve against the current directory)."""
    cfg = load_run_config(run_dir) if cfg is None else cfg
    resolved = read_data_summary(run_dir).get("resolved")
    return resolved if isinstance(resolved, str) and resolved else cfg.dataset.data


def model_identity(run_dir: str | Path) -> dict:
    """The weights a run encodes with, as an index records them (`lbhash index build`):
    {"file": best.pt or checkpoint.pt, "sha256", "epoch"}, and what tells models apart for a
    reader: the run ("run", its resolved directory), "variant", "bits", "input_kind" (features
    or images), "backbone" (images) and "data" (run_data_spec). The SHA-256 is the identity: a
    resumed run that trained on has another, unless its kept epoch (best.pt) stayed the same."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    name = BEST if cfg.recipe.select == "best-val" and (run_dir / BEST).is_file() else CHECKPOINT
    if not (run_dir / name).is_file():
        raise InputError(f"{run_dir}: no {name} (the run has not finished an epoch)")
    recorded = (read_manifest(run_dir) or {}).get(name, {}).get("sha256")
    digest = recorded if isinstance(recorded, str) else file_sha256(run_dir / name)
    epoch = None
    if (run_dir / METRICS).is_file():
        epoch = read_metrics(run_dir).get("run", {}).get("selected_epoch")
    return {"file": name, "sha256": digest, "epoch": epoch, "run": str(run_dir.resolve()), "variant": cfg.variant,
            "bits": cfg.hashing.bits, "input_kind": cfg.input_kind,
            "backbone": cfg.model.backbone if cfg.input_kind == "images" else None, "data": run_data_spec(run_dir, cfg)}


# --- a run's end: its codes, metrics and manifest ------------------------------------------

def finish_run(run_dir: Path) -> dict[str, Any]:
    """Every metric of a run whose codes are written but which stopped before its metrics (killed in
    between: the one case that reads its codes back), written as `write_finished` writes them."""
    from lbhash.train.results import run_metrics  # (the metrics' numba kernels: imported only to evaluate)

    seen = load_codes_file(run_dir / CODES_SEEN) if (run_dir / CODES_SEEN).is_file() else None
    codes = load_codes_file(run_dir / CODES) if (run_dir / CODES).is_file() else None
    metrics = run_metrics(load_run_config(run_dir), read_log(run_dir / LOG), load_split(run_dir / SPLIT), codes, seen)
    write_finished(run_dir, metrics)
    return metrics


def write_finished(run_dir: Path, metrics: dict[str, Any]) -> None:
    """A finished run's metrics.json, then the manifest of every file, written last."""
    write_json(run_dir / METRICS, metrics)
    write_manifest(run_dir)


# --- the store that `lbhash.train.fit.fit` trains into --------------------------------------

def _write_first_files(out: Path, split: Split, summary: dict, form: InputForm, cfg: RunConfig) -> None:
    save_split(out / SPLIT, split)
    write_json(out / DATA_SUMMARY, summary)
    write_json(out / INPUT_FORM, form.to_dict())
    save_run_config(out, cfg)  # last: its presence marks a run


def _reopen(out: Path, trainer: Trainer) -> None:
    """Before a run trains further to cfg.recipe.epochs: check that there is something to train, then
    make it unfinished and record the new total in config.yaml."""
    cfg = trainer.cfg
    check_further(cfg.recipe, cfg.recipe.epochs, trainer.start_epoch, trainer.selection.stopped, str(out))
    if trainer.fabric.is_global_zero:
        reopen_run(out)  # first: a kill from here on leaves a run that --resume continues
        save_run_config(out, load_run_config(out).replace(epochs=cfg.recipe.epochs))
    trainer.fabric.barrier()


class DirectoryStore:
    """Run directory `run_dir` as a `RunStore`: a new run (`resume` False) or one to continue from its
    checkpoint, trained further to `epochs` in all where given (`lbhash train --resume --epochs N`)."""

    def __init__(self, run_dir: Path, resume: bool = False, epochs: int | None = None):
        self.run_dir, self.resumed, self.epochs = Path(run_dir), resume, epochs

    def begin(self, trainer: Trainer) -> None:
        """Every check has happened before this writes anything: a new run then writes its first files,
        a resumed one loads its checkpoint, and one trained further (`epochs`) is reopened. A resumed
        run's trainer then holds the config and input form of the directory (as they were written: this
        call's progress= is not)."""
        if trainer.fabric.is_global_zero and not (self.run_dir / CONFIG).exists():
            _write_first_files(self.run_dir, trainer.exp.split, trainer.data_summary, trainer.input_form,
                               trainer.run_config)
        trainer.fabric.barrier()
        self._load_checkpoint(trainer)
        if self.epochs is not None:
            _reopen(self.run_dir, trainer)
        if self.resumed and process_rank() == 0:
            trainer.run_config = load_run_config(self.run_dir)
            trainer.input_form = load_input_form(self.run_dir, trainer.run_config)

    def finish(self, trained: Trained) -> None:
        """codes_seen.npz and codes.npz, then metrics.json and the manifest, from what the fit holds."""
        save_split_codes(self.run_dir, trained.codes)
        write_finished(self.run_dir, trained.metrics)

    def failed(self, reason: str) -> None:
        mark_failed(self.run_dir, reason)

    @staticmethod
    def write(out: Path, trained: Trained) -> None:
        """Write an in-memory fit (`fit` without a store) as a finished run directory `out` (a new,
        empty directory): the files `lbhash train` writes, from memory."""
        fitted = trained.fitted
        _write_first_files(out, trained.split, trained.data_summary, fitted.input_form, fitted.config)
        write_log(out / LOG, fitted.history)
        for name, content in ((CHECKPOINT, trained.checkpoint), (BEST, trained.best)):
            if content is not None:
                with atomic_path(out / name) as tmp:
                    torch.save(content, tmp)
        save_split_codes(out, trained.codes)
        write_finished(out, trained.metrics)

    def save_best(self, best: dict) -> None:
        """best.pt, atomically (a kill never leaves half of it)."""
        path = self.run_dir / BEST
        tmp = temporary_name(path)
        torch.save(best, tmp)
        os.replace(tmp, path)

    def load_best(self) -> dict | None:
        path = self.run_dir / BEST
        return torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None

    def loggers(self, cfg) -> list:
        """Fabric loggers of the run: TensorBoard event files in RUN_DIR/tensorboard when asked."""
        if cfg.runtime.logger != "tensorboard":
            return []
        from lightning_fabric.loggers import TensorBoardLogger

        return [TensorBoardLogger(root_dir=str(self.run_dir / "tensorboard"), name="", version="")]

    def record(self, trainer: Trainer, epoch: int, record: dict) -> None:
        """The epoch's log line (rank 0), then its checkpoint."""
        if trainer.fabric.is_global_zero:
            with open(self.run_dir / LOG, "a") as fh:
                fh.write(json.dumps(record, allow_nan=False) + "\n")
        path = self.run_dir / CHECKPOINT
        tmp = temporary_name(path)  # unique: only rank 0 writes it, and its lock keeps others out
        trainer.fabric.save(tmp, trainer.state(epoch))
        if trainer.fabric.is_global_zero:
            os.replace(tmp, path)  # atomic: a kill never leaves a broken checkpoint
        trainer.fabric.barrier()

    def _load_checkpoint(self, trainer: Trainer) -> None:
        """Continue from the checkpoint; without one, from the start (dropping any log lines of
        an epoch that had not reached its checkpoint)."""
        path = self.run_dir / CHECKPOINT
        if not path.is_file():
            if trainer.fabric.is_global_zero and (self.run_dir / LOG).exists():
                truncate_log(self.run_dir / LOG, 0)
            return
        verify_zip(path)
        state = {"learner": trainer.learner}
        try:
            rest = trainer.fabric.load(path, state, weights_only=True)
        except Exception as err:  # unsafe content (refused, never run), a foreign file, another model's weights
            raise InputError(f"{path}: not a checkpoint of this run ({type(err).__name__})") from None
        for opt, sd in zip(trainer.optimizers, rest["optimizers"]):
            opt.load_state_dict(sd)
        for sched, sd in zip(trainer.schedulers, rest["schedulers"]):
            load_scheduler_state(sched, sd, trainer.cfg.recipe)
        if "selection" in rest:
            trainer.selection.load_state_dict(rest["selection"])
        trainer.start_epoch = int(rest["epoch"])
        if trainer.fabric.is_global_zero:
            trainer.history = truncate_log(self.run_dir / LOG, trainer.start_epoch)


def save_split_codes(run_dir: Path, files: dict[str, dict[str, np.ndarray]]) -> None:
    """`split_codes`' arrays as codes_seen.npz, then codes.npz (last: it marks the codes as done)."""
    for part, name in (("seen", CODES_SEEN), ("all", CODES)):
        if part in files:
            save_npz(run_dir / name, **files[part])
