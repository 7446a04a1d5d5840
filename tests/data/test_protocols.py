import numpy as np
import pytest

from lbhash.data import (
    PARAMETRIC_PROTOCOLS,
    PROTOCOLS,
    ArrayDataset,
    Split,
    load_digits,
    load_split,
    make_split,
    parse_protocol,
    save_split,
)
from helpers import cli, one_line_error, raises
from lbhash.errors import InputError
from lbhash.labels import SparseClassIdsWarning, as_multihot

COUNTS = np.array([20, 25, 30, 22, 40])


def toy(counts=COUNTS, is_test=None, names=None, seed=0):
    ids = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(counts)), counts))
    return ArrayDataset(np.zeros((len(ids), 2), np.float32), ids, is_test, "toy", names)


def class_ids(ds):
    return ds.labels.argmax(axis=1)


def assert_sorted_int64(split):
    for part in (split.train, split.query):
        assert part.dtype == np.int64 and (np.diff(part) > 0).all()
    # the database is a seeded permutation (ties are broken by database position)
    db = split.database
    assert db.dtype == np.int64 and len(np.unique(db)) == len(db)
    if len(db) > 10:
        assert (np.diff(db) < 0).any()


def test_protocol_names():
    assert set(PROTOCOLS) == {"cifar10", "cifar10-1", "cifar10-2", "digits", "given", "lists", "all-train"}
    assert "random:T,Q" in PARAMETRIC_PROTOCOLS
    spec = parse_protocol("per-class:7,3,+train")
    assert (spec.kind, spec.train, spec.query, spec.include_train, spec.topk) == ("per-class", 7, 3, True, None)
    assert parse_protocol("cifar10").topk == 54000 and parse_protocol("digits").topk is None


def test_per_class_counts_and_disjointness():
    ds = toy()
    s = make_split(ds, "per-class:5,3", seed=1)
    ids = class_ids(ds)
    np.testing.assert_array_equal(np.bincount(ids[s.train]), [5] * 5)
    np.testing.assert_array_equal(np.bincount(ids[s.query]), [3] * 5)
    np.testing.assert_array_equal(np.bincount(ids[s.database]), COUNTS - 8)
    all_parts = np.concatenate([s.train, s.query, s.database])
    np.testing.assert_array_equal(np.sort(all_parts), np.arange(len(ds)))  # disjoint and complete
    assert_sorted_int64(s)
    assert (s.protocol, s.seed, s.topk, s.num_items) == ("per-class:5,3", 1, None, len(ds))


def test_per_class_with_train_in_database():
    ds = toy()
    s = make_split(ds, "per-class:5,3,+train", seed=1)
    np.testing.assert_array_equal(np.sort(s.database), np.setdiff1d(np.arange(len(ds)), s.query))
    assert np.isin(s.train, s.database).all() and len(s.train) == 25
    # the same draw as without +train: only the database differs
    plain = make_split(ds, "per-class:5,3", seed=1)
    np.testing.assert_array_equal(s.train, plain.train)
    np.testing.assert_array_equal(s.query, plain.query)


def test_seeds():
    ds = toy()
    a, b, c = (make_split(ds, "per-class:5,3", seed) for seed in (4, 4, 5))
    for part in ("train", "query", "database"):
        np.testing.assert_array_equal(getattr(a, part), getattr(b, part))
    assert not np.array_equal(a.query, c.query)
    r1, r2 = make_split(ds, "random:10,5", 4), make_split(ds, "random:10,5", 5)
    assert not np.array_equal(r1.query, r2.query)
    np.testing.assert_array_equal(r1.train, make_split(ds, "random:10,5", 4).train)


