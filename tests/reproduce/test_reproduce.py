"""The experiment runner: spec expansion, resumable grids, tables."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from lbhash.cli import main
from lbhash.reproduce.experiments import Context, GridSpec, configure
from lbhash.reproduce.runner import Cell, cell_state, config_hash
from run_bank import REPRODUCED

FAST = ["--set", "hidden=[32]", "--set", "centers=hadamard", "--set", "lr_step=0"]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_grid_expands_to_every_cell():
    spec = GridSpec(methods=("csq", "dch"), bits=(16, 32), seeds=(0, 1, 2))
    cells = spec.cells(Context(data="digits", out=None, overrides={"epochs": 3}))
    assert len(cells) == 2 * 2 * 2 * 3
    names = {c.name for c in cells}
    assert "csq_D-32bits-seed2" in names and "dch-16bits-seed0" in names
    cell = next(c for c in cells if c.name == "dch_D-16bits-seed1")
    # the paper's split (validation 0), whatever lbhash train's default
    assert cell.config == {"data": "digits", "method": "dch", "lbhash": True, "bits": 16, "seed": 1, "epochs": 3,
                           "validation": 0.0}
    # watching settings do not change a cell's identity; training settings do
    assert config_hash({**cell.config, "eval_every": 1}) == cell.config_hash
    assert config_hash({**cell.config, "epochs": 4}) != cell.config_hash
    selecting = {**cell.config, "validation": 0.1}  # eval_every then decides which epochs can be kept
    assert config_hash({**selecting, "eval_every": 1}) != config_hash(selecting)


def test_default_grid_is_the_papers():
    spec = configure("grid")
    assert spec.methods == ("hashnet", "dbdh", "dsdh", "dch", "greedyhash", "csq")
    assert (spec.bits, spec.seeds, spec.variants) == ((16, 32, 64), (0, 1, 2, 3, 4), (False, True))
    with pytest.raises(ValueError, match="experiment grid has no option"):
        configure("grid", kinds=("bch",))


def grid_command(out, epochs=2):
    return ["reproduce", "grid", "--data", "digits", "--methods", "csq", "--bits", "16", "--seeds", "0,1",
            "--epochs", str(epochs), "--out", str(out)] + FAST


@pytest.mark.slow  # a killed grid runner, about 25 s; make test-slow
def test_killed_grid_resumes_and_skips_finished_cells(tmp_path):
    out = tmp_path / "res"
    env = {**os.environ, "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "lbhash.cli"] + grid_command(out, epochs=30)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "runs" / "grid" / "csq-16bits-seed0" / "metrics.json"
    second_log = out / "runs" / "grid" / "csq-16bits-seed1" / "log.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (second_log.exists() and second_log.read_text().count("\n") >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists(), "the first cell should have finished before the kill"
    assert not (out / "grid.csv").exists()
    stamp = first.stat().st_mtime_ns
    done_epochs = second_log.read_text().count("\n")
    result = CliRunner().invoke(main, grid_command(out, epochs=30))
    assert result.exit_code == 0, result.output
    assert "1 finished, 3 to run" in result.output  # seed0 of csq; csq_D cells and csq seed1 remain
    assert first.stat().st_mtime_ns == stamp  # not retrained
    log = [json.loads(x) for x in second_log.read_text().splitlines()]
    assert [r["epoch"] for r in log] == list(range(1, 31))  # resumed, not restarted
    assert done_epochs >= 2
    table = rows(out / "grid.csv")
    assert sorted(r["run_id"] for r in table) == ["csq-16bits-seed0", "csq-16bits-seed1",
                                                   "csq_D-16bits-seed0", "csq_D-16bits-seed1"]


def test_a_directory_with_other_settings_is_refused(tmp_path, runs):
    out = runs.copy("reproduce-grid", tmp_path / "res")  # csq and csq_D of 2 epochs, seed 0
    again = ["reproduce", "grid", *REPRODUCED["grid"], "--out", str(out)]
    rerun = CliRunner().invoke(main, again)
    assert rerun.exit_code == 0 and "2 cells: 2 finished, 0 to run" in rerun.output, rerun.output
    result = CliRunner().invoke(main, again + ["--epochs", "3"])
    assert result.exit_code == 2 and "holds a run with other settings" in result.output


def test_runner_adopts_a_matching_run_made_by_hand(tmp_path, runs):
    run = runs.copy("csq", tmp_path / "csq-16bits-seed0")  # made by RunDirectory.train: no cell.json
    # the bank's recipe (tests/run_bank.py): CSQ of 2 epochs, one hidden layer of 64
    cell = Cell("csq-16bits-seed0", {"data": "digits", "method": "csq", "lbhash": False, "bits": 16, "seed": 0,
                                     "epochs": 2, "hidden": [64], "centers": "hadamard", "lr": 1e-3,
                                     "warmup_epochs": 1, "lr_step": 2, "lr_gamma": 0.1})
    other = Cell(cell.name, {**cell.config, "epochs": 3})
    with pytest.raises(ValueError, match="epochs=2"):
        cell_state(other, run)
    assert not (run / "cell.json").exists()
    assert cell_state(cell, run) == "finished"
    assert json.loads((run / "cell.json").read_text())["config_hash"] == cell.config_hash
    with pytest.raises(ValueError, match="other settings"):
        cell_state(other, run)


def copy_runs(source, out, experiment):
    """The finished runs of the bank's `reproduce EXPERIMENT` into out: a rerun there finds them."""
    shutil.copytree(source / "runs" / experiment, out / "runs" / experiment)


