import functools

import numpy as np
import pytest
import scipy.io
from helpers import raises

from lbhash.data import (
    DATA_KINDS,
    ArrayDataset,
    DataKind,
    count_unlabelled,
    load_data,
    load_digits,
    load_features,
    parse_data_spec,
    register_data_kind,
)
from lbhash.labels import SparseClassIdsWarning

FEAT = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], dtype=np.float32)
IDS = np.array([0, 2, 1, 2])
ONEHOT = np.eye(3, dtype=bool)[IDS]


def npz(tmp_path, name="d.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


# --- .npz files, keys and labels ---------------------------------------------------------

def test_npz_default_keys(tmp_path):
    path = npz(tmp_path, feat=FEAT.astype(np.float64), labels=IDS, is_test=np.array([0, 0, 1, 1], bool))
    ds = load_features(path)
    assert ds.x.dtype == np.float32 and ds.x.shape == (4, 2)
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, ONEHOT)
    np.testing.assert_array_equal(ds.is_test, [False, False, True, True])
    assert ds.name == "features:d.npz" and ds.num_classes == 3 and len(ds) == 4
    assert not ds.multi_label and ds.class_names is None


@pytest.mark.parametrize("xk,yk", [("features", "label"), ("x", "y"), ("X", "Y"), ("data", "targets")])
def test_npz_other_default_keys(tmp_path, xk, yk):
    ds = load_features(npz(tmp_path, **{xk: FEAT, yk: IDS}))
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, ONEHOT)
    assert ds.is_test is None


def test_default_keys_are_tried_in_order(tmp_path):
    # "feat" before "data", "labels" before "y"
    ds = load_features(npz(tmp_path, data=FEAT * 0, feat=FEAT, y=IDS * 0, labels=IDS))
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, ONEHOT)


def test_explicit_keys(tmp_path):
    path = npz(tmp_path, emb=FEAT, cls=IDS, test_flag=np.array([1, 0, 0, 1], np.uint8), feat=FEAT * 0)
    ds = load_features(path, x_key="emb", y_key="cls", split_key="test_flag")
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, ONEHOT)
    np.testing.assert_array_equal(ds.is_test, [True, False, False, True])


def test_multihot_labels_and_class_names(tmp_path):
    y = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 0], [1, 1, 1]], dtype=np.uint8)
    ds = load_features(npz(tmp_path, x=FEAT, y=y, label_names=np.array(["a", "b", "c"])))
    np.testing.assert_array_equal(ds.labels, y.astype(bool))
    assert ds.multi_label and ds.class_names == ["a", "b", "c"]
    assert count_unlabelled(ds) == 1 and count_unlabelled(y) == 1 and count_unlabelled(IDS) == 0


def test_class_names_widen_the_class_axis(tmp_path):
    ds = load_features(npz(tmp_path, x=FEAT, y=IDS, class_names=np.array(list("abcde"))))
    assert ds.num_classes == 5 and ds.labels[:, 3:].sum() == 0


def test_single_column_labels_are_class_ids(tmp_path):
    ds = load_features(npz(tmp_path, x=FEAT, y=IDS[:, None].astype(np.float64)))
    np.testing.assert_array_equal(ds.labels, ONEHOT)
    # an (n, 1) column of 0/1 is ambiguous: read as ids, so two classes
    ds = load_features(npz(tmp_path, "b.npz", x=FEAT, y=np.array([[0], [1], [1], [0]])))
    np.testing.assert_array_equal(ds.labels, [[1, 0], [0, 1], [0, 1], [1, 0]])


def test_presplit_file(tmp_path):
    y_tr, y_te = np.array([[1, 0], [0, 1], [1, 1]], np.uint8), np.array([[0, 1]], np.uint8)
    path = npz(tmp_path, x_train=FEAT[:3], x_test=FEAT[3:], y_train=y_tr, y_test=y_te,
               label_names=np.array(["p", "q"]))
    ds = load_features(path)
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, [[1, 0], [0, 1], [1, 1], [0, 1]])
    np.testing.assert_array_equal(ds.is_test, [False, False, False, True])
    assert ds.class_names == ["p", "q"]


