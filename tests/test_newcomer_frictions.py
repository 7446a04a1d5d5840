"""Issue 19's newcomer frictions: uint8 features, the names of fit's validation metrics, a
line on what a run loaded (and --quiet, epoch lines in logs), and training on part of a file's
own train split (protocol given:T)."""

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_digits

from lbhash import HashEncoder
from lbhash.cli import main
from lbhash.data import make_split
from lbhash.errors import InputError
from lbhash.evaluate import lower_bound

FAST = dict(bits=16, hidden=[64], centers="hadamard")
DIGITS_LINE = ("data digits: features, 1797 items, 10 classes, 64 features (used as stored); "
               "split digits: 1000 train, 300 query, 1497 database")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def digits():
    raw = load_digits()
    return raw.data.astype(np.float32), raw.target


# --- 13: 2-D uint8 "features" ----------------------------------------------------------------------

def test_2d_uint8_features_warn_and_float_features_do_not(digits):
    X, y = digits
    with pytest.warns(UserWarning, match=r"2-D uint8 array \(1797, 64\).*raw values 0\.\.255.*astype"):
        HashEncoder(epochs=1, **FAST).fit(X.astype(np.uint8), y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        HashEncoder(epochs=1, **FAST).fit(X.astype(np.uint8).astype(np.float32), y)
    assert not [w for w in caught if "uint8" in str(w.message)]


# --- 14: fit(..., eval_set=...) names its metrics for what they measure ----------------------------

def test_validation_metrics_are_named_for_the_validation_items(digits):
    X, y = digits
    Xt, yt, Xv, yv = X[:1300], y[:1300], X[1300:], y[1300:]
    enc = HashEncoder(epochs=2, **FAST).fit(Xt, yt, eval_set=(Xv, yv))
    m = enc.metrics_
    assert "n_query" not in m and "n_db" not in m
    assert m["n_validation"] == len(Xv) == m["run"]["n_validation"] and m["n_train"] == len(Xt)
    assert m["run"]["protocol"] == "validation"
    expected = lower_bound(enc.encode(Xv), yv, 99.9, bits=16)  # the held-out codes, encoded again
    assert m["lower_bound"] == {"codes": "validation", "percentile": 99.9, "min_inter": expected.min_inter,
                                "max_intra": expected.max_intra, "ratio": expected.ratio}
    assert expected.max_intra > 0  # held out: not sitting on the centers
    assert HashEncoder.load(enc.run_dir_).metrics_ == m


def test_without_validation_metrics_hold_the_run_summary_only(digits):
    X, y = digits
    m = HashEncoder(epochs=1, **FAST).fit(X, y).metrics_
    assert set(m) == {"run"} and m["run"]["n_train"] == len(X) and m["run"]["n_validation"] == 0


# --- 15: what a run loaded, --quiet, one line per epoch in a log -----------------------------------

def run_args(out, *extra):
    return ["train", "--data", "digits", "--bits", 16, "--hidden", 64, "--centers", "hadamard", "--epochs", 3,
            "--eval-every", 2, "--out", out, *extra]


def test_a_run_says_what_it_loaded_and_prints_one_line_per_epoch_off_a_terminal(tmp_path):
    result = cli(*run_args(tmp_path / "run"))  # progress on (the default); CliRunner is no terminal
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "profile recommended: differs from the paper in epochs 3 (paper 100), lr_step 0 (paper 10)"
    assert lines[1] == DIGITS_LINE and "\r" not in result.output
    epochs = [line for line in lines if line.startswith("csq epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["csq epoch 1/3", "csq epoch 2/3", "csq epoch 3/3"]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert epochs[1] == (f"csq epoch 2/3: loss {log[1]['loss']['total']:.4f}, {log[1]['seconds']:.1f} s, "
                         f"mAP@all {log[1]['eval']['map']:.4f}")
    summary = json.loads((tmp_path / "run" / "data.json").read_text())
    assert summary == {"data": "digits", "name": "digits", "kind": "features", "items": 1797, "classes": 10,
                       "multi_label": False, "feature_dim": 64, "dequantized": False,
                       "split": {"protocol": "digits", "seed": 0, "train": 1000, "query": 300, "database": 1497,
                                 "validation": 0}}
    resumed = cli("train", "--resume", "--out", tmp_path / "run")
    assert resumed.exit_code == 0 and DIGITS_LINE not in resumed.output  # finished: nothing loaded


def test_quiet_prints_only_the_results(tmp_path):
    result = cli(*run_args(tmp_path / "run", "--quiet"))
    assert result.exit_code == 0, result.output
    assert "data digits" not in result.output and "epoch" not in result.output
    assert result.output.splitlines()[0].startswith("codes ") and "mAP@all" in result.output
    assert (tmp_path / "run" / "data.json").is_file()
    both = cli(*run_args(tmp_path / "other", "--quiet", "--progress"))
    assert both.exit_code == 2 and "--quiet" in both.output and not (tmp_path / "other").exists()


def test_the_data_line_says_when_features_were_dequantized(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "q.npz", x=rng.integers(0, 255, (120, 8), dtype=np.uint8), labels=np.arange(120) % 3,
             is_test=np.arange(120) >= 100, scale=np.float32(0.02), zero_point=np.float32(128))
    result = cli("train", "--data", f"features:{tmp_path / 'q.npz'}", "--protocol", "given", "--bits", 8,
                 "--hidden", 16, "--epochs", 1, "--out", tmp_path / "run", "--no-progress")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1] == ("data features:" + str(tmp_path / "q.npz") + ": features, 120 items, "
                                             "3 classes, 8 features (dequantized); split given: 100 train, "
                                             "20 query, 100 database")
    assert json.loads((tmp_path / "run" / "data.json").read_text())["dequantized"] is True


# --- 16: given:T, a subset of a file's own train part -----------------------------------------------

class Items:
    """The fields make_split reads: 10 train items and 4 test items, two classes."""

    name = "items"
    labels = np.eye(2, dtype=bool)[np.arange(14) % 2]
    is_test = np.arange(14) >= 10


def test_given_t_trains_on_a_seeded_sample_of_the_train_part():
    full = make_split(Items, "given", seed=0)
    part = make_split(Items, "given:4", seed=0)
    assert len(part.train) == 4 and set(part.train) <= set(range(10)) and list(part.train) == sorted(part.train)
    assert list(part.query) == [10, 11, 12, 13] and sorted(part.database) == list(range(10))
    assert np.array_equal(part.query, full.query) and np.array_equal(part.database, full.database)
    assert np.array_equal(part.train, make_split(Items, "given:4", seed=0).train)
    assert any(not np.array_equal(part.train, make_split(Items, "given:4", seed=s).train) for s in range(1, 6))
    with pytest.raises(InputError, match="'given:11' trains on 11 items.*has 10"):
        make_split(Items, "given:11", seed=0)
    with pytest.raises(InputError, match="at least 1"):
        make_split(Items, "given:0", seed=0)


def test_an_image_array_file_trains_on_part_of_its_train_split(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "imgs.npz", x_train=rng.integers(0, 255, (60, 8, 8), dtype=np.uint8),
             y_train=np.arange(60) % 3, x_test=rng.integers(0, 255, (12, 8, 8), dtype=np.uint8),
             y_test=np.arange(12) % 3)
    result = cli("train", "--data", f"image-array:{tmp_path / 'imgs.npz'}", "--protocol", "given:15", "--bits", 8,
                 "--image-size", 8, "--batch-size", 16, "--epochs", 1, "--out", tmp_path / "run", "--no-progress")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1] == ("data image-array:" + str(tmp_path / "imgs.npz") + ": images, 72 items, "
                                             "3 classes, 8x8 images -> 8x8 model input; split given:15: 15 train, "
                                             "12 query, 60 database")
    codes = np.load(tmp_path / "run" / "codes.npz")
    assert sorted(codes["query_ids"]) == list(range(60, 72)) and sorted(codes["db_ids"]) == list(range(60))
