"""Resuming a run (`lbhash train --resume`, `RunDirectory(out).resume()`): an unfinished run
continues where its last checkpoint left it (a torn log line, a kill before the first checkpoint,
stale temporaries), a finished run says there is nothing to do once its files verify against its
manifest, and `--resume --epochs N` trains a finished run further."""

import json
import shutil

import numpy as np
import pytest
import torch
import yaml

from helpers import FAST_TRAIN, Killed, cli, one_line_error, snapshot, stop_before_the_first_epoch
from lbhash.codes_file import load_codes_file
from lbhash.runs import RunDirectory
from lbhash.train import TrainConfig
from lbhash.runs.run_files import verify_finished_run

FAST = dict(data="digits", bits=16, hidden=[64], centers="hadamard", progress=False, eval_every=0)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


def log_of(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def weights(run):
    state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    return state["learner"], state["optimizers"], state["epoch"]


def assert_finished_at(run, epochs):
    """The run verifies against its manifest, and --resume has nothing left to do."""
    verify_finished_run(run)
    result = cli("train", "--out", run, "--resume")
    assert result.exit_code == 0, result.output
    assert f"{run}: already finished at epoch {epochs}; nothing to do" in result.output
    assert "mAP@all" in result.output  # the saved metrics, printed again


def test_finished_run_says_there_is_nothing_to_do(tmp_path, runs):
    run = runs.copy("csq", tmp_path / "run")
    before = (run / "manifest.json").read_bytes()
    assert_finished_at(run, 2)
    assert (run / "manifest.json").read_bytes() == before


def test_two_plus_two_epochs_equal_four_through_a_kill(tmp_path, runs, monkeypatch):
    # the bank's "csq" and "csq-4": lr 1e-3, a warm-up of 1 epoch, then x0.1 every 2 epochs
    straight, further = runs.path("csq-4"), runs.copy("csq", tmp_path / "further")
    with monkeypatch.context() as patch:  # killed once it is reopened, as it is about to train epoch 3
        stop_before_the_first_epoch(patch)
        assert isinstance(cli("train", "--out", further, "--resume", "--epochs", "4").exception, Killed)
    # killed while training further: no longer finished (no manifest, codes or metrics of the old
    # total), the new total recorded, so that a plain --resume finishes it
    assert not any((further / n).exists() for n in ("manifest.json", "codes.npz", "metrics.json"))
    assert yaml.safe_load((further / "config.yaml").read_text())["epochs"] == 4
    assert [r["epoch"] for r in log_of(further)] == [1, 2]
    result = cli("train", "--out", further, "--resume")
    assert result.exit_code == 0, result.output
    log = log_of(further)
    assert [r["epoch"] for r in log] == [1, 2, 3, 4]
    # the schedules continue by their rule: after a warm-up the steps count from its end
    assert [r["lr"] for r in log] == pytest.approx([1e-3, 1e-3, 1e-3, 1e-4], rel=1e-12)
    assert [r["lr"] for r in log] == [r["lr"] for r in log_of(straight)]
    metrics = json.loads((further / "metrics.json").read_text())
    assert (metrics["run"]["epochs"], metrics["run"]["epochs_trained"]) == (4, 4)
    assert_finished_at(further, 4)
    # the loop is deterministic on a CPU (every epoch seeded from (seed, epoch)): same weights,
    # same optimizer state, same codes
    (a, opt_a, ea), (b, opt_b, eb) = weights(straight), weights(further)
    assert ea == eb == 4 and a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
    torch.testing.assert_close(opt_a, opt_b, rtol=0, atol=0)
    ca, cb = load_codes_file(straight / "codes.npz"), load_codes_file(further / "codes.npz")
    np.testing.assert_array_equal(ca["db_codes"], cb["db_codes"])


# the third case's fast test is the one above, on the bank's runs of that schedule
@pytest.mark.parametrize("schedule, first, total, rates", [
    # a constant rate stays constant (checkpoints once stored epochs + 1 as its step)
    pytest.param(dict(lr_step=0), 1, 3, [1.0, 1.0, 1.0], marks=pytest.mark.slow),
    # a warm-up of 2 epochs rises linearly, (e + 1) / 2, then the step schedule holds
    pytest.param(dict(lr_step=0, warmup_epochs=2), 1, 3, [0.5, 1.0, 1.0], marks=pytest.mark.slow),
    # after a warm-up the steps count from its end: x0.1 every 2 epochs from epoch 2
    pytest.param(dict(lr_step=2, lr_gamma=0.1, warmup_epochs=1), 2, 4, [1.0, 1.0, 1.0, 0.1],
                 marks=pytest.mark.slow),
])
def test_schedules_continue_by_their_rule(tmp_path, schedule, first, total, rates):
    run = tmp_path / "run"
    RunDirectory(run).train(TrainConfig(**FAST, epochs=first, lr=1e-3, **schedule))
    RunDirectory(run).resume(epochs=total)
    assert [r["lr"] for r in log_of(run)] == pytest.approx([1e-3 * r for r in rates], rel=1e-12)


def test_refusals_leave_the_finished_run_as_it_was(tmp_path, runs, monkeypatch):
    from lbhash.train.loop import Trainer

    run = runs.copy("csq", tmp_path / "run")
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}

    def no_model(*args, **kwargs):
        raise AssertionError("a refused resume built a trainer: check the request first")
    monkeypatch.setattr(Trainer, "__init__", no_model)
    one_line_error(cli("train", "--out", run, "--resume", "--epochs", "2"), "--epochs 2", "trained 2 epoch",
                    "N > 2")
    one_line_error(cli("train", "--out", run, "--resume", "--epochs", "3", "--bits", "32"),
                    "saved config", "drop the other options")
    one_line_error(cli("train", "--out", run, "--resume", "--hidden="), "saved config", "drop the other options")
    one_line_error(cli("train", "--out", run, "--resume", "--epochs", "0"), "epochs must be a positive integer")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files
    assert_finished_at(run, 2)


