import json

import click
import numpy as np
import pytest
from click.testing import CliRunner

from helpers import Killed, one_line_error, stop_before_the_first_epoch
from lbhash import __version__
from lbhash.cli import main
from lbhash.codes_file import save_codes_file
from lbhash.evaluate import RATIO_SCALE, evaluate_codes


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and __version__ in result.output


@pytest.mark.parametrize("command", [[], ["evaluate"], ["demo"], ["train"], ["centers"], ["toy-mvb"]])
def test_help_for_every_command(command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output


@pytest.fixture
def codes_file(tmp_path, rng):
    q = rng.choice([-1, 1], size=(20, 16))
    d = rng.choice([-1, 1], size=(80, 16))
    ql, dl = rng.integers(0, 4, 20), rng.integers(0, 4, 80)
    path = tmp_path / "codes.npz"
    save_codes_file(path, q, d, ql, dl)
    return path, (q, d, ql, dl)


def test_evaluate_writes_metrics_json_and_table(codes_file):
    path, (q, d, ql, dl) = codes_file
    out = path.parent / "metrics.json"
    result = run("evaluate", str(path), "--topk", "30", "--ks", "5,10", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "mAP@30 (ties by index)" in result.output
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(evaluate_codes(q, d, ql, dl, topk=30, ks=(5, 10))))


@pytest.mark.parametrize("topk, label", [("all", "all"), ("80", "all"), ("500", "all"), ("79", "79"),
                                         ("30", "30")])
def test_map_label_names_r_the_same_whichever_way_it_was_asked(codes_file, topk, label):
    path, (q, d, ql, dl) = codes_file  # 80 database items: R >= 80 is the whole database
    result = run("evaluate", str(path), "--topk", topk)
    assert result.exit_code == 0, result.output
    names = [line.split("  ")[0] for line in result.output.splitlines() if line.startswith("mAP@")]
    assert names == [f"mAP@{label} (ties by index)"]
    value = float(result.output.split(f"mAP@{label} (ties by index)")[1].split()[0])
    if label == "all":  # R covers the database: the number of R = all, under its name
        assert value == pytest.approx(evaluate_codes(q, d, ql, dl)["map"], abs=5e-5)


def test_evaluate_out_option(codes_file, tmp_path):
    path, _ = codes_file
    out = tmp_path / "sub" / "m.json"
    assert run("evaluate", str(path), "--out", str(out)).exit_code == 0
    assert json.loads(out.read_text())["topk"] == "all"
    one_line_error(run("evaluate", str(path), "--out", str(out)), "m.json: exists; choose another --out to keep it, or pass --overwrite")
    assert run("evaluate", str(path), "--out", str(out), "--overwrite").exit_code == 0


def test_evaluate_writes_nothing_without_out(codes_file):
    path, _ = codes_file
    before = sorted(p.name for p in path.parent.iterdir())
    assert run("evaluate", str(path)).exit_code == 0
    assert sorted(p.name for p in path.parent.iterdir()) == before


def test_evaluate_missing_key(tmp_path):
    path = tmp_path / "codes.npz"
    np.savez(path, query_codes=np.zeros((2, 2), np.uint8), db_codes=np.zeros((2, 2), np.uint8), bits=16)
    one_line_error(run("evaluate", str(path)), "codes.npz", "the queries have no labels", "--query-labels")


def test_evaluate_bad_topk(codes_file):
    path, _ = codes_file
    one_line_error(run("evaluate", str(path), "--topk", "0"), "--topk", "'0'")


def test_evaluate_missing_and_corrupt_files(tmp_path):
    one_line_error(run("evaluate", str(tmp_path / "none.npz")), "none.npz: no such file")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    one_line_error(run("evaluate", str(bad)), "bad.npz")


def test_evaluate_mismatched_bits_in_file(tmp_path):
    path = tmp_path / "codes.npz"
    np.savez(path, query_codes=np.zeros((2, 2), np.uint8), db_codes=np.zeros((3, 1), np.uint8),
             query_labels=[0, 1], db_labels=[0, 1, 1], bits=16)
    one_line_error(run("evaluate", str(path)), "db_codes", "bits=16 needs 2")


def test_demo_trains_both_variants_and_prints_table(tmp_path):
    result = run("demo", "--out", str(tmp_path), "--bits", "16", "--epochs", "2")
    assert result.exit_code == 0, result.output
    row = [line for line in result.output.splitlines() if line.strip().startswith("16 ")]
    assert len(row) == 1 and len(row[0].split()) == 7
    # the split the runs trained on: 10 of each digit's 100 training images held out, still database items
    assert "split digits: 900 train, 100 validation, 300 query, 1497 database (validation included)" in result.output
    assert "best validation epoch kept" in result.output
    assert "chance level: a random ranking has mAP@all 0.10" in result.output  # ten balanced digits
    assert f"LB's scale: {RATIO_SCALE}" in result.output and "not the queries" in RATIO_SCALE
    for name in ("csq", "csq_D"):
        metrics = json.loads((tmp_path / f"{name.lower()}-16bits" / "metrics.json").read_text())
        assert metrics["bits"] == 16 and 0 < metrics["map"] <= 1
        assert metrics["run"]["variant"] == name


def test_train_options_are_the_config_fields_with_their_defaults():
    from lbhash.cli.options import cli_fields, shown_default
    from lbhash.cli.train import train
    from lbhash.train.config import FIELDS, SETS, TrainConfig

    options = {p.name: p for p in train.params if isinstance(p, click.Option)}
    explicit = {"config_file", "out", "resume", "quiet", "method_option", "hidden", "topk"}
    config_names = {"method_option": "method_options", "hidden": "hidden", "topk": "topk"}
    assert set(options) - explicit == set(cli_fields())
    for name in cli_fields():
        option = options[name]
        assert option.opts[0] == "--" + name.replace("_", "-")
        shown = shown_default(name)
        assert ("[required]" if shown == "required" else f"[default: {shown}]") in option.help, name
        assert option.default is None  # not given: the config file and the defaults show through
    for option_name, field in config_names.items():
        assert f"[default: {shown_default(field)}]" in options[option_name].help, option_name
    assert set(FIELDS) - set(cli_fields()) == {"method_options", "hidden", "topk"}
    # what the data decides is the resolved run's, never a user's option; the config's own fields are its sets
    assert not {"input_kind", "input_dim"} & set(FIELDS) and "--input-dim" not in options
    assert list(TrainConfig.model_fields) == list(SETS)


def test_train_help_groups_its_options_by_option_set_and_lists_each_once():
    """`lbhash train --help` listed 63 options in one list (issue 60, item 7): they come in one
    section per option set of TrainConfig (the run's own options first), and every option
    appears exactly once, in the section of the option set that owns its field."""
    import re

    from lbhash.cli.options import SECTION_TITLES
    from lbhash.cli.train import train
    from lbhash.train.config import OWNERS, SETS

    text = run("train", "--help").output
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"^(\S[^\n]*):$", text, re.M)]
    titles = [h for _, h in heads]
    assert titles[:2] == ["Run", "Data"], titles
    assert list(SECTION_TITLES) == list(SETS)  # a title for each option set
    expected = {"config_file": "Run", "out": "Run", "resume": "Run", "quiet": "Run"}
    extra = {"method_option": "method_options", "hidden": "hidden", "topk": "topk"}
    for param in train.params:
        field = extra.get(param.name, param.name)
        if field in OWNERS:
            expected[param.name] = SECTION_TITLES[OWNERS[field]]
    assert set(titles) == set(expected.values()) and "Other options" not in titles, titles
    assert len(expected) == len(train.params) > 60
    ends = [start for start, _ in heads[1:]] + [len(text)]
    for param in train.params:
        flag = param.opts[0]
        where = [title for (start, title), end in zip(heads, ends)
                 if re.search(rf"^  {re.escape(flag)}(?![\w-])", text[start:end], re.M)]
        assert where == [expected[param.name]], (flag, where)
    assert re.search(r"^Run:\n(.*\n)*?  -h, --help", text, re.M)