def test_presplit_class_ids_share_one_axis(tmp_path):
    ds = load_features(npz(tmp_path, x_train=FEAT[:2], x_test=FEAT[2:], y_train=[0, 1], y_test=[2, 1]))
    np.testing.assert_array_equal(ds.labels, np.eye(3, dtype=bool)[[0, 1, 2, 1]])
    # sparse ids (no class 2) are remapped to a dense axis, still one for train and test
    with pytest.warns(SparseClassIdsWarning, match=r"class ids are not dense \(largest 3, 3 used\)"):
        ds = load_features(npz(tmp_path, x_train=FEAT[:2], x_test=FEAT[2:], y_train=[0, 1], y_test=[3, 1]))
    np.testing.assert_array_equal(ds.labels, np.eye(3, dtype=bool)[[0, 1, 2, 1]])


def test_labels_from_another_file(tmp_path):
    np.save(tmp_path / "f.npy", FEAT)
    np.save(tmp_path / "l.npy", IDS)
    ds = load_features(tmp_path / "f.npy", labels_path=tmp_path / "l.npy")
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, ONEHOT)
    assert ds.is_test is None
    lab = npz(tmp_path, "lab.npz", cls=IDS[::-1])
    ds = load_features(npz(tmp_path, feat=FEAT, labels=IDS), labels_path=lab, y_key="cls")
    np.testing.assert_array_equal(ds.labels, ONEHOT[::-1])  # labels_path wins over the file's


# --- MATLAB ---------------------------------------------------------------------------------

def test_mat_file(tmp_path):
    path = tmp_path / "m.mat"
    # savemat stores 1-D arrays as (1, n) rows and booleans as uint8
    scipy.io.savemat(path, {"feat": FEAT.astype(np.float64), "labels": IDS.astype(np.float64),
                            "is_test": np.array([True, False, True, False]),
                            "label_names": np.array(["ab", "c", "def"])})
    ds = load_features(path)
    np.testing.assert_array_equal(ds.x, FEAT)
    np.testing.assert_array_equal(ds.labels, ONEHOT)
    np.testing.assert_array_equal(ds.is_test, [True, False, True, False])
    assert ds.class_names == ["ab", "c", "def"]


def test_mat_column_labels_and_quantised(tmp_path):
    path = tmp_path / "m.mat"
    scipy.io.savemat(path, {"X": np.array([[10, 12], [11, 10]], np.uint8), "Y": np.array([[3], [1]]),
                            "scale": 0.25, "zero_point": 10})
    with pytest.warns(SparseClassIdsWarning, match="m.mat: labels 'Y': class ids are not dense"):
        ds = load_features(path)
    np.testing.assert_array_equal(ds.x, [[0.0, 0.5], [0.25, 0.0]])
    np.testing.assert_array_equal(ds.labels.nonzero()[1], [1, 0])  # ids 3 and 1, remapped densely


def test_mat_v73_is_refused(tmp_path):
    path = tmp_path / "big.mat"
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, HDF5 schema 1.00 .".ljust(124) + b"\x00\x02IM"
    path.write_bytes(header + bytes(512))
    with raises("big.mat", "v7.3", "HDF5"):
        load_features(path)


def test_unreadable_mat(tmp_path):
    path = tmp_path / "junk.mat"
    path.write_bytes(b"not a mat file at all" * 10)
    with raises("junk.mat", "not a readable .mat file"):
        load_features(path)


# --- dequantisation -------------------------------------------------------------------------

def quantised(tmp_path, **extra):
    return npz(tmp_path, feat=np.array([[3, 5], [0, 255]], np.uint8), labels=[0, 1], **extra)


def test_dequantise_from_file(tmp_path):
    ds = load_features(quantised(tmp_path, scale=np.float32(0.5), zero_point=np.int32(3)))
    assert ds.x.dtype == np.float32
    np.testing.assert_array_equal(ds.x, [[0.0, 1.0], [-1.5, 126.0]])  # (q - 3) * 0.5


