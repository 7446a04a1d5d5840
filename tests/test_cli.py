import json

import numpy as np
import pytest
from click.testing import CliRunner

from lbhash import __version__
from lbhash.cli import main
from lbhash.codes import save_codes_file
from lbhash.evaluate import evaluate_codes


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
    result = run("evaluate", str(path), "--topk", "30", "--ks", "5,10")
    assert result.exit_code == 0, result.output
    assert "mAP@30 (ties by index)" in result.output
    written = json.loads((path.parent / "metrics.json").read_text())
    assert written == json.loads(json.dumps(evaluate_codes(q, d, ql, dl, topk=30, ks=(5, 10))))


def test_evaluate_out_option(codes_file, tmp_path):
    path, _ = codes_file
    out = tmp_path / "sub" / "m.json"
    assert run("evaluate", str(path), "--out", str(out)).exit_code == 0
    assert json.loads(out.read_text())["topk"] == "all"


def _one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_evaluate_missing_key(tmp_path):
    path = tmp_path / "codes.npz"
    np.savez(path, query_codes=np.zeros((2, 2), np.uint8), db_codes=np.zeros((2, 2), np.uint8), bits=16)
    _one_line_error(run("evaluate", str(path)), "codes.npz", "missing key(s) query_labels, db_labels")


def test_evaluate_bad_topk(codes_file):
    path, _ = codes_file
    _one_line_error(run("evaluate", str(path), "--topk", "0"), "--topk", "'0'")


def test_evaluate_missing_and_corrupt_files(tmp_path):
    _one_line_error(run("evaluate", str(tmp_path / "none.npz")), "none.npz: no such file")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    _one_line_error(run("evaluate", str(bad)), "bad.npz")


def test_evaluate_mismatched_bits_in_file(tmp_path):
    path = tmp_path / "codes.npz"
    np.savez(path, query_codes=np.zeros((2, 2), np.uint8), db_codes=np.zeros((3, 1), np.uint8),
             query_labels=[0, 1], db_labels=[0, 1, 1], bits=16)
    _one_line_error(run("evaluate", str(path)), "db_codes", "bits=16 needs 2")


def test_demo_trains_both_variants_and_prints_table(tmp_path):
    result = run("demo", "--out", str(tmp_path), "--bits", "16", "--epochs", "2")
    assert result.exit_code == 0, result.output
    row = [line for line in result.output.splitlines() if line.strip().startswith("16 ")]
    assert len(row) == 1 and len(row[0].split()) == 7
    for name in ("csq", "csq_D"):
        metrics = json.loads((tmp_path / f"{name.lower()}-16bits" / "metrics.json").read_text())
        assert metrics["bits"] == 16 and 0 < metrics["map"] <= 1
        assert metrics["run"]["variant"] == name
