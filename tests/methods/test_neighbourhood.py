"""The neighbourhood term (lbhash.methods.neighbourhood): its value on a batch computed by hand,
the label-free `distill` method on a toy whose neighbours are known, and the term composed with
a method and its _D variant through the learner."""

import math

import numpy as np
import pytest
import torch

from lbhash.data import ArrayDataset
from lbhash.errors import InputError
from lbhash.methods import create_method
from lbhash.methods.neighbourhood import neighbourhood_distillation
from lbhash.train.builder import build_experiment
from lbhash.train.config import make_config


def hand_batch():
    """3 items, 2 bits. Features: cos(f1, f2) = 0, cos(f1, f3) = cos(f2, f3) = 1/sqrt(2).
    tanh(u) = (t, t), (t, -t), (-t, -t) with t = 1/2: code similarities h_i . h_j / 2 are
    s12 = 0, s13 = -1/4, s23 = 0."""
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    a = math.atanh(0.5)
    u = torch.tensor([[a, a], [a, -a], [-a, -a]], dtype=torch.float64, requires_grad=True)
    return features, u


def test_distillation_on_three_items_by_hand():
    features, u = hand_batch()
    # temperatures 1: row 1 compares softmax(0, 0.7071) = (0.330238, 0.669762) with
    # softmax(0, -0.25) = (0.562177, 0.437823): KL 0.109032; row 2 the same teacher with
    # (1/2, 1/2): KL 0.058800; row 3 (1/2, 1/2) with softmax(-0.25, 0): KL 0.007792
    value = neighbourhood_distillation(features, u, teacher_temperature=1.0, student_temperature=1.0)
    assert float(value) == pytest.approx((0.109032 + 0.058800 + 0.007792) / 3, abs=2e-6)
    # halving the teacher's temperature doubles its logits: row 3 keeps a uniform teacher
    sharper = neighbourhood_distillation(features, u, teacher_temperature=0.5, student_temperature=1.0)
    p = 1 / (1 + math.exp(-2 / math.sqrt(2)))                 # softmax(0, 1.4142)[1]
    row1 = (1 - p) * math.log((1 - p) / 0.562177) + p * math.log(p / 0.437823)
    row2 = (1 - p) * math.log((1 - p) / 0.5) + p * math.log(p / 0.5)
    assert float(sharper) == pytest.approx((row1 + row2 + 0.007792) / 3, abs=2e-6)


def test_the_cosine_student_on_three_items_by_hand():
    features, u = hand_batch()
    # cos(u1, u2) = 0, cos(u1, u3) = -1, cos(u2, u3) = 0, whatever |u|: at temperatures 1, row 1
    # compares softmax(0, 0.7071) with softmax(0, -1) = (0.731059, 0.268941): KL 0.348676; row 2
    # the same teacher with (1/2, 1/2): KL 0.058800; row 3 (1/2, 1/2) with softmax(-1, 0): KL 0.120115
    value = neighbourhood_distillation(features, u, teacher_temperature=1.0, student_temperature=1.0,
                                       student="cosine")
    assert float(value) == pytest.approx((0.348676 + 0.058800 + 0.120115) / 3, abs=2e-6)
    # the cosine does not saturate: the same codes three times longer give the same loss, where
    # tanh's similarities move towards +/-1
    longer = (u.detach() * 3).requires_grad_(True)
    assert float(neighbourhood_distillation(features, longer, 1.0, 1.0, "cosine")) == pytest.approx(float(value))
    assert float(neighbourhood_distillation(features, longer, 1.0, 1.0)) != pytest.approx(
        float(neighbourhood_distillation(features, u, 1.0, 1.0)))
    with pytest.raises(InputError, match="neighbourhood_student must be one of tanh, cosine, got 'sine'"):
        neighbourhood_distillation(features, u, student="sine")


def test_distillation_is_zero_when_the_code_ranks_as_the_features_and_reaches_u_only():
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    # student logits equal the teacher's: tanh(u_i) . tanh(u_j) / bits / T_s = cos / T_t
    h = torch.nn.functional.normalize(features.detach(), dim=1)
    u = torch.atanh(h * 0.999).clone().requires_grad_(True)       # h_i . h_j ~ cos * 0.998
    value = neighbourhood_distillation(features, u, teacher_temperature=1.0, student_temperature=0.5 * 0.998)
    assert float(value) == pytest.approx(0.0, abs=1e-6)
    value.backward()
    assert features.grad is None and u.grad is not None
    assert float(neighbourhood_distillation(features[:1], u[:1])) == 0.0   # one item: no neighbour


def test_distill_method_needs_features_and_names_its_part():
    loss = create_method("distill", bits=2, num_classes=0, teacher_temperature=1.0, student_temperature=1.0)
    features, u = hand_batch()
    out = loss(u, torch.zeros(3, 0), None, features)
    assert list(out.parts) == ["distillation"]
    assert float(out.total) == pytest.approx(0.058541, abs=2e-6)
    with pytest.raises(InputError, match="distill learns from the hash head's input features"):
        loss(u, torch.zeros(3, 0), None)
    with pytest.raises(InputError, match="student_temperature must be a positive number"):
        create_method("distill", bits=2, num_classes=0, student_temperature=0.0)


