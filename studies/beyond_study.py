"""Codes for the classes nobody trained on (issue 44): the neighbourhood term's curve and the
label-free code, on CIFAR-10 features (docs/methods.md, "Codes for classes nobody trained on").

    python studies/beyond_study.py curve --data features:../shared/data/cifar10-mobilenetv1-features.npz \\
        --out docs/results/beyond
    python studies/beyond_study.py label-free --data features:../shared/data/cifar10-mobilenetv1-features.npz \\
        --out docs/results/beyond

curve: CSQ_D at 64 bits with neighbourhood_weight on a grid, and ITQ and Distill beside it.
The weight is chosen on validation classes: per seed, the 7 classes unseen:3 trains on are cut
out (their training items only, relabelled) and split again by unseen:3:per-class:400,100,+train,
so 3 of them play the unseen classes; the weight maximising the mean of validation seen and
unseen mAP@all (averaged over seeds) is chosen, and only then read on the test classes
(unseen:3:cifar10, every weight, to draw the whole curve). 30 epochs, every training item
trains, the last epoch kept (as lbhash reproduce baselines). Writes curve.csv and curve.md.

label-free: protocol cifar10 (5,000 training items, 1,000 queries, 54,000 database items),
mAP@1000 of LSH, PCA, ITQ, Distill and the sign of the standardised features, each by
Hamming ranking and with float rescoring (the top 4,000 by Hamming re-ranked by the cosine of
the standardised float features), beside float cosine kNN. Writes label_free.csv and label_free.md.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from lbhash.data import ArrayDataset, load_data, make_split
from lbhash.evaluate import mean_average_precision
from lbhash.reproduce.experiments.baselines import ranked_map
from lbhash.train.config import make_config
from lbhash.train.forward import encode
from lbhash.train.fit import prepare, train_to_end

RESCORE_FACTOR = 4   # rescoring re-ranks RESCORE_FACTOR x R candidates for mAP@R
TOP = 1000
RESCORE_CANDIDATES = RESCORE_FACTOR * TOP
WEIGHTS = (0.0, 0.3, 1.0, 3.0, 10.0)
VALIDATION_PROTOCOL = "unseen:3:per-class:400,100,+train"


def train_codes(dataset, values: dict, parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Train a config on `dataset` (every training item, last epoch) and return the +/-1
    codes of the split parts named in `parts` (e.g. {"query": ..., "database": ...})."""
    cfg = make_config({"validation": 0.0, "progress": False, "test": False, **values})
    trainer = prepare(cfg, None, dataset, False, None)
    train_to_end(trainer)
    model = trainer.learner.model.eval()
    return {name: encode(model, trainer.exp.dataset, idx, trainer.options) for name, idx in parts.items()}


def split_parts(dataset, protocol: str, seed: int) -> dict[str, np.ndarray]:
    split = make_split(dataset, protocol, seed)
    return {"query": split.query, "database": split.database, "seen_query": split.seen_query,
            "seen_database": split.seen_database, "train": split.train}


# --- the curve ---------------------------------------------------------------------------------

def seen_unseen(dataset, values: dict, protocol: str, seed: int) -> tuple[float, float]:
    """mAP@all on the seen and the unseen classes of one run under an unseen:K protocol."""
    parts = split_parts(dataset, protocol, seed)
    codes = train_codes(dataset, {**values, "protocol": protocol, "seed": seed},
                        {k: parts[k] for k in ("query", "database", "seen_query", "seen_database")})
    labels = dataset.labels
    seen = mean_average_precision(codes["seen_query"], codes["seen_database"], labels[parts["seen_query"]],
                                  labels[parts["seen_database"]])
    unseen = mean_average_precision(codes["query"], codes["database"], labels[parts["query"]],
                                    labels[parts["database"]])
    return seen, unseen


def validation_dataset(dataset, seed: int) -> ArrayDataset:
    """The training items of unseen:3:cifar10's 7 training classes, relabelled 0..6."""
    split = make_split(dataset, "unseen:3:cifar10", seed)
    kept = np.setdiff1d(np.arange(dataset.num_classes), split.unseen_classes)
    return ArrayDataset(dataset.x[split.train], dataset.labels[split.train][:, kept], np.zeros(len(split.train), bool),
                        f"{dataset.name} (validation classes, seed {seed})")


