"""What training hands back: each epoch's record to `on_epoch_end(epoch, record)`, the history,
and `train_run`'s fitted model, which is the model a loaded run gives."""

import numpy as np
import pytest
import torch

from lbhash.codes_file import load_codes_file
from lbhash.train import TrainConfig
from lbhash.train.builder import build_experiment
from lbhash.train.loop import Trainer
from lbhash.train.run import train_run
from lbhash.train.run_store import RunStore
from lbhash.train.rundir import CODES, LOG, load_run_model, read_fitted, read_log, read_metrics

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


def test_train_run_returns_the_model_a_loaded_run_gives(tmp_path):
    run_dir = tmp_path / "run"
    result = train_run(TrainConfig(**FAST, epochs=2), run_dir)
    fitted, model_and_config = result.fitted, load_run_model(run_dir)
    assert fitted.config == model_and_config[1] and not fitted.model.training
    assert all(param.grad is None for param in fitted.model.parameters())
    loaded = model_and_config[0].state_dict()
    for name, value in fitted.model.state_dict().items():
        assert value.device.type == "cpu" and torch.equal(value, loaded[name]), name
    assert fitted.history == read_log(run_dir / LOG) and len(fitted.history) == 2
    assert result.metrics == read_metrics(run_dir)
    assert fitted.input_form == read_fitted(run_dir).input_form
    codes = load_codes_file(run_dir / CODES)
    np.testing.assert_array_equal(result.query_codes["query_codes"], codes["query_codes"])
    again = train_run(None, run_dir, resume=True)  # finished: nothing trained, its metrics only
    assert again.fitted is None and again.metrics == result.metrics


def test_a_closed_form_fit_is_recorded_as_the_loop_records_an_epoch(tmp_path):
    run_dir = tmp_path / "run"
    result = train_run(TrainConfig(data="digits", method="pca", bits=16, progress=False), run_dir)
    assert result.fitted.history == read_log(run_dir / LOG)
    assert [r["epoch"] for r in result.fitted.history] == [1] and "loss" in result.fitted.history[0]
