"""DBDH: the memory-bank likelihood and balance term against hand-computed values, under both
binarisations (the paper's straight-through sign, the benchmark's clamp), training on the real
frozen features, and the fused likelihood pass (lbhash.methods.bank_likelihood) against the plain
autograd formula it replaced (its gradient, constants, bank state and resume:
tests/methods/test_methods_all.py)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lbhash.methods.dbdh  # noqa: F401  (registers dbdh)
from conftest import shared_data_dir
from hand_cases import TWO_BATCH_LABELS, U1, U2, bank_likelihood_by_hand
from helpers import fused_and_plain_bank_training, plain_bank_likelihood
from lbhash.errors import InputError
from lbhash.methods import create_method, method_class
from lbhash.methods.bank_likelihood import bank_likelihood, block_rows
from lbhash.methods.dbdh import pairwise_likelihood

# what each binarisation makes of one output, in plain Python
BINARIZE = {"ste": lambda x: 1.0 if x >= 0 else -1.0, "clamp": lambda x: min(max(x, -1.0), 1.0)}


def dbdh_by_hand(bank_u, bank_y, u, y, alpha, p, binarize):
    """Plain-Python DBDH on a batch whose (binarised) rows are already in the bank."""
    b = [[BINARIZE[binarize](x) for x in row] for row in u]
    means = [sum(row) / len(row) for row in b]
    balance = sum((m * m if p == 2 else abs(m)) for m in means) / len(means)
    return bank_likelihood_by_hand(bank_u, bank_y, b, y), alpha * balance


def bank_after(writes, num_train, bits, classes, binarize):
    """The bank as plain lists after the given (index, u, y) writes; unwritten rows are 0."""
    bank_u = [[0.0] * bits for _ in range(num_train)]
    bank_y = [[0.0] * classes for _ in range(num_train)]
    for index, u, y in writes:
        for i, urow, yrow in zip(index, u, y):
            bank_u[i] = [BINARIZE[binarize](x) for x in urow]
            bank_y[i] = list(yrow)
    return bank_u, bank_y


@pytest.mark.parametrize("binarize, row1", [("ste", [1.0, 1.0, -1.0, -1.0]), ("clamp", [1.0, 0.1, -0.6, -0.4])])
@pytest.mark.parametrize("labels1, labels2", TWO_BATCH_LABELS)
def test_dbdh_hand_computed_with_bank_update(labels1, labels2, binarize, row1):
    loss = create_method("dbdh", bits=4, num_classes=3, num_train=6, alpha=0.3, binarize=binarize)
    i1, i2 = [0, 3], [1, 4, 3]  # row 3 is overwritten by the second batch; 2 and 5 stay empty
    y1, y2 = torch.tensor(labels1, dtype=torch.float32), torch.tensor(labels2, dtype=torch.float32)
    loss(torch.tensor(U1), y1, torch.tensor(i1))
    out = loss(torch.tensor(U2), y2, torch.tensor(i2))
    bank_u, bank_y = bank_after([(i1, U1, labels1), (i2, U2, labels2)], 6, 4, 3, binarize)
    likelihood, balance = dbdh_by_hand(bank_u, bank_y, U2, labels2, 0.3, 2, binarize)
    assert float(out.parts["likelihood"]) == pytest.approx(likelihood, rel=1e-5)
    assert float(out.parts["balance"]) == pytest.approx(balance, rel=1e-5)
    assert float(out.total) == pytest.approx(likelihood + balance, rel=1e-5)
    # the bank holds the binarised outputs and labels at the batch's indices, zeros elsewhere
    np.testing.assert_allclose(loss.U.numpy(), np.array(bank_u), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(loss.Y.numpy(), np.array(bank_y))
    assert loss.U[1].tolist() == pytest.approx(row1)  # U2's first row, [1.2, 0.1, -0.6, -0.4]


@pytest.mark.parametrize("binarize, means", [("ste", (0.5, 0.5)), ("clamp", (0.55, 0.475))])
def test_dbdh_balance_p1_is_absolute_p2_is_square(binarize, means):
    # the rows' signs are (+ + - +) and (- - + -): means 0.5 and -0.5; clamped, 0.55 and -0.475
    u = [[0.9, 0.8, -0.1, 0.6], [-0.5, -0.7, 0.2, -0.9]]
    labels = torch.eye(3)[[0, 1]]
    parts = {p: create_method("dbdh", bits=4, num_classes=3, num_train=4, alpha=0.2, p=p, binarize=binarize)(
        torch.tensor(u), labels, torch.tensor([2, 0])).parts["balance"] for p in (1, 2)}
    assert float(parts[1]) == pytest.approx(0.2 * (means[0] + means[1]) / 2, rel=1e-6)
    assert float(parts[2]) == pytest.approx(0.2 * (means[0] ** 2 + means[1] ** 2) / 2, rel=1e-6)


def test_straight_through_is_the_sign_forward_with_zero_to_plus_one():
    # exactly +/-1 whatever the size: the literal u + (sign(u) - u).detach() gives 0 for 5e8 in float32
    u = torch.tensor([[-2.0, -0.0, 0.0, 0.3, -1e-30, 5e8, -7e30]])
    loss = create_method("dbdh", bits=7, num_classes=2, num_train=3)
    out = loss(u, torch.tensor([[1.0, 0.0]]), torch.tensor([1]))
    assert loss.U[1].tolist() == [-1.0, 1.0, 1.0, 1.0, -1.0, 1.0, -1.0]
    assert loss.U[0].tolist() == loss.U[2].tolist() == [0.0] * 7
    # balance: the row mean of the signs, 1/7; the likelihood: its own row (theta 7/2, similar)
    # and two empty rows (theta 0, log 2)
    assert float(out.parts["balance"]) == pytest.approx(0.1 / 49, rel=1e-6)
    expected = (math.log1p(math.exp(3.5)) - 3.5 + 2 * math.log(2)) / 3
    assert float(out.parts["likelihood"]) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("binarize", ["ste", "clamp"])
def test_gradient_passes_straight_through_where_the_clamp_stops_it(binarize):
    """One item, u = (3, 0), class 0, at index 0 of a bank of 2 (row 1 never written); alpha 0.1.

    ste: b = (1, 1); the likelihood's gradient on b is (sigmoid(1) - 1) * 0.5 * b / 2 from its
    own row (theta 1, similar) and 0 from the empty row; the balance's, alpha * 2 * mean(b) / 2 =
    alpha. Both reach u unchanged, the first coordinate too (|u| = 3 > 1).
    clamp: b = (1, 0); nothing reaches u_1 (3 lies beyond the clamp); u_2 gets only the
    balance's alpha * 2 * 0.5 / 2 (its likelihood gradient is 0.5 * (sigmoid(0.5) - 1) * b_2 = 0)."""
    loss = create_method("dbdh", bits=2, num_classes=2, num_train=2, alpha=0.1, binarize=binarize)
    u = torch.tensor([[3.0, 0.0]], requires_grad=True)
    out = loss(u, torch.tensor([[1.0, 0.0]]), torch.tensor([0]))
    out.total.backward()
    sigmoid = 1 / (1 + math.exp(-1))
    if binarize == "ste":
        assert loss.U[0].tolist() == [1.0, 1.0]
        assert float(out.parts["likelihood"]) == pytest.approx((math.log1p(math.e) - 1 + math.log(2)) / 2, rel=1e-6)
        assert u.grad[0].tolist() == pytest.approx([(sigmoid - 1) / 4 + 0.1] * 2, rel=1e-6)
    else:
        assert loss.U[0].tolist() == [1.0, 0.0]
        assert u.grad[0].tolist() == pytest.approx([0.0, 0.05], rel=1e-6, abs=1e-12)


