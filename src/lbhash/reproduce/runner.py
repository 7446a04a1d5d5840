"""Run training cells in parallel processes, resumably.

A cell is one training run: a name and the TrainConfig values that define it (`cell.json` in
its run directory). A rerun skips finished cells, continues unfinished ones from their last
checkpoint, and refuses a directory whose run was made with other values.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

from lbhash._io import check_name, write_json
from lbhash.cpus import usable_cpus
from lbhash.errors import InputError

CELL = "cell.json"
# values that change how a run is watched, not what it computes (eval_every only without a
# validation split: with one, it decides which epochs can be kept)
NOT_HASHED = {"progress", "eval_every", "num_workers"}


@dataclass(frozen=True)
class Cell:
    name: str
    config: dict  # TrainConfig values

    @property
    def config_hash(self) -> str:
        return config_hash(self.config)


def config_hash(config: dict) -> str:
    watched = NOT_HASHED if config.get("validation") == 0 else NOT_HASHED - {"eval_every"}
    relevant = {k: v for k, v in sorted(config.items()) if k not in watched}
    return hashlib.sha1(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cell_state(cell: Cell, run_dir: Path) -> str:
    """'new', 'unfinished' or 'finished'; a directory made by other values is an error."""
    if not run_dir.exists():
        return "new"
    saved = run_dir / CELL
    if saved.is_file():
        if json.loads(saved.read_text())["config_hash"] != cell.config_hash:
            raise InputError(f"{run_dir} holds a run with other settings than cell {cell.name}; "
                             "remove it or choose another --out")
    elif (run_dir / "config.yaml").is_file():
        _adopt(cell, run_dir)  # a run made by hand (or an older runner) with the same values
    else:
        return "new"
    return "finished" if (run_dir / "metrics.json").is_file() else "unfinished"


def _adopt(cell: Cell, run_dir: Path) -> None:
    from lbhash.runs import RunDirectory

    saved = RunDirectory(run_dir).config().to_dict()
    for key, value in cell.config.items():
        if key not in NOT_HASHED and saved.get(key) != value:
            raise InputError(f"{run_dir} holds a run with {key}={saved.get(key)!r}, but cell {cell.name} "
                             f"needs {value!r}; remove it or choose another --out")
    _mark(cell, run_dir)


def _mark(cell: Cell, run_dir: Path, epoch: int | None = None) -> None:
    """Write cell.json if it is not there; a new run calls it as each epoch ends (the run
    directory exists after the first)."""
    if not (run_dir / CELL).exists():
        write_json(run_dir / CELL, {"name": cell.name, "config_hash": cell.config_hash, "config": cell.config})


def run_cell(cell: Cell, root: str, threads: int) -> dict[str, Any]:
    """Train one cell (in a worker process) and return its metrics."""
    if threads:
        os.environ["LBHASH_NUM_THREADS"] = str(threads)
        import torch

        torch.set_num_threads(threads)
    from lbhash.runs import RunDirectory
    from lbhash.train import make_config

    run_dir = Path(root) / cell.name
    state = cell_state(cell, run_dir)
    if state == "finished":
        return json.loads((run_dir / "metrics.json").read_text())
    if state == "new":
        if run_dir.exists():  # created but killed before its first file
            shutil.rmtree(run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        return RunDirectory(run_dir).train(make_config({**cell.config, "progress": False}),
                                           on_epoch_end=partial(_mark, cell, run_dir))
    return RunDirectory(run_dir).resume(progress=False)


def _headline(metrics: dict[str, Any]) -> str:
    """Test mAP, or validation mAP for a validation-only run (studies without --test)."""
    if "map" in metrics:
        return f"mAP {metrics['map']:.4f}"
    val = metrics.get("run", {}).get("validation_map")
    return "no evaluation" if val is None else f"validation mAP {val:.4f}"


def run_cells(cells: list[Cell], root: Path, workers: int = 1,
              report: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run every cell (finished ones are read back); return their metrics in cell order."""
    names = [check_name(c.name, "cell") for c in cells]
    if len(set(names)) != len(names):
        raise InputError("cell names must be unique")
    states = {c.name: cell_state(c, root / c.name) for c in cells}  # every check before any work
    todo = sum(s != "finished" for s in states.values())
    report(f"{len(cells)} cells: {len(cells) - todo} finished, {todo} to run, {workers} worker(s)")
    if workers <= 1:
        return [run_cell(c, str(root), 0) for c in cells]
    threads = max(1, usable_cpus() // workers)
    # spawn: a forked child would inherit the parent's torch and numba thread pools
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(run_cell, c, str(root), threads) for c in cells]
        results = []
        for cell, future in zip(cells, futures):
            results.append(future.result())
            report(f"done {cell.name}: {_headline(results[-1])}")
    return results
