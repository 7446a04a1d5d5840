"""The CLI's one-line error path: bad input to any command gives exit status 2, one line
`error: ...` that names the value, no traceback, and leaves every file as it was (or works as
documented); so does a run whose files changed, and a missing optional dependency (one line
naming the extra that installs it). Missing modules are simulated with sys.modules[name] = None,
which makes every import of them fail as if they were not installed."""

import shutil
import sys

import numpy as np
import pytest
import torch

from helpers import FAST_TRAIN, cli, one_line_error, snapshot
from lbhash.codes_file import save_codes_file
from lbhash.errors import InputError, require_extra
from lbhash.limits import MAX_K


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- options, config files, outputs and data of every command -------------------------------------

@pytest.fixture
def finished_run(runs):
    """A finished CSQ_D run on digits (the R of the issue, shorter): the run bank's, never changed."""
    return runs.path("csq_D-3")


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
    (tmp_path / "bits.yaml").write_text("bits: 4097\n")
    (tmp_path / "seed.yaml").write_text("seed: 1180591620717411303424\n")
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
    # issue 60, item 9: 103 s of center generation, then an ArrayMemoryError traceback
    ("bits-huge", ["train", "--data", "digits", "--bits", "100000", "--out", "{w}/run"],
     ["bits must be an integer from 1 to 4096", "100000"]),
    ("bits-huge-config", ["train", "--data", "digits", "--config", "{w}/bits.yaml", "--out", "{w}/run"],
     ["bits.yaml", "bits must be an integer from 1 to 4096", "4097"]),
    ("centers-bits-huge", ["centers", "--bits", "100000", "--classes", "10"],
     ["bits must be an integer from 1 to 4096", "100000"]),
    # issue 87: torch's and numpy's seeds are int64; a bigger one was their OverflowError's traceback
    ("seed-huge", ["train", *FAST_TRAIN, "--seed", "9223372036854775808", "--out", "{w}/run"],
     ["seed must be an integer from 0 to 2^63 - 1", "9223372036854775808"]),
    ("seed-huge-config", ["train", *FAST_TRAIN, "--config", "{w}/seed.yaml", "--out", "{w}/run"],
     ["seed.yaml", "seed must be an integer from 0 to 2^63 - 1", "1180591620717411303424"]),
    ("reproduce-seed-huge", ["reproduce", "grid", "--data", "digits", "--seeds", "9223372036854775808",
                             "--out", "{w}/rep"], ["seed must be an integer from 0 to 2^63 - 1"]),
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


# --- issue 19: values past the limits, array shapes and ids, paths in list files ------------------
# (input_files: tests/conftest.py)

# (id: the point, arguments with {w} for the work folder, fragments the one line must hold)
CASES_19 = [
    ("1-evaluate-radius-over-bits", ["evaluate", "{w}/codes.npz", "--radius", "1000", "--out", "{w}/m.json"],
     ["radius must be at most bits=16", "1000"]),
    ("2-query-labels-3d", ["evaluate", "{w}/q3d.npz", "--out", "{w}/m.json"],
     ["q3d.npz", "'query_labels'", "(300, 1, 1)"]),
    ("2-both-labels-3d", ["evaluate", "{w}/both3d.npz", "--out", "{w}/m.json"],
     ["both3d.npz", "'query_labels'", "(300, 1, 1)"]),
    ("3-float-ids", ["index", "add", "{w}/idx", "{w}/float_ids.npz"], ["float_ids.npz", "'ids' must be integers", "1.5"]),
    ("3-integral-float-ids", ["index", "add", "{w}/idx", "{w}/int_float_ids.npz"],
     ["int_float_ids.npz", "'ids' must be integers", "float64"]),
    ("4-remove-id-past-int64", ["index", "remove", "{w}/idx", "--ids", "99999999999999999999999"],
     ["--ids", "99999999999999999999999", "int64"]),
    ("5-search-k-huge", ["search", "{w}/idx", "--codes", "{w}/q.npy", "-k", "100000000000"],
     ["-k must be at most 1000", "100000000000"]),
    ("5-search-k-zero", ["search", "{w}/idx", "--codes", "{w}/q.npy", "-k", "0"], ["-k must be a positive integer", "0"]),
    ("6-filter-class-huge", ["search", "{w}/idx", "--codes", "{w}/q.npy", "--filter-labels", "99999999999"],
     ["--filter-labels", "between 0 and 65535", "99999999999"]),
    ("6-filter-class-negative", ["search", "{w}/idx", "--codes", "{w}/q.npy", "--filter-labels", "2,-1"],
     ["--filter-labels", "-1"]),
    ("6-add-class-over-limit", ["index", "add", "{w}/idx", "{w}/big_class.npz"], ["big_class.npz", "class id 65536", "0 to 65535"]),
    ("7-features-beyond-memory", ["train", *FAST_TRAIN[2:], "--data", "features:{w}/huge.npz", "--out", "{w}/run"],
     ["huge.npz", "'x'", "(30, 2000000000000)", "memory available"]),
    ("7-npy-beyond-memory", ["train", *FAST_TRAIN[2:], "--data", "features:{w}/huge.npy?labels={w}/labels.npy",
                             "--out", "{w}/run"], ["huge.npy", "(30, 2000000000000)", "memory available"]),
    ("7-query-file-beyond-memory", ["search", "{w}/idx", "--codes", "{w}/huge.npy"],
     ["huge.npy", "(30, 2000000000000)"]),
    ("9-k-and-radius", ["search", "{w}/idx", "--codes", "{w}/q.npy", "-k", "5", "--radius", "2"],
     ["either -k or --radius", "-k 5", "--radius 2"]),
    ("11-absolute-list-path", ["train", "--data", "list:{w}/lists?root={w}/imgs", "--out", "{w}/run"],
     ["train.txt:2", "absolute paths are not allowed", "/imgs/b.jpg"]),
    ("serve-max-k-over-table", ["serve", "{w}/idx", "--max-k", str(MAX_K + 1)], ["--max-k", str(MAX_K + 1)]),
]