def test_dequantise_off_and_overrides(tmp_path):
    path = quantised(tmp_path, scale=np.float32(0.5), zero_point=np.int32(3))
    np.testing.assert_array_equal(load_features(path, dequantize="off").x, [[3, 5], [0, 255]])
    np.testing.assert_array_equal(load_features(path, scale=2).x, [[0, 4], [-6, 504]])  # file's zero point
    np.testing.assert_array_equal(load_features(path, zero_point=0).x, [[1.5, 2.5], [0, 127.5]])


def test_dequantise_needs_both_keys_in_auto(tmp_path):
    path = quantised(tmp_path, scale=np.float32(0.5))
    np.testing.assert_array_equal(load_features(path).x, [[3, 5], [0, 255]])
    np.testing.assert_array_equal(load_features(path, dequantize="on").x, [[1.5, 2.5], [0, 127.5]])
    with raises("d.npz", "no 'scale' key"):
        load_features(npz(tmp_path, feat=FEAT, labels=IDS), dequantize="on")


def test_dequantise_bad_arguments(tmp_path):
    path = quantised(tmp_path)
    with raises("dequantize", "'sometimes'"):
        load_features(path, dequantize="sometimes")
    with raises("dequantize='off'"):
        load_features(path, scale=0.5, dequantize="off")
    with raises("d.npz", "scale", "0.0"):
        load_features(path, scale=0.0)
    with raises("d.npz", "'scale'", "single number"):
        load_features(quantised(tmp_path, scale=np.ones(2), zero_point=0))


# --- errors ---------------------------------------------------------------------------------

def test_missing_and_unsupported_files(tmp_path):
    with raises("nothere.npz", "no such file"):
        load_features(tmp_path / "nothere.npz")
    (tmp_path / "f.csv").write_text("1,2\n")
    with raises("f.csv", "'.csv'", ".npz"):
        load_features(tmp_path / "f.csv")


def test_unknown_and_missing_keys(tmp_path):
    path = npz(tmp_path, emb=FEAT, cls=IDS)
    with raises("d.npz", "features key 'feat'", "keys: emb, cls"):
        load_features(path, x_key="feat")
    with raises("d.npz", "no features", "keys: emb, cls"):
        load_features(path)
    with raises("d.npz", "no labels", "keys: emb, cls"):
        load_features(path, x_key="emb")
    with raises("d.npz", "split key 'is_test'"):
        load_features(path, x_key="emb", y_key="cls", split_key="is_test")


def test_bad_shapes(tmp_path):
    with raises("d.npz", "'feat'", "2-D", "(4,)"):
        load_features(npz(tmp_path, feat=np.arange(4.0), labels=IDS))
    with raises("d.npz", "2-D", "(4, 2, 1)"):
        load_features(npz(tmp_path, feat=FEAT[:, :, None], labels=IDS))
    with raises("d.npz", "'labels'", "3 rows", "features have 4"):
        load_features(npz(tmp_path, feat=FEAT, labels=IDS[:3]))
    with raises("d.npz", "'is_test'", "(4,)", "(3,)"):
        load_features(npz(tmp_path, feat=FEAT, labels=IDS, is_test=np.zeros(3, bool)))
    with raises("d.npz", "'is_test'", "0/1"):
        load_features(npz(tmp_path, feat=FEAT, labels=IDS, is_test=np.array([0, 2, 0, 1])))


def test_non_finite_features(tmp_path):
    bad = FEAT.copy()
    bad[2, 1] = np.nan
    with raises("d.npz", "NaN or inf", "row 2"):
        load_features(npz(tmp_path, feat=bad, labels=IDS))
    big = FEAT.astype(np.float64)
    big[3, 0] = 1e300  # beyond float32: inf after conversion
    with raises("d.npz", "row 3"):
        load_features(npz(tmp_path, feat=big, labels=IDS))


