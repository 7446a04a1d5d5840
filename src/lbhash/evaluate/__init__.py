"""Evaluation of hash codes: retrieval metrics, recognition accuracy and the lower bound.

Public functions (all accept +/-1 codes, or packed uint8 codes with `bits=`):
mean_average_precision, average_precision (per query), precision_recall_curve,
precision_at_k, precision_within_radius, knn_accuracy, lower_bound; and evaluate_codes,
which computes them all for a query/database pair; asymmetric_map and rank_asymmetric rank
by the queries' real-valued outputs (lbhash.evaluate.asymmetric).
"""

from lbhash._lazy import lazy_names

# public name -> its module; imported on first use, so that `lbhash.evaluate.asymmetric` (which
# search re-ranking needs) does not load the numba kernels of the ranking metrics
_HOMES = {
    "asymmetric_map": "asymmetric", "rank_asymmetric": "asymmetric",
    "LowerBound": "report", "lower_bound": "report", "RATIO_SCALE": "formatting", "chance_map": "report",
    "evaluate_codes": "report", "format_metrics": "formatting", "map_label": "formatting",
    **{name: "retrieval" for name in ("DEFAULT_KS", "PRCurve", "PrecisionAtK", "RadiusPrecision",
                                      "average_precision", "classifier_accuracy", "knn_accuracy",
                                      "mean_average_precision", "precision_at_k", "precision_recall_curve",
                                      "precision_within_radius")},
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