def curve_cells(weights, baselines: bool = True) -> list[tuple[str, dict]]:
    """CSQ_D at each weight, then (baselines) ITQ and Distill, which no weight or student changes."""
    cells = [(f"csq_D w={w:g}", {"method": "csq", "lbhash": True, "neighbourhood_weight": w}) for w in weights]
    return cells + ([("itq", {"method": "itq"}), ("distill", {"method": "distill"})] if baselines else [])


def run_curve(args) -> None:
    """Each stage's rows go to curve-<stage>.csv; curve.md is made from every such file there."""
    dataset = load_data(args.data)
    cells = curve_cells(args.weights, args.student == "tanh")
    for _, values in cells:
        if values["method"] == "csq":
            values["neighbourhood_student"] = args.student
    for stage in args.stages:
        redone = {(seed, name) for seed in args.seeds for name, _ in cells}
        rows = [r for r in read_rows(args.out / f"curve-{stage}.csv") if (r["seed"], r["setting"]) not in redone]
        for seed in args.seeds:
            data = validation_dataset(dataset, seed) if stage == "validation" else dataset
            protocol = VALIDATION_PROTOCOL if stage == "validation" else "unseen:3:cifar10"
            for name, values in cells:
                start = time.perf_counter()
                extra = {} if values["method"] in ("itq", "distill") else {"epochs": args.epochs}
                seen, unseen = seen_unseen(data, {"data": args.data, "bits": args.bits, **values, **extra},
                                           protocol, seed)
                rows.append({"stage": stage, "setting": name, "seed": seed, "seen_map": seen, "unseen_map": unseen})
                print(f"{stage} seed {seed} {name}: seen {seen:.4f} unseen {unseen:.4f} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
                write_rows(args.out / f"curve-{stage}.csv", rows)
    rows = [r for stage in ("validation", "test") if (args.out / f"curve-{stage}.csv").is_file()
            for r in read_rows(args.out / f"curve-{stage}.csv")]
    write_curve_md(args.out / "curve.md", rows, args)


def read_rows(path: Path) -> list[dict]:
    """A curve csv's rows ([] when there is none yet)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{**r, "seed": int(r["seed"]), "seen_map": float(r["seen_map"]), "unseen_map": float(r["unseen_map"])}
                for r in csv.DictReader(f)]


def chosen_weight(rows: list[dict]) -> str:
    """The csq_D setting with the best mean (over seeds) of validation seen and unseen mAP."""
    scores = {}
    for r in rows:
        if r["stage"] == "validation" and r["setting"].startswith("csq_D"):
            scores.setdefault(r["setting"], []).append((r["seen_map"] + r["unseen_map"]) / 2)
    return max(scores, key=lambda s: np.mean(scores[s]))


def write_curve_md(path: Path, rows: list[dict], args) -> None:
    chosen = chosen_weight(rows)
    weights = sorted({float(r["setting"].split("=")[1]) for r in rows if r["setting"].startswith("csq_D w=")})
    student = "" if args.student == "tanh" else " (neighbourhood_student cosine: the code similarity cos(u_i, u_j))"
    lines = ["# Seen and unseen classes as the neighbourhood weight moves", "",
             f"Data `{args.data}`. CSQ_D{student}, {args.bits} bits, {args.epochs} epochs, validation seeds "
             f"{', '.join(sorted({str(r['seed']) for r in rows if r['stage'] == 'validation'}))}, test seeds as the last "
             "column says (rows with other seeds do not compare exactly); "
             "mAP@all (%), mean ± std over seeds (a single value: one seed). Validation: the 7 training classes of unseen:3:cifar10 split again by "
             f"`{VALIDATION_PROTOCOL}`; test: `unseen:3:cifar10`. Chosen on validation (best mean of seen "
             f"and unseen): **{chosen}**.", "",
             "| setting | validation seen | validation unseen | test seen | test unseen | test seeds |",
             "|---|---|---|---|---|---|"]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        cells = []
        for stage in ("validation", "test"):
            for key in ("seen_map", "unseen_map"):
                v = [r[key] for r in rows if r["stage"] == stage and r["setting"] == setting]
                cells.append(f"{100 * np.mean(v):.1f} ± {100 * np.std(v, ddof=1):.1f}" if len(v) > 1 else
                             (f"{100 * v[0]:.1f}" if v else ""))
        mark = "**" if setting == chosen else ""
        cells.append(",".join(sorted(str(r["seed"]) for r in rows if r["stage"] == "test" and r["setting"] == setting)))
        lines.append(f"| {mark}{setting}{mark} | " + " | ".join(cells) + " |")
    lines += ["", f"Command: `python studies/beyond_study.py curve --data {args.data} --out {args.out} "
                  f"--seeds {','.join(sorted({str(r['seed']) for r in rows}))}"
                  + (f" --weights {','.join(f'{w:g}' for w in weights)}" if weights != sorted(WEIGHTS) else "")
                  + (f" --student {args.student}" if args.student != "tanh" else "") + "`", ""]
    path.write_text("\n".join(lines))


# --- the label-free table ---------------------------------------------------------------------

def standardised(dataset, train: np.ndarray) -> np.ndarray:
    mean, std = dataset.normalization(train)
    return ((dataset.x - mean) / std).astype(np.float32)


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def hamming_scores(q: np.ndarray, db: np.ndarray) -> np.ndarray:
    """bits - 2 * Hamming distance: the inner product of +/-1 codes (ranks as -Hamming)."""
    return q.astype(np.float32) @ db.astype(np.float32).T


def rescored(hamming: np.ndarray, cosine: np.ndarray, candidates: int = RESCORE_CANDIDATES) -> np.ndarray:
    """Scores of a rescored search: each query's top `candidates` by Hamming (ties by database
    index) take their float cosine; every other item ranks below them."""
    order = np.argsort(-hamming, axis=1, kind="stable")[:, :candidates]
    out = np.full(hamming.shape, -np.inf, dtype=np.float32)
    rows = np.arange(len(hamming))[:, None]
    out[rows, order] = cosine[rows, order]
    return out


def label_free_rows(dataset, seed: int, bits_list, methods, data: str, protocol: str = "cifar10",
                    top: int = TOP) -> list[dict]:
    parts = split_parts(dataset, protocol, seed)
    q, db = parts["query"], parts["database"]
    relevant = (dataset.labels[q].astype(np.float32) @ dataset.labels[db].astype(np.float32).T) > 0
    x = standardised(dataset, parts["train"])
    cosine = unit_rows(x[q]) @ unit_rows(x[db]).T
    top = min(top, len(db))
    candidates = min(RESCORE_FACTOR * top, len(db))
    counts = {"train": len(parts["train"]), "queries": len(q), "database": len(db), "top": top,
              "candidates": candidates}
    rows = [{"seed": seed, "code": "float cosine kNN", "bits": 32 * x.shape[1],
             "hamming_map": ranked_map(cosine, relevant, top), "rescored_map": None, **counts}]
    codes = {("sign of features", x.shape[1]): (np.where(x[q] >= 0, 1, -1), np.where(x[db] >= 0, 1, -1))}
    for method in methods:
        for bits in bits_list:
            out = train_codes(dataset, {"data": data, "protocol": protocol, "seed": seed, "bits": bits,
                                        "method": method}, {"query": q, "database": db})
            codes[(method, bits)] = (out["query"], out["database"])
    for (name, bits), (cq, cdb) in codes.items():
        scores = hamming_scores(cq, cdb)
        rows.append({"seed": seed, "code": name, "bits": bits, "hamming_map": ranked_map(scores, relevant, top),
                     "rescored_map": ranked_map(rescored(scores, cosine, candidates), relevant, top), **counts})
        print(f"seed {seed} {name} {bits}: {rows[-1]['hamming_map']:.4f} / rescored {rows[-1]['rescored_map']:.4f}",
              flush=True)
    return rows


def read_label_free(path: Path) -> list[dict]:
    """A label-free csv's rows ([] when there is none yet); files written before the counts
    columns existed are protocol cifar10's."""
    if not path.is_file():
        return []
    legacy = {"train": 5000, "queries": 1000, "database": 54000, "top": TOP, "candidates": RESCORE_CANDIDATES}
    with open(path, newline="") as f:
        return [{**legacy, **{k: v for k, v in r.items() if v != "" or k == "rescored_map"},
                 "seed": int(r["seed"]), "bits": int(r["bits"]), "hamming_map": float(r["hamming_map"]),
                 "rescored_map": float(r["rescored_map"]) if r["rescored_map"] else None}
                for r in csv.DictReader(f)]


