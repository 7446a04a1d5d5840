"""A tiny but complete set of result tables, as `lbhash reproduce` writes them, for the report.

    write_fixture(tmp_path)  # meta.json (the first format), grid/curves/epochs/timing/centers/
                             # bound/study/baselines CSVs, codes sample, toy.json, toy_probs.npz

Numbers are synthetic but shaped like real ones: _D usually beats base (one cell does not),
the ratio grows with mAP, one run has an infinite ratio, greedyhash has a classifier and
multi-hot labels in the codes sample. Larger grids: pass methods, bits, seeds, codes.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from lbhash._io import atomic_path, save_npz
from lbhash.reproduce.tables import (STUDY_COLUMNS, STUDY_EPOCHS_COLUMNS, BASELINES_COLUMNS,
    BOUND_COLUMNS, CENTERS_COLUMNS, CURVES_COLUMNS, EPOCHS_COLUMNS, GRID_COLUMNS, TIMING_COLUMNS)

METHODS = ("hashnet", "greedyhash", "csq")
BITS = (16, 32)
SEEDS = (0, 1)
WORSE_CELL = ("hashnet", 32)  # the cell where _D is made worse than base
INF_RUN = "csq_D-16-s1"  # the run with an infinite lower-bound ratio
DATA = "cifar10-features"


def run_id(method: str, d: bool, bits: int, seed: int) -> str:
    return f"{method}{'_D' if d else ''}-{bits}-s{seed}"


def write_fixture(directory: str | Path, methods=METHODS, bits=BITS, seeds=SEEDS,
                  codes: int = 120, seed: int = 0) -> Path:
    """Write the tables into directory; `codes` database codes per sampled run."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    grid = _grid(rng, methods, bits, seeds)
    _json(directory / "meta.json", {
        "data": DATA, "protocol": "paper", "seeds": list(seeds), "epochs": 6,
        "software": {"python": "3.12", "torch": "2.5", "numpy": "2.1", "lightning": "2.4",
                     "lbhash": "0.1"},
        "commands": {"grid": f"lbhash reproduce grid --data {DATA}",
                     "toy": "lbhash reproduce toy"},
        "created": "2025-01-01T00:00:00"})
    _csv(directory / "grid.csv", GRID_COLUMNS, grid)
    _csv(directory / "curves.csv", CURVES_COLUMNS, _curves(grid))
    _csv(directory / "epochs.csv", EPOCHS_COLUMNS, _epochs(grid))
    _csv(directory / "timing.csv", TIMING_COLUMNS, _timing(bits))
    _csv(directory / "centers.csv", CENTERS_COLUMNS, _centers(rng, seeds))
    _csv(directory / "bound.csv", BOUND_COLUMNS, _bound(rng, bits))
    sampled = [run_id(m, d, max(bits), seeds[0]) for m in methods[:2] for d in (False, True)]
    save_npz(directory / "codes_sample.npz", **_codes(rng, sampled, codes, max(bits)))
    _toy(directory, rng)
    study = _study(rng, methods[:2], seeds)
    _csv(directory / "study.csv", STUDY_COLUMNS, study)
    _csv(directory / "study_epochs.csv", STUDY_EPOCHS_COLUMNS,
         [{"study": r["study"], "run_id": r["run_id"], "epoch": e, "val_map": round(r["val_map"] - 0.1 / e, 5),
           "loss_total": 1.0 / e} for r in study for e in (1, 3, 6)])
    _csv(directory / "baselines.csv", BASELINES_COLUMNS, _baselines(rng, bits, seeds))
    return directory


def _baselines(rng, bits_list, seeds) -> list[dict]:
    """lsh, csq and csq_D on seen and unseen classes, both rankings; float kNN rows per seed."""
    rows = []
    for seed in seeds:
        shared = {"seed": seed, "n_query": 50, "n_database": 400, "held_out": "1 7", "protocol": "unseen:2:paper"}
        for method, variant, kind in (("lsh", "lsh", "baseline"), ("csq", "csq", "deep"), ("csq", "csq_D", "deep")):
            for bits in bits_list:
                for classes in ("seen", "unseen"):
                    for ranking in ("symmetric", "asymmetric"):
                        m = round(float(rng.uniform(0.2, 0.8)), 5)
                        rows.append({**shared, "method": method, "variant": variant, "kind": kind, "bits": bits,
                                     "bytes_per_item": bits // 8, "classes": classes, "ranking": ranking,
                                     "map_all": m, "map_1000": round(m + 0.01, 5), "precision_h2": 0.5})
        for classes in ("seen", "unseen"):
            rows.append({**shared, "method": "cosine-knn", "variant": "cosine-knn", "kind": "reference",
                         "bits": 2048, "bytes_per_item": 256, "classes": classes, "ranking": "float",
                         "map_all": 0.7, "map_1000": 0.72, "precision_h2": ""})
    return rows


