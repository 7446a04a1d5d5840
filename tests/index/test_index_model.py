"""An index knows which model made its codes (issue 46 item 6): `index build` records the run's
weights; `search --run` and `serve --run` refuse a run that trained on since, unless --force."""

import json
import shlex

import numpy as np
from helpers import cli
from sklearn.datasets import load_digits

from lbhash._io import file_sha256 as sha256
from lbhash.runs.run_files import model_identity

def one_line(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and all(f in lines[0] for f in fragments), result.output
    return lines[0]


def test_a_search_with_a_model_that_did_not_make_the_index_is_refused(tmp_path, runs):
    ix, queries = tmp_path / "ix", tmp_path / "q.npy"
    # CSQ of 2 epochs on every training item (no validation share: the last epoch is the model), trained on below
    run = runs.copy("reproduce-grid", tmp_path / "grid") / "runs" / "grid" / "csq-16bits-seed0"
    np.save(queries, load_digits().data[:5].astype(np.float32))
    assert cli("index", "build", run, "--out", ix).exit_code == 0
    recorded = json.loads((ix / "manifest.json").read_text())["metadata"]["model"]
    assert recorded == {"file": "checkpoint.pt", "sha256": sha256(run / "checkpoint.pt"), "epoch": 2,
                        "run": str(run.resolve()), "variant": "csq", "bits": 16, "input_kind": "features",
                        "backbone": None, "data": "digits"}
    search = ["search", ix, "--features", queries, "--run", run, "--json"]
    first = cli(*search)
    assert first.exit_code == 0, first.output
    assert cli("train", "--out", run, "--resume", "--epochs", 3).exit_code == 0  # the model moves on
    assert model_identity(run)["epoch"] == 3 and model_identity(run)["sha256"] != recorded["sha256"]
    line = one_line(cli(*search), str(run), "epoch 3", "did not make the codes of", "epoch 2",
                    "trained on since", f"lbhash index build {run} --out {ix}-csq-16bits-seed0`", "--force")
    assert "Traceback" not in line and "--overwrite" not in line  # the advice keeps the index it was given
    one_line(cli("serve", ix, "--run", run, "--port", 0), "did not make the codes of", "--force")
    assert not (tmp_path / "ix.wal").exists()  # refused before the index was opened
    forced = cli(*search, "--force")
    assert forced.exit_code == 0 and "warning: " in forced.output and "--force" in forced.output, forced.output
    built = cli("index", "build", run, "--out", f"{ix}-csq-16bits-seed0")  # the advice, as written: a new index
    assert built.exit_code == 0, built.output
    assert cli("search", f"{ix}-csq-16bits-seed0", *search[2:]).exit_code == 0
    assert cli("search", ix, "--codes", run / "codes.npz").exit_code == 0  # codes need no model


def test_an_index_of_a_codes_file_has_no_model_to_check(tmp_path, runs):
    ix, queries = tmp_path / "ix", tmp_path / "q.npy"
    run = runs.path("csq")  # only read
    np.save(queries, load_digits().data[:3].astype(np.float32))
    assert cli("encode", run, "--out", tmp_path / "c.npz", "--no-progress").exit_code == 0
    assert cli("index", "build", tmp_path / "c.npz", "--out", ix).exit_code == 0
    assert "model" not in json.loads((ix / "manifest.json").read_text())["metadata"]
    assert cli("search", ix, "--features", queries, "--run", run).exit_code == 0


def test_search_prints_the_query_label_class_names_and_marks_other_classes(tmp_path, runs, tiny_image_run):
    run, ix = runs.path("csq"), tmp_path / "ix"  # only read
    assert cli("index", "build", run, "--out", ix).exit_code == 0
    result = cli("search", ix, "--codes", run / "codes.npz", "-k", 5)
    assert result.exit_code == 0, result.output
    codes = np.load(run / "codes.npz")
    lines = result.output.splitlines()
    heads = [k for k, line in enumerate(lines) if line.startswith("query ")]
    assert len(heads) == len(codes["query_labels"])
    for q in (0, 1, 7):
        own = int(codes["query_labels"][q])
        assert lines[heads[q]] == f"query {q} (row {q}, label {own}): 5 results"
        for hit in lines[heads[q] + 1:heads[q] + 6]:
            other = int(hit.split("labels ")[1].split()[0]) != own
            assert hit[7] == ("x" if other else " "), hit
    assert lines[-1] == "x: a hit of another class than its query"
    data = json.loads(cli("search", ix, "--codes", run / "codes.npz", "-k", 2, "--json").output)
    assert data[3]["query_labels"] == [int(codes["query_labels"][3])]
    # an image index knows its class names: ids print with them
    tree, image_run = tiny_image_run
    assert cli("index", "build", image_run, "--out", tmp_path / "img").exit_code == 0
    red = sorted((tree / "train" / "red").glob("*.png"))[0]
    result = cli("search", tmp_path / "img", "--images", red, "--run", image_run, "-k", 3)
    assert result.exit_code == 0 and "labels 2 red" in result.output, result.output


def test_feature_rows_given_to_an_image_run_are_refused_in_one_clear_line(tmp_path, tiny_image_run):
    """`search --features` with a run that encodes images said `got object with shape ()`
    (issue 60, item 7): it now names what was given and what the run takes."""
    tree, image_run = tiny_image_run
    ix = tmp_path / "img"
    assert cli("index", "build", image_run, "--out", ix).exit_code == 0
    np.save(tmp_path / "q.npy", np.zeros((2, 8), np.float32))
    line = one_line(cli("search", ix, "--features", tmp_path / "q.npy", "--run", image_run),
                    "q.npy", "--features takes feature rows", "encodes images", "--images")
    assert "shape ()" not in line and "object" not in line


def test_another_run_is_refused_with_advice_that_keeps_the_index(tmp_path, runs, tiny_image_run):
    """Issue 60 item 3: searching an index through another run (a typo away) names the run that
    built it and a new index name; each piece of advice, run as written, leaves the index as it
    was. Models are told apart by what they are (variant, bits, input kind, run), not by epoch."""
    from helpers import snapshot

    ix, queries = tmp_path / "ix", tmp_path / "q.npy"
    mine, other = runs.path("csq"), runs.path("csq-4")  # only read: two feature runs of 16 bits
    np.save(queries, load_digits().data[:3].astype(np.float32))
    assert cli("index", "build", mine, "--out", ix).exit_code == 0
    (tmp_path / f"ix-{other.name}").mkdir()  # that name is taken: the advice must pick a free one
    before = snapshot(tmp_path)
    line = one_line(cli("search", ix, "--features", queries, "--run", other), f"run {other.resolve()}",
                    f"run {mine.resolve()}", "csq 16 bits on feature rows", f"--run {mine.resolve()}")
    assert "--overwrite" not in line and f"--out {ix} " not in line and f"--out {ix}`" not in line
    command = line.split("`")[1]
    assert command == f"lbhash index build {other} --out {ix}-{other.name}-2", line
    assert cli(*shlex.split(command)[1:]).exit_code == 0  # the advice, as written
    assert snapshot(tmp_path / "ix") == {k[len("ix/"):]: v for k, v in before.items() if k.startswith("ix/")}
    assert cli("search", ix, "--features", queries, "--run", mine.resolve()).exit_code == 0  # the other advice


def test_an_image_index_is_never_searched_through_a_feature_model(tmp_path, runs, tiny_image_run):
    """--force may search through another model of the same input kind (with a warning), never
    through one that takes another kind of input: its codes cannot be compared."""
    tree, image_run = tiny_image_run
    features_run, ix, queries = runs.path("csq"), tmp_path / "img", tmp_path / "q.npy"
    np.save(queries, load_digits().data[:3].astype(np.float32))
    assert cli("index", "build", image_run, "--out", ix).exit_code == 0
    for force in ([], ["--force"]):
        line = one_line(cli("search", ix, "--features", queries, "--run", features_run, *force),
                        "encodes feature rows", "are of images", "--force does not apply", f"--run {image_run.resolve()}")
        assert "--overwrite" not in line
        one_line(cli("serve", ix, "--run", features_run, "--port", 0, *force), "encodes feature rows", "are of images")
    # an index built before lbhash recorded the input kind: the kind of its recorded data tells
    from lbhash.index import CodeIndex

    index = CodeIndex.load(ix)
    index.metadata["model"] = {k: index.metadata["model"][k] for k in ("file", "sha256", "epoch")}
    index.save(ix)
    one_line(cli("search", ix, "--features", queries, "--run", features_run, "--force"), "are of images")
