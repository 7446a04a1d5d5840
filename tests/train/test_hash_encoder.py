"""The HashEncoder front door: fit and encode arrays, save and load run directories, and warn
about uint8 features (fit's eval_set metrics, named for what they measure, are read from the
watched in-memory fit of tests/train/test_train_core.py)."""

import copy
import re
import warnings

import numpy as np
import pytest
import torch
from scipy import sparse
from sklearn.base import clone

from helpers import Killed, held_out, stop_before_the_first_epoch
from lbhash import HashEncoder, InputError
from lbhash.codes import unpack
from lbhash.codes_file import load_codes_file
from lbhash.evaluate import mean_average_precision
from lbhash.runs.hash_encoder import NotFittedError

FAST = dict(hidden=[128], centers="hadamard", lr_step=0)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    raw = load_digits()
    x, y = raw.data.astype(np.float32), raw.target
    order = np.random.default_rng(0).permutation(len(x))
    train, test = order[:1400], order[1400:]
    return x[train], y[train], x[test], y[test]


@pytest.fixture(scope="module")
def fitted(digits, tmp_path_factory):
    x, y, _, _ = digits
    return HashEncoder(method="csq", bits=32, lbhash=True, epochs=12, seed=0, **FAST).fit(x, y)


def test_fit_beats_an_untrained_model_by_a_wide_margin(digits, fitted):
    from lbhash.train.builder import build_model

    x, y, xq, yq = digits
    trained = mean_average_precision(fitted.encode(xq), fitted.encode(x), yq, y, bits=32)
    torch.manual_seed(0)
    cfg = fitted.config_
    untrained = build_model(cfg.model, cfg.hashing.bits, cfg.input_kind, cfg.input_dim, (x.mean(0), x.std(0) + 1e-6))
    from lbhash.train.forward import encode
    from lbhash.data import ArrayDataset

    def codes(rows):
        return encode(untrained, ArrayDataset(rows, np.zeros((len(rows), 0), bool), None, "x"))

    baseline = mean_average_precision(codes(xq), codes(x), yq, y)
    assert trained > baseline + 0.3, (baseline, trained)
    assert fitted.bits_ == 32 and fitted.n_features_in_ == 64 and fitted.input_kind_ == "features"
    assert len(fitted.history_) == 12 and fitted.config_.objective.lbhash_mode == "replace"


def test_stored_integers_are_refused_after_a_float_fit(digits, fitted):
    """Fit on float features, then encode the raw uint8 rows: refused, not silently wrong."""
    _, _, xq, _ = digits
    assert fitted.input_form_.dtype == "float32" and fitted.input_form_.quantization is None
    with pytest.raises(ValueError, match="uint8 values, but the run was trained on float32 features"):
        fitted.encode(xq.astype(np.uint8))
    np.testing.assert_array_equal(fitted.encode(xq), fitted.encode(xq.astype(np.float64)))


def test_codes_are_packed_in_the_faiss_layout(digits, fitted):
    _, _, xq, _ = digits
    codes = fitted.encode(xq[:5])
    assert codes.dtype == np.uint8 and codes.shape == (5, 4)
    u = fitted.model_(torch.from_numpy(xq[:5])).detach().numpy()
    np.testing.assert_array_equal(unpack(codes, 32), np.where(u >= 0, 1, -1))


def test_save_then_load_gives_identical_codes(digits, fitted, tmp_path):
    _, _, xq, _ = digits
    path = fitted.save(tmp_path / "enc")
    assert (path / "config.yaml").is_file() and (path / "checkpoint.pt").is_file()
    again = HashEncoder.load(path)
    np.testing.assert_array_equal(again.encode(xq), fitted.encode(xq))
    assert again.get_params()["bits"] == 32 and again.config_ == fitted.config_
    with pytest.raises(InputError, match=r"already exists: save\(path, overwrite=True\) replaces"):
        fitted.save(path)
    (path / "stale").write_text("left by the old run")
    other = HashEncoder(method="hashnet", bits=16, epochs=1, **FAST).fit(*digits[:2])
    assert other.save(path, overwrite=True) == path  # replaced whole: the other run, nothing of the old
    assert not (path / "stale").exists() and HashEncoder.load(path).get_params()["bits"] == 16
    np.testing.assert_array_equal(HashEncoder.load(path).encode(xq), other.encode(xq))
    assert [p.name for p in tmp_path.iterdir()] == ["enc"]  # no temporary or replaced directory left
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="is not a run directory"):
        other.save(tmp_path / "plain", overwrite=True)


