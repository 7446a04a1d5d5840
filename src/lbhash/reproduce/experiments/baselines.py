"""`lbhash reproduce baselines`: deep methods (with and without _D) against the closed-form
baselines and float cosine kNN, on seen and unseen classes, ranked symmetrically and
asymmetrically (docs/reproduce.md; lbhash.reproduce.baselines_summary makes its tables).

Every run trains under `unseen:K[:BASE]`, so one run gives retrieval among the held-out classes
(codes.npz) and among the training classes (codes_seen.npz). Results: baselines.csv,
baselines.md and baselines.png.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash._io import atomic_path
from lbhash.codes_file import load_codes_file
from lbhash.errors import InputError
from lbhash.evaluate import evaluate_codes
from lbhash.reproduce.baselines_summary import baselines_figure, summary_lines
from lbhash.reproduce.experiments.specs import CellSpec, GridSpec, variant_name, write_csv
from lbhash.reproduce.runner import run_cells
from lbhash.reproduce.tables import BASELINES_COLUMNS, BASELINES_FILE, BASELINES_REFERENCE

BASELINES = ("lsh", "pca", "itq", "linear")
DEEP = ("csq", "orthohash")
TOP = 1000  # the second cut-off beside R = all
MD_FILE, FIGURE_FILE = "baselines.md", "baselines.png"
PARTS = (("seen", "codes_seen.npz"), ("unseen", "codes.npz"))


def default_methods() -> tuple[str, ...]:
    """The four baselines and the deep methods of the comparison that are registered."""
    from lbhash.methods import available_methods

    return BASELINES + tuple(m for m in DEEP if m in available_methods())


@dataclass(frozen=True)
class BaselinesSpec(CellSpec):
    methods: tuple = ()          # empty: default_methods()
    bits: tuple = (16, 32, 64)
    seeds: tuple = (0, 1, 2)
    held_out: int | None = None  # K; None: a quarter of the classes, rounded up

    def protocol(self, ctx) -> str:
        from lbhash.data import load_data

        k = self.held_out
        if k is None:
            k = math.ceil(load_data(ctx.data).num_classes / 4)
        return f"unseen:{k}" + (f":{ctx.protocol}" if ctx.protocol else "")

    def grid(self):
        return GridSpec(methods=self.methods or default_methods(), bits=self.bits, seeds=self.seeds)

    def cells(self, ctx):
        if ctx.protocol and ctx.protocol.startswith("unseen:"):
            raise InputError("--protocol: baselines hold classes out themselves; give the base protocol "
                             f"(e.g. cifar10), not {ctx.protocol!r}")
        return self.grid().cells(dataclasses.replace(ctx, protocol=self.protocol(ctx)))

    def run(self, ctx) -> None:
        cells, root = self.cells(ctx), ctx.runs("baselines")
        run_cells(cells, root, ctx.workers, ctx.report)
        rows, splits = [], {}
        for cell in cells:
            rows += run_rows(cell.config, root / cell.name)
            splits.setdefault(cell.config["seed"], []).append(root / cell.name)
        from lbhash.data import load_data

        dataset = load_data(ctx.data)  # once: the float reference of every seed reads it
        for seed, run_dirs in sorted(splits.items()):
            rows += reference_rows(dataset, seed, run_dirs)
        write_csv(ctx.out / BASELINES_FILE, BASELINES_COLUMNS, rows)
        title = "# Baselines: seen and unseen classes, symmetric and asymmetric ranking"
        with atomic_path(ctx.out / MD_FILE) as tmp:
            Path(tmp).write_text("\n".join([title, "", *summary_lines(rows)]))
        baselines_figure(rows, ctx.out / FIGURE_FILE)
        ctx.report(f"baselines: {len(cells)} runs summarised in {BASELINES_FILE}, {MD_FILE} and {FIGURE_FILE}")


def run_rows(config: dict, run_dir: Path) -> list[dict]:
    """Seen and unseen classes x symmetric and asymmetric ranking of one finished run."""
    from lbhash.methods import method_class

    method, bits = config["method"], config["bits"]
    base = {"method": method, "variant": variant_name(method, config.get("lbhash", False)),
            "kind": "baseline" if method_class(method).closed_form else "deep", "bits": bits,
            "bytes_per_item": -(-bits // 8), "seed": config["seed"]}
    rows = []
    for classes, name in PARTS:
        codes = load_codes_file(run_dir / name)
        args = (codes["query_codes"], codes["db_codes"], codes["query_labels"], codes["db_labels"])
        full = evaluate_codes(*args, bits=bits, query_real=codes["query_real"])
        cut = evaluate_codes(*args, bits=bits, topk=min(TOP, len(codes["db_codes"])),
                             query_real=codes["query_real"])
        shared = {**base, "classes": classes, "n_query": len(codes["query_codes"]),
                  "n_database": len(codes["db_codes"]), "held_out": _held_out(run_dir),
                  "protocol": _protocol(run_dir)}
        for ranking, whole, top in (("symmetric", full, cut), ("asymmetric", full["asymmetric"], cut["asymmetric"])):
            rows.append({**shared, "ranking": ranking, "map_all": whole["map"], "map_1000": top["map"],
                         "precision_h2": full["precision_within_radius"]["precision"]})
    return rows


def _held_out(run_dir: Path) -> str:
    from lbhash.data.protocols import load_split
    from lbhash.runs.run_files import SPLIT

    return " ".join(str(int(c)) for c in load_split(run_dir / SPLIT).unseen_classes)


def _protocol(run_dir: Path) -> str:
    from lbhash.runs import RunDirectory

    return RunDirectory(run_dir).config().dataset.protocol


def reference_rows(dataset, seed: int, run_dirs: list[Path]) -> list[dict]:
    """Float cosine kNN on the raw feature vectors, over the split every run of `seed` used
    (checked to be the same); nothing for image data."""
    if not hasattr(dataset, "x"):
        return []
    x = np.asarray(dataset.x, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    labels = dataset.labels.astype(np.float32)
    rows = []
    for classes, name in PARTS:
        indices = [tuple(load_codes_file(d / name)[k].tobytes() for k in ("query_ids", "db_ids"))
                   for d in run_dirs]
        if len(set(indices)) != 1:
            raise RuntimeError(f"runs of seed {seed} disagree on their {classes}-class split")
        codes = load_codes_file(run_dirs[0] / name)
        q, db = codes["query_ids"], codes["db_ids"]
        scores = x[q] @ x[db].T
        relevant = (labels[q] @ labels[db].T) > 0
        rows.append({"method": BASELINES_REFERENCE, "variant": BASELINES_REFERENCE, "kind": "reference",
                     "bits": 32 * x.shape[1], "bytes_per_item": 4 * x.shape[1], "seed": seed, "classes": classes, "ranking": "float",
                     "map_all": ranked_map(scores, relevant, len(db)),
                     "map_1000": ranked_map(scores, relevant, min(TOP, len(db))),
                     "precision_h2": None, "n_query": len(q), "n_database": len(db),
                     "held_out": _held_out(run_dirs[0]), "protocol": _protocol(run_dirs[0])})
    return rows


def ranked_map(scores: np.ndarray, relevant: np.ndarray, top: int) -> float:
    """mAP@top of rankings by descending score, ties by database index (a stable sort)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top]
    ranked = np.take_along_axis(relevant, order, axis=1)
    hits = np.cumsum(ranked, axis=1)
    found = hits[:, -1]
    precision_sum = (hits / np.arange(1, top + 1) * ranked).sum(1)
    return float(np.where(found > 0, precision_sum / np.maximum(found, 1), 0.0).mean())