@pytest.fixture(scope="module")
def cosine_run(tmp_path_factory):
    """(run, output): `lbhash train` of 2 epochs, cosine schedule, the test mAP every epoch (no
    validation share), R = 1497: digits' whole database, so mAP@all."""
    out = tmp_path_factory.mktemp("cosine") / "run"
    result = cli("train", *FAST_TRAIN[:-1], "--epochs", "2", "--schedule", "cosine", "--eval-every", "1",
                 "--topk", "1497", "--validation", "0", "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.output


def test_cosine_runs_are_not_trained_further(tmp_path, cosine_run):
    run = shutil.copytree(cosine_run[0], tmp_path / "run")
    one_line_error(cli("train", "--out", run, "--resume", "--epochs", "3"), "--epochs 3", "cosine",
                    "fixed by its 2 epochs")
    assert_finished_at(run, 2)


def test_closed_form_baselines_have_one_epoch_only(tmp_path, runs):
    run = runs.copy("itq", tmp_path / "run")
    one_line_error(cli("train", "--out", run, "--resume", "--epochs", "2"), "closed form", "epochs must be 1")
    assert_finished_at(run, 1)


def assert_lines_name_r(output, label):
    epoch_1 = next(line for line in output.splitlines() if line.startswith("csq epoch 1/2"))
    assert epoch_1.split(", ")[-1].startswith(f"mAP@{label} 0.")
    assert f"mAP@{label} (ties by index)" in output
    done = next(line for line in output.splitlines() if line.startswith("done: "))
    assert f", mAP@{label} 0." in done  # the done line names R as the table does
    assert sum(line.startswith("mAP@") for line in output.splitlines()) == 3
    assert all(line.startswith(f"mAP@{label} ") for line in output.splitlines() if line.startswith("mAP@"))


def test_training_lines_and_table_name_r_alike(cosine_run):
    assert_lines_name_r(cosine_run[1], "all")  # --topk 1497: all of digits' database


# the other ways of asking for R; map_label's own cases are in test_cli.py
@pytest.mark.slow
@pytest.mark.parametrize("topk, label", [("all", "all"), ("100", "100")])
def test_training_lines_and_table_name_r_alike_for_each_topk(tmp_path, topk, label):
    result = cli("train", *FAST_TRAIN[:-1], "--epochs", "2", "--eval-every", "1", "--topk", topk,
                 "--validation", "0", "--out", tmp_path / "run")  # no validation: the test mAP every epoch
    assert result.exit_code == 0, result.output
    assert_lines_name_r(result.output, label)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A finished CSQ run on digits of 4 epochs that stopped early, after epoch 2, and kept its best
    validation epoch (best.pt): validation mAP 1/epoch makes epoch 1 the best, and patience 1
    stops the run after epoch 2. Issue 19's tests below change copies of it."""
    from lbhash.train.loop import Selection

    update = Selection.update
    run = tmp_path_factory.mktemp("stopped") / "R"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Selection, "update", lambda self, epoch, val_map, model, is_writer:
                      update(self, epoch, 1.0 / epoch, model, is_writer))
        RunDirectory(run).train(TrainConfig(**{**FAST, "eval_every": 1}, epochs=4, validation=0.2, patience=1))
    assert (run / "best.pt").is_file()
    return run