def test_tables_of_the_other_experiments(tmp_path, runs):
    # timing times every run again: its tables come from the bank's directory; centers and bound
    # find the bank's finished runs, and write their tables and meta.json records here
    out = runs.copy("reproduce-timing", tmp_path / "res")
    clash = CliRunner().invoke(main, ["reproduce", "centers", *REPRODUCED["centers"], "--set", "centers=hadamard",
                                      "--out", str(out)])
    assert clash.exit_code == 2 and "--set centers conflicts" in clash.output
    for experiment in ("centers", "bound"):
        copy_runs(runs.path(f"reproduce-{experiment}"), out, experiment)
        result = CliRunner().invoke(main, ["reproduce", experiment, *REPRODUCED[experiment], "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "finished, 0 to run" in result.output
    centers = rows(out / "centers.csv")
    assert [(r["kind"], r["bits"]) for r in centers] == [("hadamard", "16"), ("random", "16")]
    assert float(centers[0]["min_distance"]) == 8.0  # 10 rows of [H; -H] at 16 bits
    bound = rows(out / "bound.csv")
    assert [int(r["epoch"]) for r in bound] == [1, 2]
    # the bank's timing scripts its seconds (run_bank.SCRIPTED_SECONDS: 2.0, 2.5, 3.0 s after a 9 s
    # first epoch); digits' 1000 training items (no validation share) in batches of 64
    timing = rows(out / "timing.csv")
    assert [(r["variant"], float(r["seconds_per_epoch"]), float(r["ratio"]), int(r["steps_per_epoch"]))
            for r in timing] == [("bce", 2.0, 1.0, 16), ("cauchy", 2.5, 1.25, 16), ("ours", 3.0, 1.5, 16)]
    meta = json.loads((out / "meta.json").read_text())
    assert list(meta["experiments"]) == ["timing", "centers", "bound"] and "torch" in meta["software"]
    settings = {k: [e[s] for s in ("seeds", "epochs")] for k, e in meta["experiments"].items()}
    assert settings == {"centers": [[0], 2], "bound": [[0], 2], "timing": [[0], 2]}  # as the commands give them
    assert all(e["command"].startswith("lbhash ") for e in meta["experiments"].values())


@pytest.mark.slow  # three trainings of 2 epochs; make test scripts the seconds (run_bank.SCRIPTED_SECONDS)
def test_timing_measures_every_variants_epochs(tmp_path):
    result = CliRunner().invoke(main, ["reproduce", "timing", *REPRODUCED["timing"], "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    timing = rows(tmp_path / "timing.csv")
    assert [r["variant"] for r in timing] == ["bce", "cauchy", "ours"] and float(timing[0]["ratio"]) == 1.0
    seconds = [float(r["seconds_per_epoch"]) for r in timing]
    assert all(0 < s < 60 for s in seconds)
    assert [float(r["ratio"]) for r in timing] == pytest.approx([s / seconds[0] for s in seconds], rel=1e-12)
    assert {int(r["steps_per_epoch"]) for r in timing} == {16}
