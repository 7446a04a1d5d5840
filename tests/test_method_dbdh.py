"""DBDH: the memory-bank likelihood and balance term against hand-computed values, its
gradient, and exact resume of its bank (alone and through the training loop)."""

import math

import numpy as np
import pytest
import torch

import lbhash.methods.dbdh  # noqa: F401  (registers dbdh)
from lbhash.train import train as train_and_evaluate
from lbhash.methods import create_method
from helpers import assert_resume_matches, digits_subset, train_passes
from lbhash.train import TrainConfig


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


@pytest.mark.parametrize("p", [1, 2])
def test_dbdh_gradient_matches_finite_differences(p):
    torch.manual_seed(0)
    loss = create_method("dbdh", bits=4, num_classes=3, num_train=6, p=p).double()
    labels = torch.tensor([[1.0, 0, 0], [0, 1.0, 1.0], [0, 0, 1.0]], dtype=torch.float64)
    bank = torch.rand(6, 4, dtype=torch.float64) * 1.6 - 0.8
    loss(bank, torch.eye(3, dtype=torch.float64)[[0, 1, 2, 0, 1, 2]], torch.arange(6))
    u = torch.tensor([[0.3, -0.6, 0.1, 0.7], [-0.2, 0.5, -1.4, 0.4], [0.6, 0.2, -0.3, 1.3]],
                     dtype=torch.float64, requires_grad=True)
    loss._remember = lambda *args: None  # hold the bank fixed while gradcheck perturbs u
    f = lambda x: loss(x, labels, torch.tensor([5, 1, 2])).total
    assert torch.autograd.gradcheck(f, (u,), eps=1e-6, atol=1e-6)
    torch.testing.assert_close(loss.U, bank)  # all bank writes go through _remember


def test_dbdh_rejects_bad_input():
    with pytest.raises(ValueError, match="num_train"):
        create_method("dbdh", bits=4, num_classes=3)
    with pytest.raises(ValueError, match="p must be 1 or 2, got 3"):
        create_method("dbdh", bits=4, num_classes=3, num_train=5, p=3)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0, got -1"):
        create_method("dbdh", bits=4, num_classes=3, num_train=5, alpha=-1)
    loss = create_method("dbdh", bits=4, num_classes=3, num_train=5)
    u, labels = torch.zeros(2, 4), torch.eye(3)[[0, 1]]
    with pytest.raises(ValueError, match="stable index"):
        loss(u, labels, None)
    with pytest.raises(ValueError, match=r"index values must lie in \[0, 5\), got min 1, max 5"):
        loss(u, labels, torch.tensor([1, 5]))
    with pytest.raises(ValueError, match="index values"):
        loss(u, labels, torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match=r"u must have shape \(batch, 4\), got \(2, 3\)"):
        loss(torch.zeros(2, 3), labels, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels must have shape \(2, 3\), got \(2, 2\)"):
        loss(u, torch.zeros(2, 2), torch.tensor([0, 1]))


def test_dbdh_loss_decreases_on_digits():
    torch.manual_seed(0)
    x, labels = digits_subset()
    loss = create_method("dbdh", bits=16, num_classes=10, num_train=len(x))
    means = train_passes(loss, torch.nn.Linear(64, 16), x, labels, passes=5)  # 20 steps
    # the likelihood starts near log 2 and has a floor well above 0: expect steady, small steps
    assert all(b < a for a, b in zip(means, means[1:])) and means[-1] < means[0] - 0.02, means


def test_dbdh_state_dict_restores_the_bank_exactly(tmp_path):
    torch.manual_seed(1)
    x, labels = digits_subset(128)
    loss = create_method("dbdh", bits=8, num_classes=10, num_train=len(x))
    head = torch.nn.Linear(64, 8)
    train_passes(loss, head, x, labels, passes=2)
    torch.save(loss.state_dict(), tmp_path / "state.pt")
    fresh = create_method("dbdh", bits=8, num_classes=10, num_train=len(x))
    fresh.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert set(fresh.state_dict()) == {"U", "Y"}
    assert torch.equal(fresh.U, loss.U) and torch.equal(fresh.Y, loss.Y)
    assert loss.U.abs().sum() > 0
    index = torch.tensor([3, 40, 77])
    with torch.no_grad():
        u = head(x[index])
    a, b = loss(u, labels[index], index), fresh(u, labels[index], index)
    assert all(torch.equal(a.parts[k], b.parts[k]) for k in a.parts)


def test_dbdh_interrupted_run_resumes_to_the_same_codes(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    cfg = TrainConfig(data="digits", method="dbdh", bits=16, epochs=4, hidden=[64], progress=False,
                      lr_step=0)
    assert_resume_matches(train_and_evaluate, cfg, tmp_path)