def test_bad_labels(tmp_path):
    with raises("d.npz", "'labels'", "0/1", "2", "row 1"):
        load_features(npz(tmp_path, feat=FEAT, labels=np.array([[1, 0], [2, 0], [0, 1], [1, 1]])))
    with raises("d.npz", "labels 'Y'", "non-negative", "-1"):
        load_features(npz(tmp_path, feat=FEAT, Y=np.array([0, -1, 1, 2])))
    with raises("d.npz", "3 class names", "2 label columns"):
        load_features(npz(tmp_path, feat=FEAT, labels=np.eye(2)[[0, 1, 0, 1]],
                          label_names=np.array(["a", "b", "c"])))


def test_npy_errors(tmp_path):
    np.save(tmp_path / "f.npy", FEAT)
    with raises("f.npy", "labels_path"):
        load_features(tmp_path / "f.npy")
    with raises("f.npy", "x_key='feat'"):
        load_features(tmp_path / "f.npy", x_key="feat", labels_path=tmp_path / "f.npy")
    with raises("missing.npy", "no such file"):
        load_features(tmp_path / "f.npy", labels_path=tmp_path / "missing.npy")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with raises("obj.npy", "cannot read safely"):
        load_features(tmp_path / "obj.npy", labels_path=tmp_path / "f.npy")


def test_npz_with_objects_is_not_unpickled(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, feat=FEAT, labels=np.array([object()] * 4, dtype=object))
    with raises("obj.npz", "cannot read safely"):
        load_features(path)


def test_presplit_errors(tmp_path):
    path = npz(tmp_path, x_train=FEAT[:2], x_test=FEAT[2:], y_train=[0, 1])
    with raises("d.npz", "y_test missing"):
        load_features(path)
    with raises("d.npz", "y_key='y'"):
        load_features(path, y_key="y")


def test_array_dataset_checks_and_subset():
    with pytest.raises(ValueError, match="toy: 3 label rows for 4 items"):
        ArrayDataset(FEAT, IDS[:3], None, "toy")
    ds = ArrayDataset(FEAT, IDS, np.array([0, 1, 0, 1]), "toy", ["a", "b", "c"])
    sub = ds.subset([3, 0])
    np.testing.assert_array_equal(sub.x, FEAT[[3, 0]])
    np.testing.assert_array_equal(sub.labels, ONEHOT[[3, 0]])
    np.testing.assert_array_equal(sub.is_test, [True, False])
    assert sub.num_classes == 3 and sub.class_names == ["a", "b", "c"]


# --- digits and data specs ------------------------------------------------------------------

def test_digits():
    ds = load_digits()
    assert ds.x.shape == (1797, 64) and ds.x.dtype == np.float32
    assert ds.num_classes == 10 and not ds.multi_label and ds.is_test is None
    assert ds.x.min() == 0 and ds.x.max() == 16 and ds.name == "digits"
    assert load_data("digits").x.shape == (1797, 64)


def test_features_spec_with_options(tmp_path):
    np.save(tmp_path / "l.npy", np.array([1, 0]))
    path = quantised(tmp_path, scale=np.float32(0.5), zero_point=np.int32(3), emb=np.full((2, 3), 7))
    ds = load_data(f"features:{path}?scale=0.25&zero_point=1")
    np.testing.assert_array_equal(ds.x, [[0.5, 1.0], [-0.25, 63.5]])
    ds = load_data(f"features:{path}?x=emb&labels={tmp_path / 'l.npy'}&dequantize=off")
    np.testing.assert_array_equal(ds.x, np.full((2, 3), 7))
    np.testing.assert_array_equal(ds.labels, [[0, 1], [1, 0]])
    spec = parse_data_spec(f"features:{path}?x=feat&split=is_test&labels=a.npy")
    assert spec.kind == "features" and spec.path == str(path)
    assert spec.options == {"x": "feat", "split": "is_test", "labels": "a.npy"}


