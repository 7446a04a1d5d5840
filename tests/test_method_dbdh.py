"""DBDH: the memory-bank likelihood and balance term against hand-computed values (its
gradient, constants, bank state and resume: tests/test_methods_all.py)."""

import math

import numpy as np
import pytest
import torch

import lbhash.methods.dbdh  # noqa: F401  (registers dbdh)
from lbhash.methods import create_method


def dbdh_by_hand(bank_u, bank_y, u, y, alpha, p):
    """Plain-Python DBDH on a batch whose (clamped) rows are already in the bank."""
    u = [[min(max(x, -1.0), 1.0) for x in row] for row in u]
    total, count = 0.0, 0
    for ui, yi in zip(u, y):
        for uj, yj in zip(bank_u, bank_y):
            theta = 0.5 * sum(a * b for a, b in zip(ui, uj))
            s = 1.0 if sum(a * b for a, b in zip(yi, yj)) > 0 else 0.0
            total += math.log(1 + math.exp(theta)) - s * theta
            count += 1
    means = [sum(row) / len(row) for row in u]
    balance = sum((m * m if p == 2 else abs(m)) for m in means) / len(means)
    return total / count, alpha * balance


def bank_after(writes, num_train, bits, classes):
    """The bank as plain lists after the given (index, u, y) writes; unwritten rows are 0."""
    bank_u = [[0.0] * bits for _ in range(num_train)]
    bank_y = [[0.0] * classes for _ in range(num_train)]
    for index, u, y in writes:
        for i, urow, yrow in zip(index, u, y):
            bank_u[i] = [min(max(x, -1.0), 1.0) for x in urow]
            bank_y[i] = list(yrow)
    return bank_u, bank_y


U1 = [[0.5, -1.7, 0.2, 0.9], [-0.3, 0.4, 1.3, -0.8]]
U2 = [[1.2, 0.1, -0.6, -0.4], [-0.9, -0.2, 0.7, 2.5], [0.3, 0.8, -1.1, 0.05]]


@pytest.mark.parametrize("labels1, labels2", [
    ([[1, 0, 0], [0, 1, 0]], [[0, 1, 0], [1, 0, 0], [0, 0, 1]]),        # single-label
    ([[1, 1, 0], [0, 1, 0]], [[0, 0, 1], [1, 0, 1], [0, 0, 0]]),        # multi-label, one unlabelled
])
def test_dbdh_hand_computed_with_bank_update(labels1, labels2):
    loss = create_method("dbdh", bits=4, num_classes=3, num_train=6, alpha=0.3)
    i1, i2 = [0, 3], [1, 4, 3]  # row 3 is overwritten by the second batch; 2 and 5 stay empty
    y1, y2 = torch.tensor(labels1, dtype=torch.float32), torch.tensor(labels2, dtype=torch.float32)
    loss(torch.tensor(U1), y1, torch.tensor(i1))
    out = loss(torch.tensor(U2), y2, torch.tensor(i2))
    bank_u, bank_y = bank_after([(i1, U1, labels1), (i2, U2, labels2)], 6, 4, 3)
    likelihood, balance = dbdh_by_hand(bank_u, bank_y, U2, labels2, 0.3, 2)
    assert float(out.parts["likelihood"]) == pytest.approx(likelihood, rel=1e-5)
    assert float(out.parts["balance"]) == pytest.approx(balance, rel=1e-5)
    assert float(out.total) == pytest.approx(likelihood + balance, rel=1e-5)
    # the bank holds the clamped outputs and labels at the batch's indices, zeros elsewhere
    np.testing.assert_allclose(loss.U.numpy(), np.array(bank_u), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(loss.Y.numpy(), np.array(bank_y))
    assert loss.U[1].tolist() == pytest.approx([1.0, 0.1, -0.6, -0.4])


def test_dbdh_balance_p1_is_absolute_p2_is_square():
    u = [[0.9, 0.8, -0.1, 0.6], [-0.5, -0.7, 0.2, -0.9]]  # row means 0.55 and -0.475
    labels = torch.eye(3)[[0, 1]]
    parts = {p: create_method("dbdh", bits=4, num_classes=3, num_train=4, alpha=0.2, p=p)(
        torch.tensor(u), labels, torch.tensor([2, 0])).parts["balance"] for p in (1, 2)}
    assert float(parts[1]) == pytest.approx(0.2 * (0.55 + 0.475) / 2, rel=1e-6)
    assert float(parts[2]) == pytest.approx(0.2 * (0.55 ** 2 + 0.475 ** 2) / 2, rel=1e-6)
