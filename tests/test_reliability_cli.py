"""Regression suite of bad inputs: every case gives exit status 2, one line `error: ...` that
names the value, no traceback, and leaves no file behind (or works as documented)."""

import shutil

import numpy as np
import pytest
import torch

from helpers import FAST_TRAIN, cli
from lbhash.codes_file import save_codes_file


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished CSQ_D run on digits (the R of the issue, shorter)."""
    root = tmp_path_factory.mktemp("reliability")
    out = root / "R"
    result = cli("train", *FAST_TRAIN, "--lbhash", "--epochs", "2", "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def work(tmp_path):
    """A scratch folder with a few input files; each case must leave it as it was."""
    rng = np.random.default_rng(0)
    save_codes_file(tmp_path / "codes.npz", rng.choice([-1, 1], (20, 16)), rng.choice([-1, 1], (60, 16)),
                    rng.integers(0, 4, 20), rng.integers(0, 4, 60))
    (tmp_path / "a_file").write_text("not a directory")
    (tmp_path / "text.npz").write_text("hello, I am text")
    (tmp_path / "fake.mat").write_bytes(b"MATLAB 5.0 MAT-file" + bytes(200))
    (tmp_path / "no.yaml").write_text("lbhash: 'no'\n")
    (tmp_path / "heavy.yaml").write_text("lbhash_weight: heavy\n")
    (tmp_path / "method7.yaml").write_text("method: 7\n")
    (tmp_path / "options.yaml").write_text("method_options: [1, 2]\n")
    (tmp_path / "broken.yaml").write_text("bits: [16\n")
    (tmp_path / "python.yaml").write_text("bits: !!python/object/apply:os.system ['true']\n")
    wide = np.zeros((40, 300_000), np.uint8)
    np.savez(tmp_path / "wide.npz", x=wide, labels=np.arange(40) % 2, is_test=np.arange(40) >= 30)
    (tmp_path / "existing_dir").mkdir()
    return tmp_path


# (id, arguments with {w} for the work folder, fragments the one line must hold)
CASES = [
    ("lr-inf", ["train", *FAST_TRAIN, "--lr", "inf", "--out", "{w}/run"], ["lr must be a positive number", "inf"]),
    ("surrogate-lr-inf", ["train", *FAST_TRAIN, "--lbhash", "--surrogate-lr", "inf", "--out", "{w}/run"],
     ["surrogate_lr", "inf"]),
    ("weight-nan", ["train", *FAST_TRAIN, "--lbhash", "--lbhash-weight", "nan", "--out", "{w}/run"],
     ["lbhash_weight", "nan"]),
    ("gamma-nan", ["train", *FAST_TRAIN, "--lr-gamma", "nan", "--lr-step", "1", "--out", "{w}/run"], ["lr_gamma", "nan"]),
    ("config-bool-string", ["train", "--config", "{w}/no.yaml", "--out", "{w}/run"],
     ["no.yaml", "lbhash must be true or false", "'no'"]),
    ("config-number-string", ["train", "--config", "{w}/heavy.yaml", "--out", "{w}/run"],
     ["heavy.yaml", "lbhash_weight must be a positive number", "'heavy'"]),
    ("config-method-int", ["train", "--config", "{w}/method7.yaml", "--out", "{w}/run"], ["method7.yaml", "method must be a method name", "7"]),
    ("config-options-list", ["train", "--config", "{w}/options.yaml", "--out", "{w}/run"],
     ["options.yaml", "method_options", "[1, 2]"]),
    ("config-malformed", ["train", "--config", "{w}/broken.yaml", "--out", "{w}/run"], ["broken.yaml", "YAML"]),
    ("config-python-tag", ["train", "--config", "{w}/python.yaml", "--out", "{w}/run"], ["python.yaml", "YAML"]),
    ("method-option-text", ["train", *FAST_TRAIN, "--method-option", "quantization=abc", "--out", "{w}/run"],
     ["quantization", "'abc'"]),
    ("method-option-unknown", ["train", *FAST_TRAIN, "--method-option", "bogus=1", "--out", "{w}/run"], ["'bogus'"]),
    ("out-is-a-file", ["train", *FAST_TRAIN, "--out", "{w}/a_file"], ["a_file", "is a file"]),
    ("out-under-a-file", ["train", *FAST_TRAIN, "--out", "{w}/a_file/run"], ["a_file", "file"]),
    ("wide-features", ["train", "--data", "features:{w}/wide.npz", "--bits", "16", "--out", "{w}/run"],
     ["300000 features", "parameters"]),
    ("fake-mat", ["train", "--data", "features:{w}/fake.mat", "--out", "{w}/run"], ["fake.mat"]),
    ("text-npz", ["train", "--data", "features:{w}/text.npz", "--out", "{w}/run"], ["text.npz", "not an .npz"]),
    ("evaluate-radius", ["evaluate", "{w}/codes.npz", "--radius", "-1", "--out", "{w}/m.json"], ["radius", "-1"]),
    ("evaluate-ks-zero", ["evaluate", "{w}/codes.npz", "--ks", "0", "--out", "{w}/m.json"], ["ks", "0"]),
    ("evaluate-ks-negative", ["evaluate", "{w}/codes.npz", "--ks", "-5", "--out", "{w}/m.json"], ["ks", "-5"]),
    ("evaluate-out-dir", ["evaluate", "{w}/codes.npz", "--out", "{w}/existing_dir"], ["existing_dir", "directory"]),
    ("evaluate-text-npz", ["evaluate", "{w}/text.npz", "--out", "{w}/m.json"], ["text.npz", "not an .npz"]),
    ("centers-out-dir", ["centers", "--bits", "16", "--classes", "4", "--out", "{w}/existing_dir"],
     ["existing_dir", "directory"]),
    ("reproduce-kinds", ["reproduce", "centers", "--data", "digits", "--kinds", "foo", "--out", "{w}/rep"],
     ["--kinds", "'foo'"]),
    ("reproduce-set-unknown", ["reproduce", "grid", "--data", "digits", "--set", "foo=1", "--out", "{w}/rep"],
     ["unknown option 'foo'"]),
    ("reproduce-set-own-axis", ["reproduce", "grid", "--data", "digits", "--set", "bits=32", "--out", "{w}/rep"],
     ["--set bits"]),
    ("reproduce-unknown-method", ["reproduce", "grid", "--data", "digits", "--methods", "nope", "--out", "{w}/rep"],
     ["unknown method 'nope'"]),
    ("reproduce-missing-data", ["reproduce", "grid", "--data", "features:{w}/none.npz", "--out", "{w}/rep"],
     ["none.npz", "no such file"]),
    ("reproduce-out-file", ["reproduce", "grid", "--data", "digits", "--out", "{w}/a_file"], ["a_file", "is a file"]),
    ("report-out-dir", ["report", "{w}", "--out", "{w}/existing_dir"], ["existing_dir", "directory"]),
    ("unparsable-int", ["train", "--epochs", "many"], ["--epochs", "'many'"]),
]
if not torch.cuda.is_available():
    CASES.append(("no-gpu", ["train", *FAST_TRAIN, "--accelerator", "gpu", "--out", "{w}/run"], ["--accelerator gpu", "GPU"]))


@pytest.mark.parametrize("args, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing(work, args, fragments):
    before = files_under(work)
    one_line_error(cli(*[a.format(w=work) for a in args]), *fragments)
    assert files_under(work) == before


@pytest.mark.parametrize("args, fragments", [
    (["encode", "{r}", "--out", "{w}/existing_dir"], ["existing_dir", "directory"]),
    (["encode", "{r}", "--data", "features:{w}/wide.npz", "--out", "{w}/e.npz"], ["300000 features", "trained on 64"]),
    (["encode", "{r}", "--data", "images:{w}/existing_dir", "--out", "{w}/e.npz"], ["existing_dir"]),
    (["train", "--data", "digits", "--out", "{r}", "--epochs", "1"], ["already holds a run"]),
], ids=["encode-out-dir", "encode-wrong-width", "encode-images-for-features", "train-existing-run"])
def test_bad_input_against_a_finished_run(work, finished_run, args, fragments):
    before, run_before = files_under(work), files_under(finished_run)
    one_line_error(cli(*[a.format(w=work, r=finished_run) for a in args]), *fragments)
    assert files_under(work) == before and files_under(finished_run) == run_before


def test_image_data_for_a_feature_run_says_so(work, finished_run):
    images = work / "imgs"
    from PIL import Image

    for c in ("a", "b"):
        (images / c).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(images / c / f"{i}.png")
    one_line_error(cli("encode", finished_run, "--data", f"images:{images}", "--out", work / "e.npz"),
                   "holds images", "encodes features")


def test_edited_run_files_are_refused_naming_the_file(tmp_path, finished_run):
    run = tmp_path / "R"
    shutil.copytree(finished_run, run)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("bits: 16", "bits: 32"))
    one_line_error(cli("encode", run, "--out", tmp_path / "e.npz"), "config.yaml", "SHA-256")
    assert not (tmp_path / "e.npz").exists()


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


def test_sparse_class_ids_are_remapped_with_a_warning(tmp_path):
    rng = np.random.default_rng(1)
    ids = np.where(rng.random(200) < 0.5, 0, 10**9)
    np.savez(tmp_path / "f.npz", x=rng.normal(size=(200, 8)).astype(np.float32) + ids[:, None] / 10**9,
             labels=ids, is_test=np.arange(200) >= 160)
    result = cli("train", "--data", f"features:{tmp_path / 'f.npz'}", "--bits", "8", "--epochs", "1",
                 "--hidden", "16", "--centers", "hadamard", "--out", tmp_path / "run", "--no-progress")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if "class ids are not dense" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "(largest 1000000000, 2 used)" in warned[0]
    codes = np.load(tmp_path / "run" / "codes.npz")
    assert set(np.unique(codes["db_labels"])) == {0, 1}


def test_list_file_paths_may_not_leave_the_image_root(tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    for name in ("train.txt", "test.txt", "database.txt"):
        (lists / name).write_text("a.jpg 1 0\n../../../../etc/passwd 0 1\n")
    one_line_error(cli("train", "--data", f"list:{lists}", "--out", tmp_path / "run"),
                   "train.txt:2", "leaves the image root")
