"""The one training driver (lbhash.train.fit): without a store it writes nothing, and it trains exactly
what it trains into a run directory (`RunDirectory.fit`, whose fitted model is the one a loaded run gives);
`DirectoryStore.write` writes an in-memory result as the files `lbhash train` writes; what training hands back: each epoch's
record to the trainer's `on_epoch_end(epoch, record)`, and the history (a closed-form fit's one
record too)."""

import os
import sys
import tempfile

import numpy as np
import pytest
import torch
from helpers import Killed, held_out, stop_before_the_first_epoch

from lbhash import HashEncoder, InputError
from lbhash.codes_file import load_codes_file
from lbhash.evaluate import lower_bound
from lbhash.train import TrainConfig
from lbhash.train.fit import fit
from lbhash.runs import RunDirectory
from lbhash.runs.encoder import load_run_model, read_fitted
from lbhash.runs.run_files import CHECKPOINT, CODES, LOG, DirectoryStore, read_log, read_metrics, verify_finished_run

FAST = dict(data="digits", bits=16, hidden=[32], centers="hadamard", lr_step=0, progress=False)
TIMES = ("seconds", "seconds_per_epoch", "encode_seconds")

_writes: list | None = None  # the audit hook below records writes while this is a list


def _audit(event: str, args: tuple) -> None:
    if _writes is None:
        return
    if event == "open":
        path, mode, flags = args
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or \
            (mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writing and isinstance(path, (str, bytes, os.PathLike)):
            _writes.append((event, str(path)))
    elif event in ("os.mkdir", "os.rename", "os.replace", "os.remove", "shutil.copyfile", "shutil.rmtree"):
        _writes.append((event, str(args[0])))


sys.addaudithook(_audit)  # hooks cannot be removed: it records only while _writes is a list


def _files(*roots) -> set:
    return {os.path.join(d, f) for root in roots for d, _, fs in os.walk(root) for f in fs} | \
        {d for root in roots for d, _, _ in os.walk(root)}


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _watched(call) -> list:
    global _writes
    _writes = []
    try:
        call()
        return [(event, path) for event, path in _writes if "__pycache__" not in path]  # Python's bytecode
    finally:
        _writes = None


# CSQ_D with a validation share that chooses the epoch: the fits below
PARAMS = dict(method="csq", bits=16, lbhash=True, epochs=2, hidden=[32], validation=0.1, select="best-val",
              eval_every=1)


@pytest.fixture(scope="module")
def in_memory_fit(tmp_path_factory):
    """What HashEncoder.fit writes, watched in a home, temporary and working folder of its own:
    (the first _D fit's writes up to its first epoch, the second fit's writes, the folders' files before and after it,
    that second fit, on the first 1200 digits with the other 597 as its eval_set)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    home, temp, work = (tmp_path_factory.mktemp(name) for name in ("home", "tmp", "work"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("LBHASH_CACHE_DIR", str(home / "cache"))
        patch.setattr(tempfile, "tempdir", str(temp))
        patch.chdir(work)
        # the training stack's imports may write their packages' own caches (Lightning once wrote
        # matplotlib's config folder); import them first so that what is watched is the fit's writes
        import lightning_fabric  # noqa: F401
        (home / "cache").mkdir()
        # the first _D fit of a machine computes its class centers once, as it builds its
        # objective: watched up to its first epoch, the whole second fit after it
        with pytest.MonkeyPatch.context() as stop:
            stop_before_the_first_epoch(stop)
            first = _watched(lambda: pytest.raises(Killed, HashEncoder(**PARAMS).fit, X[:1200], y[:1200]))
        before = _files(home, temp, work)
        fitted = HashEncoder(**PARAMS)
        second = _watched(lambda: fitted.fit(X[:1200], y[:1200], eval_set=(X[1200:], y[1200:])))
        after = _files(home, temp, work)
    return dict(home=home, first=first, second=second, before=before, after=after, fitted=fitted)


def test_hash_encoder_fit_writes_nothing(in_memory_fit):
    first, fitted = in_memory_fit["first"], in_memory_fit["fitted"]
    # the first _D fit's writes (before its first epoch) go into lbhash's cache only
    assert first and all(path.startswith(str(in_memory_fit["home"] / "cache" / "centers")) for _, path in first), first
    assert in_memory_fit["second"] == [] and in_memory_fit["after"] == in_memory_fit["before"]
    assert fitted.run_dir_ is None and 0 < fitted.metrics_["map"] <= 1 and len(fitted.history_) == 2


def test_eval_set_arrays_give_validation_metrics(in_memory_fit, tmp_path):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    enc, xt, yt, xv, yv = in_memory_fit["fitted"], X[:1200], y[:1200], X[1200:], y[1200:]
    m = enc.metrics_  # named for what they measure: the eval_set items searched among the training items
    assert "n_query" not in m and "n_db" not in m
    assert m["n_validation"] == len(xv) == m["run"]["n_validation"] and m["n_train"] == len(xt)
    assert m["run"]["n_held_out"] == held_out(yt)  # the share of xt that chose the epoch
    assert m["run"]["protocol"] == "validation" and 0 < m["map"] <= 1
    expected = lower_bound(enc.encode(xv), yv, 99.9, bits=16)  # the held-out codes, encoded again
    assert m["lower_bound"] == {"codes": "validation", "percentile": 99.9, "min_inter": expected.min_inter,
                                "max_intra": expected.max_intra, "ratio": expected.ratio}
    assert expected.max_intra > 0  # held out: not sitting on the centers
    again = HashEncoder.load(enc.save(tmp_path / "run"))  # the same fitted attributes, read back from the run
    assert again.metrics_ == m and again.history_ == enc.history_ and again.config_ == enc.config_
    assert again.input_form_ == enc.input_form_
    np.testing.assert_array_equal(again.encode(xv), enc.encode(xv))


@pytest.fixture(scope="module")
def run_of_a_config(tmp_path_factory):
    """(cfg, run directory, RunDirectory.fit's result, what the trainer's on_epoch_end was given): DSDH_D
    of 3 epochs whose validation share chooses the epoch (a classifier: its codes file holds
    scores as well)."""
    from lbhash.train.loop import Trainer

    cfg = TrainConfig(**FAST, method="dsdh", lbhash=True, epochs=3, validation=0.1, select="best-val",
                      eval_every=1)
    run_dir, seen, init = tmp_path_factory.mktemp("core") / "run", [], Trainer.__init__

    def watched(self, exp, store=None, on_epoch_end=None, **run_files):
        def at_epoch_end(epoch, record):
            seen.append((epoch, record))
            on_epoch_end(epoch, record)
        init(self, exp, store, at_epoch_end, **run_files)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "__init__", watched)
        result = RunDirectory(run_dir).fit(cfg)
    return cfg, run_dir, result, seen


def test_on_epoch_end_gets_each_record_as_the_log_holds_it(run_of_a_config):
    _, run_dir, result, seen = run_of_a_config
    assert [epoch for epoch, _ in seen] == [1, 2, 3]
    assert [record for _, record in seen] == result.fitted.history == read_log(run_dir / LOG)
    assert {"val_map", "best_val_map"} <= set(result.fitted.history[1]["eval"])


def test_a_closed_form_fit_is_recorded_as_the_loop_records_an_epoch(tmp_path):
    result = RunDirectory(tmp_path / "run").fit(TrainConfig(data="digits", method="pca", bits=16, progress=False))
    assert result.fitted.history == read_log(tmp_path / "run" / LOG)
    assert [r["epoch"] for r in result.fitted.history] == [1] and "loss" in result.fitted.history[0]


@pytest.fixture(scope="module")
def core_fit(run_of_a_config):
    """The in-memory fit of run_of_a_config's cfg."""
    return fit(run_of_a_config[0])


def test_the_core_trains_what_a_run_directory_trains(run_of_a_config, core_fit):
    cfg, run_dir, run, _ = run_of_a_config
    trained = core_fit
    assert _without_times(trained.fitted.history) == _without_times(run.fitted.history)
    assert _without_times(trained.metrics) == _without_times(run.metrics)
    assert trained.fitted.config == run.fitted.config and trained.fitted.input_form == run.fitted.input_form
    ours, theirs = trained.fitted.model.state_dict(), run.fitted.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    disk = torch.load(run_dir / CHECKPOINT, map_location="cpu", weights_only=True)
    assert trained.checkpoint["learner"].keys() == disk["learner"].keys()
    assert all(torch.equal(trained.checkpoint["learner"][k], disk["learner"][k]) for k in disk["learner"])
    assert trained.checkpoint["epoch"] == disk["epoch"] == 3 and trained.checkpoint["selection"] == disk["selection"]
    assert trained.best["epoch"] == disk["selection"]["best_epoch"]


def test_fit_returns_the_model_a_loaded_run_gives(run_of_a_config):
    _, run_dir, result, _ = run_of_a_config
    fitted, model_and_config = result.fitted, load_run_model(run_dir)
    assert fitted.config == model_and_config[1] and not fitted.model.training
    assert all(param.grad is None for param in fitted.model.parameters())
    loaded = model_and_config[0].state_dict()
    for name, value in fitted.model.state_dict().items():
        assert value.device.type == "cpu" and torch.equal(value, loaded[name]), name
    assert fitted.history == read_log(run_dir / LOG) and len(fitted.history) == 3
    assert result.metrics == read_metrics(run_dir)
    assert fitted.input_form == read_fitted(run_dir).input_form
    codes = load_codes_file(run_dir / CODES)
    np.testing.assert_array_equal(result.codes["all"]["query_codes"], codes["query_codes"])
    assert result.checkpoint is None and result.best is None  # on the store's disk, not kept in memory
    again = RunDirectory(run_dir).resume()  # finished: nothing trained, its metrics only
    assert again == result.metrics


def test_write_gives_the_run_directory_of_the_fit(tmp_path, core_fit):
    trained = core_fit
    out = tmp_path / "saved"
    out.mkdir()
    DirectoryStore.write(out, trained)
    verify_finished_run(out)
    assert read_metrics(out) == trained.metrics
    loaded = read_fitted(out)
    assert loaded.history == trained.fitted.history and loaded.config == trained.fitted.config
    model, _ = load_run_model(out)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(5, 64)).astype(np.float32))
    assert torch.equal(model(x), trained.fitted.model(x))
    codes = load_codes_file(out / CODES)
    assert "query_scores" in codes and codes["bits"] == 16