def test_distill_keeps_the_float_neighbours_of_a_toy_without_labels():
    """4 clusters of 10 in 16-D whose float cosine kNN are exactly each item's 9 cluster mates
    (checked): a code that keeps the kNN ranking puts them first by Hamming. A linear layer
    trained on the method's loss alone (no labels) does; at initialisation it does not."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 10)
    x = torch.from_numpy(rng.standard_normal((4, 16))[y] * 2 + 0.6 * rng.standard_normal((40, 16))).float()
    mate = (y[:, None] == y[None, :]) & ~np.eye(40, dtype=bool)
    unit = torch.nn.functional.normalize(x, dim=1)
    cosine = (unit @ unit.T).numpy()
    assert all(cosine[i, mate[i]].min() > cosine[i, y != y[i]].max() for i in range(40))
    loss = create_method("distill", bits=8, num_classes=0)
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)

    def mates_first() -> bool:
        codes = torch.where(layer(x) >= 0, 1, -1).detach().numpy()
        distances = (8 - codes @ codes.T) // 2
        return all(distances[i, mate[i]].max() < distances[i, y != y[i]].min() for i in range(40))

    assert not mates_first()
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
    for _ in range(150):
        optimizer.zero_grad()
        loss(layer(x), torch.zeros(40, 0), None, x).total.backward()
        optimizer.step()
    assert mates_first()


def blob_data():
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(4), 15)
    x = rng.normal(size=(4, 12))[y] + rng.normal(size=(60, 12))
    return ArrayDataset(x.astype(np.float32), y, None, "blobs")


def learner_of(**values):
    cfg = make_config({"data": "features:blobs.npz", "protocol": "per-class:10,4", "bits": 16, "centers": "hadamard",
                       "validation": 0.0, **values})
    return build_experiment(cfg, dataset=blob_data()).learner


@pytest.mark.parametrize("method,lbhash", [("csq", True), ("dch", False)])
def test_the_neighbourhood_term_joins_a_method_and_its_D_variant(method, lbhash):
    torch.manual_seed(0)
    x = torch.randn(6, 12)
    labels = torch.eye(4)[[0, 0, 1, 1, 2, 3]]
    plain = learner_of(method=method, lbhash=lbhash)
    weighted = learner_of(method=method, lbhash=lbhash, neighbourhood_weight=2.5)
    u, out, _ = weighted(x, labels, torch.arange(6))
    features = weighted.model.head_inputs(x)            # the standardised features
    expected = 2.5 * neighbourhood_distillation(features, u)
    assert float(out.parts["neighbourhood"]) == pytest.approx(float(expected), rel=1e-6)
    assert float(out.total) == pytest.approx(float(sum(out.parts.values())), rel=1e-6)
    _, plain_out, _ = plain(x, labels, torch.arange(6))
    assert "neighbourhood" not in plain_out.parts
    assert set(out.parts) - set(plain_out.parts) == {"neighbourhood"}
    # neighbourhood_student reaches the learner's term
    cosine = learner_of(method=method, lbhash=lbhash, neighbourhood_weight=2.5, neighbourhood_student="cosine")
    u, out, _ = cosine(x, labels, torch.arange(6))
    expected = 2.5 * neighbourhood_distillation(cosine.model.head_inputs(x), u, student="cosine")
    assert float(out.parts["neighbourhood"]) == pytest.approx(float(expected), rel=1e-6)


def test_the_neighbourhood_term_is_refused_where_it_has_no_fixed_features_or_no_gradient(tmp_path):
    with pytest.raises(InputError, match="method itq is fitted in closed form.*neighbourhood"):
        make_config({"data": "digits", "method": "itq", "neighbourhood_weight": 1.0})
    with pytest.raises(InputError, match="neighbourhood_weight must be a number >= 0"):
        make_config({"data": "digits", "neighbourhood_weight": -1.0})
    with pytest.raises(InputError, match="neighbourhood_student must be one of tanh, cosine, got 'sine'"):
        make_config({"data": "digits", "neighbourhood_weight": 1.0, "neighbourhood_student": "sine"})
    labels = np.repeat(np.arange(2), 6)
    images = np.random.default_rng(0).integers(0, 256, (12, 16, 16, 3)).astype(np.uint8)
    np.savez(tmp_path / "images.npz", images=images, labels=labels, is_test=np.tile(np.arange(6) < 2, 2))
    images_data = {"data": f"image-array:{tmp_path / 'images.npz'}", "epochs": 1}
    with pytest.raises(InputError, match="neighbourhood_weight 1 keeps the neighbourhoods of fixed input features"):
        build_experiment(make_config({**images_data, "neighbourhood_weight": 1.0}))
    with pytest.raises(InputError, match="method distill keeps the neighbourhoods of fixed input features"):
        build_experiment(make_config({**images_data, "method": "distill"}))
