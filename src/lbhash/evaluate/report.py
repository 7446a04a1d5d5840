"""All metrics of a query/database pair at once, as a JSON-ready dict (the table the CLI prints
is lbhash.evaluate.formatting's)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from lbhash.checks import non_negative_int, positive_int
from lbhash.errors import InputError
from lbhash.evaluate._inputs import check_ks, check_percentile, check_topk, prepare
from lbhash.evaluate.asymmetric import asymmetric_metrics, check_query_real
from lbhash.evaluate.bound import lower_bound
from lbhash.evaluate.chance import chance_map
from lbhash.evaluate.retrieval import (DEFAULT_KS, average_precisions, knn_vote_accuracy, pr_curve,
                                      precision_recall_at_k, radius_precision)


def evaluate_codes(query_codes, db_codes, query_labels, db_labels, bits: int | None = None,
                   topk: int | None = None, ks: Sequence[int] = DEFAULT_KS, radius: int = 2,
                   knn: int = 100, percentile: float = 99.9, tie_averaged: bool = False,
                   query_real=None) -> dict[str, Any]:
    """Every metric of docs/evaluation.md for one query/database pair; the lower bound is on the
    database. The tie-averaged mAP is computed only with `tie_averaged=True`. With `query_real`
    (the queries' real-valued outputs, (n_query, bits)), `asymmetric` also holds mAP@R and
    P@K of the asymmetric ranking (lbhash.evaluate.asymmetric).

    Floats that JSON cannot hold are stored as strings ("inf") or null (NaN).
    """
    ks_arr = check_ks(ks)
    radius = non_negative_int(radius, "radius")
    check_percentile(percentile)
    inp = prepare(query_codes, db_codes, query_labels, db_labels, bits)
    if radius > inp.bits:
        raise InputError(f"radius must be at most bits={inp.bits}, got {radius}")
    top = check_topk(topk, inp.n_db)
    knn = positive_int(knn, "knn")
    real = None if query_real is None else check_query_real(query_real, inp.n_query, inp.bits)
    ap_index, ap_average = average_precisions(inp, top, tie_averaged=tie_averaged)
    at_k = precision_recall_at_k(inp, ks_arr)
    curve = pr_curve(inp)
    ball = radius_precision(curve, radius)
    bound = lower_bound(inp.db_packed, inp.db_labels, percentile, inp.bits)
    metrics = {
        "bits": inp.bits,
        "n_query": inp.n_query,
        "n_db": inp.n_db,
        "topk": "all" if topk is None else int(topk),
        "map": float(ap_index.mean()),
        "chance_map": chance_map(inp.q_labels, inp.db_labels),  # mAP@all of a random ranking
        **({"map_tie_averaged": float(ap_average.mean())} if tie_averaged else {}),
        "precision_at_k": {"k": at_k.ks, "precision": at_k.precision, "recall": at_k.recall},
        "precision_within_radius": {"radius": int(radius), "precision": ball.precision,
                                    "empty_fraction": ball.empty_fraction},
        "knn_accuracy": {"k": knn, "accuracy": knn_vote_accuracy(inp, knn)},
        "lower_bound": {"percentile": float(percentile), "min_inter": bound.min_inter,
                        "max_intra": bound.max_intra, "ratio": bound.ratio},
        "pr_curve": {"radius": curve.radius, "precision": curve.precision,
                     "recall": curve.recall, "retrieved_fraction": curve.retrieved_fraction},
    }
    if real is not None:
        metrics["asymmetric"] = asymmetric_metrics(inp, real, top, ks_arr)
    return jsonable(metrics)


def jsonable(obj: Any) -> Any:
    """Arrays to lists, NaN to None, infinities to "inf"/"-inf"."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in (obj.tolist() if isinstance(obj, np.ndarray) else obj)]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
    return obj
