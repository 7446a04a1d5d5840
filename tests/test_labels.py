"""Class labels (lbhash.labels): sparse class ids are remapped to dense ones with a warning that
`warnings` filters see, in Python and on the command line."""

import numpy as np
import pytest

from helpers import Killed, cli, stop_before_the_first_epoch


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
    ids = np.where(rng.random(200) < 0.5, 0, 10**9)
    np.savez(tmp_path / "f.npz", x=rng.normal(size=(200, 8)).astype(np.float32) + ids[:, None] / 10**9,
             labels=ids, is_test=np.arange(200) >= 160)
    stopped = stop_before_the_first_epoch(monkeypatch)  # the data a run trains on, as it is about to train
    result = cli("train", "--data", f"features:{tmp_path / 'f.npz'}", "--bits", "8", "--epochs", "1",
                 "--hidden", "16", "--centers", "hadamard", "--out", tmp_path / "run", "--no-progress")
    assert isinstance(result.exception, Killed), result.output
    warned = [line for line in result.output.splitlines() if "class ids are not dense" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "(largest 1000000000, 2 used)" in warned[0]
    labels = stopped[0].exp.dataset.labels  # one column per class used: ids 0 and 10**9 are classes 0 and 1
    assert labels.shape == (200, 2) and (labels.sum(1) == 1).all()
    np.testing.assert_array_equal(labels[:, 1], ids == 10**9)