def test_fit_takes_the_eval_items_as_eval_set_only(digits):
    x, y, xq, yq = digits
    with pytest.raises(TypeError, match="unexpected keyword argument 'validation'"):
        HashEncoder(method="hashnet", bits=16, epochs=1, **FAST).fit(x, y, validation=(xq, yq))


def test_transform_gives_the_codes_for_a_pipeline(digits, fitted):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y, xq, _ = digits
    np.testing.assert_array_equal(fitted.transform(xq), fitted.encode(xq))
    signs = copy.copy(fitted).set_params(code_format="signs")  # the same fitted model
    assert signs.transform(xq).dtype == np.int8
    np.testing.assert_array_equal(signs.transform(xq), unpack(fitted.encode(xq), 32))
    pipe = make_pipeline(StandardScaler(), HashEncoder(method="itq", bits=16, code_format="signs"))
    codes = pipe.fit_transform(x, y)
    assert codes.shape == (len(x), 16) and set(np.unique(codes)) == {-1, 1}
    np.testing.assert_array_equal(pipe.transform(x[:50]), codes[:50])
    with pytest.raises(InputError, match="code_format must be one of packed, signs"):
        HashEncoder(method="itq", bits=16, code_format="bits").fit(x)


def test_fit_transform_is_fit_then_transform(all_digits):
    X, y = all_digits  # ITQ: a fit of milliseconds, through the same fit and transform as a deep method's
    codes = HashEncoder(method="itq", bits=16).fit_transform(X[:1300], y[:1300], eval_set=(X[1300:], y[1300:]))
    alone = HashEncoder(method="itq", bits=16).fit(X[:1300], y[:1300], eval_set=(X[1300:], y[1300:]))
    np.testing.assert_array_equal(codes, alone.transform(X[:1300]))  # the same parameters, fit alone
    assert codes.shape == (1300, 2) and codes.dtype == np.uint8


def test_load_reads_a_cli_run(runs):
    out = runs.path("csq")  # what `lbhash train --data digits ...` wrote
    from sklearn.datasets import load_digits

    x = load_digits().data.astype(np.float32)
    codes = load_codes_file(out / "codes.npz")
    enc = HashEncoder.load(out)
    np.testing.assert_array_equal(enc.encode(x[codes["query_ids"]]), codes["query_codes"])
    np.testing.assert_array_equal(enc.encode(x[codes["db_ids"]]), codes["db_codes"])


def test_not_fitted_error():
    enc = HashEncoder()
    with pytest.raises(NotFittedError, match="not fitted"):
        enc.encode(np.zeros((2, 3), np.float32))
    assert isinstance(NotFittedError("x"), InputError)


def test_bad_shapes_and_label_widths(digits, fitted):
    x, y, xq, yq = digits
    enc = HashEncoder(bits=16, epochs=1, **FAST)
    with pytest.raises(InputError, match="y must hold one label row per row of X"):
        enc.fit(x, y[:-1])
    with pytest.raises(InputError, match=r"X must be a numeric array \(n, d\)"):
        enc.fit(x.reshape(len(x), 8, 8), y)
    multi = np.eye(10, dtype=np.uint8)[y]
    with pytest.raises(InputError, match="y has 10 label columns but y_val has 8"):
        enc.fit(x, multi, eval_set=(xq, np.eye(8, dtype=np.uint8)[yq % 8]))
    with pytest.raises(InputError, match="X_val items have shape"):
        enc.fit(x, y, eval_set=(xq[:, :10], yq))
    with pytest.raises(InputError, match="X is a sparse matrix"):
        enc.fit(sparse.csr_matrix(x), y)
    with pytest.raises(InputError, match="X is a sparse matrix"):
        fitted.transform(sparse.csr_matrix(xq))
    with pytest.raises(InputError, match="X: 10 features per row, but the run was trained on 64"):
        fitted.encode(xq[:, :10])
    bad = xq.copy()
    bad[3, 2] = np.nan
    with pytest.raises(InputError, match="holds nan at row 3"):
        fitted.encode(bad)
    with pytest.raises(InputError, match="epochs must be a positive integer, got 0"):
        HashEncoder(epochs=0).fit(x, y)


