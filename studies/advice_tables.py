"""The summary tables of issue 60's advice check (studies/advice_check.sh), from the csv files it
left in RESULTS (default docs/results/advice): writes RESULTS/tables.md and prints it.

    python studies/advice_tables.py [RESULTS]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np


def rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ms(values) -> str:
    v = 100 * np.asarray(values, float)
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def per_seed(values) -> str:
    return " / ".join(f"{100 * v:+.1f}" for v in values)


def label_free(results: Path) -> list[str]:
    data = rows(results / "label-free-lite1" / "label_free.csv")
    if not data:
        return []
    get = {(r["code"], int(r["bits"]), int(r["seed"])): float(r["hamming_map"]) for r in data}
    seeds = sorted({int(r["seed"]) for r in data})
    out = ["## distill against ITQ, label-free (methods.md: \"Which code to pick when new classes will arrive\")", "",
           "Lite1 features, protocol cifar10, mAP@1000 by Hamming ranking, seeds " + ", ".join(map(str, seeds))
           + " (label-free-lite1/label_free.md has every code).", "",
           "| comparison | mean ± std of each | distill minus ITQ, per seed |", "|---|---|---|"]
    for db, ib in ((32, 32), (64, 64), (128, 128), (64, 128), (32, 128)):
        d = [get[("distill", db, s)] for s in seeds]
        i = [get[("itq", ib, s)] for s in seeds]
        out.append(f"| distill-{db} vs ITQ-{ib} | {ms(d)} vs {ms(i)} | {per_seed(np.subtract(d, i))} |")
    f = [get[("float cosine kNN", b, s)] for (c, b, s) in get if c == "float cosine kNN"]
    d64 = [get[("distill", 64, s)] for s in seeds]
    out += ["", f"Float cosine kNN: {ms(f)}; distill-64 by Hamming alone {ms(d64)}.", ""]
    return out


def ridge(results: Path) -> list[str]:
    out = []
    for name in ("ridge-lite1.csv", "ridge-scene.csv"):
        data = rows(results / name)
        if not data:
            continue
        if not out:
            out = ["## `linear`'s ridge on validation only (methods.md: \"`ridge=0.1` was chosen on a validation split\")",
                   "", "Validation mAP@all (%), 64 bits: 10% of the protocol's training items searched among the "
                   "other 90%, which the map is fitted on; mean ± std over seeds 0-2.", "",
                   "| data | ridge 0.01 | 0.1 | 1 | 10 |", "|---|---|---|---|---|"]
        ridges = list(dict.fromkeys(r["ridge"] for r in data))
        cells = [ms([float(r["validation_map"]) for r in data if r["ridge"] == x]) for x in ridges]
        best = int(np.argmax([np.mean([float(r["validation_map"]) for r in data if r["ridge"] == x]) for x in ridges]))
        cells[best] = f"**{cells[best]}**"
        out.append(f"| {data[0]['data']} ({data[0]['protocol']}) | " + " | ".join(cells) + " |")
    return out + [""] if out else []


def grid_pairs(data: list[dict]) -> dict:
    """(method, bits) -> {"base": {seed: map}, "_D": {seed: map}}"""
    pairs: dict = {}
    for r in data:
        kind = "_D" if r["lbhash"] == "True" else "base"
        pairs.setdefault((r["method"], int(r["bits"])), {"base": {}, "_D": {}})[kind][int(r["seed"])] = float(r["map"])
    return pairs


def lbhash16(results: Path) -> list[str]:
    data = rows(results / "lbhash16-lite1" / "grid.csv")
    if not data:
        return []
    out = ["## `_D` against the base method on frozen features (methods.md: \"When to use --lbhash\")", "",
           "Lite1 features, protocol cifar10, 16 bits, the recommended profile's recipe (constant rate; DBDH at "
           "3e-4) as `lbhash reproduce grid` runs it (every training item trains, the last epoch is kept), 30 epochs; "
           "test mAP at the protocol's R (all 6,000 database items), %, mean ± std over seeds 0-2.", "",
           "| method | base | `_D` | `_D` − base | per seed |", "|---|---|---|---|---|"]
    for (method, bits), p in sorted(grid_pairs(data).items()):
        seeds = sorted(set(p["base"]) & set(p["_D"]))
        b, d = [p["base"][s] for s in seeds], [p["_D"][s] for s in seeds]
        out.append(f"| {method} | {ms(b)} | {ms(d)} | {100 * (np.mean(d) - np.mean(b)):+.1f} | {per_seed(np.subtract(d, b))} |")
    return out + [""]


def schedule(results: Path) -> list[str]:
    profiles = {p: rows(results / "schedule-lite1" / f"grid-{p}.csv") for p in ("recommended", "paper", "best-val")}
    if not (profiles["recommended"] and profiles["paper"]):
        return []
    out = ["## The default's constant rate against `--defaults paper` on frozen features (models.md: \"The "
           "learning-rate schedule on these features\")", "",
           "Lite1 features as the image head takes them (`normalize=none`, no hidden layer), protocol cifar10, "
           "64 bits, 50 epochs; test mAP at the protocol's R (all 6,000 database items), %, mean ± std over seeds 0-2.", "",
           "| variant | constant rate, last epoch (the default until 2026-11-25) | `--defaults paper` (x0.1 every "
           "10 epochs, last epoch) | paper − constant, per seed | the default: constant rate, 10% held out, best "
           "validation epoch | paper − default, per seed |", "|---|---|---|---|---|---|"]
    rec, pap = grid_pairs(profiles["recommended"]), grid_pairs(profiles["paper"])
    best = grid_pairs(profiles["best-val"]) if profiles["best-val"] else {}
    for key in sorted(rec):
        for kind in ("base", "_D"):
            seeds = sorted(set(rec[key][kind]) & set(pap[key][kind]))
            r, p = [rec[key][kind][s] for s in seeds], [pap[key][kind][s] for s in seeds]
            name = key[0] + ("_D" if kind == "_D" else "")
            cells = [ms(r), ms(p), per_seed(np.subtract(p, r)), "", ""]
            if key in best:
                b = [best[key][kind][s] for s in seeds]
                cells[3:] = [ms(b), per_seed(np.subtract(p, b))]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out + [""]


def dbdh_lr(results: Path) -> list[str]:
    data = rows(results / "dbdh-lr-lite1" / "study.csv")
    if not data:
        return []
    out = ["## DBDH's learning rate on validation only (methods.md: \"base learning rate where the base collapses\")",
           "", "Lite1 features, protocol cifar10, 32 bits, the recommended profile (constant rate, `binarize: clamp`), "
           "50 epochs, 10% of the training items held out, best validation epoch; validation mAP@all (%).", "",
           "| lr | mean | per seed | epoch kept |", "|---|---|---|---|"]
    for setting in dict.fromkeys(r["setting"] for r in data):
        group = sorted((r for r in data if r["setting"] == setting), key=lambda r: int(r["seed"]))
        out.append(f"| {setting.split('lr=')[1]} | {ms([float(r['val_map']) for r in group])} | "
                   + " / ".join(f"{100 * float(r['val_map']):.1f}" for r in group) + " | "
                   + " / ".join(r["selected_epoch"] for r in group) + " |")
    return out + [""]


def seen_unseen(path: Path) -> dict:
    """variant -> {classes: {seed: mAP@all}}, Hamming ranking, from a baselines.csv"""
    out: dict = {}
    for r in rows(path):
        if r["ranking"] == "symmetric" and r["map_all"]:
            out.setdefault(r["variant"], {}).setdefault(r["classes"], {})[int(r["seed"])] = float(r["map_all"])
    return out


def neighbourhood(results: Path) -> list[str]:
    plain = seen_unseen(results / "baselines-lite1" / "baselines.csv")
    term = seen_unseen(results / "neighbourhood-lite1" / "baselines.csv")
    if not (plain and term):
        return []
    out = ["## The neighbourhood term, cosine student, weight 10 (methods.md: \"Both kinds of class matter\")", "",
           "Lite1 features, `unseen:3:cifar10`, 64 bits, 30 epochs, seeds 0-2; mAP@all (%) by Hamming ranking, "
           "the same runs' protocol as baselines-lite1 (whose rows are the plain methods).", "",
           "| variant | seen: plain | with the term | per seed | unseen: plain | with the term | per seed |",
           "|---|---|---|---|---|---|---|"]
    for variant in ("csq", "csq_D"):
        cells = []
        for classes in ("seen", "unseen"):
            seeds = sorted(set(plain[variant][classes]) & set(term[variant][classes]))
            a = [plain[variant][classes][s] for s in seeds]
            b = [term[variant][classes][s] for s in seeds]
            cells += [ms(a), ms(b), per_seed(np.subtract(b, a))]
        out.append(f"| {variant} | " + " | ".join(cells) + " |")
    itq, distill = plain.get("itq", {}), plain.get("distill", {})
    if itq and distill:
        out += ["", f"Beside them: ITQ seen {ms(list(itq['seen'].values()))}, unseen {ms(list(itq['unseen'].values()))}; "
                    f"distill seen {ms(list(distill['seen'].values()))}, unseen {ms(list(distill['unseen'].values()))}."]
    return out + [""]


def main() -> None:
    results = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/advice")
    lines = ["# Issue 60's advice check: summary tables", "",
             "Made by `python studies/advice_tables.py` from the csv files of `bash studies/advice_check.sh "
             "../shared/data OUT` (README.md here says what each checks).", ""]
    for part in (label_free, ridge, lbhash16, schedule, dbdh_lr, neighbourhood):
        lines += part(results)
    (results / "tables.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