def run_label_free(args) -> None:
    dataset = load_data(args.data)
    path = args.out / "label_free.csv"
    rows = [r for r in read_label_free(path) if r["seed"] not in args.seeds]
    for seed in args.seeds:
        rows += label_free_rows(dataset, seed, args.label_free_bits, args.methods, args.data, args.protocol,
                                args.top)
        rows.sort(key=lambda r: r["seed"])
        write_rows(path, rows)
    write_label_free_md(args.out / "label_free.md", read_label_free(path), args)


def write_label_free_md(path: Path, rows: list[dict], args) -> None:
    seeds = sorted({r["seed"] for r in rows})
    c = {k: int(rows[0][k]) for k in ("train", "queries", "database", "top", "candidates")}
    lines = [f"# Label-free codes: mAP@{c['top']} (%) by Hamming ranking and with float rescoring", "",
             f"Data `{args.data}`, protocol {args.protocol} ({c['train']:,} training items, {c['queries']:,} queries, "
             f"{c['database']:,} database items), mean ± std over "
             f"seeds {', '.join(map(str, seeds))} (a single value: one seed). Rescored: each query's top {c['candidates']:,} by Hamming "
             "re-ranked by the cosine of the standardised float features (the code plus the float vectors).", "",
             "| code | bits | bytes per item | Hamming | rescored |", "|---|---|---|---|---|"]
    for key in dict.fromkeys((r["code"], r["bits"]) for r in rows):
        group = [r for r in rows if (r["code"], r["bits"]) == key]
        cells = []
        for metric in ("hamming_map", "rescored_map"):
            v = [r[metric] for r in group if r[metric] is not None]
            cells.append("" if not v else f"{100 * np.mean(v):.1f}" + (f" ± {100 * np.std(v, ddof=1):.1f}"
                                                                       if len(v) > 1 else ""))
        lines.append(f"| {key[0]} | {key[1]} | {-(-key[1] // 8)} | " + " | ".join(cells) + " |")
    extra = "" if (args.protocol, args.top) == ("cifar10", TOP) else f" --protocol {args.protocol} --top {args.top}"
    lines += ["", f"Command: `python studies/beyond_study.py label-free --data {args.data} --out {args.out} "
                  f"--seeds {','.join(map(str, seeds))}{extra}`", ""]
    path.write_text("\n".join(lines))


