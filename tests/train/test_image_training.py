"""Training on real CIFAR-10 pixels (a few hundred images from the shared tarball)."""

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from lbhash.cli import main
from lbhash.codes_file import load_codes_file
from lbhash.runs import RunDirectory
from lbhash.train import TrainConfig

CLASSES = ("airplane", "automobile", "ship")
FAST = dict(method="csq", bits=16, backbone="resnet8", image_size=32, transform="cifar-augment",
            protocol="given", centers="hadamard", lr_step=0, progress=False, batch_size=32)


@pytest.fixture(scope="module")
def tree(cifar_sample, tmp_path_factory):
    """3 classes x (100 train + 20 test) real CIFAR-10 JPEGs as a class-folder tree: the first of
    each class in the shared tarball (conftest's cifar_sample)."""
    root = tmp_path_factory.mktemp("pixels")
    for part in ("train", "test"):
        for name in CLASSES:
            shutil.copytree(cifar_sample / part / name, root / part / name)
    return root


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.slow  # 4 epochs; broken_tree_run (below) trains the same data fast
def test_small_cnn_trains_on_real_pixels(tree, tmp_path):
    out = tmp_path / "run"
    metrics = RunDirectory(out).train(TrainConfig(data=f"images:{tree}", epochs=4, **FAST))
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert log[-1]["loss"]["total"] < 0.8 * log[0]["loss"]["total"]
    assert metrics["map"] > 0.4  # 3 balanced classes: random codes give about 1/3
    assert metrics["n_query"] == 60 and metrics["n_db"] == 300  # the 30 held out for validation included


@pytest.fixture(scope="module")
def broken_tree_run(tree, tmp_path_factory):
    """(the command, the tree with one unreadable training JPEG, the run `lbhash train
    --skip-bad-images` made of it: 1 epoch of the small CNN)."""
    root = tmp_path_factory.mktemp("broken")
    broken = shutil.copytree(tree, root / "tree")
    (broken / "train" / "ship" / "0003.jpg").write_bytes(b"not a jpeg")
    args = ["train", "--data", f"images:{broken}", "--protocol", "given", "--bits", "16", "--backbone",
            "resnet8", "--image-size", "32", "--transform", "cifar-augment", "--epochs", "1",
            "--centers", "hadamard", "--no-progress"]
    result = CliRunner().invoke(main, args + ["--out", str(root / "run"), "--skip-bad-images"])
    assert result.exit_code == 0, result.output
    assert "skipped 1 unreadable image" in result.output
    return args, root / "run"


def test_encode_reproduces_the_runs_database_codes(broken_tree_run, tmp_path):
    out = broken_tree_run[1]  # only read; its unreadable image is left out on every path
    codes = load_codes_file(out / "codes.npz")
    encoded = RunDirectory(out).encode(part="database", progress=False)
    np.testing.assert_array_equal(encoded["codes"], codes["db_codes"])
    np.testing.assert_array_equal(encoded["labels"], codes["db_labels"])
    result = CliRunner().invoke(main, ["encode", str(out), "--part", "query", "--out", str(tmp_path / "q.npz"),
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "q.npz", allow_pickle=False) as q:
        np.testing.assert_array_equal(q["codes"], codes["query_codes"])
        assert str(q["sources"][0]).endswith(".jpg")  # image data: each item's file


def test_bad_image_stops_before_training_unless_skipped(broken_tree_run, tmp_path):
    args, skipped = broken_tree_run
    result = CliRunner().invoke(main, args + ["--out", str(tmp_path / "a")])
    assert result.exit_code == 2 and "0003.jpg" in result.output
    assert not (tmp_path / "a").exists()
    metrics = json.loads((skipped / "metrics.json").read_text())
    assert metrics["n_db"] == 299  # 300 (the 30 held out for validation included) less the broken one
    assert not any("0003.jpg" in str(s) for s in load_codes_file(skipped / "codes.npz")["db_sources"]
                   if "/ship/" in str(s))
