"""A run directory (lbhash.runs.run_files) under faults: a held lock, corrupted and malicious
checkpoints, a full disk while encoding, and runs that fail (diverging, or after their first
write) marked failed so that resume and encode refuse them."""

import errno
import fcntl
import json
import os
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import torch

from helpers import cli, one_line_error
from lbhash.runs import RunDirectory
from lbhash.train import TrainConfig

FAST = dict(data="digits", bits=16, hidden=[64], centers="hadamard", progress=False, lbhash=True)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def flip_tensor_bytes(checkpoint):
    """Flip bytes in the middle of the largest tensor stored in a torch checkpoint (a zip)."""
    with zipfile.ZipFile(checkpoint) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(checkpoint, "r+b") as fh:
        fh.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(fh.read(4), dtype="<u2")
        start = info.header_offset + 30 + int(name_len) + int(extra_len) + info.file_size // 2
        fh.seek(start)
        data = bytearray(fh.read(8))
        fh.seek(start)
        fh.write(bytes(b ^ 0xFF for b in data))


# --- the lock: one process per run directory --------------------------------------------------------

def test_a_held_lock_stops_a_second_process_at_once(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        one_line_error(cli("train", "--data", "digits", "--out", out, "--no-progress"), "in use")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


@pytest.mark.slow  # two processes, about 20 s; the held lock's fast test is above
def test_two_training_processes_on_one_directory(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "lbhash.cli", "train", "--data", "digits", "--bits", "16", "--hidden", "64",
           "--epochs", "200", "--no-progress", "--out", str(out)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "config.yaml").exists():
            time.sleep(0.1)
        assert (out / "config.yaml").exists(), "the first process did not start its run"
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "in use by another lbhash process" in second.stderr
        resumed = subprocess.run(cmd[:4] + ["--resume", "--out", str(out)], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 2 and "in use" in resumed.stderr
    finally:
        first.kill()
        first.wait()


# --- checkpoints: checked against the manifest, or their zip CRCs, and never unpickled --------------

def test_flipped_bytes_in_a_checkpoint_tensor_are_refused(tmp_path, runs):
    finished = runs.copy("csq_D-3", tmp_path / "finished")
    flip_tensor_bytes(finished / "checkpoint.pt")
    one_line_error(cli("encode", finished, "--out", tmp_path / "e.npz"), "checkpoint.pt", "SHA-256")
    from lbhash import HashEncoder

    with pytest.raises(ValueError, match="checkpoint.pt.*SHA-256"):
        HashEncoder.load(finished)
    cut = runs.copy("cut-at-1", tmp_path / "cut")  # no manifest yet: the zip's own CRCs catch it
    flip_tensor_bytes(cut / "checkpoint.pt")
    one_line_error(cli("train", "--resume", "--out", cut), "checkpoint.pt", "corrupt")
    assert not (tmp_path / "e.npz").exists()


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > evil-ran",))


@pytest.mark.parametrize("kind", ["malicious", "truncated", "empty"])
def test_bad_checkpoints_on_resume(tmp_path, kind, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    cut = runs.copy("cut-at-1", tmp_path / "cut")
    path = cut / "checkpoint.pt"
    if kind == "malicious":
        torch.save({"learner": Evil()}, path)
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.write_bytes(b"")
    result = cli("train", "--resume", "--out", cut)
    one_line_error(result, "checkpoint.pt")
    assert "weights_only=False" not in result.output and not (tmp_path / "evil-ran").exists()


def test_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, runs):
    run = runs.path("csq_D-3")  # encode only reads it

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "codes.npz"))

    monkeypatch.setattr(np, "savez", no_space)
    before = sorted(p.name for p in tmp_path.iterdir())
    one_line_error(cli("encode", run, "--out", tmp_path / "codes.npz"), "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# --- failed runs: status.json says so, and resume and encode refuse them --------------------------

def test_a_diverging_run_stops_with_one_line_and_says_it_failed(tmp_path):
    out = tmp_path / "run"
    result = cli("train", "--data", "digits", "--bits", "16", "--hidden", "64", "--centers", "hadamard", "--lbhash",
                 "--lbhash-weight", "1e38", "--epochs", "2", "--out", out, "--quiet")  # no data line
    one_line_error(result, "epoch 1, step 1", "lower_bound", "inf")
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "failed" and "lower_bound" in status["error"]
    for line in (out / "log.jsonl").read_text().splitlines() if (out / "log.jsonl").exists() else []:
        json.loads(line)  # strict JSON
    one_line_error(cli("train", "--resume", "--out", out), "failed run")
    one_line_error(cli("encode", out, "--out", tmp_path / "e.npz"), "failed run")


def test_a_run_that_fails_after_its_first_write_is_marked_failed(tmp_path, monkeypatch):
    import lbhash.train.fit as run_module
    from lbhash.errors import InputError

    def refused(trainer):  # after the run's first files, before its first epoch
        raise InputError("training refused")

    monkeypatch.setattr(run_module, "train_to_end", refused)
    out = tmp_path / "run"
    with pytest.raises(InputError, match="training refused"):
        RunDirectory(out).train(TrainConfig(**FAST, epochs=1))
    assert (out / "config.yaml").is_file()
    assert json.loads((out / "status.json").read_text()) == {"state": "failed", "error": "training refused"}
    assert not (out / "manifest.json").exists()
    one_line_error(cli("train", "--resume", "--out", out), "failed run", "training refused")


def test_a_run_writes_its_metrics_from_the_arrays_in_hand_and_only_a_killed_one_reads_its_codes(
        tmp_path, monkeypatch):
    """The one driver hands the store what it trained: no codes file is read back to measure it. A run
    killed between its codes and its metrics is the one case that reads them (`--resume` finishes it),
    and gives the same metrics."""
    import lbhash.runs.run_files as run_module

    reads, real_load = [], run_module.load_codes_file

    def counted(path, *args, **kwargs):
        reads.append(path.name)
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(run_module, "load_codes_file", counted)
    whole = RunDirectory(tmp_path / "whole").train(TrainConfig(**FAST, epochs=1))
    assert reads == [] and (tmp_path / "whole" / "manifest.json").is_file()

    def killed(out, metrics):  # the codes are written; the process dies before metrics.json
        raise KeyboardInterrupt

    real_finish = run_module.write_finished
    monkeypatch.setattr(run_module, "write_finished", killed)
    with pytest.raises(KeyboardInterrupt):
        RunDirectory(tmp_path / "cut").train(TrainConfig(**FAST, epochs=1))
    monkeypatch.setattr(run_module, "write_finished", real_finish)  # (the process that resumes it is a new one)
    assert (tmp_path / "cut" / "codes.npz").is_file() and not (tmp_path / "cut" / "metrics.json").exists()
    finished = RunDirectory(tmp_path / "cut").resume()
    assert reads == ["codes.npz"] and (tmp_path / "cut" / "manifest.json").is_file()
    drop = ("seconds", "seconds_per_epoch", "encode_seconds")
    assert {k: v for k, v in finished["run"].items() if k not in drop} == \
        {k: v for k, v in whole["run"].items() if k not in drop}
    assert finished["map"] == whole["map"]


def test_a_transient_failure_leaves_a_run_that_resume_continues(tmp_path, monkeypatch):
    import lbhash.runs.run_files as run_module

    real = run_module.save_split_codes

    def full_disk(out, files):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_module, "save_split_codes", full_disk)
    out = tmp_path / "run"
    with pytest.raises(OSError):
        RunDirectory(out).train(TrainConfig(**FAST, epochs=1))
    assert not (out / "status.json").exists()
    monkeypatch.setattr(run_module, "save_split_codes", real)
    metrics = RunDirectory(out).resume()
    assert (out / "manifest.json").is_file() and metrics["map"] > 0


