"""Evaluation of hash codes: retrieval metrics, recognition accuracy and the lower bound.

Public functions (all accept +/-1 codes, or packed uint8 codes with `bits=`):
mean_average_precision, average_precision (per query), precision_recall_curve,
precision_at_k, precision_within_radius, knn_accuracy, lower_bound; and evaluate_codes,
which computes them all for a query/database pair; asymmetric_map and rank_asymmetric rank
by the queries' real-valued outputs (lbhash.evaluate.asymmetric).
"""

from lbhash.evaluate.asymmetric import asymmetric_map, rank_asymmetric
from lbhash.evaluate.bound import LowerBound, lower_bound
from lbhash.evaluate.report import evaluate_codes, format_metrics, map_label
from lbhash.evaluate.retrieval import (
    DEFAULT_KS,
    PRCurve,
    PrecisionAtK,
    RadiusPrecision,
    average_precision,
    classifier_accuracy,
    knn_accuracy,
    mean_average_precision,
    precision_at_k,
    precision_recall_curve,
    precision_within_radius,
)

__all__ = [
    "DEFAULT_KS", "LowerBound", "PRCurve", "PrecisionAtK", "RadiusPrecision",
    "asymmetric_map", "average_precision", "classifier_accuracy", "evaluate_codes", "format_metrics", "knn_accuracy", "lower_bound",
    "map_label", "mean_average_precision", "precision_at_k", "precision_recall_curve",
    "precision_within_radius", "rank_asymmetric",
]