def test_image_arrays_fit_encode_save_and_load(tmp_path):
    from sklearn.datasets import load_digits

    raw = load_digits()
    images = (raw.images[:300] * 15).astype(np.uint8)   # (n, 8, 8) grayscale
    enc = HashEncoder(method="csq", bits=16, epochs=1, backbone="resnet8", image_size=8, batch_size=64,
                      centers="hadamard", lr_step=0).fit(images, raw.target[:300])
    assert enc.input_kind_ == "images" and enc.n_features_in_ is None
    codes = enc.encode(images[:20])
    assert codes.shape == (20, 2)
    np.testing.assert_array_equal(HashEncoder.load(enc.save(tmp_path / "img")).encode(images[:20]), codes)
    with pytest.raises(InputError, match="must be uint8"):
        enc.encode(images[:5].astype(np.float32))


# the _D wrapper's front door: test_train_core.py's fits (CSQ_D); orthohash_D trains in test_method_orthohash.py
@pytest.mark.parametrize("lbhash", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_orthohash_through_the_front_door(digits, tmp_path, lbhash):
    x, y, xq, _ = digits
    enc = HashEncoder(method="orthohash", bits=16, lbhash=lbhash, epochs=2, seed=0, **FAST).fit(x, y)
    codes, real = enc.encode(xq), enc.embed(xq)
    assert codes.shape == (len(xq), 2) and real.shape == (len(xq), 16)
    assert np.array_equal(unpack(codes, 16), np.where(real >= 0, 1, -1))
    enc.save(tmp_path / "run")
    assert np.array_equal(HashEncoder.load(tmp_path / "run").encode(xq), codes)


# --- issue 19, 13 and 14: 2-D uint8 "features"; fit without an eval_set ----------------------------

SMALL = dict(bits=16, hidden=[64], centers="hadamard")


@pytest.fixture(scope="module")
def all_digits():
    from sklearn.datasets import load_digits

    raw = load_digits()
    return raw.data.astype(np.float32), raw.target


def fit_and_warnings(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = fit()
    return fitted, list(caught)


@pytest.fixture(scope="module")
def fit_warnings(all_digits):
    """{dtype: warnings}: fits on every digit as a 2-D uint8 and as a float32 array, no eval_set,
    each stopped as it is about to train (the warnings come before), and the warnings each gave."""
    X, y = all_digits
    caught = {}
    with pytest.MonkeyPatch.context() as patch:
        stop_before_the_first_epoch(patch)
        for dtype in (np.uint8, np.float32):
            fit = HashEncoder(epochs=1, **SMALL).fit
            caught[dtype] = fit_and_warnings(lambda: pytest.raises(Killed, fit, X.astype(dtype), y))[1]
    return caught


def test_2d_uint8_features_warn_and_float_features_do_not(fit_warnings):
    uint8 = [str(w.message) for w in fit_warnings[np.uint8] if issubclass(w.category, UserWarning)]
    assert any(re.search(r"2-D uint8 array \(1797, 64\).*raw values 0\.\.255.*astype", m) for m in uint8), uint8
    assert not [w for w in fit_warnings[np.float32] if "uint8" in str(w.message)]


def test_without_validation_metrics_hold_the_run_summary_only(digits, fitted):
    x, y, _, _ = digits
    m = fitted.metrics_  # fit without an eval_set
    assert set(m) == {"run"} and m["run"]["n_train"] == len(x) - held_out(y) and m["run"]["n_validation"] == held_out(y)


def test_set_params_refuses_unknown_names_as_scikit_learn_does():
    enc = HashEncoder(method="csq", bits=16)
    with pytest.raises(ValueError, match=r"invalid parameter 'nosuch' for HashEncoder; valid parameters: method, "):
        enc.set_params(nosuch=1)
    with pytest.raises(InputError, match="invalid parameter 'data'"):  # fit trains on its arrays
        enc.set_params(data="digits")
    assert enc.get_params()["bits"] == 16 and "nosuch" not in enc.get_params()
    assert clone(enc).get_params() == enc.get_params()  # scikit-learn's clone rebuilds it from its parameters
    assert enc.set_params(bits=32, lr=1e-4).get_params()["lr"] == 1e-4 and enc.bits == 32
    # values are checked by fit, never by __init__ or set_params (scikit-learn's rule)
    odd = HashEncoder(method=-1, bits="helloworld", lr=[1]).set_params(seed={}, hidden=3.0)
    with pytest.raises(InputError):
        odd.fit(np.zeros((4, 2), np.float32), np.array([0, 0, 1, 1]))