def test_flags_reach_the_saved_config(tmp_path, monkeypatch):
    import yaml

    stop_before_the_first_epoch(monkeypatch)  # config.yaml is written before the first epoch

    out = tmp_path / "run"
    result = run("train", "--data", "digits", "--bits", "16", "--epochs", "1", "--hidden", "32,16",
                 "--lbhash", "--lbhash-weight", "0.5", "--surrogate-dropout", "0.25", "--no-theta-dropout",
                 "--method-option", "quantization=1e-3", "--topk", "50", "--centers", "hadamard",
                 "--out", str(out), "--no-progress")
    assert isinstance(result.exception, Killed), result.output
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert (saved["lbhash_weight"], saved["surrogate_dropout"], saved["theta_dropout"]) == (0.5, 0.25, False)
    assert saved["hidden"] == [32, 16] and saved["topk"] == 50
    assert saved["method_options"] == {"quantization": 1e-3} and saved["input_dim"] == 64


@pytest.mark.parametrize("value, widths", [("none", []), ("", []), ("64", [64])])
def test_hidden_none_or_empty_is_one_linear_layer_not_the_default(tmp_path, monkeypatch, value, widths):
    """An empty --hidden (`--hidden=`) once fell through to the feature default, a 1024-unit layer."""
    import yaml

    stop_before_the_first_epoch(monkeypatch)
    out = tmp_path / "run"
    result = run("train", "--data", "digits", "--bits", "16", "--epochs", "1", f"--hidden={value}",
                 "--out", str(out), "--no-progress")
    assert isinstance(result.exception, Killed), result.output
    assert yaml.safe_load((out / "config.yaml").read_text())["hidden"] == widths