def _study(rng, methods, seeds) -> list[dict]:
    """A validation study: base, paper and one other setting, with test mAP."""
    rows = []
    for method in methods:
        for k, setting in enumerate(("base", "paper", "lbhash_reduction=mean,lbhash_weight=0.1")):
            for seed in seeds:
                rows.append({"study": "fixture-study", "run_id": f"{method}-{k}-{seed}", "method": method,
                             "setting": setting, "lbhash": str(setting != "base"), "bits": 32, "seed": seed,
                             "val_map": round(0.6 + 0.02 * k + rng.normal(0, 0.01), 5), "selected_epoch": 6,
                             "epochs_trained": 6, "map": round(0.55 + 0.02 * k + rng.normal(0, 0.01), 5),
                             "config_hash": ""})
    return rows


def _grid(rng, methods, bits_list, seeds) -> list[dict]:
    rows = []
    for i, method in enumerate(methods):
        for d in (False, True):
            for bits in bits_list:
                for seed in seeds:
                    gain = -0.03 if (method, bits) == WORSE_CELL else 0.04 + 0.01 * i
                    m = 0.5 + 0.05 * i + 0.04 * (bits > 16) + d * gain + rng.normal(0, 0.01)
                    rid = run_id(method, d, bits, seed)
                    ratio = "inf" if rid == INF_RUN else round(0.3 + 0.8 * m + rng.normal(0, 0.02), 4)
                    rows.append({
                        "run_id": rid, "method": method, "variant": method + ("_D" if d else ""),
                        "lbhash": str(d), "bits": bits, "seed": seed, "data": DATA,
                        "protocol": "paper", "epochs": 6, "config_hash": f"h{len(rows):04d}",
                        "map": round(m, 5), "map_tie_averaged": round(m - 0.004, 5), "topk": "all",
                        "knn_accuracy": round(min(m + 0.1, 0.99), 5),
                        "classifier_accuracy": round(min(m + 0.12, 0.99), 5) if method == "greedyhash" else "",
                        "precision_h2": round(m * (0.6 + 0.005 * bits), 5),
                        "empty_h2": round(0.02 * bits / 16 + 0.01 * d, 5), "lb_min_inter": 6.0,
                        "lb_max_intra": 5.0, "lb_ratio": ratio, "seconds_per_epoch": 1.5 + 0.2 * d})
    return rows


def _curves(grid) -> list[dict]:
    rows = []
    for r in grid:
        bits, m, rid = r["bits"], r["map"], r["run_id"]
        for radius in range(bits + 1):
            frac = (radius + 1) / (bits + 1)
            precision = round(m + (1 - m) * (1 - frac) ** 2 * 0.5, 5)
            rows += [dict(run_id=rid, curve="pr_precision", x=radius,
                          y="" if radius == 0 and r["seed"] == 1 else precision),  # no ball
                     dict(run_id=rid, curve="pr_recall", x=radius, y=round(frac ** 0.7, 5)),
                     dict(run_id=rid, curve="pr_retrieved", x=radius, y=round(min(1, 2 * frac), 5))]
        for k in range(100, 1001, 100):
            rows += [dict(run_id=rid, curve="p_at_k", x=k, y=round(m + 0.2 - k / 1e4, 5)),
                     dict(run_id=rid, curve="r_at_k", x=k, y=round(k / 5400, 5))]
    return rows


