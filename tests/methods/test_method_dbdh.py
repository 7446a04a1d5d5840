"""DBDH: the memory-bank likelihood and balance term against hand-computed values, the fused
likelihood pass (lbhash.methods.bank_likelihood) against the plain autograd formula it replaced
(its gradient, constants, bank state and resume: tests/methods/test_methods_all.py)."""

import math

import numpy as np
import pytest
import torch

import lbhash.methods.dbdh  # noqa: F401  (registers dbdh)
from hand_cases import TWO_BATCH_LABELS, U1, U2, bank_likelihood_by_hand
from helpers import fused_and_plain_bank_training, plain_bank_likelihood
from lbhash.errors import InputError
from lbhash.methods import create_method
from lbhash.methods.bank_likelihood import bank_likelihood, block_rows
from lbhash.methods.dbdh import pairwise_likelihood


def dbdh_by_hand(bank_u, bank_y, u, y, alpha, p):
    """Plain-Python DBDH on a batch whose (clamped) rows are already in the bank."""
    u = [[min(max(x, -1.0), 1.0) for x in row] for row in u]
    means = [sum(row) / len(row) for row in u]
    balance = sum((m * m if p == 2 else abs(m)) for m in means) / len(means)
    return bank_likelihood_by_hand(bank_u, bank_y, u, y), alpha * balance


def bank_after(writes, num_train, bits, classes):
    """The bank as plain lists after the given (index, u, y) writes; unwritten rows are 0."""
    bank_u = [[0.0] * bits for _ in range(num_train)]
    bank_y = [[0.0] * classes for _ in range(num_train)]
    for index, u, y in writes:
        for i, urow, yrow in zip(index, u, y):
            bank_u[i] = [min(max(x, -1.0), 1.0) for x in urow]
            bank_y[i] = list(yrow)
    return bank_u, bank_y




@pytest.mark.parametrize("labels1, labels2", TWO_BATCH_LABELS)
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


def bank_inputs(batch, n, bits, classes, scale=1.0, dtype=torch.float64, seed=0, one_hot=False):
    """Random u, batch labels and bank: multi-label (some rows with several labels, some with
    none: those are similar to nothing), or one-hot rows when one_hot (and one unlabelled)."""
    gen = torch.Generator().manual_seed(seed)
    u = scale * torch.randn(batch, bits, generator=gen, dtype=dtype)
    bank_u = scale * torch.randn(n, bits, generator=gen)
    if one_hot:
        labels = torch.eye(classes)[torch.randint(0, classes, (batch,), generator=gen)]
        bank_y = torch.eye(classes)[torch.randint(0, classes, (n,), generator=gen)]
    else:
        labels = (torch.rand(batch, classes, generator=gen) < 0.3).float()
        bank_y = (torch.rand(n, classes, generator=gen) < 0.3).float()
        labels[1] = 1.0
    labels[0], bank_y[1] = 0.0, 0.0
    return u, labels, bank_u, bank_y


def fused_and_plain(u, labels, bank_u, bank_y, block=None):
    """(loss, dL/du) of the fused pass and of the plain autograd formula."""
    out = []
    for fn in (lambda x: bank_likelihood(x, labels, bank_u, bank_y, block),
               lambda x: plain_bank_likelihood(x, labels, bank_u, bank_y)):
        x = u.detach().clone().requires_grad_()
        value = fn(x)
        value.backward()
        out.append((value.detach(), x.grad))
    return out


@pytest.mark.parametrize("block", [None, 1, 7, 64, 1000], ids=lambda b: f"block{b}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("one_hot", [False, True], ids=["multi", "single"])
def test_fused_likelihood_and_gradient_match_the_plain_formula(block, dtype, one_hot):
    # n = 300: blocks of 7 and 64 leave a short last block, 1000 exceeds the bank
    u, labels, bank_u, bank_y = bank_inputs(9, 300, 16, 5, dtype=dtype, one_hot=one_hot)
    (loss, grad), (ref_loss, ref_grad) = fused_and_plain(u, labels, bank_u, bank_y, block)
    assert loss.dtype == grad.dtype == dtype
    tol = {"rtol": 1e-12, "atol": 1e-14} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-7}
    torch.testing.assert_close(loss, ref_loss, **tol)
    torch.testing.assert_close(grad, ref_grad, **tol)