def test_straight_through_gradient_is_the_formula_gradient_at_the_codes():
    """For outputs far outside [-1, 1] the gradient on u is that of the same formula at b, the
    codes taken as the variable (the bank fixed), coordinate by coordinate."""
    gen = torch.Generator().manual_seed(3)
    loss = create_method("dbdh", bits=8, num_classes=3, num_train=10, p=1)
    labels = torch.eye(3)[torch.arange(10) % 3]
    loss(3 * torch.randn(10, 8, generator=gen), labels, torch.arange(10))  # fill the bank
    loss._remember = lambda *args: None  # hold it fixed
    index = torch.tensor([2, 7, 9])
    u = (5 * torch.randn(3, 8, generator=gen)).requires_grad_()
    assert bool((u.abs() > 1).float().mean() > 0.7)
    loss(u, labels[index], index).total.backward()
    b = torch.where(u.detach() >= 0, 1.0, -1.0).requires_grad_()
    # softplus: its gradient at theta = 0 (frequent between codes) is sigmoid(0) = 0.5
    theta, s = 0.5 * b @ loss.U.T, (labels[index] @ loss.Y.T > 0).float()
    by_hand = (F.softplus(theta) - s * theta).mean() + 0.1 * b.mean(1).abs().mean()
    by_hand.backward()
    torch.testing.assert_close(u.grad, b.grad)


