"""OrthoHash against values computed by hand from its formula in docs/methods.md."""

import math

import pytest
import torch

import lbhash.methods.orthohash  # noqa: F401  (registers the method)
from lbhash.methods import HashLoss, LowerBoundObjective, ObjectiveOptions, create_method
from lbhash.surrogate import BlockSurrogate

U = [[0.5, -1.0, 2.0, 0.1],
     [-0.2, 0.4, 1.1, -0.9],
     [1.5, -0.6, 0.0, 0.8],
     [0.3, 0.9, -0.7, -1.1]]
CENTERS = [[1, 1, 1, 1], [1, -1, 1, -1], [-1, -1, 1, 1]]
SINGLE = [[1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
MULTI = [[1, 1, 0], [0, 0, 1], [1, 1, 1], [0, 0, 0]]  # the last item has no label


def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def ortho_by_hand(u, labels, scale, margin, weight, centers=CENTERS):
    """(classification, quantization): the target spread evenly over the positive classes,
    z_k = scale (cos(u, c_k) - margin y_k); weight * mean(1 - |u|_1 / (|u|_2 sqrt(bits)))."""
    classification = 0.0
    for row, y in zip(u, labels):
        z = [scale * (cos(row, c) - margin * yk) for c, yk in zip(centers, y)]
        log_total = math.log(sum(math.exp(zk) for zk in z))
        if sum(y):
            classification += sum(yk / sum(y) * (log_total - zk) for yk, zk in zip(y, z))
    # cos(u, bin u) = sum |u_j| / (||u|| sqrt(bits)), whatever the sign of each u_j
    quant = [1 - sum(abs(x) for x in row) / (math.sqrt(sum(x * x for x in row)) * math.sqrt(len(row)))
             for row in u]
    return classification / len(u), weight * sum(quant) / len(u)


def make(multi_label=False, **constants):
    return create_method("orthohash", bits=4, num_classes=3, multi_label=multi_label,
                         centers=torch.tensor(CENTERS, dtype=torch.float32), **constants)


def run(loss, u, labels, dtype=torch.float32):
    return loss(torch.tensor(u, dtype=dtype), torch.tensor(labels, dtype=dtype), torch.arange(len(u)))


@pytest.mark.parametrize("labels", [SINGLE, MULTI], ids=["single", "multi"])
def test_hand_computed_defaults(labels):
    out = run(make(multi_label=labels is MULTI), U, labels)
    classification, quant = ortho_by_hand(U, labels, 8.0, 0.2, 0.0)
    assert set(out.parts) == {"classification", "quantization"}
    assert out.total.dtype == torch.float32
    assert float(out.parts["classification"]) == pytest.approx(classification, rel=1e-5)
    assert float(out.parts["quantization"]) == 0.0
    assert float(out.total) == pytest.approx(classification, rel=1e-5)


@pytest.mark.parametrize("labels", [SINGLE, MULTI], ids=["single", "multi"])
def test_hand_computed_other_constants(labels):
    out = run(make(scale=3.0, margin=0.5, quantization=0.7), U, labels)
    classification, quant = ortho_by_hand(U, labels, 3.0, 0.5, 0.7)
    assert quant > 0.01  # the term is really exercised
    assert float(out.parts["classification"]) == pytest.approx(classification, rel=1e-5)
    assert float(out.parts["quantization"]) == pytest.approx(quant, rel=1e-5)
    assert float(out.total) == pytest.approx(classification + quant, rel=1e-5)


def test_single_label_is_the_plain_cross_entropy_and_the_margin_raises_it():
    # u is class 1's code: its cosines to the three codes are 0, 1 and 0
    u, y = [[1.0, -1.0, 1.0, -1.0]], [[0, 1, 0]]
    z = [8 * 0.0, 8 * (1.0 - 0.2), 8 * 0.0]
    expected = math.log(sum(math.exp(v) for v in z)) - z[1]
    # float64: the loss is small and float32 rounding would dominate it
    assert float(run(make(), u, y, torch.float64).total) == pytest.approx(expected, rel=1e-12)
    assert float(run(make(margin=0.0), u, y, torch.float64).total) < expected


def test_unlabelled_rows_add_nothing():
    # the mean is over every row, the unlabelled one contributing 0
    out = run(make(multi_label=True), U, MULTI)
    three = run(make(multi_label=True), U[:3], MULTI[:3])
    assert float(out.total) == pytest.approx(float(three.total) * 3 / 4, rel=1e-6)


def test_float64_stays_float64():
    out = run(make(quantization=0.7), U, SINGLE, dtype=torch.float64)
    assert out.total.dtype == torch.float64
    classification, quant = ortho_by_hand(U, SINGLE, 8.0, 0.2, 0.7)
    assert float(out.total) == pytest.approx(classification + quant, rel=1e-12)


def test_classify_is_the_cosine_to_each_class_code():
    loss = make()
    assert type(loss).classify is not HashLoss.classify and loss.center_part == "classification"
    codes = torch.tensor([[1.0, -1.0, 1.0, -1.0], [-1.0, -1.0, -1.0, 1.0]])
    expected = [[cos(b, c) for c in CENTERS] for b in codes.tolist()]
    torch.testing.assert_close(loss.classify(codes), torch.tensor(expected))
    torch.testing.assert_close(loss.classify(codes.to(torch.int8)), torch.tensor(expected))
    assert loss.classify(codes).argmax(1).tolist() == [1, 2]


def test_bad_centers():
    with pytest.raises(ValueError, match=r"method orthohash needs \(3, 4\) class centers"):
        create_method("orthohash", bits=4, num_classes=3)
    with pytest.raises(ValueError, match=r"method orthohash needs \(3, 4\) class centers"):
        create_method("orthohash", bits=4, num_classes=3, centers=torch.ones(3, 5))


def test_replace_mode_drops_the_classification_part():
    centers = torch.tensor(CENTERS, dtype=torch.float32).repeat(1, 2)  # 8 bits: one surrogate block
    base = create_method("orthohash", bits=8, num_classes=3, centers=centers, quantization=0.1)
    wrapped = LowerBoundObjective(base, centers, BlockSurrogate(8), ObjectiveOptions(lbhash_mode="replace")).eval()
    u, y = torch.randn(4, 8), torch.tensor(SINGLE, dtype=torch.float32)
    out = wrapped(u, y, None)
    assert set(out.parts) == {"quantization", "lower_bound"}
    assert float(out.parts["quantization"]) == pytest.approx(float(base(u, y, None).parts["quantization"]))


# in make test-slow; fast: OrthoHash's loss falls on digits (test_methods_all.py's test_loss_decreases_on_digits),
# it trains end to end through HashEncoder (test_hash_encoder.py's test_orthohash_through_the_front_door), and
# OrthoHash_D's objective is checked without training in test_replace_mode_drops_the_classification_part and
# test_methods_all.py's test_lbhash_adds_exactly_l_theta_for_every_method
@pytest.mark.slow
@pytest.mark.parametrize("lbhash", [False, True], ids=["orthohash", "orthohash_D"])
def test_training_beats_an_untrained_model_by_a_wide_margin(lbhash, tmp_path, monkeypatch):
    from lbhash.evaluate import mean_average_precision
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig
    from lbhash.train.builder import build_experiment
    from lbhash.train.forward import encode

    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    cfg = TrainConfig(data="digits", method="orthohash", lbhash=lbhash, bits=16, hidden=[128],
                      centers="hadamard", progress=False, epochs=6, lr_step=0)
    exp = build_experiment(cfg)
    ds, split, model = exp.dataset, exp.split, exp.learner.model
    untrained = mean_average_precision(encode(model, ds, split.query), encode(model, ds, split.database),
                                       ds.labels[split.query], ds.labels[split.database])
    metrics = RunDirectory(tmp_path / "run").train(cfg)
    assert metrics["run"]["variant"] == "orthohash" + ("_D" if lbhash else "")
    assert metrics["map"] > untrained + 0.3, (untrained, metrics["map"])
    assert metrics["classifier_accuracy"] > 0.8


def test_the_grid_runs_it_when_named_only():
    # the default grid is the paper's six methods; OrthoHash, beyond the paper, joins on request
    from lbhash.reproduce.experiments import Context, GridSpec

    assert "orthohash" not in GridSpec().methods
    cells = GridSpec(methods=("orthohash",), bits=(16,), seeds=(0,)).cells(Context(data="digits", out=None))
    assert [c.name for c in cells] == ["orthohash-16bits-seed0", "orthohash_D-16bits-seed0"]