def test_an_in_memory_fit_refuses_what_needs_a_run_directory():
    with pytest.raises(InputError, match="tensorboard writes its event files into a run directory"):
        fit(TrainConfig(**FAST, epochs=1, logger="tensorboard"))
    with pytest.raises(InputError, match="devices=2: an in-memory fit trains in one process"):
        fit(TrainConfig(**FAST, epochs=1, devices=2))


def test_a_fit_asked_for_a_run_directory_trains_into_it(tmp_path, monkeypatch):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    stopped = stop_before_the_first_epoch(monkeypatch)  # a run directory's trainer, as it is about to train
    with pytest.raises(Killed):
        HashEncoder(**PARAMS).fit(X[:1200], y[:1200], eval_set=(X[1200:], y[1200:]), run_dir=tmp_path / "run")
    assert stopped[0].store is not None and stopped[0].store.run_dir == tmp_path / "run"
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"config.yaml", "split.npz", "input.json", "data.json"}
    # what the split stores: the arrays' own 1200 training items (less the share that chooses the epoch)
    # and the eval_set's 597 as queries searched among them
    split = np.load(tmp_path / "run" / "split.npz")
    assert len(split["train"]) + len(split["validation"]) == 1200 and sorted(split["query"]) == list(range(1200, 1797))


# the whole fit into a run directory against the same fit in memory: make test-slow; make test's
# equality of the two is the core's (test_the_core_trains_what_a_run_directory_trains, above)
@pytest.mark.slow
def test_a_fit_into_a_run_directory_equals_the_fit_in_memory(tmp_path, in_memory_fit):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    on_disk = HashEncoder(**PARAMS).fit(X[:1200], y[:1200], eval_set=(X[1200:], y[1200:]), run_dir=tmp_path / "run")
    in_memory = in_memory_fit["fitted"]  # the same fit, in memory
    assert on_disk.run_dir_ == tmp_path / "run" and (tmp_path / "run" / "manifest.json").is_file()
    assert _without_times(on_disk.metrics_) == _without_times(in_memory.metrics_)
    np.testing.assert_array_equal(on_disk.encode(X[1200:]), in_memory.encode(X[1200:]))
    copy = on_disk.save(tmp_path / "copy")  # a copy of its directory
    assert HashEncoder.load(copy).metrics_ == on_disk.metrics_
