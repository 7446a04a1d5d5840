"""What training hands back: each epoch's record to `on_epoch_end(epoch, record)` and the history
(train_run's fitted model, the one a loaded run gives: test_train_core.py)."""

import pytest

from lbhash.train import TrainConfig
from lbhash.train.builder import build_experiment
from lbhash.train.loop import Trainer
from lbhash.train.run import train_run
from lbhash.train.run_store import RunStore
from lbhash.train.rundir import LOG, read_log

FAST = dict(data="digits", bits=16, hidden=[32], centers="hadamard", lr_step=0, progress=False)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


def test_on_epoch_end_gets_each_record_as_the_log_holds_it(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    seen = []
    exp = build_experiment(TrainConfig(**FAST, epochs=3, validation=0.1, eval_every=2))
    trainer = Trainer(exp, RunStore(run_dir), lambda epoch, record: seen.append((epoch, record)))
    history = trainer.fit()
    assert [epoch for epoch, _ in seen] == [1, 2, 3]
    assert [record for _, record in seen] == history == read_log(run_dir / LOG)
    assert "eval" not in history[0] and {"val_map", "best_val_map"} <= set(history[1]["eval"])


def test_a_closed_form_fit_is_recorded_as_the_loop_records_an_epoch(tmp_path):
    run_dir = tmp_path / "run"
    result = train_run(TrainConfig(data="digits", method="pca", bits=16, progress=False), run_dir)
    assert result.fitted.history == read_log(run_dir / LOG)
    assert [r["epoch"] for r in result.fitted.history] == [1] and "loss" in result.fitted.history[0]