@pytest.mark.parametrize("args, fragments", [c[1:] for c in CASES_19], ids=[c[0] for c in CASES_19])
def test_bad_input_is_one_line_and_changes_nothing(input_files, args, fragments):
    before = snapshot(input_files)
    one_line_error(cli(*[a.format(w=input_files) for a in args]), *fragments)
    assert snapshot(input_files) == before


# --- a missing optional dependency ------------------------------------------------------------------

def hide(monkeypatch, *names):
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


SERVE = "lbhash serve needs the 'serve' extra: pip install 'lbhash[serve]'"
MILVUS = "--backend milvus needs the 'milvus' extra: pip install 'lbhash[milvus]'"
TENSORBOARD = "--logger tensorboard needs the 'tensorboard' extra: pip install 'lbhash[tensorboard]'"


@pytest.mark.parametrize("module", ["uvicorn", "fastapi"])
def test_serve_without_the_serve_extra(tmp_path, monkeypatch, module):
    hide(monkeypatch, module)
    result = cli("serve", tmp_path / "idx", "--port", "0")
    assert one_line_error(result, SERVE).startswith(f"error: {SERVE}")
    assert f"(no module {module})" in result.output


def test_milvus_backend_without_pymilvus(monkeypatch):
    hide(monkeypatch, "pymilvus")
    assert one_line_error(cli("index", "info", "lbhash", "--backend", "milvus"), MILVUS).startswith(f"error: {MILVUS}")
    assert one_line_error(cli("serve", "lbhash", "--backend", "milvus", "--port", "0"),
                          MILVUS).startswith(f"error: {MILVUS}")


def test_tensorboard_logger_without_tensorboardx(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    hide(monkeypatch, "tensorboardX", "tensorboard")  # Lightning writes with either
    out = tmp_path / "run"
    assert one_line_error(cli("train", *FAST_TRAIN, "--epochs", "1", "--logger", "tensorboard", "--out", out),
                          TENSORBOARD).startswith(f"error: {TENSORBOARD}")
    assert not out.exists()  # checked before the run writes anything


def test_any_one_of_alternative_modules_will_do(monkeypatch):
    hide(monkeypatch, "lbhash_no_such_module")
    require_extra("x", "y", ("lbhash_no_such_module", "json"))
    with pytest.raises(InputError, match=r"^x needs the 'y' extra: pip install 'lbhash\[y\]' \(no module "
                                         r"lbhash_no_such_module or lbhash_no_such_module_2\)$"):
        require_extra("x", "y", "json", ("lbhash_no_such_module", "lbhash_no_such_module_2"))


def test_no_refusal_advises_overwriting_alone():
    """Issue 60 item 3: a refusal's advice is safe to follow as written. Wherever a message of
    the package mentions --overwrite, it first offers the choice that keeps what is there (another
    --out), and no message advises --overwrite as the remedy of another problem (a wrong model)."""
    import ast
    from pathlib import Path

    import lbhash

    found = []
    for path in sorted(Path(lbhash.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                text = "".join(n.value for n in ast.walk(node.exc) if isinstance(n, ast.Constant)
                               and isinstance(n.value, str))
                if "--overwrite" in text:
                    found.append((f"{path.name}:{node.lineno}", text))
    assert len(found) >= 4, found  # the outputs of evaluate/encode, index build (twice, Milvus), export
    for where, text in found:
        assert "choose another" in text and text.index("choose another") < text.index("--overwrite"), (where, text)


def test_every_option_a_refusal_names_is_an_option_of_a_command():
    """Issue 69: advice that names an option the CLI does not have cannot be followed. Every `--flag` in
    the text of a `raise` anywhere in the package is an option (or its `--no-` form) of some `lbhash`
    command, found by walking the command tree; the pieces of an f-string are read apart, so a value
    between two flags does not join them."""
    import ast
    import re
    from pathlib import Path

    import click

    import lbhash
    from lbhash.cli import main

    def commands(cmd, ctx=None):
        yield cmd
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd, parent=ctx)
            for name in cmd.list_commands(ctx):
                yield from commands(cmd.get_command(ctx, name), ctx)

    options = {o for cmd in commands(main) for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    named = {}
    for path in sorted(Path(lbhash.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                text = " ".join(n.value for n in ast.walk(node.exc)
                                if isinstance(n, ast.Constant) and isinstance(n.value, str))
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text):
                    named.setdefault(flag, f"{path.name}:{node.lineno}")
    assert len(named) >= 40 and {"--no-rescore", "--overwrite", "--resume"} <= named.keys()
    assert {flag: where for flag, where in named.items() if flag not in options} == {}
