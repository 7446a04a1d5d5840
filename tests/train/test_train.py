"""Training end to end on the bundled digits set: outputs, quality, resume, bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from lbhash.cli import main
from lbhash.codes_file import load_codes_file
from lbhash.evaluate import mean_average_precision
from lbhash.runs import RunDirectory
from helpers import one_line_error
from run_bank import DIGITS
from lbhash.errors import InputError
from lbhash.runs.train_options import build_config, load_config_file
from lbhash.train import TrainConfig
from lbhash.train.builder import build_experiment
from lbhash.train.forward import encode

FAST = dict(data="digits", bits=16, hidden=[128], centers="hadamard", progress=False)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_config_precedence_flags_over_file_over_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("bits: 32\nepochs: 7\nlbhash-weight: 0.5\n")
    cfg = build_config(load_config_file(path), {"epochs": 3, "bits": None})
    assert (cfg.hashing.bits, cfg.recipe.epochs, cfg.objective.lbhash_weight, cfg.hashing.method) == (32, 3, 0.5, "csq")
    from lbhash.data import load_data
    from lbhash.train import resolve_config

    resolved = resolve_config(cfg, load_data(cfg.dataset.data))
    assert (resolved.recipe.optimizer, resolved.recipe.lr, resolved.objective.lbhash_mode) == ("adam", 1e-3, "replace")
    path.write_text("bitz: 3\n")
    with pytest.raises(ValueError, match="c.yaml: unknown option 'bitz'"):
        load_config_file(path)
    # an option set given whole (nested), with flat keys: the flags still win
    path.write_text("recipe:\n  lr: 0.01\n  epochs: 7\nobjective: {lbhash_weight: 0.5}\nbits: 32\n")
    cfg = build_config(load_config_file(path), {"epochs": 3})
    assert (cfg.recipe.lr, cfg.recipe.epochs, cfg.objective.lbhash_weight, cfg.hashing.bits) == (0.01, 3, 0.5, 32)
    path.write_text("recipe:\n  lr: fast\n")
    with pytest.raises(InputError, match=r"c.yaml: lr must be a positive number, got 'fast'$"):
        load_config_file(path)


# a "billion laughs": 9 levels of 9 aliases each, 9^9 strings once expanded, in 600 bytes
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [{','.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + "method_options: {x: *i}\n"


def test_a_config_of_yaml_aliases_is_refused_in_one_line(tmp_path):
    """A 600-byte YAML of nested aliases (`--config`) printed pydantic tracebacks and ran past
    120 s (issue 60, item 9): YAML anchors and aliases are refused where YAML is read, naming
    the file, before anything expands them."""
    from lbhash.runs.train_options import parse_yaml

    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    assert len(LAUGHS) < 700
    with pytest.raises(InputError) as err:
        load_config_file(path)
    assert str(err.value).startswith(f"{path}: YAML anchors and aliases (&NAME, *NAME) are not accepted")
    assert "\n" not in str(err.value)
    for text in ("bits: &b 32\n", "bits: 32\nepochs: *b\n", "[*x]"):
        with pytest.raises(InputError, match="^--set x: YAML anchors and aliases"):
            parse_yaml(text, "--set x")
    assert parse_yaml("bits: 32\nname: '&not *an alias'\n", "f") == {"bits": 32, "name": "&not *an alias"}


def test_train_config_of_yaml_aliases_is_one_line_exit_2(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    result = cli("train", "--data", "digits", "--config", path, "--out", tmp_path / "run")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output[:2000]
    assert "laughs.yaml" in result.output and "aliases" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name, text, message", [
    # 10,000 levels raised RecursionError in YAML's composer (a traceback)
    ("deep.yaml", "data: digits\nmethod_options: " + "[" * 10_000 + "]" * 10_000 + "\n",
     "nested deeper than 32 levels at line 2"),
    ("deep32.yaml", "method_options: " + "[" * 32 + "]" * 32 + "\n", "nested deeper than 32 levels at line 1"),
    # YAML keeps the last of two equal keys: the run would silently train 32 bits
    ("twice.yaml", "data: digits\nbits: 16\nepochs: 2\nbits: 32\n", "key 'bits' is given twice (lines 2 and 4)"),
    ("inner.yaml", "data: digits\nmethod_options:\n  a: 1\n  b: 2\n  a: 3\n", "key 'a' is given twice (lines 3 and 5)"),
])
def test_a_config_too_deep_or_with_a_key_twice_is_one_line_exit_2(tmp_path, name, text, message):
    """Issue 69: a --config nested 10,000 deep gave a RecursionError traceback, a 50 MB one a
    MemoryError, and a key given twice took its last value silently."""
    path = tmp_path / name
    path.write_text(text)
    result = cli("train", "--config", path, "--out", tmp_path / "run")
    assert result.exit_code == 2, result.output[-2000:]
    assert result.output.strip().splitlines() == [f"error: {path}: {message}"]
    assert not (tmp_path / "run").exists()


def test_a_config_over_a_megabyte_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import yaml as pyyaml

    path = tmp_path / "big.yaml"
    path.write_text("data: digits\n" + "#" * (1 << 20) + "\n")  # 1 MB of comment: a config is a few lines
    monkeypatch.setattr(pyyaml, "load", lambda *a, **k: pytest.fail("parsed"))
    with pytest.raises(InputError, match=rf"^{path}: larger than 1 MB; a config holds option: value lines$"):
        load_config_file(path)
    nested = "method_options: " + "[" * 31 + "]" * 31 + "\n"  # 32 levels with the mapping: accepted
    monkeypatch.undo()
    from lbhash.runs.train_options import parse_yaml

    value = parse_yaml(nested, "f")["method_options"]
    for _ in range(30):
        value = value[0]
    assert value == []


def test_a_saved_run_config_has_no_aliases(tmp_path):
    """A run's config.yaml is read back by the same reader, which refuses aliases: the writer
    never makes them, even for values that are one object twice."""
    from lbhash.runs.run_files import plain_yaml

    shared = [1, 2]
    text = plain_yaml({"a": shared, "b": shared})
    assert "&" not in text and "*" not in text and yaml.safe_load(text) == {"a": [1, 2], "b": [1, 2]}


@pytest.fixture(scope="module")
def csq_d_run(tmp_path_factory):
    """(config, run directory, metrics): CSQ_D of 8 epochs, evaluated every other epoch."""
    cfg = TrainConfig(**FAST, epochs=8, lbhash=True, lr_step=0, eval_every=2)
    out = tmp_path_factory.mktemp("csq-d") / "run"
    return cfg, out, RunDirectory(out).train(cfg)


# make test's check of the same kind: HashEncoder's fit, through the same core
# (tests/train/test_hash_encoder.py::test_fit_beats_an_untrained_model_by_a_wide_margin)
@pytest.mark.slow
def test_training_beats_an_untrained_model_by_a_wide_margin(csq_d_run):
    cfg, _, metrics = csq_d_run
    exp = build_experiment(cfg)  # the same seed's initial weights, untrained
    ds, split = exp.dataset, exp.split
    q = encode(exp.learner.model, ds, split.query)
    db = encode(exp.learner.model, ds, split.database)
    untrained = mean_average_precision(q, db, ds.labels[split.query], ds.labels[split.database])
    assert metrics["map"] > untrained + 0.3, (untrained, metrics["map"])


def test_run_directory_contents(runs, tmp_path):
    out = runs.path("csq_D-3")  # CSQ_D of 3 epochs, validated every epoch
    metrics = json.loads((out / "metrics.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == [  # best.pt: the default keeps the best validation epoch
        ".lock", "best.pt", "checkpoint.pt", "codes.npz", "config.yaml", "data.json", "input.json", "log.jsonl", "manifest.json",
        "metrics.json", "split.npz"]
    import hashlib

    manifest = json.loads((out / "manifest.json").read_text())["files"]
    assert sorted(manifest) == ["best.pt", "checkpoint.pt", "codes.npz", "config.yaml", "data.json", "input.json", "log.jsonl", "metrics.json",
                                "split.npz"]
    for name, entry in manifest.items():
        assert entry["sha256"] == hashlib.sha256((out / name).read_bytes()).hexdigest()
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["protocol"] == "digits" and config["lbhash_mode"] == "replace"
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3]
    assert {"lower_bound", "quantization", "surrogate_pi", "pattern_accuracy", "total"} <= set(log[0]["loss"])
    assert "ratio" in log[0]["train_lower_bound"] and "val_map" in log[0]["eval"]
    # codes.npz is what `lbhash evaluate` reads, and it reproduces the run's mAP
    codes = load_codes_file(out / "codes.npz")
    again = mean_average_precision(codes["query_codes"], codes["db_codes"], codes["query_labels"],
                                   codes["db_labels"], bits=codes["bits"])
    assert again == pytest.approx(metrics["map"], abs=1e-12)
    assert metrics["run"]["variant"] == "csq_D"
    assert cli("evaluate", out / "codes.npz", "--out", tmp_path / "m.json").exit_code == 0


# make test's same-seed checks are bit-exact too: the in-memory fit against the run directory
# (test_train_core.py) and every resume against the uninterrupted run (test_train_resume.py)
@pytest.mark.slow
def test_same_seed_same_codes(tmp_path, runs):
    bank = runs.path("csq_D-3")  # the same config, trained earlier in this session
    again = RunDirectory(tmp_path / "again").train(TrainConfig(**DIGITS, epochs=3, lbhash=True, eval_every=1))
    ca, cb = load_codes_file(bank / "codes.npz"), load_codes_file(tmp_path / "again" / "codes.npz")
    np.testing.assert_array_equal(ca["db_codes"], cb["db_codes"])
    assert json.loads((bank / "metrics.json").read_text())["map"] == again["map"]


@pytest.mark.slow  # a real kill -9 of a training process, about 25 s; resume's fast tests: test_train_resume.py
def test_killed_process_resumes_to_the_same_codes(tmp_path):
    args = ["train", "--data", "digits", "--bits", "16", "--hidden", "128", "--centers", "hadamard",
            "--lbhash", "--epochs", "40", "--eval-every", "0", "--no-progress"]
    env = {**os.environ, "LBHASH_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-c", "from lbhash.cli import main; main()"]
    subprocess.run(cmd + args + ["--out", str(tmp_path / "full")], check=True, env=env,
                   capture_output=True)
    proc = subprocess.Popen(cmd + args + ["--out", str(tmp_path / "cut")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp_path / "cut" / "log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "cut" / "codes.npz").exists(), "the run finished before it was killed"
    subprocess.run(cmd + ["train", "--resume", "--out", str(tmp_path / "cut"), "--no-progress"],
                   check=True, env=env, capture_output=True)
    full = load_codes_file(tmp_path / "full" / "codes.npz")
    cut = load_codes_file(tmp_path / "cut" / "codes.npz")
    np.testing.assert_array_equal(full["db_codes"], cut["db_codes"])



@pytest.fixture
def bad_feature_files(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    labels = np.eye(3, dtype=np.uint8)[rng.integers(0, 3, 120)]
    is_test = np.arange(120) >= 100
    zero = labels.copy()
    zero[5] = 0
    nan = x.copy()
    nan[7, 2] = np.nan
    np.savez(tmp_path / "zero.npz", x=x, labels=zero, is_test=is_test)
    np.savez(tmp_path / "nan.npz", x=nan, labels=labels, is_test=is_test)
    return tmp_path


@pytest.mark.parametrize("args, fragments", [
    (["--lbhash", "--bits", "12"], ["bits=12", "block size 8"]),
    (["--centers", "hadamard", "--bits", "4"], ["hadamard", "bits=4", "classes=10"]),
    (["--method", "nope"], ["unknown method 'nope'"]),
    (["--data", "pixels:foo"], ["pixels:foo"]),
    (["--protocol", "cifar10"], ["class"]),
    (["--epochs", "0"], ["epochs must be a positive integer, got 0"]),
])
def test_bad_input_leaves_no_run_directory(tmp_path, args, fragments):
    out = tmp_path / "run"
    data = [] if "--data" in args else ["--data", "digits"]
    one_line_error(cli("train", "--out", out, "--no-progress", *data, *args), *fragments)
    assert not out.exists()


def test_bad_feature_files_leave_no_run_directory(bad_feature_files):
    out = bad_feature_files / "run"
    one_line_error(cli("train", "--data", f"features:{bad_feature_files / 'zero.npz'}", "--lbhash",
                        "--bits", "8", "--out", out), "has no label")
    one_line_error(cli("train", "--data", f"features:{bad_feature_files / 'nan.npz'}",
                        "--bits", "8", "--out", out), "nan.npz", "row 7")
    assert not out.exists()


def test_existing_run_needs_resume_and_resume_takes_no_options(tmp_path, runs):
    out = runs.copy("csq", tmp_path / "run")
    one_line_error(cli("train", "--data", "digits", "--out", out, "--epochs", "1"), "already holds a run", "--resume")
    one_line_error(cli("train", "--out", out, "--resume", "--bits", "32"), "saved config")
    one_line_error(cli("train", "--out", tmp_path / "none", "--resume"), "nothing to resume")
    result = cli("train", "--out", out, "--resume")  # finished: reports the saved metrics
    assert result.exit_code == 0 and "mAP@all" in result.output