@pytest.mark.parametrize("spec,parts", [
    ("cifar:x.npz", ["'cifar:x.npz'", "unknown kind 'cifar'", "digits, features"]),
    ("x.npz", ["'x.npz'", "unknown kind"]),
    ("digits:foo", ["'digits:foo'", "takes no path"]),
    ("features:", ["'features:'", "needs a path"]),
    ("features:a.npz?bits=3", ["'features:a.npz?bits=3'", "unknown option 'bits'"]),
    ("features:a.npz?x", ["'features:a.npz?x'", "malformed option 'x'"]),
    ("features:a.npz?x=", ["malformed option 'x='"]),
    ("features:a.npz?", ["malformed option ''"]),
    ("features:a.npz?x=a&x=b", ["option 'x' given twice"]),
    ("features:a.npz?scale=big", ["'features:a.npz?scale=big'", "scale must be a number", "'big'"]),
    ("features:a.npz?dequantize=maybe", ["dequantize must be one of", "'maybe'"]),
    ("", ["non-empty"]),
])
def test_bad_specs(spec, parts):
    with raises(*parts):
        load_data(spec)


def test_registry_takes_new_kinds(monkeypatch):
    toy = ArrayDataset(FEAT, IDS, None, "toy")
    monkeypatch.setitem(DATA_KINDS, "toy", DataKind("toy", lambda spec: toy, takes_path=True, options=("n",)))
    assert load_data("toy:anything?n=3") is toy
    with raises("already registered"):
        register_data_kind(DataKind("features", lambda spec: toy, takes_path=True))


# --- the real files -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _load_cached(path: str):
    return load_features(path)


def real(shared_data, name):
    path = shared_data / name
    if not path.is_file():
        pytest.skip(f"{name} not found in {shared_data}")
    return path


def test_real_cifar10_features(shared_data):
    path = real(shared_data, "cifar10-mobilenetv1-features.npz")
    ds = _load_cached(str(path))
    assert ds.x.shape == (60000, 1024) and ds.x.dtype == np.float32
    assert ds.num_classes == 10 and not ds.multi_label and count_unlabelled(ds) == 0
    assert ds.is_test.sum() == 10000 and not ds.is_test[:50000].any()
    np.testing.assert_array_equal(ds.labels.sum(axis=0), [6000] * 10)
    with np.load(path, allow_pickle=False) as raw:
        scale, feat = float(raw["scale"]), raw["feat"]
        rows = [0, 1, 31337, 59999]
        np.testing.assert_allclose(ds.x[rows], feat[rows].astype(np.float64) * scale, rtol=1e-6)
        np.testing.assert_array_equal(ds.labels[rows].argmax(axis=1), raw["labels"][rows])
    assert abs(scale - 0.023528) < 1e-6


def test_real_scene_multilabel(shared_data):
    ds = load_data(f"features:{real(shared_data, 'scene-multilabel.npz')}")
    assert ds.x.shape == (1211 + 1196, 294) and ds.labels.shape == (2407, 6)
    assert ds.multi_label and ds.is_test.sum() == 1196 and not ds.is_test[:1211].any()
    assert ds.class_names == ["Beach", "Sunset", "FallFoliage", "Field", "Mountain", "Urban"]
    assert 1.0 < ds.labels.sum() / len(ds) < 1.2  # about 1.07 labels per image


def test_scale_on_float_features_is_refused_not_applied_twice(tmp_path):
    rows = np.array([[0.25, -1.5], [2.0, 0.0]], np.float32)  # feature values already
    np.save(tmp_path / "f.npy", rows)
    with raises("f.npy", "holds float features", "dequantize=on forces it"):
        load_features(tmp_path / "f.npy", scale=0.02, labels_required=False)
    np.testing.assert_array_equal(load_features(tmp_path / "f.npy", labels_required=False).x, rows)
    forced = load_features(tmp_path / "f.npy", scale=2.0, dequantize="on", labels_required=False)
    np.testing.assert_array_equal(forced.x, rows * 2)  # asked for explicitly