def test_a_run_that_stopped_early_is_not_trained_further(tmp_path, stopped_run, monkeypatch):
    run = shutil.copytree(stopped_run, tmp_path / "R")
    assert [r["epoch"] for r in log_of(run)] == [1, 2]
    result = cli("train", "--out", run, "--resume")
    assert result.exit_code == 0 and f"{run}: already finished at epoch 2 (stopped early: patience 1); " \
                                      "nothing to do" in result.output
    from lbhash.train.loop import Trainer

    monkeypatch.setattr(Trainer, "__init__", lambda *a, **k: pytest.fail("the refusal built a trainer"))
    one_line_error(cli("train", "--out", run, "--resume", "--epochs", "6"), "--epochs 6",
                    "stopped early at epoch 2", "patience 1")
    verify_finished_run(run)


# --- an unfinished run continues from its last checkpoint -----------------------------------------

def test_a_resume_after_a_torn_log_line_equals_the_uninterrupted_run(tmp_path, caplog, runs):
    full, cut = runs.path("csq_D-3"), runs.copy("cut-at-2", tmp_path / "cut")  # killed after epoch 2 of 3
    with open(cut / "log.jsonl", "a") as fh:
        fh.write('{"epoch": 3, "lo')
    (cut / ".checkpoint.pt.424242.dead.tmp").write_bytes(b"")  # a killed writer's temporary
    with caplog.at_level("WARNING", logger="lbhash"):
        RunDirectory(cut).resume()
    assert any("log.jsonl" in r.getMessage() and "torn" in r.getMessage() for r in caplog.records)
    epochs = [json.loads(line)["epoch"] for line in (cut / "log.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]
    assert not list(cut.glob(".*.tmp"))
    # the stale temporary and the torn line aside, the resumed run is the uninterrupted one
    a, b = load_codes_file(full / "codes.npz"), load_codes_file(cut / "codes.npz")
    np.testing.assert_array_equal(a["db_codes"], b["db_codes"])
    np.testing.assert_array_equal(a["query_codes"], b["query_codes"])
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if k != "seconds"}
                       for x in (p / "log.jsonl").read_text().splitlines()]
    assert strip(full) == strip(cut)


def test_a_failure_before_the_first_checkpoint_starts_again_from_an_empty_log(tmp_path, runs, monkeypatch):
    cut = runs.copy("cut-at-1", tmp_path / "cut")
    (cut / "checkpoint.pt").unlink()  # as if killed between the log line and the checkpoint
    stop_before_the_first_epoch(monkeypatch)  # the resumed run, as it is about to train its epoch 1
    with pytest.raises(Killed):
        RunDirectory(cut).resume()
    assert (cut / "log.jsonl").read_text() == ""  # epoch 1's line is gone: the loop writes it again


@pytest.mark.slow  # the resume trains all 3 epochs again; the fast test above stops it before its first
def test_a_failure_before_the_first_checkpoint_does_not_duplicate_epochs(tmp_path, runs):
    cut = runs.copy("cut-at-1", tmp_path / "cut")
    (cut / "checkpoint.pt").unlink()  # as if killed between the log line and the checkpoint
    RunDirectory(cut).resume()
    epochs = [json.loads(line)["epoch"] for line in (cut / "log.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


# --- issue 19, 8: resuming a finished run verifies every file against its manifest ----------------

class Payload:
    def __reduce__(self):
        return (print, ("payload ran",))


def corrupt(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "zeroed":
        path.write_bytes(bytes(len(data)))
    elif how == "flipped":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 8]) + data[middle + 8:])
    elif how == "pickle":
        import torch

        torch.save({"learner": Payload()}, path)
    elif how == "python-tag":
        path.write_text("bits: !!python/object/apply:os.system ['echo payload ran']\n")


@pytest.mark.parametrize("name, how", [
    ("checkpoint.pt", "truncated"), ("checkpoint.pt", "zeroed"), ("checkpoint.pt", "flipped"),
    ("checkpoint.pt", "pickle"), ("best.pt", "flipped"), ("best.pt", "pickle"), ("config.yaml", "python-tag"),
    ("config.yaml", "truncated"), ("metrics.json", "zeroed"), ("codes.npz", "flipped"),
])
def test_resuming_a_changed_finished_run_is_refused(tmp_path, stopped_run, name, how):
    run = tmp_path / "R"
    shutil.copytree(stopped_run, run)
    corrupt(run / name, how)
    before = snapshot(run)
    result = cli("train", "--resume", "--out", run)
    one_line_error(result, name, "SHA-256")
    assert "payload ran" not in result.output and snapshot(run) == before


def test_resuming_an_intact_finished_run_reprints_its_metrics(tmp_path, stopped_run):
    run = tmp_path / "R"
    shutil.copytree(stopped_run, run)
    (run / "best.pt").unlink()
    one_line_error(cli("train", "--resume", "--out", run), "best.pt", "missing")
    shutil.copy(stopped_run / "best.pt", run / "best.pt")
    before = snapshot(run)
    result = cli("train", "--resume", "--out", run)
    assert result.exit_code == 0 and "mAP@all" in result.output and snapshot(run) == before