def test_fused_likelihood_by_hand_with_unlabelled_rows():
    # theta and s written out: rows without labels are similar to nothing, even to each other
    u, bank_u = [[1.0, -2.0], [0.0, 0.0], [3.0, 1.0]], [[2.0, 1.0], [-1.0, -1.0]]
    labels, bank_y = [[1, 1, 0], [0, 0, 0], [0, 0, 1]], [[0, 1, 0], [0, 0, 0]]
    total = 0.0
    for ui, yi in zip(u, labels):
        for uj, yj in zip(bank_u, bank_y):
            theta = 0.5 * (ui[0] * uj[0] + ui[1] * uj[1])
            s = float(any(a and b for a, b in zip(yi, yj)))
            total += math.log1p(math.exp(theta)) - s * theta
    value = bank_likelihood(*(torch.tensor(t, dtype=torch.float64) for t in (u, labels, bank_u, bank_y)), 1)
    assert float(value) == pytest.approx(total / 6, rel=1e-13)


def test_huge_theta_neither_overflows_nor_loses_the_gradient():
    # |theta| up to ~1e6: exp(theta) would overflow; sigmoid saturates to exactly 0 or 1
    u, labels, bank_u, bank_y = bank_inputs(6, 50, 8, 3, scale=300.0, dtype=torch.float32)
    (loss, grad), (ref_loss, ref_grad) = fused_and_plain(u, labels, bank_u, bank_y, 16)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert float(loss) > 1e4
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("block", [3, None])
def test_fused_gradient_passes_gradcheck(block):
    u, labels, bank_u, bank_y = bank_inputs(4, 20, 6, 3)
    u.requires_grad_()
    assert torch.autograd.gradcheck(lambda x: bank_likelihood(x, labels, bank_u, bank_y, block), (u,),
                                    eps=1e-6, atol=1e-7)
    # and against the plain formula's autograd gradient, scaled by an outer factor
    (fused,) = torch.autograd.grad(3.0 * bank_likelihood(u, labels, bank_u, bank_y, block), u)
    (plain,) = torch.autograd.grad(3.0 * plain_bank_likelihood(u, labels, bank_u, bank_y), u)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-15)


def test_bf16_outputs_are_computed_in_float32():
    u, labels, bank_u, bank_y = bank_inputs(5, 40, 8, 3, dtype=torch.float32)
    u16, bank16 = u.bfloat16(), bank_u.bfloat16()
    x = u16.clone().requires_grad_()
    value = bank_likelihood(x, labels, bank16, bank_y)
    value.backward()
    assert value.dtype == x.grad.dtype == torch.bfloat16
    # the float32 formula on the same (bf16-rounded) numbers, rounded once at the end
    (loss32, grad32), _ = fused_and_plain(u16.float(), labels, bank16.float(), bank_y)
    assert float(value) == float(loss32.bfloat16())
    torch.testing.assert_close(x.grad, grad32.bfloat16())


def test_only_u_takes_a_gradient_and_only_once():
    u, labels, bank_u, bank_y = bank_inputs(3, 10, 4, 2)
    with pytest.raises(InputError, match="only u takes a gradient"):
        bank_likelihood(u, labels, bank_u.requires_grad_(), bank_y)
    bank_u.requires_grad_(False)
    x = u.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(bank_likelihood(x, labels, bank_u, bank_y), x, create_graph=True)
    for block in (0, -2, 2.5, True):
        with pytest.raises(InputError, match="block must be a positive number of rows"):
            bank_likelihood(x, labels, bank_u, bank_y, block)
    # without a gradient to compute, the same value
    with torch.no_grad():
        assert float(bank_likelihood(x, labels, bank_u, bank_y)) == float(bank_likelihood(x, labels, bank_u, bank_y))


def test_block_rows_keep_the_tile_within_its_budget():
    cpu = torch.device("cpu")
    assert block_rows(64, cpu) == 8192 and block_rows(128, cpu) == 4096
    assert block_rows(10 ** 6, cpu) == 64  # never fewer rows than one product group
    assert block_rows(64, torch.device("cuda")) == 1 << 18


def test_pairwise_likelihood_is_the_fused_pass():
    u, labels, bank_u, bank_y = bank_inputs(4, 30, 8, 3, dtype=torch.float32)
    value = pairwise_likelihood(u.requires_grad_(), labels, bank_u, bank_y)
    assert type(value.grad_fn).__name__ == "BankLikelihoodBackward"
    torch.testing.assert_close(value, plain_bank_likelihood(u, labels, bank_u, bank_y))


def test_dbdh_training_gives_the_same_codes_with_the_plain_formula(monkeypatch):
    (codes, means, _), (plain_codes, plain_means, _), calls = \
        fused_and_plain_bank_training(monkeypatch, "dbdh")
    assert calls == 3 * 4  # 3 passes of 4 batches went through the plain formula
    assert means[-1] < 0.9 * means[0]  # it trained
    assert torch.equal(codes, plain_codes)
    np.testing.assert_allclose(means, plain_means, rtol=1e-5)