def test_per_class_too_few_items():
    ds = toy(counts=[20, 20, 7], names=["a", "b", "c"])
    with raises("per-class:5,3", "class 2 ('c')", "has 7 items", "needs at least 9", "+ 1 database"):
        make_split(ds, "per-class:5,3", 0)
    make_split(ds, "per-class:4,2", 0)  # 4 + 2 + 1 database item fit in 7
    with raises("class 2 ('c')", "has 7 items", "needs at least 8 (5 train + 3 query)"):
        make_split(ds, "per-class:5,3,+train", 0)
    onehot = np.eye(4, dtype=bool)[np.repeat([0, 1, 3], 20)]  # class 2 (a label column) is empty
    empty = ArrayDataset(np.zeros((60, 1)), onehot, None, "gappy")
    with raises("class 2 of gappy", "has 0 items"):
        make_split(empty, "per-class:1,1", 0)
    with pytest.warns(SparseClassIdsWarning, match="sparse ids: labels: class ids are not dense"):
        ids = ArrayDataset(np.zeros((60, 1)), np.repeat([0, 1, 3], 20), None, "sparse ids")  # remapped densely
    assert ids.num_classes == 3 and len(make_split(ids, "per-class:1,1", 0).query) == 3


def test_per_class_refuses_multi_label_and_unlabelled():
    y = np.zeros((30, 3), bool)
    y[np.arange(30), np.arange(30) % 3] = True
    y[4, 0] = True  # row 4 is class 1 and now also class 0
    with raises("per-class:2,2", "single-label", "1 items of ml have several labels", "random:T,Q", "given"):
        make_split(ArrayDataset(np.zeros((30, 1)), y, None, "ml"), "per-class:2,2", 0)
    y[4] = False
    with raises("no label", "row 4", "random:T,Q"):
        make_split(ArrayDataset(np.zeros((30, 1)), y, None, "ml"), "digits", 0)


def test_random_protocol_multi_label():
    rng = np.random.default_rng(0)
    y = rng.random((200, 4)) < 0.4
    ds = ArrayDataset(np.zeros((200, 1)), y, None, "ml")
    s = make_split(ds, "random:50,30", seed=3)
    assert (len(s.train), len(s.query), len(s.database)) == (50, 30, 170)
    np.testing.assert_array_equal(np.union1d(s.query, s.database), np.arange(200))
    assert not np.isin(s.query, s.database).any() and np.isin(s.train, s.database).all()
    assert_sorted_int64(s)
    assert s.topk is None
    with raises("random:150,60", "at least 210", "ml has 200"):
        make_split(ds, "random:150,60", 0)


def test_given_protocol():
    is_test = np.zeros(COUNTS.sum(), bool)
    is_test[::4] = True
    ds = toy(is_test=is_test)
    for name, topk in (("given", None), ("cifar10-2", None)):  # DeepHash-pytorch: topK = -1
        s = make_split(ds, name, 9)
        np.testing.assert_array_equal(s.query, np.flatnonzero(is_test))
        np.testing.assert_array_equal(s.train, np.flatnonzero(~is_test))
        np.testing.assert_array_equal(np.sort(s.database), s.train)
        assert s.topk == topk
    with raises("given", "toy has none", "per-class:T,Q"):
        make_split(toy(), "given", 0)
    with raises("test part", "empty"):
        make_split(toy(is_test=np.zeros(COUNTS.sum(), bool)), "given", 0)


@pytest.mark.parametrize("protocol", ["foo", "per-class:5", "per-class:a,b", "per-class:5,3,train",
                                      "random:", "cifar-10"])
def test_unknown_protocols(protocol):
    with raises(repr(protocol), "unknown protocol", "cifar10", "per-class:T,Q"):
        make_split(toy(), protocol, 0)


def test_bad_protocol_values():
    with raises("'per-class:0,3'", "at least 1"):
        parse_protocol("per-class:0,3")
    with raises("'random:5,3,+train'", "+train"):
        parse_protocol("random:5,3,+train")
    for seed in (-1, 1.5, True, "3"):
        with raises("seed", repr(seed)):
            make_split(toy(), "per-class:2,2", seed)