def _epochs(grid) -> list[dict]:
    rows = []
    for r in grid:
        for epoch in range(1, 7):
            evaluated = epoch % 2 == 0  # mAP only on every other epoch
            m = r["map"] * (1 - 0.5 ** epoch)
            rows.append(dict(run_id=r["run_id"], epoch=epoch, map=round(m, 5) if evaluated else "",
                             lb_ratio_db=round(0.3 + m, 4) if evaluated else "",
                             lb_ratio_train=round(0.35 + m, 4), loss_total=round(2 / epoch, 4)))
    return rows


def _timing(bits_list) -> list[dict]:
    seconds = {"bce": 10.0, "cauchy": 10.2, "ours": 10.6}
    return [dict(variant=v, bits=b, seconds_per_epoch=s + 0.01 * b, steps_per_epoch=79,
                 ratio=round((s + 0.01 * b) / (seconds["bce"] + 0.01 * b), 5))
            for v, s in seconds.items() for b in bits_list]


def _centers(rng, seeds) -> list[dict]:
    distance = {16: {"hadamard": 8, "bch": 7, "reed_solomon": 6, "random": 6},
                32: {"hadamard": 16, "bch": 16, "reed_solomon": 12, "random": 12}}
    return [dict(kind=k, bits=b, seed=s, min_distance=d,
                 map=round(0.7 + d / 100 + rng.normal(0, 0.005), 5),
                 map_tie_averaged=round(0.7 + d / 100 - 0.003, 5))
            for b, kinds in distance.items() for k, d in kinds.items() for s in seeds]


def _bound(rng, bits_list) -> list[dict]:
    rows = []
    for bits in bits_list:
        for epoch in range(1, 9):
            m = 0.8 * (1 - 0.7 ** epoch) + rng.normal(0, 0.005)
            rows.append(dict(run_id=f"csq_D-bound-{bits}", bits=bits, epoch=epoch, map=round(m, 5),
                             lb_ratio=round(0.2 + m + rng.normal(0, 0.01), 4),
                             lb_min_inter=bits / 2, lb_max_intra=round(bits / 2 / (0.2 + m), 3)))
    return rows


def _codes(rng, runs, n, bits, classes=4) -> dict[str, np.ndarray]:
    out = {}
    for run in runs:
        flip = 0.1 if "_D" in run else 0.25  # _D codes lie closer to their class centers
        centers = rng.choice(np.array([-1, 1], dtype=np.int8), size=(classes, bits))
        labels = rng.integers(0, classes, n)
        codes = np.where(rng.random((n, bits)) < flip, -centers[labels], centers[labels])
        out[f"{run}__codes"] = codes.astype(np.int8)
        if run.startswith("greedyhash"):  # multi-hot labels: the first label colours a point
            out[f"{run}__labels"] = np.eye(classes, dtype=np.uint8)[labels]
        else:
            out[f"{run}__labels"] = labels
    return out


def _toy(directory: Path, rng) -> None:
    from lbhash.reproduce.toy import ToyConfig, ToyResult

    results, probs = {}, {}
    for bits in (8, 16):
        k = 2 ** bits
        z = rng.standard_normal(k)
        real = np.exp(z) / np.exp(z).sum()
        ones = (np.arange(k)[:, None] >> np.arange(bits)) & 1
        p1 = real @ ones  # P(bit = +1)
        naive = np.prod(np.where(ones, p1, 1 - p1), axis=1)
        surrogate = real * np.exp(rng.normal(0, 0.1, k))
        surrogate /= surrogate.sum()
        probs.update({f"{bits}__real": real, f"{bits}__surrogate": surrogate,
                      f"{bits}__naive": naive})
        ns = (100, 10000)
        kl = {n: {"surrogate": 0.3 / np.sqrt(n) * bits, "naive": 0.5 + 1 / n,
                  "histogram": k / (2 * n), "histogram_jeffreys": k / (3 * n),
                  "floor_asymptotic": (k - 1) / (2 * n)} for n in ns}
        kl[100]["histogram"] = float("inf")
        results[str(bits)] = ToyResult(
            ToyConfig(bits=bits, eval_samples=ns), real, kl, 0.52, None if bits == 8 else 0.3,
            {n: 0.1 for n in ns}, {n: 0.0 for n in ns}, {"seconds": 1.0}, {}).to_dict()
    _json(directory / "toy.json", results)
    save_npz(directory / "toy_probs.npz", **probs)


def _csv(path: Path, columns, rows) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def _json(path: Path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2))
