"""The thread count is the user's (OMP_NUM_THREADS) or lbhash's rule, never an import's side
effect: building BCH or Reed-Solomon centers cold (galois JIT-compiles numba ufuncs, whose
threading layer sets OpenMP's count) leaves torch's count as it was, so one seed trains alike
on a machine's first run and on every later one."""

import os
import sys

import pytest
import torch
from helpers import run_bounded

CENTERS = """
import sys, torch
from lbhash.centers import generate_centers
before = torch.get_num_threads()
generate_centers(64, 10, kind="bch", seed=5)  # Reed-Solomon's builder has the same guard
print("threads", before, torch.get_num_threads())
"""
SCRIPT = CENTERS + """
from lbhash.train import TrainConfig, train
train(TrainConfig(data="digits", bits=32, hidden=[64], centers="bch", lbhash=True, epochs=1, progress=False,
                  eval_every=0), sys.argv[1])
"""


@pytest.mark.slow  # a fresh process that imports galois and JIT-compiles it, about 8 s; make test-slow, in CI
def test_cold_centers_keep_the_thread_count(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    result = run_bounded([sys.executable, "-c", CENTERS], env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["threads 1 1"]


@pytest.mark.slow
def test_cold_and_warm_first_runs_of_a_seed_are_identical(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for name in ("cold", "warm"):  # the first builds the centers (galois), the second reads them
        result = run_bounded([sys.executable, "-c", SCRIPT, str(tmp_path / name)], env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "threads 1 1" in result.stdout.splitlines(), result.stdout
        runs.append(torch.load(tmp_path / name / "checkpoint.pt", map_location="cpu", weights_only=True))
    cold, warm = (r["learner"] for r in runs)
    assert cold.keys() == warm.keys()
    for key in cold:
        torch.testing.assert_close(cold[key], warm[key], rtol=0, atol=0)