# every option of a run's config.yaml since 2026-11-22, when runs first recorded their input kind;
# the options added later are lbhash.runs.run_files.ADDED_OPTIONS, with the values those runs used
FIRST_OPTIONS = (
    "data", "protocol", "image_size", "transform", "num_workers", "skip_bad_images", "normalize", "method",
    "defaults", "lbhash", "bits", "method_options", "seed", "epochs", "batch_size", "optimizer", "lr",
    "weight_decay", "lr_step", "lr_gamma", "schedule", "warmup_epochs", "eval_every", "validation", "select",
    "patience", "test", "topk", "centers", "canonical_centers", "lbhash_mode", "lbhash_weight", "lbhash_reduction",
    "surrogate_flips", "block_assignment", "block_redraw_every", "multilabel_target", "fused_surrogate",
    "theta_dropout", "surrogate_lr", "surrogate_weight_decay", "block_size", "surrogate_hidden",
    "surrogate_dropout", "hidden", "head_dropout", "backbone", "pretrained", "freeze_backbone", "logger",
    "accelerator", "devices", "precision", "progress")


def test_a_saved_config_reads_its_added_options_as_its_run_used_them_and_refuses_others_missing(tmp_path):
    """config.yaml records every option, resolved; one upgrade (ADDED_OPTIONS) gives a file written
    before an option the value its run used; a file lacking another option is one line naming them."""
    import yaml

    from lbhash.data import load_data
    from lbhash.errors import InputError
    from lbhash.runs.run_files import ADDED_OPTIONS, load_run_config, save_run_config
    from lbhash.train import make_config, resolve_config
    from lbhash.train.config import FIELDS

    assert sorted(FIELDS) == sorted([*FIRST_OPTIONS, *ADDED_OPTIONS]), "a new option: add its old value to ADDED_OPTIONS"
    cfg = resolve_config(make_config({**FAST, "method": "dsdh", "neighbourhood_weight": 0.5}), load_data("digits"))
    save_run_config(tmp_path, cfg)
    path = tmp_path / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    assert list(saved) == [*FIELDS, "input_kind", "input_dim"] and load_run_config(tmp_path) == cfg
    path.write_text(yaml.safe_dump({k: v for k, v in saved.items() if k not in ADDED_OPTIONS}))
    old = load_run_config(tmp_path)
    assert old == cfg.replace(**ADDED_OPTIONS) and old.neighbourhood.neighbourhood_weight == 0.0  # as runs before the options
    path.write_text(yaml.safe_dump({k: v for k, v in saved.items() if k not in ("lr", "schedule", "csq_ties")}))
    with pytest.raises(InputError, match=rf"^{path}: lacks the options lr, schedule; a run's config.yaml records every "
                                         r"option \(add them with the values the run used\)$"):
        load_run_config(tmp_path)


def test_a_saved_dsdh_run_without_weighting_reads_the_weighting_it_trained_with(tmp_path):
    """DSDH runs saved before issue 70 put eta on the per-entry mean: their config lacks the
    constant, and reads as weighting=mean (resumed and encoded as they trained); new runs say paper."""
    import yaml

    from lbhash.data import load_data
    from lbhash.runs.run_files import load_run_config, save_run_config
    from lbhash.train import make_config, resolve_config

    cfg = resolve_config(make_config({**FAST, "method": "dsdh"}), load_data("digits"))
    assert cfg.hashing.method_options["weighting"] == "paper"
    save_run_config(tmp_path, cfg)
    path = tmp_path / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    saved["method_options"].pop("weighting")
    path.write_text(yaml.safe_dump(saved))
    old = load_run_config(tmp_path)
    assert old.hashing.method_options == {**cfg.hashing.method_options, "weighting": "mean"}
