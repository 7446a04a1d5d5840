"""Class labels (lbhash.labels): sparse class ids are remapped to dense ones with a warning that
`warnings` filters see, in Python and on the command line; a class id above 65535 (what an index
holds) is refused in one line naming the file, the id and the limit, never remapped to a class the
outputs would name by another id (issue 87: 2^40 was remapped with a warning, and a search of the
run's index then showed it as class 2)."""

import re

import numpy as np
import pytest

from helpers import Killed, cli, one_line_error, one_line_message, stop_before_the_first_epoch


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def test_sparse_class_ids_warn_as_a_python_warning():
    import warnings

    from lbhash.errors import LbhashWarning
    from lbhash.labels import SparseClassIdsWarning, as_multihot

    assert issubclass(SparseClassIdsWarning, LbhashWarning) and issubclass(LbhashWarning, UserWarning)
    with pytest.warns(SparseClassIdsWarning, match=r"^ids: class ids are not dense \(largest 5, 2 used\); "
                                                   r"remapped to 0..1 in increasing order$"):
        labels = as_multihot(np.array([0, 5, 5]), "ids")
    np.testing.assert_array_equal(labels, [[1, 0], [0, 1], [0, 1]])
    with warnings.catch_warnings():  # filters see it: ignored, or turned into an error
        warnings.simplefilter("error", SparseClassIdsWarning)
        with pytest.raises(SparseClassIdsWarning):
            as_multihot(np.array([0, 5]), "ids")
        warnings.simplefilter("ignore", SparseClassIdsWarning)
        as_multihot(np.array([0, 5]), "ids")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        as_multihot(np.array([1, 0, 1]), "ids")  # dense ids: no warning


def test_sparse_class_ids_are_remapped_with_a_warning(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    ids = np.where(rng.random(200) < 0.5, 0, 65535)
    np.savez(tmp_path / "f.npz", x=rng.normal(size=(200, 8)).astype(np.float32) + ids[:, None] / 65535,
             labels=ids, is_test=np.arange(200) >= 160)
    stopped = stop_before_the_first_epoch(monkeypatch)  # the data a run trains on, as it is about to train
    result = cli("train", "--data", f"features:{tmp_path / 'f.npz'}", "--bits", "8", "--epochs", "1",
                 "--hidden", "16", "--centers", "hadamard", "--out", tmp_path / "run", "--no-progress")
    assert isinstance(result.exception, Killed), result.output
    warned = [line for line in result.output.splitlines() if "class ids are not dense" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "(largest 65535, 2 used)" in warned[0]
    labels = stopped[0].exp.dataset.labels  # one column per class used: ids 0 and 65535 are classes 0 and 1
    assert labels.shape == (200, 2) and (labels.sum(1) == 1).all()
    np.testing.assert_array_equal(labels[:, 1], ids == 65535)


RULE = "class ids are 0 to 65535 (lbhash.limits.MAX_CLASS_ID"


@pytest.mark.parametrize("big", [65536, 10**9, 2**40])
def test_a_class_id_above_the_limit_in_a_features_file_is_one_line_exit_2(tmp_path, monkeypatch, big):
    rng = np.random.default_rng(2)
    ids = np.where(rng.random(200) < 0.5, 3, 7)
    ids[17] = big
    np.savez(tmp_path / "f.npz", x=rng.normal(size=(200, 8)).astype(np.float32), labels=ids,
             is_test=np.arange(200) >= 160)
    stopped = stop_before_the_first_epoch(monkeypatch)
    result = cli("train", "--data", f"features:{tmp_path / 'f.npz'}", "--bits", "8", "--epochs", "1",
                 "--hidden", "16", "--centers", "hadamard", "--out", tmp_path / "run", "--no-progress")
    line = one_line_error(result, str(tmp_path / "f.npz"), f"class id {big} at index 17", RULE)
    assert "remapped" not in result.output and not stopped, line


def test_a_class_id_above_the_limit_is_refused_in_python_whatever_its_dtype():
    from lbhash.errors import InputError
    from lbhash.labels import as_class_ids, as_multihot, as_multihot_pair

    for ids, shown in ((np.array([0, 2**40]), "1099511627776"), (np.array([0.0, 2.0**40]), "1099511627776"),
                       (np.array([0, 2**64 - 1], np.uint64), "18446744073709551615"), (np.array([0.0, 1e30]), "1e+30")):
        with pytest.raises(InputError) as err:  # (a cast to int64 first would wrap 2^64 - 1 to -1)
            as_multihot(ids, "y.npy: labels")
        one_line_message(err, f"y.npy: labels has class id {shown} at index 1; {RULE}")
        with pytest.raises(InputError, match=re.escape(f"db_labels has class id {shown} at index 1")):
            as_multihot_pair(np.array([0, 1]), ids, ("query_labels", "db_labels"))
        with pytest.raises(InputError, match=re.escape(f"has class id {shown} at index 1")):
            as_class_ids(ids, "ids")
    with pytest.raises(InputError, match="found -1 at index 0"):
        as_multihot(np.array([-1.0, 2.0**40]), "ids")
    np.testing.assert_array_equal(as_class_ids(np.array([65535, 0], np.uint64)), [65535, 0])  # the limit itself
