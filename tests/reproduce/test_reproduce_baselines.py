"""`lbhash reproduce baselines`: the comparison table of baselines and deep methods on seen and
unseen classes, checked against brute-force rankings recomputed here."""

import csv

import numpy as np
import pytest
from click.testing import CliRunner

from lbhash.cli import main
from lbhash.codes import unpack
from lbhash.codes_file import load_codes_file
from lbhash.data import load_data
from lbhash.errors import InputError
from lbhash.reproduce.experiments import Context
from lbhash.reproduce.experiments.baselines import BaselinesSpec, ranked_map
from run_bank import REPRODUCED


def brute_ap(scores: np.ndarray, relevant: np.ndarray, top: int) -> float:
    """AP@top of one query: items sorted by descending score, equal scores by index."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top]
    hits, total = 0, 0.0
    for rank, i in enumerate(order, 1):
        if relevant[i]:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


def brute_map(scores: np.ndarray, relevant: np.ndarray, top: int) -> float:
    return float(np.mean([brute_ap(s, r, top) for s, r in zip(scores, relevant)]))


def test_ranked_map_matches_a_per_query_loop_with_ties():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, size=(7, 40)).astype(float)  # many ties: the index decides
    relevant = rng.random((7, 40)) < 0.3
    relevant[0] = False  # a query without relevant items scores 0
    for top in (1, 5, 40):
        assert ranked_map(scores, relevant, top) == pytest.approx(brute_map(scores, relevant, top), abs=1e-12)


def test_baselines_refuses_an_unseen_protocol_and_held_out_elsewhere(tmp_path):
    with pytest.raises(InputError, match="give the base protocol"):
        BaselinesSpec().cells(Context(data="digits", out=tmp_path, protocol="unseen:2"))
    result = CliRunner().invoke(main, ["reproduce", "grid", "--data", "digits", "--held-out", "2",
                                       "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--held-out applies to the baselines experiment only" in result.output


def test_cells_hold_out_a_quarter_of_the_classes_by_default(tmp_path):
    cells = BaselinesSpec(methods=("lsh", "csq"), bits=(16,), seeds=(0,)).cells(
        Context(data="digits", out=tmp_path, protocol="digits"))
    assert [c.name for c in cells] == ["lsh-16bits-seed0", "csq-16bits-seed0", "csq_D-16bits-seed0"]
    assert {c.config["protocol"] for c in cells} == {"unseen:3:digits"}  # ceil(10 / 4)
    assert "epochs" not in cells[0].config  # the closed-form baseline ignores epochs


def test_a_bad_held_out_count_writes_nothing(tmp_path):
    result = CliRunner().invoke(main, ["reproduce", "baselines", "--data", "digits", "--methods", "lsh", "--bits",
                                       "16", "--seeds", "0", "--held-out", "0", "--out", str(tmp_path / "ob")])
    assert result.exit_code == 2
    assert result.output.strip() == "error: protocol 'unseen:0': K (held-out classes) must be at least 1, got 0"
    assert not (tmp_path / "ob").exists()


def test_a_closed_form_run_is_found_finished_by_a_rerun(tmp_path, runs):
    # the bank's run gave no --protocol: the cells' is 'unseen:3', the runs' 'unseen:3:digits'
    out = runs.copy("reproduce-baselines", tmp_path / "ob")
    assert (out / "runs" / "baselines" / "lsh-16bits-seed0" / "cell.json").is_file()
    again = CliRunner().invoke(main, ["reproduce", "baselines", *REPRODUCED["baselines"], "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert "6 cells: 6 finished, 0 to run" in again.output  # LSH, CSQ and CSQ_D at two seeds


@pytest.fixture
def baselines_out(runs):
    """LSH, CSQ and CSQ_D of one epoch at seeds 0 and 1, the default 3 classes held out (tests/run_bank.py)."""
    return runs.path("reproduce-baselines")


def _rows(out):
    with open(out / "baselines.csv") as fh:
        return list(csv.DictReader(fh))


def test_every_run_has_seen_and_unseen_symmetric_and_asymmetric_rows(baselines_out):
    rows = _rows(baselines_out)
    keys = {(r["variant"], r["seed"], r["classes"], r["ranking"]) for r in rows}
    for variant in ("lsh", "csq", "csq_D"):
        for seed in ("0", "1"):
            for classes in ("seen", "unseen"):
                for ranking in ("symmetric", "asymmetric"):
                    assert (variant, seed, classes, ranking) in keys
    assert {(r["seed"], r["classes"]) for r in rows if r["variant"] == "cosine-knn"} == {
        ("0", "seen"), ("0", "unseen"), ("1", "seen"), ("1", "unseen")}
    assert (baselines_out / "baselines.png").stat().st_size > 0
    summary = (baselines_out / "baselines.md").read_text()
    assert "| csq_D |" in summary and "Float cosine kNN" in summary


def test_unseen_rows_hold_only_held_out_classes(baselines_out):
    run = baselines_out / "runs" / "baselines" / "lsh-16bits-seed1"
    rows = [r for r in _rows(baselines_out) if r["variant"] == "lsh" and r["seed"] == "1"]
    held = {int(c) for c in rows[0]["held_out"].split()}
    assert len(held) == 3
    unseen, seen = load_codes_file(run / "codes.npz"), load_codes_file(run / "codes_seen.npz")
    unseen_classes = set(np.flatnonzero(unseen["query_labels"].any(0))) | set(np.flatnonzero(unseen["db_labels"].any(0)))
    seen_classes = set(np.flatnonzero(seen["query_labels"].any(0))) | set(np.flatnonzero(seen["db_labels"].any(0)))
    assert unseen_classes == held and not (seen_classes & held)


def test_symmetric_and_asymmetric_maps_equal_brute_force(baselines_out):
    run = baselines_out / "runs" / "baselines" / "csq_D-16bits-seed0"
    rows = {(r["classes"], r["ranking"]): r for r in _rows(baselines_out)
            if r["variant"] == "csq_D" and r["seed"] == "0"}
    for classes, name in (("seen", "codes_seen.npz"), ("unseen", "codes.npz")):
        codes = load_codes_file(run / name)
        q = unpack(codes["query_codes"], 16).astype(float)
        db = unpack(codes["db_codes"], 16).astype(float)
        relevant = (codes["query_labels"].astype(int) @ codes["db_labels"].astype(int).T) > 0
        hamming = (16 - q @ db.T) / 2
        top = min(1000, len(db))
        assert float(rows[(classes, "symmetric")]["map_all"]) == pytest.approx(
            brute_map(-hamming, relevant, len(db)), abs=1e-9)
        assert float(rows[(classes, "symmetric")]["map_1000"]) == pytest.approx(
            brute_map(-hamming, relevant, top), abs=1e-9)
        asym = codes["query_real"].astype(float) @ db.T
        assert float(rows[(classes, "asymmetric")]["map_all"]) == pytest.approx(
            brute_map(asym, relevant, len(db)), abs=1e-9)


def test_float_reference_is_cosine_knn_on_the_features(baselines_out):
    run = baselines_out / "runs" / "baselines" / "lsh-16bits-seed0"
    codes = load_codes_file(run / "codes.npz")
    x = load_data("digits").x.astype(float)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q, db = x[codes["query_ids"]], x[codes["db_ids"]]
    relevant = (codes["query_labels"].astype(int) @ codes["db_labels"].astype(int).T) > 0
    row = next(r for r in _rows(baselines_out)
               if r["variant"] == "cosine-knn" and r["seed"] == "0" and r["classes"] == "unseen")
    assert float(row["map_all"]) == pytest.approx(brute_map(q @ db.T, relevant, len(db)), abs=1e-9)
    assert int(row["bytes_per_item"]) == 4 * x.shape[1]


def test_an_empty_list_option_is_refused_and_a_failed_first_run_leaves_no_folders(tmp_path, monkeypatch):
    out = tmp_path / "o"
    for flag in ("--settings", "--methods", "--kinds"):
        result = CliRunner().invoke(main, ["reproduce", "study" if flag == "--settings" else "baselines",
                                           "--data", "digits", flag, " ", "--out", str(out)])
        assert result.exit_code == 2 and f"{flag} is empty" in result.output, result.output
        assert not out.exists()

    def broken(*args, **kwargs):
        raise RuntimeError("a run failed")

    monkeypatch.setattr("lbhash.reproduce.experiments.baselines.run_cells", broken)
    result = CliRunner().invoke(main, ["reproduce", "baselines", "--data", "digits", "--methods", "lsh", "--bits",
                                       "16", "--seeds", "0", "--out", str(out)])
    assert isinstance(result.exception, RuntimeError)
    assert not out.exists()  # no empty o/runs/baselines behind
