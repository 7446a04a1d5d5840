"""HashNet against values computed by hand from its formula in docs/methods.md."""

import math

import pytest
import torch

import lbhash.methods.hashnet  # noqa: F401  (registers the method)
from hand_cases import MULTI, SINGLE, U, run
from lbhash.methods import create_method



def hashnet_by_hand(u, labels, alpha, scale):
    """Mean over all B*B pairs of w_ij * (log(1 + exp(dp)) - S_ij dp), dp = alpha <h_i, h_j>."""
    n = len(u)
    h = [[math.tanh(scale * x) for x in row] for row in u]
    sim = [[1 if sum(a * b for a, b in zip(labels[i], labels[j])) > 0 else 0 for j in range(n)]
           for i in range(n)]
    s1 = sum(map(sum, sim))
    s0 = n * n - s1
    total = 0.0
    for i in range(n):
        for j in range(n):
            dp = alpha * sum(a * b for a, b in zip(h[i], h[j]))
            if s1 and s0:
                w = n * n / s1 if sim[i][j] else n * n / s0
            else:
                w = 1.0
            total += w * (math.log(1 + math.exp(dp)) - sim[i][j] * dp)
    return total / (n * n)


@pytest.mark.parametrize("labels", [SINGLE, MULTI], ids=["single", "multi"])
def test_hand_computed(labels):
    loss = create_method("hashnet", bits=6, num_classes=3, multi_label=labels is MULTI)
    out = run(loss, U, labels)
    assert set(out.parts) == {"pairwise"}
    assert out.total.dtype == torch.float32
    assert float(out.total) == pytest.approx(hashnet_by_hand(U, labels, 0.1, 1.0), rel=1e-5)


def test_hand_computed_other_alpha_and_scale():
    loss = create_method("hashnet", bits=6, num_classes=3, alpha=0.5)
    loss.on_epoch_start(45)
    expected = hashnet_by_hand(U, SINGLE, 0.5, math.sqrt(3))
    assert float(run(loss, U, SINGLE).total) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("epoch,scale", [(0, 1.0), (19, 1.0), (20, math.sqrt(2)), (45, math.sqrt(3))])
def test_continuation_scale(epoch, scale):
    loss = create_method("hashnet", bits=6, num_classes=3)
    loss.on_epoch_start(epoch)
    assert float(loss.scale) == pytest.approx(scale, rel=1e-6)


def test_scale_is_in_the_checkpoint():
    loss = create_method("hashnet", bits=6, num_classes=3)
    loss.on_epoch_start(60)
    restored = create_method("hashnet", bits=6, num_classes=3)
    restored.load_state_dict(loss.state_dict())
    assert float(restored.scale) == pytest.approx(2.0)
    assert float(run(restored, U, SINGLE).total) == pytest.approx(float(run(loss, U, SINGLE).total))


def test_continuation_step_is_a_constant():
    loss = create_method("hashnet", bits=6, num_classes=3, continuation_step=5)
    loss.on_epoch_start(10)
    assert float(loss.scale) == pytest.approx(math.sqrt(3))


def test_all_pairs_similar_uses_unit_weights():
    labels = [[1, 0, 0]] * 4
    out = run(create_method("hashnet", bits=6, num_classes=3), U, labels)
    assert torch.isfinite(out.total)
    assert float(out.total) == pytest.approx(hashnet_by_hand(U, labels, 0.1, 1.0), rel=1e-5)


def test_balance_weights_sum_each_kind_to_half():
    # sum of weights over similar pairs = |S| = sum over dissimilar pairs
    from lbhash.methods.hashnet import balance_weights
    sim = torch.tensor([[1.0, 0, 0], [0, 1.0, 1.0], [0, 1.0, 1.0]])
    w = balance_weights(sim)
    assert float((w * sim).sum()) == pytest.approx(9.0)
    assert float((w * (1 - sim)).sum()) == pytest.approx(9.0)
    assert torch.equal(balance_weights(torch.zeros(3, 3)), torch.ones(3, 3))
