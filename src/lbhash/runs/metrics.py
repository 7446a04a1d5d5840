"""A run directory's results: metrics.json (`lbhash.train.results.run_metrics` of its files),
then manifest.json, written last (`finish_run`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lbhash._io import write_json
from lbhash.codes_file import load_codes_file
from lbhash.data import load_split
from lbhash.runs.rundir import CODES, CODES_SEEN, LOG, METRICS, SPLIT, load_run_config, read_log, write_manifest
from lbhash.train.results import run_metrics


def finish_run(run_dir: Path) -> dict[str, Any]:
    """Every metric of a finished run and a summary of it (metrics.json), then the manifest of
    every file, written last."""
    seen = load_codes_file(run_dir / CODES_SEEN) if (run_dir / CODES_SEEN).is_file() else None
    codes = load_codes_file(run_dir / CODES) if (run_dir / CODES).is_file() else None
    metrics = run_metrics(load_run_config(run_dir), read_log(run_dir / LOG), load_split(run_dir / SPLIT), codes, seen)
    write_json(run_dir / METRICS, metrics)
    write_manifest(run_dir)
    return metrics