def write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def numbers(text: str, kind=float) -> tuple:
    return tuple(kind(v) for v in text.split(",") if v)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("curve", "label-free"))
    p.add_argument("--data", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=lambda t: numbers(t, int), default=(0, 1, 2))
    p.add_argument("--bits", type=int, default=64, help="curve: code length")
    p.add_argument("--epochs", type=int, default=30, help="curve: epochs of CSQ_D")
    p.add_argument("--weights", type=numbers, default=WEIGHTS, help="curve: neighbourhood weights")
    p.add_argument("--student", choices=("tanh", "cosine"), default="tanh",
                   help="curve: neighbourhood_student, the term's code similarity (cosine: "
                        "its curve has no ITQ and Distill rows, which no student changes: read them beside "
                        "the tanh curve's)")
    p.add_argument("--stages", type=lambda t: tuple(t.split(",")), default=("validation", "test"),
                   help="curve: validation, test or both (each writes its own csv)")
    p.add_argument("--label-free-bits", type=lambda t: numbers(t, int), default=(32, 64, 128))
    p.add_argument("--protocol", default="cifar10", help="label-free: the split protocol")
    p.add_argument("--top", type=int, default=TOP, help="label-free: R of mAP@R (rescoring re-ranks 4 R)")
    p.add_argument("--methods", type=lambda t: tuple(t.split(",")), default=("lsh", "pca", "itq", "distill"),
                   help="label-free: the learned codes")
    args = p.parse_args()
    (run_curve if args.part == "curve" else run_label_free)(args)


if __name__ == "__main__":
    main()
