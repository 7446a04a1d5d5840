"""DCH against values computed by hand from its formula in docs/methods.md."""

import math

import pytest
import torch

import lbhash.methods.dch  # noqa: F401  (registers the method)
from hand_cases import MULTI, SINGLE, U, run
from lbhash.methods import create_method



def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def distance(a, b, bits):
    """(1 - min(cos, 0.99)) * bits / 2, the norm product floored at 1e-4."""
    cos = dot(a, b) / max(math.sqrt(dot(a, a)) * math.sqrt(dot(b, b)), 1e-4)
    return (1 - min(cos, 0.99)) * bits / 2


def dch_by_hand(u, labels, gamma, lam):
    """Balanced mean of S log(d/gamma) + log(1 + gamma/d), and lam * mean log(1 + d(|u|, 1)/gamma)."""
    n, bits = len(u), len(u[0])
    sim = [[1 if dot(labels[i], labels[j]) > 0 else 0 for j in range(n)] for i in range(n)]
    s1 = sum(map(sum, sim))
    s0 = n * n - s1
    pairwise = 0.0
    for i in range(n):
        for j in range(n):
            d = distance(u[i], u[j], bits)
            w = (n * n / s1 if sim[i][j] else n * n / s0) if s1 and s0 else 1.0
            pairwise += w * (sim[i][j] * math.log(d / gamma) + math.log(1 + gamma / d))
    quant = sum(math.log(1 + distance([abs(x) for x in row], [1.0] * bits, bits) / gamma) for row in u)
    return pairwise / (n * n), lam * quant / n


@pytest.mark.parametrize("labels", [SINGLE, MULTI], ids=["single", "multi"])
def test_hand_computed(labels):
    loss = create_method("dch", bits=6, num_classes=3, multi_label=labels is MULTI)
    out = run(loss, U, labels)
    pairwise, quant = dch_by_hand(U, labels, 20.0, 0.1)
    assert set(out.parts) == {"pairwise", "quantization"}
    assert out.total.dtype == torch.float32
    assert float(out.parts["pairwise"]) == pytest.approx(pairwise, rel=1e-5)
    assert float(out.parts["quantization"]) == pytest.approx(quant, rel=1e-5)
    assert float(out.total) == pytest.approx(pairwise + quant, rel=1e-5)


def test_hand_computed_other_constants():
    out = run(create_method("dch", bits=6, num_classes=3, gamma=3.0, quantization=0.5), U, SINGLE)
    pairwise, quant = dch_by_hand(U, SINGLE, 3.0, 0.5)
    assert float(out.total) == pytest.approx(pairwise + quant, rel=1e-5)


def test_both_pair_types():
    # two items of different classes: the two self-pairs are similar, the two cross pairs are
    # dissimilar; each kind has weight 4/2 = 2, so the mean is one of each kind
    u = [[1.0, 2.0, -1.0, 0.5], [0.5, -1.0, 1.0, 2.0]]
    out = run(create_method("dch", bits=4, num_classes=2, quantization=0.0), u, [[1, 0], [0, 1]])
    d_self = 0.01 * 4 / 2  # cosine 1 is capped at 0.99
    cos = dot(u[0], u[1]) / math.sqrt(dot(u[0], u[0]) * dot(u[1], u[1]))
    d_cross = (1 - cos) * 4 / 2
    expected = math.log(1 + d_self / 20) + math.log(1 + 20 / d_cross)
    assert float(out.parts["pairwise"]) == pytest.approx(expected, rel=1e-5)


def test_only_similar_pairs_is_finite():
    labels = [[1, 1, 0], [0, 1, 0], [0, 1, 1], [1, 1, 1]]
    out = run(create_method("dch", bits=6, num_classes=3), U, labels)
    assert torch.isfinite(out.total)
    assert float(out.parts["pairwise"]) == pytest.approx(dch_by_hand(U, labels, 20.0, 0.1)[0], rel=1e-5)


def test_quantization_at_binary_outputs():
    # |u| = 1 everywhere: cosine 1, capped at 0.99, so d = 0.01 * bits / 2
    u = torch.tensor([[1.0, -1.0, 1.0, 1.0, -1.0, -1.0], [-1.0, -1.0, 1.0, -1.0, 1.0, 1.0]])
    out = create_method("dch", bits=6, num_classes=3)(u, torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]), None)
    assert float(out.parts["quantization"]) == pytest.approx(0.1 * math.log(1 + 0.03 / 20), rel=1e-5)