def test_binarize_is_a_constant_the_paper_straight_through_by_default():
    assert method_class("dbdh").constants() == {"alpha": 0.1, "p": 2, "binarize": "ste"}
    assert create_method("dbdh", bits=4, num_classes=2, num_train=3).binarize == "ste"
    for bad in ("sign", "STE", None, 1):
        with pytest.raises(InputError) as info:
            create_method("dbdh", bits=4, num_classes=2, num_train=3, binarize=bad)
        assert str(info.value) == f"method dbdh: binarize must be one of ste, clamp, got {bad!r}"


def mobilenet_cut(train: int, test: int):
    """The first `train` training and `test` test rows of each class of the shared CIFAR-10
    MobileNet features, dequantised (the file's rows run in class order)."""
    path = shared_data_dir() / "cifar10-mobilenetv1-features.npz"
    if not path.is_file():
        pytest.skip(f"shared features not found at {path} (set LBHASH_SHARED_DATA)")
    with np.load(path) as data:
        rows = np.concatenate([np.arange(c * 5000, c * 5000 + train) for c in range(10)]
                              + [50000 + np.arange(c * 1000, c * 1000 + test) for c in range(10)])
        x = (data["feat"][rows].astype(np.float32) - float(data["zero_point"])) * float(data["scale"])
        y = data["labels"][rows].astype(np.int64)
    n = 10 * train
    return x[:n], y[:n], x[n:], y[n:]


@pytest.mark.slow  # a training of 10 epochs: the straight-through gradient's formula is checked above
def test_dbdh_on_frozen_features_trains_well_above_chance():
    """Adam 1e-3 (the paper's recipe), 32 bits, 2,000 items: the straight-through codes train, the
    clamped outputs saturate and the loss climbs. Measured, seed 0: mAP 0.496, the epoch loss
    falling from 1.25 to 1.13 (ste); mAP 0.381, the loss rising from 0.79 to 2.73 (clamp). Seeds
    0-7: ste 0.405-0.526, its last epoch's loss always below its first; clamp 0.287-0.395, its
    last epoch's loss 2.2 to 8.5 times its first. Chance is 0.10. At this size the mAPs of the
    two overlap across seeds; the rising loss is what tells the clamp apart on every seed."""
    from lbhash import HashEncoder

    x, y, x_test, y_test = mobilenet_cut(200, 50)
    encoder = HashEncoder(method="dbdh", bits=32, epochs=10, seed=0, progress=False, defaults="paper")
    encoder.fit(x, y, eval_set=(x_test, y_test))
    losses = [round(record["loss"]["total"], 3) for record in encoder.history_]
    assert encoder.metrics_["map"] > 0.35, encoder.metrics_["map"]
    assert losses[-1] < losses[0], f"the loss rose over training (the codes saturated): {losses}"


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
    # under the straight-through sign, +/-1 codes of even length make theta a whole number, often
    # exactly 0: the plain reference is softplus-based, so its gradient there is sigmoid(0) - s,
    # as the fused pass's (with the stable form's subgradient 1 - s, 31 of 3,840 bits parted)
    (codes, means, _), (plain_codes, plain_means, _), calls = \
        fused_and_plain_bank_training(monkeypatch, "dbdh")
    assert calls == 3 * 4  # 3 passes of 4 batches went through the plain formula
    assert means[-1] < 0.9 * means[0]  # it trained
    assert torch.equal(codes, plain_codes)
    np.testing.assert_allclose(means, plain_means, rtol=1e-5)


def test_each_profile_binarises_as_its_recipe_was_made():
    from lbhash.methods import method_defaults

    # the paper's sign for the paper-faithful profiles; the clamp the recommended RMSprop recipe was validated with
    assert method_defaults("dbdh", "paper").constants["binarize"] == "ste"
    assert method_defaults("dbdh", "benchmark").constants["binarize"] == "ste"
    assert method_defaults("dbdh", "recommended").constants["binarize"] == "clamp"
    # DSDH's recommended profile differs from the paper's constants in eta alone (1: chosen on validation)
    assert method_defaults("dsdh", "recommended").constants == {**method_defaults("dsdh", "paper").constants, "eta": 1.0}
