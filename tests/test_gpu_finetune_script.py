"""studies/gpu_finetune.sh, the one script a lent GPU runs (issue 70 items 4 and 5), and the table
maker that reads what it brings back: its weights check before any cell, and (slow) a small run of
the whole script on the CPU whose records give the mean, spread and paired difference that the
table prints, recomputed here from the cells' own metrics."""

import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "studies" / "gpu_finetune.sh"
TABLE = REPO / "studies" / "gpu_finetune_table.py"
TARBALL = REPO.parent / "shared" / "data" / "cifar10-jpg.tar.gz"


def _env(**extra) -> dict[str, str]:
    env = dict(os.environ)
    # the script calls python3: the interpreter running the tests, with this checkout's src first
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.update(extra)
    return env


@pytest.mark.slow  # the study's script in a process of its own (3 s); make test-slow, in CI
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_missing_weights_stop_the_script_before_any_cell(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(SCRIPT), "unused.tar.gz", str(out), "60"], capture_output=True, text=True,
                            env=_env(BACKBONE="efficientnet_lite0", PRETRAINED=str(tmp_path / "absent.pt")),
                            timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{tmp_path / 'absent.pt'}: no such weights file" in (out / "gpu.log").read_text()
    assert not any((out / "cells").iterdir())  # no grid started


@pytest.mark.slow
@pytest.mark.skipif(not TARBALL.is_file(), reason=f"the CIFAR-10 JPEGs are not in {TARBALL.parent}")
def test_smoke_grid_records_and_paired_table(tmp_path):
    out = tmp_path / "out"
    env = _env(SMOKE_ACCELERATOR="cpu", SMOKE_DATA="?per-class=10", SMOKE_PROTOCOL="given",
               SMOKE_SETS="--set epochs=2", BACKBONE="smallcnn", PRETRAINED="", SIZE="32", SEEDS="0,1",
               METHODS="csq", WORKERS="2", RECORD_EVERY="5")
    result = subprocess.run(["bash", str(SCRIPT), str(TARBALL), str(out), "300"], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pairs: exit 0 (4 cells done)" in (out / "gpu.log").read_text()
    records = tmp_path / "records"
    with tarfile.open(out / "records.tar.gz") as tar:
        tar.extractall(records, filter="data")
    names = {p.parent.name for p in records.glob("pairs/runs/grid/*/metrics.json")}
    assert names == {f"csq{v}-64bits-seed{s}" for v in ("", "_D") for s in (0, 1)}
    assert not list(records.rglob("*.pt"))  # checkpoints stay behind
    maps = {name: 100 * json.loads((records / "pairs/runs/grid" / name / "metrics.json").read_text())["map"]
            for name in names}

    table = subprocess.run([sys.executable, str(TABLE), str(tmp_path / "table"), str(records)], capture_output=True,
                           text=True, timeout=120, check=True).stdout
    base = [maps[f"csq-64bits-seed{s}"] for s in (0, 1)]
    lifted = [maps[f"csq_D-64bits-seed{s}"] for s in (0, 1)]
    diff = [b - a for a, b in zip(base, lifted)]
    row = (f"| csq | fp32 | 0,1 | {statistics.mean(base):.1f} +- {statistics.stdev(base):.1f} | "
           f"{statistics.mean(lifted):.1f} +- {statistics.stdev(lifted):.1f} | "
           f"{statistics.mean(diff):+.1f} +- {statistics.stdev(diff):.1f} |")
    assert row in table
    assert f"| csq_D | {lifted[0]:.1f} |  |" in table  # seed 0: the smoke run trains in float32
    rows = list(csv.DictReader((tmp_path / "table" / "grid.csv").open()))
    assert sorted((r["variant"], r["seed"]) for r in rows) == [("csq", "0"), ("csq", "1"), ("csq_D", "0"),
                                                              ("csq_D", "1")]
