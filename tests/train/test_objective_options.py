"""The options of the _D objective and of model selection (issue: when does the objective help)."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import assert_resume_matches
from lbhash.data import ArrayDataset, carve_validation, make_split
from lbhash.errors import InputError
from lbhash.methods import LowerBoundObjective, ObjectiveOptions, create_method
from lbhash.methods.lower_bound import flip_bits
from lbhash.surrogate import BlockSurrogate, _FusedSurrogate, theta_weights
from lbhash.train import TrainConfig
from lbhash.train.optim import lr_factor
from lbhash.train.loop import Selection

FAST = dict(data="digits", bits=16, hidden=[64], centers="hadamard", progress=False)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


def reference_logp(l, params, mask):
    w1, b1, w2, b2 = params
    x = l.reshape(len(l), -1, w1.shape[1]).transpose(0, 1)
    return F.log_softmax(torch.baddbmm(b2, F.silu(torch.baddbmm(b1, x, w1)) * mask, w2), -1)


@pytest.mark.parametrize("multilabel", ["sum", "mean"])
@pytest.mark.parametrize("reduction, scale", [("sum", 1.0), ("mean", 0.5)])
def test_one_forward_gives_each_loss_its_own_gradient(reduction, scale, multilabel):
    """L_pi of one forward reaches pi only, L_theta reaches l only, with the values and gradients
    of the two separate passes (pi live on detached l; pi frozen on live l) under one mask."""
    torch.manual_seed(0)
    s = BlockSurrogate(16, hidden=32).double()
    params = [s.w1, s.b1, s.w2, s.b2]
    l = torch.randn(6, 16, dtype=torch.float64, requires_grad=True)
    patterns = torch.randint(0, 256, (3, 2))
    labels = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=torch.float64)
    mask = (torch.rand(2, 6, 32) < 0.5).double() * 2
    target = s.pattern_index(l.detach() >= 0).t().contiguous()
    weights = theta_weights(labels, multilabel).double()  # rows sum to 2 ("sum") or 1 ("mean")
    pi, theta, _ = _FusedSurrogate.apply(l, *params, target, patterns, weights, mask, scale)

    logp = reference_logp(l.detach(), params, mask)
    ref_pi = -logp.gather(2, target.unsqueeze(2)).sum() / 6
    logp_frozen = reference_logp(l, [p.detach() for p in params], mask)
    nll = -logp_frozen.gather(2, patterns.t().unsqueeze(1).expand(-1, 6, -1)).sum(0)
    ref_theta = (nll * weights).sum(1).mean() * scale
    assert float(pi.detach()) == pytest.approx(float(ref_pi.detach()), rel=1e-12)
    assert float(theta.detach()) == pytest.approx(float(ref_theta.detach()), rel=1e-12)

    got = torch.autograd.grad(pi + theta, [l, *params])
    want_params = torch.autograd.grad(ref_pi, params)
    want_l = torch.autograd.grad(ref_theta, l)[0]
    torch.testing.assert_close(got[0], want_l, rtol=1e-10, atol=1e-12)
    for g, w in zip(got[1:], want_params):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    # each loss alone: no gradient on the other side at all
    pi, theta, _ = _FusedSurrogate.apply(l, *params, target, patterns, weights, mask, scale)
    assert torch.autograd.grad(pi, [l, *params], allow_unused=True, retain_graph=True)[0] is None
    assert all(g is None for g in torch.autograd.grad(theta, [l, *params], allow_unused=True)[1:])


def test_fused_and_separate_paths_agree_without_dropout():
    torch.manual_seed(1)
    centers = torch.where(torch.randn(3, 16) >= 0, 1.0, -1.0)
    base = create_method("hashnet", 16, 3)
    make = lambda fused: LowerBoundObjective(base, centers, BlockSurrogate(16, dropout=0.0),
                                             ObjectiveOptions(fused_surrogate=fused))
    torch.manual_seed(2)
    fused = make(True)
    separate = make(False)
    separate.surrogate.load_state_dict(fused.surrogate.state_dict())
    u = torch.randn(5, 16)
    labels = torch.eye(3)[[0, 1, 2, 0, 1]]
    (a, pa), (b, pb) = fused.losses(u, labels, None), separate.losses(u, labels, None)
    assert float(a.parts["lower_bound"].detach()) == pytest.approx(float(b.parts["lower_bound"].detach()), rel=1e-6)
    assert float(pa[0]) == pytest.approx(float(pb[0]), rel=1e-6) and float(pa[1]) == float(pb[1])


@pytest.mark.parametrize("count", [0, 1, 3, 16])
def test_bit_flips_change_exactly_the_requested_number_of_bits(count):
    torch.manual_seed(0)
    l = torch.randn(50, 16)
    l[0, :4] = 0.0  # bin(0) = +1: a flipped zero must come out negative
    flipped = flip_bits(l, count)
    changed = ((flipped >= 0) != (l >= 0)).sum(1)
    assert (changed == count).all()
    assert torch.equal(flipped.abs()[l != 0], l.abs()[l != 0])  # inputs flipped, not rescaled


def test_redrawn_permutation_keeps_codes_and_centers_consistent():
    torch.manual_seed(0)
    centers = torch.where(torch.randn(4, 16) >= 0, 1.0, -1.0)
    redraw = ObjectiveOptions(block_assignment="redraw", block_redraw_every=2, lbhash_mode="replace")
    obj = LowerBoundObjective(create_method("csq", 16, 4, centers=centers), centers, BlockSurrogate(16),
                              redraw, seed=3).eval()
    orders = []
    for epoch in range(6):
        obj.on_epoch_start(epoch)
        orders.append(obj.order.clone())
        # a code equal to its class center has exactly that center's patterns after permutation
        permuted = centers[:, obj.order]
        assert torch.equal(obj.surrogate.pattern_index(permuted), obj.center_patterns)
        labels = torch.eye(4)
        out, _ = obj.losses(centers.clone(), labels, None)
        by_hand = obj.surrogate.loss_theta(permuted, obj.center_patterns, labels)
        assert float(out.parts["lower_bound"]) == pytest.approx(float(by_hand), rel=1e-6)
    assert torch.equal(orders[0], orders[1]) and torch.equal(orders[2], orders[3])
    assert not torch.equal(orders[0], orders[2]) and not torch.equal(orders[2], orders[4])
    assert sorted(orders[2].tolist()) == list(range(16))
    again = LowerBoundObjective(create_method("csq", 16, 4, centers=centers), centers, BlockSurrogate(16),
                                redraw, seed=3)
    again.on_epoch_start(5)  # a resumed run redraws what the uninterrupted one had
    assert torch.equal(again.order, orders[5])


def test_multilabel_majority_target():
    torch.manual_seed(0)
    centers = torch.where(torch.randn(3, 16) >= 0, 1.0, -1.0)
    obj = LowerBoundObjective(create_method("dch", 16, 3), centers, BlockSurrogate(16),
                              ObjectiveOptions(multilabel_target="majority")).eval()
    labels = torch.tensor([[1.0, 1, 0], [1, 1, 1], [0, 0, 1]])
    u = torch.randn(3, 16)
    out, _ = obj.losses(u, labels, None)
    c = centers.numpy()
    majority = np.stack([np.where(c[[0, 1]].sum(0) >= 0, 1, -1), np.where(c.sum(0) >= 0, 1, -1), c[2]])
    patterns = obj.surrogate.pattern_index(torch.from_numpy(majority).float())
    by_hand = obj.surrogate.pattern_nll(u, patterns).diagonal().mean()
    assert float(out.parts["lower_bound"]) == pytest.approx(float(by_hand), rel=1e-6)


def test_validation_split_is_no_query_leaves_the_database_as_drawn_and_is_seeded():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 400)
    ds = ArrayDataset(np.zeros((400, 2), np.float32), labels, None, "toy")
    for protocol in ("per-class:40,10", "per-class:40,10,+train", "random:100,50"):
        split = make_split(ds, protocol, 1)
        carved = carve_validation(split, ds.labels, 0.1, 1)
        v = carved.validation
        assert len(v) and not np.intersect1d(v, carved.query).size and not np.intersect1d(v, carved.train).size
        # training items stay database items where the protocol's database holds them (issue 60)
        np.testing.assert_array_equal(carved.database, split.database)
        held = np.isin(v, carved.database)
        assert held.all() if protocol != "per-class:40,10" else not held.any()
        np.testing.assert_array_equal(np.sort(np.concatenate([carved.train, v])), split.train)
        np.testing.assert_array_equal(carve_validation(split, ds.labels, 0.1, 1).validation, v)
        assert not np.array_equal(carve_validation(split, ds.labels, 0.1, 2).validation, v)
    per_class = np.bincount(labels[carve_validation(make_split(ds, "per-class:40,10", 1), ds.labels, 0.1, 1)
                                   .validation], minlength=5)
    assert (per_class == 4).all()


def test_best_validation_selection_restores_that_epochs_weights(every_option_run):
    from lbhash.codes_file import load_codes_file
    from lbhash.data import load_data
    from lbhash.train.forward import encode
    from lbhash.runs.encoder import load_run_model

    out = every_option_run[0]  # validated every epoch on a share of 0.2, select best-val
    metrics = json.loads((out / "metrics.json").read_text())
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    val = {r["epoch"]: r["eval"]["val_map"] for r in log}
    best = max(val, key=lambda e: (val[e], -e))
    assert metrics["run"]["selected_epoch"] == best and metrics["run"]["validation_map"] == val[best]
    saved = torch.load(out / "best.pt", weights_only=True)
    assert saved["epoch"] == best
    model, cfg = load_run_model(out)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved["model"][key], rtol=0, atol=0)
    codes = load_codes_file(out / "codes.npz")
    ds = load_data("digits")
    np.testing.assert_array_equal(encode(model, ds, codes["query_ids"]),
                                  np.where(np.unpackbits(codes["query_codes"], axis=1, count=16,
                                                         bitorder="little") > 0, 1, -1))
    assert metrics["run"]["n_validation"] == 200 and metrics["run"]["n_train"] == 800


def test_selection_patience():
    sel = Selection("last", patience=2)
    stopped = []
    for epoch, val_map in enumerate([0.5, 0.6, 0.55, 0.54], start=1):
        sel.update(epoch, val_map, None, False)
        stopped.append(sel.stopped)
    assert stopped == [False, False, False, True]  # two evaluations without a better mAP
    assert (sel.best_epoch, sel.best_map) == (2, 0.6)


def test_learning_rate_schedules():
    cfg = TrainConfig(epochs=10, warmup_epochs=2, schedule="cosine", lr_step=0, lr_gamma=0.1)
    factors = [lr_factor(e, cfg.recipe) for e in range(10)]
    assert factors[:2] == [0.5, 1.0]
    assert factors[2] == pytest.approx(1.0) and factors[6] == pytest.approx(0.5)
    assert all(a >= b for a, b in zip(factors[2:], factors[3:]))
    step = TrainConfig(epochs=10, warmup_epochs=1, schedule="step", lr_step=3, lr_gamma=0.1)
    assert [lr_factor(e, step.recipe) for e in (0, 1, 3, 4)] == [1.0, 1.0, 1.0, pytest.approx(0.1)]


@pytest.fixture(scope="module")
def every_option_run(tmp_path_factory):
    """(full, cut): a DSDH_D run with every option on, tensorboard's logger among them (a test
    dependency), and a copy cut after epoch 2 then resumed (helpers.assert_resume_matches): DSDH
    keeps a memory bank, codes B and a classifier W, which the resume must restore as well."""
    import importlib.util

    logger = "tensorboard" if importlib.util.find_spec("tensorboardX") else "none"
    cfg = TrainConfig(**FAST, lbhash=True, epochs=4, eval_every=1, validation=0.2, select="best-val", patience=3,
                      lbhash_reduction="mean", lbhash_weight=0.3, surrogate_flips=2, block_assignment="redraw",
                      block_redraw_every=1, schedule="cosine", warmup_epochs=1, optimizer="adamw",
                      weight_decay=0.01, surrogate_weight_decay=0.01, method="dsdh", logger=logger)
    return assert_resume_matches(cfg, tmp_path_factory.mktemp("every-option"))


def test_resume_is_bit_exact_with_every_option_on(every_option_run):
    full, cut = every_option_run
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if k != "seconds"}
                       for x in (p / "log.jsonl").read_text().splitlines()]
    assert strip(full) == strip(cut)


def test_tensorboard_logger_writes_event_files(every_option_run):
    pytest.importorskip("tensorboardX")
    for run in every_option_run:  # the resumed run writes its epochs' events too
        assert list((run / "tensorboard").glob("events.out.tfevents.*"))


def test_each_part_reads_its_own_option_set_of_a_config():
    from lbhash.data import DataOptions
    from lbhash.models import ModelOptions
    from lbhash.surrogate import SurrogateOptions
    from lbhash.train.config import FIELDS, OWNERS, SETS

    cfg = TrainConfig(lbhash_weight=0.5, lbhash_mode="replace", lbhash_reduction="mean", surrogate_flips=2,
                      block_assignment="redraw", block_redraw_every=3, fused_surrogate=False, hidden=[32],
                      surrogate_hidden=64, image_size=40)
    options = cfg.objective  # the flat keys went to the set that owns them
    assert type(options) is ObjectiveOptions and "hidden" not in ObjectiveOptions.model_fields
    centers = torch.where(torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) >= 0, 1.0, -1.0)
    made = LowerBoundObjective(create_method("csq", 16, 4, centers=centers), centers, BlockSurrogate(16), options)
    assert (made.weight, made.mode, made.reduction, made.flips) == (0.5, "replace", "mean", 2)
    assert (made.assignment, made.redraw_every, made.fused) == ("redraw", 3, False)
    assert (cfg.model, cfg.surrogate.surrogate_hidden, cfg.dataset) == \
        (ModelOptions(hidden=[32]), 64, DataOptions(image_size=40))
    assert type(cfg.surrogate) is SurrogateOptions and cfg.dataset.image_size == 40  # and each key reads back flat
    # no option set shares a field with another: each option has one owner
    assert len(SETS) >= 8 and sum(len(c.model_fields) for c in SETS.values()) == len(FIELDS) == len(OWNERS)
    # a set given whole, as a mapping or an option set, with flat keys over it
    whole = TrainConfig(objective={"lbhash_weight": 0.5, "lbhash_mode": "add"}, lbhash_mode="replace",
                        model=ModelOptions(hidden=[32]))
    assert (whole.objective.lbhash_weight, whole.objective.lbhash_mode, whole.model.hidden) == (0.5, "replace", [32])
    assert whole.to_dict() == {**TrainConfig().to_dict(), "lbhash_weight": 0.5, "lbhash_mode": "replace",
                               "hidden": [32]}
    with pytest.raises(InputError, match=r"^lbhash_weight must be a positive number, got -1$"):
        TrainConfig(objective={"lbhash_weight": -1})


def test_an_option_set_refuses_a_bad_value_in_one_line():
    with pytest.raises(InputError, match=r"^lbhash_mode must be one of add, replace, got 'swap'$"):
        ObjectiveOptions(lbhash_mode="swap")
    with pytest.raises(InputError, match=r"^unknown option 'wieght' \(known: lbhash_mode, "):
        ObjectiveOptions(wieght=1)
    plain = LowerBoundObjective(create_method("dch", 16, 3), torch.ones(3, 16), BlockSurrogate(16))
    assert (plain.weight, plain.mode, plain.reduction, plain.multilabel_theta) == (1.0, "add", "sum", "sum")


def test_a_config_is_read_by_its_sets_and_answers_no_flat_attribute():
    """Issue 71, item 4: options are read through their set (`cfg.recipe.lr`); a flat read (`cfg.lr`) is an
    AttributeError, and `value` gives an option by its flat key (the config file's) where a name is data."""
    from lbhash.train.config import OWNERS

    cfg = TrainConfig(data="digits", method="csq", lr=0.02, bits=32)
    assert (cfg.recipe.lr, cfg.hashing.bits) == (0.02, 32)
    for name in ("lr", "bits", "data", "backbone", "block_size"):
        assert name in OWNERS
        with pytest.raises(AttributeError):
            getattr(cfg, name)
    assert (cfg.value("lr"), cfg.value("bits"), cfg.value("data")) == (0.02, 32, "digits")
    with pytest.raises(KeyError, match="unknown option 'learning_rate'"):
        cfg.value("learning_rate")
