"""Inputs that several methods' hand-computed tests share (test_method_*.py).

U, SINGLE, MULTI: one batch of 4 real outputs of 6 bits and its labels over 3 classes (DCH,
HashNet). U1, U2 and TWO_BATCH_LABELS: two batches of 4-bit outputs that a method with a memory
bank sees in turn, the second batch overwriting one row of the first, and the pairwise likelihood
of a batch against the bank (DBDH, DSDH)."""

import math

import torch

U = [[0.5, -1.0, 2.0, 0.1, -0.3, 0.7],
     [-0.2, 0.4, 1.1, -0.9, 0.0, 0.3],
     [1.5, -0.6, 0.2, 0.8, -1.2, -0.4],
     [0.3, 0.9, -0.7, -1.1, 0.6, 0.05]]
SINGLE = [[1, 0, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]]
MULTI = [[1, 1, 0], [0, 0, 1], [0, 1, 1], [0, 0, 0]]  # the last item has no label

U1 = [[0.5, -1.7, 0.2, 0.9], [-0.3, 0.4, 1.3, -0.8]]
U2 = [[1.2, 0.1, -0.6, -0.4], [-0.9, -0.2, 0.7, 2.5], [0.3, 0.8, -1.1, 0.05]]
TWO_BATCH_LABELS = [  # (labels of U1, labels of U2): parameters of pytest.mark.parametrize("labels1, labels2")
    ([[1, 0, 0], [0, 1, 0]], [[0, 1, 0], [1, 0, 0], [0, 0, 1]]),        # single-label
    ([[1, 1, 0], [0, 1, 0]], [[0, 0, 1], [1, 0, 1], [0, 0, 0]]),        # multi-label, one unlabelled
]


def run(loss, u, labels):
    """The method's loss on outputs `u` and `labels` (lists), items numbered from 0."""
    return loss(torch.tensor(u), torch.tensor(labels, dtype=torch.float32), torch.arange(len(u)))


def bank_likelihood_by_hand(bank_u, bank_y, u, y):
    """Plain Python: the mean over (batch item, bank row) pairs of log(1 + e^theta) - s * theta,
    theta = <u_i, u_j> / 2, s = 1 where the two share a label."""
    total, count = 0.0, 0
    for ui, yi in zip(u, y):
        for uj, yj in zip(bank_u, bank_y):
            theta = 0.5 * sum(a * b for a, b in zip(ui, uj))
            s = 1.0 if sum(a * b for a, b in zip(yi, yj)) > 0 else 0.0
            total += math.log(1 + math.exp(theta)) - s * theta
            count += 1
    return total / count