@pytest.mark.parametrize("written, widths", [("none", []), ("None", []), ("[]", []), ("[64]", [64])])
def test_hidden_none_in_a_config_file_is_one_linear_layer(tmp_path, monkeypatch, written, widths):
    """Issue 87: `hidden: none` in a config file was refused where `--hidden none` worked."""
    import yaml

    stop_before_the_first_epoch(monkeypatch)
    (tmp_path / "c.yaml").write_text(f"hidden: {written}\n")
    out = tmp_path / "run"
    result = run("train", "--data", "digits", "--bits", "16", "--epochs", "1", "--config", str(tmp_path / "c.yaml"),
                 "--out", str(out), "--no-progress")
    assert isinstance(result.exception, Killed), result.output
    assert yaml.safe_load((out / "config.yaml").read_text())["hidden"] == widths


def test_hidden_rejects_a_non_integer_width():
    one_line_error(run("train", "--data", "digits", "--hidden", "64,x"), "--hidden must be comma-separated integers")


def test_input_error_is_one_line_but_an_internal_error_keeps_its_traceback(codes_file, monkeypatch):
    path, _ = codes_file
    one_line_error(run("evaluate", str(path), "--knn", "0"), "knn must be a positive integer, got 0")

    def broken(*args, **kwargs):
        raise ValueError("an internal bug inside numpy")

    monkeypatch.setattr("lbhash.evaluate.evaluate_codes", broken)
    result = run("evaluate", str(path))
    assert result.exit_code == 1 and "error:" not in result.output
    assert isinstance(result.exception, ValueError) and str(result.exception) == "an internal bug inside numpy"


def test_unparsable_option_values_are_one_line_errors():
    one_line_error(run("train", "--bits", "abc"), "--bits", "'abc'", "lbhash train --help")
    one_line_error(run("train", "--optimizer", "nadam"), "--optimizer", "nadam")


def test_training_docs_show_the_options_of_the_config():
    from pathlib import Path

    from lbhash.cli.options import options_markdown

    text = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    start = text.index("<!-- options -->\n") + len("<!-- options -->\n")
    assert text[start:].startswith(options_markdown() + "\n"), "regenerate the table with options_markdown()"
