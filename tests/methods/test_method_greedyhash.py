"""GreedyHash against values and gradients computed by hand from its formula in docs/methods.md."""

import math

import pytest
import torch

import lbhash.methods.greedyhash  # noqa: F401  (registers the method)
from lbhash.methods import HashLoss, create_method

U = [[0.5, -1.0, 2.0, 0.1, -0.3],
     [-0.2, 0.4, 1.1, -0.9, 1.7],
     [1.5, -0.6, 0.2, 0.8, -1.2]]
W = [[0.3, -0.5, 0.2, 0.7, -0.1],
     [-0.4, 0.6, 0.1, -0.2, 0.5],
     [0.2, 0.3, -0.6, 0.4, 0.8]]
SINGLE = [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
MULTI = [[1, 1, 0], [0, 0, 1], [0, 0, 0]]  # the last item has no label


def sgn(x):
    return 1.0 if x >= 0 else -1.0


def sigmoid(z):
    return 1 / (1 + math.exp(-z))


def logits_by_hand(u, w):
    return [[sum(wc[k] * sgn(x) for k, x in enumerate(row)) for wc in w] for row in u]


def greedy_by_hand(u, labels, w, alpha, bce):
    """(classification, quantization): CE or BCE on W sign(u), and alpha * mean | |u| - 1 |^3."""
    logits = logits_by_hand(u, w)
    n, c = len(u), len(w)
    if bce:
        cls = -sum(y * math.log(sigmoid(z)) + (1 - y) * math.log(1 - sigmoid(z))
                   for zr, yr in zip(logits, labels) for z, y in zip(zr, yr)) / (n * c)
    else:
        cls = sum(math.log(sum(math.exp(z) for z in zr)) - zr[yr.index(1)]
                  for zr, yr in zip(logits, labels)) / n
    values = [abs(abs(x) - 1) ** 3 for row in u for x in row]
    return cls, alpha * sum(values) / len(values)


def grad_by_hand(u, labels, w, alpha, bce):
    """d loss / d u = (d loss / d b) + derivative of the quantization term (straight-through)."""
    logits = logits_by_hand(u, w)
    n, c, bits = len(u), len(w), len(u[0])
    grad = []
    for i, row in enumerate(u):
        if bce:
            dz = [(sigmoid(z) - y) / (n * c) for z, y in zip(logits[i], labels[i])]
        else:
            total = sum(math.exp(z) for z in logits[i])
            dz = [(math.exp(z) / total - y) / n for z, y in zip(logits[i], labels[i])]
        out = []
        for k, x in enumerate(row):
            db = sum(dz[j] * w[j][k] for j in range(c))
            dq = alpha / (n * bits) * 3 * (abs(x) - 1) ** 2 * sgn(abs(x) - 1) * sgn(x)
            out.append(db + dq)
        grad.append(out)
    return grad


def make(multi_label=False, **kwargs):
    loss = create_method("greedyhash", bits=5, num_classes=3, multi_label=multi_label, **kwargs)
    with torch.no_grad():
        loss.fc.weight.copy_(torch.tensor(W))
    return loss


def run(loss, u, labels):
    return loss(torch.tensor(u), torch.tensor(labels, dtype=torch.float32), torch.arange(len(u)))


@pytest.mark.parametrize("labels,bce", [(SINGLE, False), (MULTI, True)], ids=["single-ce", "multi-bce"])
def test_hand_computed(labels, bce):
    out = run(make(multi_label=bce), U, labels)
    cls, quant = greedy_by_hand(U, labels, W, 0.1, bce)
    assert set(out.parts) == {"classification", "quantization"}
    assert out.total.dtype == torch.float32
    assert out.parts["classification"].item() == pytest.approx(cls, rel=1e-5)
    assert out.parts["quantization"].item() == pytest.approx(quant, rel=1e-5)
    assert out.total.item() == pytest.approx(cls + quant, rel=1e-5)


def test_bce_on_single_label_when_asked():
    out = run(make(classifier_loss="bce", quantization=1.0), U, SINGLE)
    cls, quant = greedy_by_hand(U, SINGLE, W, 1.0, bce=True)
    assert out.total.item() == pytest.approx(cls + quant, rel=1e-5)
    assert cls != pytest.approx(greedy_by_hand(U, SINGLE, W, 1.0, bce=False)[0], rel=1e-3)


def test_zero_output_is_plus_one():
    u = [[0.0, -1.0, 2.0, 0.1, -0.3]] + U[1:]
    out = run(make(quantization=0.0), u, SINGLE)
    assert out.total.item() == pytest.approx(greedy_by_hand(u, SINGLE, W, 0.0, False)[0], rel=1e-5)


@pytest.mark.parametrize("labels,bce", [(SINGLE, False), (MULTI, True)], ids=["single-ce", "multi-bce"])
def test_straight_through_gradient(labels, bce):
    u = torch.tensor(U, requires_grad=True)
    make(multi_label=bce)(u, torch.tensor(labels, dtype=torch.float32), None).total.backward()
    expected = torch.tensor(grad_by_hand(U, labels, W, 0.1, bce))
    torch.testing.assert_close(u.grad, expected, rtol=1e-5, atol=1e-7)


def test_fc_is_a_trained_parameter():
    loss = make()
    assert [p is loss.fc.weight for p in loss.parameters()] == [True]
    run(loss, U, SINGLE).total.backward()
    # d CE / d W_ck = sum_i (p_ic - y_ic) / n * b_ik
    logits = logits_by_hand(U, W)
    expected = [[0.0] * 5 for _ in range(3)]
    for i, row in enumerate(U):
        total = sum(math.exp(z) for z in logits[i])
        for c in range(3):
            for k in range(5):
                expected[c][k] += (math.exp(logits[i][c]) / total - SINGLE[i][c]) / 3 * sgn(row[k])
    torch.testing.assert_close(loss.fc.weight.grad, torch.tensor(expected), rtol=1e-5, atol=1e-7)


def test_classify():
    loss = make()
    assert type(loss).classify is not HashLoss.classify and loss.center_part is None
    codes = torch.tensor([[1.0, -1.0, 1.0, 1.0, -1.0], [-1.0, -1.0, 1.0, -1.0, 1.0]])
    expected = [[sum(w * b for w, b in zip(wc, row)) for wc in W] for row in codes.tolist()]
    torch.testing.assert_close(loss.classify(codes), torch.tensor(expected))
    int_codes = codes.to(torch.int8)
    torch.testing.assert_close(loss.classify(int_codes), torch.tensor(expected))


def test_loss_selection():
    assert not make().use_bce
    assert make(multi_label=True).use_bce
    assert make(classifier_loss="bce").use_bce
    assert not make(classifier_loss="ce").use_bce


def test_ce_with_multi_label_is_refused():
    message = "greedyhash: classifier_loss 'ce' is single-label only, but the data is multi-label"
    with pytest.raises(ValueError, match=message):
        create_method("greedyhash", bits=5, num_classes=3, multi_label=True, classifier_loss="ce")
    with pytest.raises(ValueError, match="classifier_loss must be one of auto, ce, bce, got 'mse'"):
        create_method("greedyhash", bits=5, num_classes=3, classifier_loss="mse")


def test_ce_needs_one_label_per_row():
    with pytest.raises(ValueError, match="exactly one label per item, but batch row 0 has 2"):
        run(make(), U, MULTI)
    with pytest.raises(ValueError, match="batch row 2 has 0"):
        run(make(), U, [[1, 0, 0], [0, 1, 0], [0, 0, 0]])