def test_digits_protocol():
    ds = load_digits()
    s = make_split(ds, "digits", seed=0)
    ids = class_ids(ds)
    np.testing.assert_array_equal(np.bincount(ids[s.train]), [100] * 10)
    np.testing.assert_array_equal(np.bincount(ids[s.query]), [30] * 10)
    assert (len(s.train), len(s.query), len(s.database)) == (1000, 300, 1497)
    np.testing.assert_array_equal(np.sort(s.database), np.setdiff1d(np.arange(1797), s.query))
    assert s.topk is None


def test_save_and_load_round_trip(tmp_path):
    for ds, protocol in ((toy(), "per-class:5,3"), (toy(counts=[700, 650]), "cifar10-1")):
        s = make_split(ds, protocol, 11)
        path = tmp_path / "run" / "split.npz"
        save_split(path, s)
        back = load_split(path)
        for part in ("train", "query", "database"):
            np.testing.assert_array_equal(getattr(back, part), getattr(s, part))
        assert (back.protocol, back.seed, back.topk, back.num_items) == (s.protocol, 11, s.topk, s.num_items)
    assert [p.name for p in path.parent.iterdir()] == ["split.npz"]  # no temporary files left


def test_load_split_errors(tmp_path):
    with raises("none.npz", "no such file"):
        load_split(tmp_path / "none.npz")
    good = dict(train=[0, 2], query=[1], database=[0, 2, 3], protocol=np.array("given"),
                seed=np.array(0), topk=np.array(-1))
    path = tmp_path / "s.npz"
    np.savez(path, **{k: v for k, v in good.items() if k != "query"})
    with raises("s.npz", "missing query"):
        load_split(path)
    np.savez(path, **{**good, "database": [3, 0, 3]})
    with raises("s.npz", "database", "unique"):
        load_split(path)
    np.savez(path, **{**good, "num_items": np.array(3)})
    with raises("s.npz", "database index out of range", "of 3 items"):
        load_split(path)


def test_split_check():
    s = Split([0], [1], [2, 3], "given", 0, None, num_items=4)
    s.check(4)
    with raises("drawn from 4 items", "data set has 5"):
        s.check(5)
    with raises("database index out of range"):
        Split([0], [1], [2, 3], "given", 0, None).check(3)


# --- the real CIFAR-10 features and scene ---------------------------------------------------

def real_labels(shared_data, name, *keys):
    path = shared_data / name
    if not path.is_file():
        pytest.skip(f"{name} not found in {shared_data}")
    with np.load(path, allow_pickle=False) as raw:  # only the small arrays: no features needed
        return [raw[k] for k in keys]


@pytest.fixture
def cifar(shared_data):
    labels, is_test = real_labels(shared_data, "cifar10-mobilenetv1-features.npz", "labels", "is_test")
    return ArrayDataset(np.zeros((len(labels), 1), np.float32), labels, is_test, "cifar10")


def test_real_cifar10(cifar):
    ids = class_ids(cifar)
    s = make_split(cifar, "cifar10", seed=0)
    np.testing.assert_array_equal(np.bincount(ids[s.train]), [500] * 10)
    np.testing.assert_array_equal(np.bincount(ids[s.query]), [100] * 10)
    np.testing.assert_array_equal(np.bincount(ids[s.database]), [5400] * 10)
    assert (len(s.train), len(s.query), len(s.database), s.topk) == (5000, 1000, 54000, 54000)
    assert len(np.union1d(np.union1d(s.train, s.query), s.database)) == 60000  # disjoint
    again = make_split(cifar, "cifar10", seed=0)
    np.testing.assert_array_equal(again.database, s.database)
    assert not np.array_equal(make_split(cifar, "cifar10", seed=1).train, s.train)

    s1 = make_split(cifar, "cifar10-1", seed=0)
    assert (len(s1.train), len(s1.query), len(s1.database)) == (5000, 1000, 59000)
    assert not np.isin(s1.query, s1.database).any() and np.isin(s1.train, s1.database).all()

    s2 = make_split(cifar, "cifar10-2", seed=0)
    assert (len(s2.train), len(s2.query), len(s2.database)) == (50000, 10000, 50000)
    np.testing.assert_array_equal(s2.query, np.arange(50000, 60000))


