"""The thread count is the user's (OMP_NUM_THREADS) or lbhash's rule, never an import's side
effect: building BCH and Reed-Solomon centers cold (numpy only; galois, whose numba threading
layer set OpenMP's count, is gone) leaves every thread pool's count as it was, so one seed
trains alike on a machine's first run and on every later one, whose centers come from the cache."""

import os
import sys

import pytest
import torch
from helpers import run_bounded

CENTERS = """
import sys, torch
from threadpoolctl import threadpool_info
from lbhash.centers import generate_centers
before = torch.get_num_threads(), sorted((p["filepath"], p["num_threads"]) for p in threadpool_info())
generate_centers(64, 10, kind="bch", seed=5)
generate_centers(64, 10, kind="reed_solomon", seed=5)
after = torch.get_num_threads(), sorted((p["filepath"], p["num_threads"]) for p in threadpool_info())
print("threads", before[0], after[0], before[1] == after[1])
"""
SCRIPT = CENTERS + """
from lbhash.runs import RunDirectory
from lbhash.train import TrainConfig
RunDirectory(sys.argv[1]).train(TrainConfig(data="digits", bits=32, hidden=[64], centers="bch", lbhash=True,
                                            epochs=1, progress=False, eval_every=0))
"""


def test_cold_centers_keep_the_thread_counts(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    result = run_bounded([sys.executable, "-c", CENTERS], env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["threads 1 1 True"]


@pytest.mark.slow  # two trainings in fresh processes; make test-slow, in CI
def test_cold_and_warm_first_runs_of_a_seed_are_identical(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for name in ("cold", "warm"):  # the first builds the centers, the second reads them from the cache
        result = run_bounded([sys.executable, "-c", SCRIPT, str(tmp_path / name)], env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "threads 1 1 True" in result.stdout.splitlines(), result.stdout
        runs.append(torch.load(tmp_path / name / "checkpoint.pt", map_location="cpu", weights_only=True))
    assert any((tmp_path / "cache" / "centers").glob("bch-b32-c10-*.npz"))  # the warm run read the cold run's set
    cold, warm = (r["learner"] for r in runs)
    assert cold.keys() == warm.keys()
    for key in cold:
        torch.testing.assert_close(cold[key], warm[key], rtol=0, atol=0)
