"""Method losses against hand-computed values, and the _D wrapper."""

import math

import numpy as np
import pytest
import torch

from lbhash.methods import LowerBoundObjective, ObjectiveOptions, available_methods, create_method
from lbhash.methods.csq import majority_targets
from lbhash.surrogate import BlockSurrogate

CENTERS = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0, -1.0],
                        [-1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 1.0],
                        [1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0]])


def csq_by_hand(u, targets, lam):
    """BCE((tanh u + 1)/2, (c + 1)/2) averaged over all bits + lam * mean((|tanh u| - 1)^2)."""
    total_bce, total_q, count = 0.0, 0.0, 0
    for row, target in zip(u.tolist(), targets.tolist()):
        for x, c in zip(row, target):
            p = (math.tanh(x) + 1) / 2
            t = (c + 1) / 2
            total_bce += -(t * math.log(p) + (1 - t) * math.log(1 - p))
            total_q += (abs(math.tanh(x)) - 1) ** 2
            count += 1
    return total_bce / count, lam * total_q / count


def test_csq_hand_computed_single_label():
    u = torch.tensor([[0.5, -1.0, 2.0, 0.1, -0.3, 0.7, -2.0, 1.5],
                      [-0.2, 0.4, 1.1, -0.9, 0.0, 0.3, -0.5, 2.2]])
    labels = torch.tensor([[1.0, 0, 0], [0, 0, 1.0]])
    loss = create_method("csq", bits=8, num_classes=3, centers=CENTERS, quantization=0.01)
    out = loss(u, labels, torch.arange(2))
    bce, q = csq_by_hand(u, CENTERS[[0, 2]], 0.01)
    assert float(out.parts["center"]) == pytest.approx(bce, rel=1e-5)
    assert float(out.parts["quantization"]) == pytest.approx(q, rel=1e-5)
    assert float(out.total) == pytest.approx(bce + q, rel=1e-5)


def test_csq_multilabel_target_is_bitwise_majority_ties_plus_one():
    labels = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    got = majority_targets(CENTERS, labels)
    c = CENTERS.numpy()
    two = np.where(c[0] + c[1] >= 0, 1, -1)  # ties between two centers go to +1
    three = np.where(c.sum(0) >= 0, 1, -1)
    np.testing.assert_array_equal(got.numpy(), np.stack([two, three]))


def test_registry():
    assert "csq" in available_methods()
    with pytest.raises(ValueError, match="unknown method 'nope'; available: .*csq"):
        create_method("nope", bits=8, num_classes=3)
    with pytest.raises(ValueError, match="method csq: .*unexpected keyword argument 'bogus'"):
        create_method("csq", bits=8, num_classes=3, centers=CENTERS, bogus=1)


def make_d(mode, weight=0.7):
    torch.manual_seed(5)
    base = create_method("csq", bits=8, num_classes=3, centers=CENTERS)
    return LowerBoundObjective(base, CENTERS, BlockSurrogate(8),
                               ObjectiveOptions(lbhash_weight=weight, lbhash_mode=mode)).eval()


@pytest.mark.parametrize("mode", ["add", "replace"])
def test_lbhash_adds_exactly_the_surrogate_term(mode):
    wrapped = make_d(mode)
    u = torch.randn(4, 8)
    labels = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]])
    with torch.no_grad():  # values only (float() of a tensor that needs grad warns)
        base_parts = wrapped.base(u, labels, torch.arange(4)).parts
        out = wrapped(u, labels, torch.arange(4))
        separately = wrapped.surrogate.loss_theta(u, wrapped.surrogate.pattern_index(CENTERS), labels)
    assert float(out.parts["lower_bound"]) == pytest.approx(0.7 * float(separately), rel=1e-6)
    kept = dict(base_parts)
    if mode == "replace":
        kept.pop("center")
    assert set(out.parts) == set(kept) | {"lower_bound"}
    expected_total = sum(float(v) for v in kept.values()) + 0.7 * float(separately)
    assert float(out.total) == pytest.approx(expected_total, rel=1e-6)


def test_one_backward_keeps_the_two_gradients_apart():
    # (theta loss + L_pi) backward == theta loss alone for the model, L_pi alone for pi
    wrapped = make_d("replace")
    head = torch.nn.Linear(6, 8)
    x = torch.randn(5, 6)
    labels = torch.eye(3)[[0, 1, 2, 0, 1]]

    def grads(which):
        head.zero_grad()
        wrapped.zero_grad()
        u = head(x)
        out, (pi, _) = wrapped.losses(u, labels, torch.arange(5))
        theta = out.total
        {"both": theta + pi, "theta": theta, "pi": pi}[which].backward()
        return ([p.grad.clone() if p.grad is not None else None for p in head.parameters()],
                [p.grad.clone() if p.grad is not None else None for p in wrapped.surrogate.parameters()])

    head_both, sur_both = grads("both")
    head_theta, sur_theta = grads("theta")
    head_pi, sur_pi = grads("pi")
    assert all(g is None for g in sur_theta) and all(g is None for g in head_pi)
    for a, b in zip(head_both, head_theta):
        torch.testing.assert_close(a, b)
    for a, b in zip(sur_both, sur_pi):
        torch.testing.assert_close(a, b)


def test_lbhash_wrapper_checks():
    base = create_method("csq", bits=8, num_classes=3, centers=CENTERS)
    with pytest.raises(ValueError, match="lbhash_mode must be one of add, replace, got 'swap'"):
        LowerBoundObjective(base, CENTERS, BlockSurrogate(8), ObjectiveOptions(lbhash_mode="swap"))
    with pytest.raises(ValueError, match="surrogate has 16 bits but the method has 8"):
        LowerBoundObjective(base, CENTERS, BlockSurrogate(16))
