"""Chance-level mAP (lbhash.evaluate.report): the exact expected mAP@all of a random ranking,
checked by hand, against every ranking of a tiny database, and against sampled rankings."""

import itertools

import numpy as np
import pytest

from lbhash.evaluate import evaluate_codes, format_metrics
from lbhash.evaluate.report import chance_map


def ap_of(relevant_in_order) -> float:
    rel = np.asarray(relevant_in_order, float)
    if not rel.sum():
        return 0.0
    return float((np.cumsum(rel) / np.arange(1, len(rel) + 1) * rel).sum() / rel.sum())


def test_by_hand_and_over_every_ranking():
    # one query, 1 relevant among 2 items: AP is 1 or 1/2, each half the time
    assert chance_map([0], [0, 1]) == pytest.approx(0.75)
    # every permutation of a 6-item database, two query classes and a multi-label query
    db = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 1], [1, 1, 0]], bool)
    queries = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 1], [0, 0, 0]], bool)  # the last: nothing relevant
    relevant = (queries.astype(int) @ db.T.astype(int)) > 0
    exact = np.mean([np.mean([ap_of(rel[list(order)]) for order in itertools.permutations(range(6))])
                     for rel in relevant])
    assert chance_map(queries, db) == pytest.approx(exact, abs=1e-12)


def test_ten_balanced_classes_are_about_a_tenth_and_sampled_rankings_agree(rng):
    db, q = rng.integers(0, 10, 1000), rng.integers(0, 10, 50)
    value = chance_map(q, db)
    assert 0.09 < value < 0.12
    sampled = np.mean([ap_of((db[rng.permutation(1000)] == c)) for c in q for _ in range(20)])
    assert value == pytest.approx(sampled, abs=0.005)


def test_the_metrics_table_prints_the_chance_level(rng):
    codes = lambda n: rng.choice([-1, 1], (n, 16))  # noqa: E731
    db_labels, q_labels = rng.integers(0, 4, 200), rng.integers(0, 4, 20)
    metrics = evaluate_codes(codes(20), codes(200), q_labels, db_labels)
    assert metrics["chance_map"] == pytest.approx(chance_map(q_labels, db_labels))
    assert f"chance level (random ranking)  mAP@all {metrics['chance_map']:.4f}" in format_metrics(metrics)