def test_real_scene(shared_data):
    x_tr, x_te, y_tr, y_te = real_labels(shared_data, "scene-multilabel.npz", "x_train", "x_test", "y_train", "y_test")
    ds = ArrayDataset(np.concatenate([x_tr, x_te]), as_multihot(np.concatenate([y_tr, y_te])),
                      np.repeat([False, True], [len(x_tr), len(x_te)]), "scene")
    s = make_split(ds, "given", 0)
    assert (len(s.train), len(s.query), len(s.database)) == (1211, 1196, 1211)
    with raises("single-label", "random:T,Q"):
        make_split(ds, "per-class:10,5", 0)
    assert len(make_split(ds, "random:1000,200", 0).database) == 2207


def test_all_train_protocol_trains_on_every_item_and_has_no_queries():
    ds = ArrayDataset(np.zeros((7, 2), np.float32), np.array([0, 1, 0, 1, 1, 0, 1]), None, "tiny")
    split = make_split(ds, "all-train", 3)
    np.testing.assert_array_equal(split.train, np.arange(7))
    assert split.query.size == 0 and split.database.size == 0


def test_each_named_cifar10_protocol_evaluates_at_its_sources_R(tmp_path):
    """The paper's cifar10: mAP@54,000 on its 54,000-item database (all of it); DeepHash-pytorch,
    whose names cifar10-1 and cifar10-2 are, uses topK = -1 (the whole database) for every
    CIFAR-10 variant. A split saved before (cifar10-1 at R = 54,000) keeps its R."""
    ds = toy(counts=np.full(10, 6000))
    paper = make_split(ds, "cifar10", seed=0)
    assert (len(paper.database), paper.topk) == (54000, 54000)
    deephash = make_split(ds, "cifar10-1", seed=0)
    assert (len(deephash.database), deephash.topk) == (59000, None)
    is_test = np.zeros(60000, bool)
    is_test[50000:] = True
    assert make_split(toy(counts=np.full(10, 6000), is_test=is_test), "cifar10-2", seed=0).topk is None
    from dataclasses import replace
    old = replace(deephash, topk=54000)
    save_split(tmp_path / "split.npz", old)
    assert load_split(tmp_path / "split.npz").topk == 54000


# --- a part with one class: nothing to rank by, refused before the run writes ---------------------

@pytest.fixture
def one_class_features(tmp_path):
    path = tmp_path / "oneclass.npz"
    rng = np.random.default_rng(0)
    np.savez(path, features=rng.normal(size=(300, 8)).astype(np.float32), labels=np.zeros(300, dtype=np.int64))
    return path


@pytest.mark.parametrize("method, part", [("lsh", "database"), ("pca", "database"), ("linear", "train"),
                                          ("csq", "train")])
def test_data_with_one_class_is_refused_before_the_run_writes(tmp_path, one_class_features, method, part):
    out = tmp_path / "run"
    result = cli("train", "--method", method, "--data", f"features:{one_class_features}", "--protocol",
                 "random:200,50", "--bits", "8", "--epochs", "1", "--no-progress", "--out", out)
    one_line_error(result, "oneclass.npz", f"the {part} part of split random:200,50",
                   "1 class(es)", "at least 2")
    assert not out.exists()


def test_one_class_without_evaluation_trains(tmp_path, one_class_features):
    out = tmp_path / "run"
    result = cli("train", "--method", "lsh", "--data", f"features:{one_class_features}", "--protocol",
                 "all-train", "--bits", "8", "--no-progress", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "manifest.json").is_file()


# --- issue 19, 16: given:T, a subset of a file's own train part --------------------------------------

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
