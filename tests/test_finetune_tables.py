"""studies/finetune_tables.py keeps a grid cell by its name and its epoch count: a method trained by
another recipe (DSDH's own, 60 epochs) is never averaged or paired with the records' cell of the same
name under the shared recipe (18 epochs). Records written before the count was a column get it from
their epoch rows; a record with neither is refused."""

import csv
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "studies" / "finetune_tables.py"


def _cell(out: Path, name: str, epochs: int, map_: float) -> None:
    run = out / "grid" / "runs" / "grid" / name
    run.mkdir(parents=True)
    (run / "log.jsonl").write_text("".join(
        json.dumps({"epoch": e, "phase": "probe" if e <= 40 else "tune", "seconds": 1.0, "eval": {"val_map": 0.5}}) + "\n"
        for e in range(1, epochs + 1)))
    (run / "metrics.json").write_text(json.dumps({"map": map_, "map_tie_averaged": map_, "knn_accuracy": {"accuracy": 0.8},
                                                  "run": {"selected_epoch": epochs, "validation_map": 0.8}}))


def _write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _old_records(dest: Path) -> None:
    """Seed 0 of DSDH and DSDH_D under the shared recipe (18 epochs), in the format without `epochs`."""
    dest.mkdir()
    cells = [{"cell": f"{v}-64bits-seed0", "map_54000": m, "map_tie_averaged": m, "knn_accuracy": 0.7,
              "selected_epoch": 18, "validation_map": 0.5} for v, m in (("dsdh", 0.478), ("dsdh_D", 0.749))]
    _write(dest / "grid-cells.csv", cells)
    _write(dest / "grid-epochs.csv", [{"cell": c["cell"], "epoch": e, "phase": "tune", "seconds": 1.0, "val_map": 0.5}
                                      for c in cells for e in range(1, 19)])


def _tables(out: Path, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(out), "--copy", str(dest)], capture_output=True, text=True,
                          timeout=60)


def test_cells_of_another_epoch_count_are_kept_apart(tmp_path):
    out, dest = tmp_path / "out", tmp_path / "dest"
    _old_records(dest)
    for seed, (base, with_d) in {1: (0.70, 0.73), 2: (0.72, 0.72)}.items():
        _cell(out, f"dsdh-64bits-seed{seed}", 60, base)
        _cell(out, f"dsdh_D-64bits-seed{seed}", 60, with_d)
    result = _tables(out, dest)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # each recipe named by its epoch count: the shared one's seed 0 alone, the own one's two seeds (70 and
    # 72: 71.0 +- 1.4) apart
    assert "| dsdh (18 epochs) | 47.8 (1 seed) |" in lines
    assert "| dsdh (60 epochs) | 71.0 ± 1.4 (2 seeds) |" in lines
    assert "| dsdh (60 epochs) 64bits | 1, 2 | 70.0, 72.0 | 73.0, 72.0 | +3.0 / +0.0 | +1.5 |" in lines
    assert not any(line.startswith("| dsdh (18 epochs) 64bits") for line in lines)  # no pair across the two recipes
    with open(dest / "grid-cells.csv", newline="") as fh:
        kept = {(r["cell"], r["epochs"]) for r in csv.DictReader(fh)}
    assert kept == {("dsdh-64bits-seed0", "18"), ("dsdh_D-64bits-seed0", "18"), ("dsdh-64bits-seed1", "60"),
                    ("dsdh_D-64bits-seed1", "60"), ("dsdh-64bits-seed2", "60"), ("dsdh_D-64bits-seed2", "60")}
    with open(dest / "grid-epochs.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 2 * 18 + 4 * 60


def test_a_record_with_no_epoch_count_and_no_epoch_rows_is_refused(tmp_path):
    out, dest = tmp_path / "out", tmp_path / "dest"
    _old_records(dest)
    _write(dest / "grid-epochs.csv", [{"cell": "dsdh-64bits-seed0", "epoch": 1, "phase": "tune", "seconds": 1.0,
                                       "val_map": 0.5}])
    _cell(out, "dsdh-64bits-seed1", 60, 0.7)
    result = _tables(out, dest)
    assert result.returncode != 0
    assert "dsdh_D-64bits-seed0: no epoch count, and no epoch rows to count" in result.stderr


def test_the_hours_line_counts_a_seed_run_under_two_recipes_as_two_cells(tmp_path):
    out, dest = tmp_path / "out", tmp_path / "dest"
    _old_records(dest)  # dsdh and dsdh_D at seed 0, 18 epochs
    _cell(out, "dsdh-64bits-seed0", 60, 0.74)  # the same name under the 60-epoch recipe
    result = _tables(out, dest)
    assert result.returncode == 0, result.stderr
    assert "3 cells; fastest fine-tuning epoch per cell 1-1 s" in result.stdout
