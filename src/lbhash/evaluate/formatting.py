"""The metrics table the CLI prints (`format_metrics`) and the name of mAP@R (`map_label`).
Nothing here loads the numba kernels of the metrics, so a command that prints saved metrics
(`lbhash train --resume` on a finished run) starts fast."""

from __future__ import annotations

from typing import Any

# The lower bound's range, printed beside it (why 4: docs/evaluation.md, "Reading the lower bound").
# It is measured on the database codes, while mAP averages over the queries: the scale says so,
# so that a ratio above 4 beside a modest mAP does not read as a contradiction.
RATIO_SCALE = ("over the database items, not the queries; 0: two class centers coincide, "
               "above 4: the database's classes fully apart")


def map_label(topk: int | str | None, n_db: int) -> str:
    """The R of mAP@R as printed: "all" whenever R covers the whole database (None, "all", or
    R >= the database size, since R is capped at it), else the number: the same R always gets
    the same name, whichever way it was asked for."""
    if topk is None or topk == "all" or int(topk) >= n_db:
        return "all"
    return str(int(topk))


def format_metrics(metrics: dict[str, Any]) -> str:
    """A plain-text table of the headline numbers of `evaluate_codes` (mAP@R named by
    `map_label`; the lower bound with its scale, RATIO_SCALE).

    A cut-off at or above the database size ranks nothing (docs/evaluation.md, "Printed
    tables"): P@K for K >= n_db, the share of relevant items whatever the ranking, is left out
    with one line saying so, and a kNN vote of k >= n_db is named as a vote of every item."""
    n_db = metrics["n_db"]
    r = map_label(metrics["topk"], n_db)
    ball = metrics["precision_within_radius"]
    knn = metrics["knn_accuracy"]
    knn_note = "" if knn["k"] < n_db else f"  (k >= the {n_db} database items: every item votes)"
    lb = metrics["lower_bound"]
    ratio = lb["ratio"]
    ratio_text = "inf (max D_intra = 0)" if ratio == "inf" else f"{ratio:.4f}"
    rows = [
        ("codes", f"{metrics['bits']} bits, {metrics['n_query']} queries, {metrics['n_db']} database items"),
        (f"mAP@{r} (ties by index)", f"{metrics['map']:.4f}"),
        *([(f"mAP@{r} (tie-averaged)", f"{metrics['map_tie_averaged']:.4f}")]
          if "map_tie_averaged" in metrics else []),
        *([(f"mAP@{r} (asymmetric)", f"{metrics['asymmetric']['map']:.4f}")] if "asymmetric" in metrics else []),
        *([("chance level (random ranking)", f"mAP@all {metrics['chance_map']:.4f}")]
          if "chance_map" in metrics else []),
        (f"P@H<={ball['radius']}", f"{ball['precision']:.4f}  (empty balls: {100 * ball['empty_fraction']:.1f}%)"),
        (f"kNN accuracy (k={knn['k']})", f"{knn['accuracy']:.4f}{knn_note}"),
        *([("classifier accuracy", f"{metrics['classifier_accuracy']:.4f}")]
          if "classifier_accuracy" in metrics else []),
        (f"lower bound (p{lb['percentile']:g})",
         f"min D_inter {lb['min_inter']:.2f} / max D_intra {lb['max_intra']:.2f} = {ratio_text}"),
        ("", f"({RATIO_SCALE})"),
    ]
    at_k = metrics["precision_at_k"]
    for k, p in zip(at_k["k"], at_k["precision"]):
        if k < n_db:
            rows.append((f"P@{k}", f"{p:.4f}"))
    beyond = [k for k in at_k["k"] if k >= n_db]
    if beyond:
        rows.append((f"P@{beyond[0]}" + (f"..{beyond[-1]}" if len(beyond) > 1 else ""),
                     f"not shown: K >= the {n_db} database items (the share of relevant items, whatever the ranking)"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
