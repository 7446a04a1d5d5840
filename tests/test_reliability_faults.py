"""Fault injection: a held lock, corrupted and malicious checkpoints, a full disk, torn log
lines, killed writes, diverging training."""

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
from click.testing import CliRunner

from lbhash._io import atomic_path
from lbhash.cli import main
from lbhash.train import TrainConfig, train

FAST = dict(data="digits", bits=16, hidden=[64], centers="hadamard", progress=False, lbhash=True)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


class Killed(Exception):
    pass


def unfinished_run(path, epochs=3, kill_at=1):
    """A run stopped after epoch `kill_at` (its checkpoint written), as a kill leaves it."""
    def die(epoch):
        if epoch == kill_at:
            raise Killed
    with pytest.raises(Killed):
        train(TrainConfig(**FAST, epochs=epochs), path, on_epoch_end=die)
    return path


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


def test_a_held_lock_stops_a_second_process_at_once(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        one_line_error(cli("train", "--data", "digits", "--out", out, "--no-progress"), "in use")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


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


def test_flipped_bytes_in_a_checkpoint_tensor_are_refused(tmp_path):
    finished = tmp_path / "finished"
    train(TrainConfig(**FAST, epochs=2), finished)
    flip_tensor_bytes(finished / "checkpoint.pt")
    one_line_error(cli("encode", finished, "--out", tmp_path / "e.npz"), "checkpoint.pt", "SHA-256")
    from lbhash import HashEncoder

    with pytest.raises(ValueError, match="checkpoint.pt.*SHA-256"):
        HashEncoder.load(finished)
    cut = unfinished_run(tmp_path / "cut")  # no manifest yet: the zip's own CRCs catch it
    flip_tensor_bytes(cut / "checkpoint.pt")
    one_line_error(cli("train", "--resume", "--out", cut), "checkpoint.pt", "corrupt")
    assert not (tmp_path / "e.npz").exists()


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > evil-ran",))


@pytest.mark.parametrize("kind", ["malicious", "truncated", "empty"])
def test_bad_checkpoints_on_resume(tmp_path, kind, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cut = unfinished_run(tmp_path / "cut")
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


def test_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(TrainConfig(**FAST, epochs=1), run)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "codes.npz"))

    monkeypatch.setattr(np, "savez", no_space)
    before = sorted(p.name for p in tmp_path.iterdir())
    one_line_error(cli("encode", run, "--out", tmp_path / "codes.npz"), "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_torn_last_log_line_is_dropped_on_resume(tmp_path, caplog):
    cut = unfinished_run(tmp_path / "cut", epochs=3, kill_at=2)
    with open(cut / "log.jsonl", "a") as fh:
        fh.write('{"epoch": 3, "lo')
    with caplog.at_level("WARNING", logger="lbhash"):
        train(None, cut, resume=True)
    assert any("log.jsonl" in r.getMessage() and "torn" in r.getMessage() for r in caplog.records)
    epochs = [json.loads(line)["epoch"] for line in (cut / "log.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_a_failure_before_the_first_checkpoint_does_not_duplicate_epochs(tmp_path):
    cut = unfinished_run(tmp_path / "cut", epochs=3, kill_at=1)
    (cut / "checkpoint.pt").unlink()  # as if killed between the log line and the checkpoint
    train(None, cut, resume=True)
    epochs = [json.loads(line)["epoch"] for line in (cut / "log.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_killed_writes_leave_no_temporaries_behind_for_long(tmp_path):
    target = tmp_path / "x.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".x.json.{dead.pid}.abcd1234.tmp"
    stale.write_bytes(b"")
    live = tmp_path / f".x.json.{os.getpid()}.live.tmp"  # a write in progress elsewhere is kept
    live.write_bytes(b"")
    with atomic_path(target) as tmp:
        tmp.write_text("{}")
    assert not stale.exists() and live.exists() and target.read_text() == "{}"


def test_stale_temporaries_in_a_run_directory_are_removed_on_resume(tmp_path):
    cut = unfinished_run(tmp_path / "cut")
    (cut / ".checkpoint.pt.424242.dead.tmp").write_bytes(b"")
    train(None, cut, resume=True)
    assert not list(cut.glob(".*.tmp"))


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


@pytest.fixture
def one_class_features(tmp_path):
    path = tmp_path / "oneclass.npz"
    rng = np.random.default_rng(0)
    np.savez(path, features=rng.normal(size=(300, 8)).astype(np.float32), labels=np.zeros(300, dtype=np.int64))
    return path


@pytest.mark.parametrize("method, part", [("lsh", "database"), ("pca", "database"), ("linear", "train"),
                                          ("csq", "train")])
def test_data_with_one_class_is_refused_before_the_run_writes(tmp_path, one_class_features, method, part):
    out = tmp_path / "run"
    result = cli("train", "--method", method, "--data", f"features:{one_class_features}", "--protocol",
                 "random:200,50", "--bits", "8", "--epochs", "1", "--no-progress", "--out", out)
    one_line_error(result, "oneclass.npz", f"the {part} part of split random:200,50",
                   "1 class(es)", "at least 2")
    assert not out.exists()


def test_one_class_without_evaluation_trains(tmp_path, one_class_features):
    out = tmp_path / "run"
    result = cli("train", "--method", "lsh", "--data", f"features:{one_class_features}", "--protocol",
                 "all-train", "--bits", "8", "--no-progress", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "manifest.json").is_file()


def test_a_run_that_fails_after_its_first_write_is_marked_failed(tmp_path, monkeypatch):
    import lbhash.train.run as run_module
    from lbhash.errors import InputError

    def refused(trainer):
        raise InputError("codes refused")

    monkeypatch.setattr(run_module, "write_codes", refused)
    out = tmp_path / "run"
    with pytest.raises(InputError, match="codes refused"):
        train(TrainConfig(**FAST, epochs=1), out)
    assert json.loads((out / "status.json").read_text()) == {"state": "failed", "error": "codes refused"}
    assert not (out / "manifest.json").exists()
    one_line_error(cli("train", "--resume", "--out", out), "failed run", "codes refused")


def test_a_transient_failure_leaves_a_run_that_resume_continues(tmp_path, monkeypatch):
    import lbhash.train.run as run_module

    real = run_module.write_codes

    def full_disk(trainer):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_module, "write_codes", full_disk)
    out = tmp_path / "run"
    with pytest.raises(OSError):
        train(TrainConfig(**FAST, epochs=1), out)
    assert not (out / "status.json").exists()
    monkeypatch.setattr(run_module, "write_codes", real)
    metrics = train(None, out, resume=True)
    assert (out / "manifest.json").is_file() and metrics["map"] > 0
