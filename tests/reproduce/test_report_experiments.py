"""`lbhash report` on what `lbhash reproduce` writes: each experiment alone, a mix of them in one
directory, and meta.json files of the first format (the committed results in docs/results)."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from helpers import cli
from lbhash.reproduce.experiments import Context, GridSpec
from lbhash.reproduce.meta import update_meta
from lbhash.reproduce.report import SECTIONS
from report_fixture import write_fixture
from run_bank import REPRODUCED

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
DEFAULT = "the data set's default"
# experiment -> its Setup row (data, protocol, seeds, epochs) as reproduced at tiny size by the
# session's bank (tests/run_bank.py REPRODUCED, the run "reproduce-EXPERIMENT")
SETUP = {
    "grid": ["digits", DEFAULT, "0", "2"],
    "bound": ["digits", DEFAULT, "0", "2"],
    "timing": ["digits", DEFAULT, "0", "2"],
    "centers": ["digits", DEFAULT, "0", "2"],
    "toy": ["—", "—", "0", "—"],
    "baselines": ["digits", DEFAULT, "0, 1", "1"],
    "study": ["digits", DEFAULT, "0", "2"],
}
# the report sections each experiment's tables feed ("setup" is always there, "agreement" may be)
OWN = {"grid": {"grid", "curves", "ratio", "convergence", "tsne"}, "bound": {"bound"}, "timing": {"timing"},
       "centers": {"centers"}, "toy": {"toy"}, "baselines": {"baselines"}, "study": {"study"}}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


# the baselines of the mixed directory below: LSH alone, as cheap as a run gets
LSH_ONLY = ["--data", "digits", "--methods", "lsh", "--bits", "16", "--seeds", "0"]


def reproduce(experiment, out, args):
    result = cli("reproduce", experiment, *args, "--out", out)
    assert result.exit_code == 0, result.output


def report(directory) -> str:
    result = cli("report", directory, "--tsne-points", 100)  # a small t-SNE keeps the grid's report fast
    assert result.exit_code == 0 and result.exception is None, result.output
    assert result.output.strip() == str(Path(directory) / "report.md")
    return (Path(directory) / "report.md").read_text()


def sections(text) -> set[str]:
    return {key for key, title in SECTIONS.items() if f"\n## {title}\n" in text}


def setup_rows(text) -> dict[str, list[str]]:
    """The Setup table: experiment -> [data, protocol, seeds, epochs]."""
    block = text[text.index("| experiment | data | protocol | seeds | epochs |"):]
    rows = block[:block.index("\n\n")].splitlines()[2:]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in r.strip("|").split("|")] for r in rows)}


def assert_sections_of(text, experiments):
    own = set().union(*(OWN[e] for e in experiments))
    found = sections(text)
    assert "setup" in found and own <= found, found
    assert found - own <= {"setup", "agreement"}, found - own  # nothing of the experiments not run


@pytest.mark.parametrize("experiment", [e if e != "toy" else pytest.param(e, marks=pytest.mark.slow) for e in SETUP])
def test_report_of_each_experiment_alone(tmp_path, experiment, runs):
    out = runs.copy(f"reproduce-{experiment}", tmp_path / "out")  # the report writes into it
    text = report(out)
    assert_sections_of(text, [experiment])
    key = "study:tiny" if experiment == "study" else experiment
    assert setup_rows(text) == {key: SETUP[experiment]}
    assert "is not here: no data" not in text
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == 2 and list(meta["experiments"]) == [key]


@pytest.mark.slow  # five experiments run, about 6 s (each alone is in the fast suite); make test-slow, in CI
def test_report_of_a_mixed_directory(tmp_path):
    out = tmp_path / "out"
    order = ["study", "baselines", "toy", "grid", "study"]  # a rerun (of finished cells) moves to the end
    for experiment in order:
        reproduce(experiment, out, LSH_ONLY if experiment == "baselines" else REPRODUCED[experiment])
    text = report(out)
    assert_sections_of(text, set(order))
    rows = setup_rows(text)
    assert list(rows) == ["baselines", "toy", "grid", "study:tiny"]
    for experiment in order:
        expected = ["digits", DEFAULT, "0", "method default"] if experiment == "baselines" else SETUP[experiment]
        assert rows["study:tiny" if experiment == "study" else experiment] == expected
    assert "is not here: no data" not in text


@pytest.mark.slow  # reports the committed results, about 40 s; make test-slow
@pytest.mark.parametrize("where, own, expected", [
    ("tables", ("grid", "curves", "ratio", "convergence", "bound", "timing", "centers", "toy"),
     {"grid": ["D", "cifar10", "0, 1, 2", "50"], "toy": ["—", "—", "0", "—"], "bound": ["D", "cifar10", "0", "50"],
      "timing": ["D", "cifar10", "—", "5"], "centers": ["D", "cifar10", "0, 1, 2", "50"]}),
    ("baselines", ("baselines",), {"baselines": ["D", "cifar10", "0, 1, 2", "30"]}),
    ("study/tables", ("study",), {"study:e2e": ["several (see the commands)"] * 2 + ["0", "60"]}),
])
def test_committed_results_of_the_first_format_still_report(tmp_path, where, own, expected):
    out = tmp_path / "out"
    out.mkdir()
    for path in (RESULTS / where).iterdir():  # the tables only: no report, figures or nested results
        if path.is_file() and path.suffix in (".json", ".csv"):
            shutil.copy(path, out)
    assert "format" not in json.loads((out / "meta.json").read_text())
    text = report(out)
    assert sections(text) - {"setup", "agreement"} == set(own)
    data = "features:../shared/data/cifar10-mobilenetv1-features.npz"  # the commands' --data
    rows = setup_rows(text)
    for key, row in expected.items():  # seeds and epochs as the commands give them (timing: its default 5)
        assert rows[key] == [data if cell == "D" else cell for cell in row], key
    assert "is not here: no data" not in text


@pytest.mark.slow  # reproduces two experiments end to end
def test_a_new_experiment_joins_an_old_meta_json(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(RESULTS / "tables" / "meta.json", out)  # five experiments, none of their tables
    old = json.loads((out / "meta.json").read_text())
    reproduce("toy", out, REPRODUCED["toy"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == 2 and list(meta["experiments"]) == ["grid", "bound", "timing", "centers", "toy"]
    assert meta["experiments"]["grid"]["command"] == old["commands"]["grid"]
    assert meta["experiments"]["grid"]["spec"] == old["experiments"]["grid"]["spec"]
    text = report(out)
    assert_sections_of(text, ["toy"])
    for name in ("grid.csv", "bound.csv", "timing.csv", "centers.csv"):
        assert f"but {name} is not here" in text
    assert setup_rows(text)["toy"] == ["—", "—", "0", "—"]


OLD_SOFTWARE = {"python": "3.11.7", "torch": "2.5", "numpy": "2.1", "lightning": "2.4", "lbhash": "0.2.0"}


@pytest.mark.parametrize("old, row", [
    # what `reproduce toy --bits 8` wrote before: no data or protocol
    ({"seeds": [], "epochs": "method default", "experiments": {"toy": {"spec": {"bits": [8], "seed": 0},
                                                                       "overrides": {}}}}, ["—", "—", "0", "—"]),
    # `reproduce bound --data digits --epochs 2`: the top level said "method default", the overrides 2
    ({"data": "digits", "protocol": DEFAULT, "seeds": [], "epochs": "method default",
      "experiments": {"bound": {"spec": {"method": "csq", "lbhash": True, "bits": [16], "seed": 0},
                                "overrides": {"epochs": 2}}}}, ["digits", DEFAULT, "0", "2"]),
])
def test_first_format_files_of_one_experiment_report(tmp_path, old, row):
    (experiment,) = old["experiments"]
    command = f"lbhash reproduce {experiment} --out P"
    (tmp_path / "meta.json").write_text(json.dumps({**old, "commands": {experiment: command},
                                                    "software": OLD_SOFTWARE, "created": "2026-11-20T10:00:00"}))
    text = report(tmp_path)
    assert setup_rows(text) == {experiment: row} and f"`{command}`" in text


def test_an_experiment_without_epochs_records_the_method_default(tmp_path):
    update_meta(tmp_path, "grid", GridSpec(methods=("csq",), seeds=(3,)), Context(data="digits", out=tmp_path),
                "lbhash reproduce grid --data digits --methods csq --seeds 3")
    record = json.loads((tmp_path / "meta.json").read_text())["experiments"]["grid"]
    assert (record["epochs"], record["seeds"], record["protocol"]) == ("method default", [3], DEFAULT)
    text = report(tmp_path)
    assert setup_rows(text) == {"grid": ["digits", DEFAULT, "3", "method default"]}
    assert "meta.json records the grid experiment, but grid.csv is not here" in text


@pytest.mark.parametrize("grid_data, kept_seed", [("cifar10-features", 0), ("other-data", 1), (None, None)])
def test_a_grid_of_several_data_sets_keeps_the_grid_experiments(tmp_path, grid_data, kept_seed):
    d = write_fixture(tmp_path / "d")
    for name in ("curves.csv", "epochs.csv", "codes_sample.npz", "study.csv", "study_epochs.csv", "toy_probs.npz"):
        (d / name).unlink()
    with open(d / "grid.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:  # seed 1's runs were made on other data
        row["data"] = "other-data" if row["seed"] == "1" else row["data"]
    with open(d / "grid.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if grid_data == "other-data":  # a format-2 record of the grid
        update_meta(d, "grid", GridSpec(), Context(data="other-data", out=d, protocol="paper"), "lbhash x")
    elif grid_data is None:  # meta.json records no grid
        meta = json.loads((d / "meta.json").read_text())
        (d / "meta.json").write_text(json.dumps({**meta, "commands": {"toy": "lbhash reproduce toy"}}))
        result = cli("report", d)
        assert result.exit_code == 2 and "meta.json records no grid experiment" in result.output
        return
    text = report(d)
    left_out = sum(row["seed"] != str(kept_seed) for row in rows)
    assert f"grid.csv: {left_out} runs on other data are left out." in text
    block = _section_text(text, "grid")
    assert f"(%) on {grid_data} (paper)." in block
    kept = next(r for r in rows if r["run_id"] == f"csq-16-s{kept_seed}")  # CSQ's one run left at 16 bits
    assert f"| CSQ | {100 * float(kept['map']):.2f} |" in block


def _section_text(text, key):
    start = text.index(f"## {SECTIONS[key]}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _format_2(tmp_path):
    update_meta(tmp_path, "grid", GridSpec(methods=("csq",)), Context(data="digits", out=tmp_path), "lbhash x")
    return json.loads((tmp_path / "meta.json").read_text())


@pytest.mark.parametrize("edit, fragment", [
    (lambda m: m.update(format=3), "unknown format 3"),
    (lambda m: m.pop("software"), "missing key(s) software"),
    (lambda m: m.update(experiments=[]), "'experiments' must be a JSON object"),
    (lambda m: m["experiments"]["grid"].update(seeds="0"), "'experiments.grid.seeds' must be a list of integers"),
    (lambda m: m["experiments"]["grid"].update(epochs=True), "'experiments.grid.epochs' must be an integer"),
    (lambda m: m["experiments"]["grid"].update(data=1), "'experiments.grid.data' must be a string"),
    (lambda m: [m.pop("format"), m.update(seeds="x")], "'seeds' must be a list of integers"),
    (lambda m: [m.pop("format"), m["experiments"]["grid"].update(spec=3)], "'experiments.grid.spec' must be a JSON"),
])
def test_a_bad_meta_json_is_one_line_naming_file_and_key(tmp_path, edit, fragment):
    meta = _format_2(tmp_path)
    edit(meta)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    for args in (["report", tmp_path], ["reproduce", "toy", "--bits", "8", "--out", tmp_path]):
        result = cli(*args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {tmp_path / 'meta.json'}: ") and fragment in lines[0]
    assert not (tmp_path / "toy.json").exists()  # reproduce refused before running
