"""Study specs (settings x methods x bits x seeds) and their report section."""

import csv
import json

import numpy as np
import pytest

from lbhash.errors import InputError
from lbhash.methods.base import PAPER_LBHASH
from lbhash.reproduce.experiments import Context
from lbhash.reproduce.experiments.objective_study import StudySpec, setting_slug, setting_values
from lbhash.reproduce.report import write_report
from lbhash.reproduce.tables import STUDY_COLUMNS, STUDY_EPOCHS_COLUMNS


def test_setting_strings():
    assert setting_values("base", "csq") == {"lbhash": False}
    assert setting_values("paper", "dch") == {"lbhash": True, **PAPER_LBHASH}
    mean = setting_values("lbhash_reduction=mean,lbhash_weight=0.1", "hashnet")
    assert mean == {**PAPER_LBHASH, "lbhash": True, "lbhash_reduction": "mean", "lbhash_weight": 0.1}
    assert setting_values("base,schedule=cosine,warmup_epochs=5", "csq") == {
        "lbhash": False, "schedule": "cosine", "warmup_epochs": 5}
    with pytest.raises(InputError, match="'bogus=1' is neither"):
        setting_values("bogus=1", "csq")
    assert setting_slug("lbhash_reduction=mean,lbhash_weight=0.1") == "lbhash-reduction-mean-lbhash-weight-0.1"


def test_study_cells_hold_every_value_explicitly(tmp_path):
    spec = StudySpec(study="s", methods=("csq", "dch"), settings=("base", "paper"), bits=(16, 32), seeds=(0, 1))
    ctx = Context(data="digits", out=tmp_path, overrides={"epochs": 3})
    plan = spec.plan(ctx)
    assert len(plan) == 2 * 2 * 2 * 2 and len({cell.name for _, _, cell in plan}) == 16
    method, setting, cell = plan[6]
    assert (method, setting) == ("csq", "paper")
    assert cell.config == {"validation": 0.1, "select": "best-val", "eval_every": 5, "data": "digits",
                           "method": "csq", "bits": 32, "seed": 0, "epochs": 3, "test": False, "lbhash": True,
                           **PAPER_LBHASH}


def _write_study(tmp_path, test: bool):
    rng = np.random.default_rng(0)
    rows, epochs = [], []
    for setting in ("base", "paper"):
        for seed in (0, 1, 2):
            run = f"csq-{setting}-32bits-seed{seed}"
            rows.append({"study": "demo", "run_id": run, "method": "csq", "setting": setting,
                         "lbhash": setting != "base", "bits": 32, "seed": seed, "val_map": rng.random(),
                         "selected_epoch": 5, "epochs_trained": 5, "map": rng.random() if test else "",
                         "config_hash": ""})
            epochs += [{"study": "demo", "run_id": run, "epoch": e, "val_map": rng.random(), "loss_total": 1.0}
                       for e in (1, 5)]
    for name, columns, table in (("study.csv", STUDY_COLUMNS, rows), ("study_epochs.csv", STUDY_EPOCHS_COLUMNS, epochs)):
        with open(tmp_path / name, "w", newline="") as fh:
            writer = csv.DictWriter(fh, columns)
            writer.writeheader()
            writer.writerows(table)
    (tmp_path / "meta.json").write_text(json.dumps({
        "data": "digits", "protocol": "digits", "seeds": [0, 1, 2], "epochs": 5, "commands": {},
        "created": "2026-11-22T00:00:00",
        "software": {"python": "3", "torch": "2", "numpy": "2", "lightning": "2", "lbhash": "0"}}))
    text = write_report(tmp_path).read_text()
    return rows, text[text.index("### demo"):]


def test_report_section_shows_the_means_of_the_study_tables(tmp_path):
    rows, section = _write_study(tmp_path, test=False)
    for setting in ("base", "paper"):
        values = [100 * r["val_map"] for r in rows if r["setting"] == setting]
        expected = f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"
        assert f"| `{setting}` | " in section and expected in section
    assert (tmp_path / "figures" / "study_demo.png").is_file()
    assert "test mAP" not in section  # the study did not evaluate the queries


def test_report_section_puts_each_setting_beside_base_in_test_map(tmp_path):
    rows, section = _write_study(tmp_path, test=True)
    table = section[section.index("**test mAP**"):]
    means = {s: 100 * np.mean([r["map"] for r in rows if r["setting"] == s]) for s in ("base", "paper")}
    stds = {s: 100 * np.std([r["map"] for r in rows if r["setting"] == s], ddof=1) for s in ("base", "paper")}
    row = next(line for line in table.splitlines() if line.startswith("| csq | 32 |"))
    assert f"{means['base']:.2f} ± {stds['base']:.2f}" in row and f"{means['paper']:.2f} ± {stds['paper']:.2f}" in row
    assert f"{means['paper'] - means['base']:+.2f}" in row


@pytest.mark.parametrize("name", ["../../escape", "/tmp/somewhere", "a/b", "..", ".hidden"])
def test_a_study_name_cannot_leave_out(tmp_path, name, monkeypatch):
    """Issue 27, item 3: the name is a folder under --out, never a path."""
    from click.testing import CliRunner

    from lbhash.cli import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["reproduce", "study", "--data", "digits", "--out", "o/p", "--methods", "csq",
                                       "--bits", "16", "--seeds", "0", "--epochs", "1", "--study", name,
                                       "--settings", "base"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --study") and "not a path" in lines[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == []  # nothing written anywhere


@pytest.mark.slow  # two worker processes, about 6 s; make test-slow, in CI
def test_a_validation_only_study_runs_on_two_workers(tmp_path):
    from lbhash.reproduce.runner import run_cells

    spec = StudySpec(study="two", methods=("csq",), settings=("base",), bits=(16,), seeds=(0, 1))
    ctx = Context(data="digits", out=tmp_path, overrides={"epochs": 2, "hidden": [32], "centers": "hadamard"})
    cells = [cell for _, _, cell in spec.plan(ctx)]
    lines = []
    results = run_cells(cells, tmp_path / "runs", workers=2, report=lines.append)
    assert all("map" not in r and 0 < r["run"]["validation_map"] <= 1 for r in results)
    done = [line for line in lines if line.startswith("done ")]
    assert done == [f"done {c.name}: validation mAP {r['run']['validation_map']:.4f}" for c, r in zip(cells, results)]


@pytest.mark.parametrize("name", ["../x", "/tmp/x", "a/b", "..", ".hidden", "x" * 256, ""])
def test_every_name_that_becomes_a_path_is_checked_the_same_way(tmp_path, name):
    from lbhash.index.milvus import MilvusIndex
    from lbhash.reproduce.runner import Cell, run_cells

    with pytest.raises(InputError, match="not a path"):
        run_cells([Cell(name=name, config={"data": "digits"})], tmp_path / "runs")
    with pytest.raises(InputError, match="collection .*not a path"):  # before any connection is tried
        MilvusIndex(32, collection=name, uri="http://127.0.0.1:9")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_milvus_collection_names_follow_milvus_rule():
    from lbhash._io import check_name

    assert check_name("codes_v2", "collection", milvus=True) == "codes_v2"
    for bad in ("codes-v2", "2codes", "codes.v2"):
        with pytest.raises(InputError, match="Milvus's rule"):
            check_name(bad, "collection", milvus=True)
