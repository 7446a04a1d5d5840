"""Properties every registered method must have (the contract checks, in the spirit of
scikit-learn's check_estimator: each runs over every registered method, with per-method inputs
from a small table where a method needs its own), and the defaults table in the docs. The
hand-computed values and method-specific behaviour live in tests/methods/test_method_<name>.py."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from helpers import assert_resume_matches, digits_loss_steps, digits_subset, train_passes
from lbhash.cli import main
from lbhash.methods import PROFILES
from lbhash.methods import LowerBoundObjective, ObjectiveOptions, available_methods, create_method, method_class
from lbhash.methods import method_defaults
from lbhash.runs.train_options import methods_markdown
from lbhash.surrogate import BlockSurrogate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "methods.md"
C, BITS, N = 4, 16, 12


def make(name, multi_label=False, **constants):
    """The method with its default constants (those given replace them), C classes of random
    centers, BITS bits and a bank of N items."""
    torch.manual_seed(0)
    centers = torch.where(torch.randn(C, BITS) >= 0, 1.0, -1.0)
    kwargs = {"num_train": N, "centers": centers, "multi_label": multi_label,
              **method_defaults(name).constants, **constants}
    return create_method(name, BITS, C, **kwargs), centers


# the supervised deep methods; distill (label-free, learns from the features) is tested in test_neighbourhood.py
DEEP = [n for n in available_methods() if not method_class(n).closed_form and method_class(n).needs_labels]
CLOSED_FORM = [n for n in available_methods() if method_class(n).closed_form]


def test_the_seven_deep_methods_and_four_baselines_are_registered():
    # the paper's six, and OrthoHash (our addition)
    assert DEEP == ["csq", "dbdh", "dch", "dsdh", "greedyhash", "hashnet", "orthohash"]
    assert CLOSED_FORM == ["itq", "linear", "lsh", "pca"]
    assert [n for n in available_methods() if not method_class(n).needs_labels] == ["distill", "itq", "lsh", "pca"]


@pytest.mark.parametrize("name", DEEP)
@pytest.mark.parametrize("multi_label", [False, True])
def test_lbhash_adds_exactly_l_theta_for_every_method(name, multi_label):
    base, centers = make(name, multi_label)
    surrogate = BlockSurrogate(BITS)
    mode = method_defaults(name).lbhash_mode
    wrapped = LowerBoundObjective(base, centers, surrogate,
                                  ObjectiveOptions(lbhash_weight=0.5, lbhash_mode=mode)).eval()
    u = torch.randn(6, BITS)
    labels = torch.eye(C)[torch.tensor([0, 1, 2, 3, 0, 1])]
    if multi_label:
        labels[0, 2] = labels[3, 1] = 1
    index = torch.arange(6)
    # memory-bank methods change state in forward: compare on identical copies
    reference = {k: v.clone() for k, v in base.state_dict().items()}
    base_parts = base(u, labels, index).parts
    base.load_state_dict(reference)
    out = wrapped(u, labels, index)
    l_theta = surrogate.loss_theta(u, surrogate.pattern_index(centers), labels)
    assert float(out.parts["lower_bound"].detach()) == pytest.approx(0.5 * float(l_theta.detach()), rel=1e-6)
    kept = {k: v for k, v in base_parts.items() if not (mode == "replace" and k == base.center_part)}
    assert set(out.parts) == set(kept) | {"lower_bound"}
    for k, v in kept.items():
        assert out.parts[k].item() == pytest.approx(v.item(), rel=1e-6, abs=1e-9), k


BANK_METHODS = [n for n in available_methods() if method_class(n).needs_index]


def test_bank_methods():
    assert BANK_METHODS == ["dbdh", "dsdh"]


@pytest.mark.parametrize("name", BANK_METHODS)
def test_memory_bank_methods_need_an_index(name):
    base, _ = make(name)
    with pytest.raises(ValueError, match=f"method {name} keeps a memory bank .* stable index"):
        base(torch.randn(3, BITS), torch.eye(C)[:3], None)
    with pytest.raises(ValueError, match="needs the training-set size"):
        create_method(name, BITS, C, num_train=None, **method_defaults(name).constants)


def test_single_label_only_setting_rejects_multi_hot_data():
    with pytest.raises(ValueError, match="greedyhash.*ce"):
        create_method("greedyhash", BITS, C, multi_label=True, classifier_loss="ce")


@pytest.mark.parametrize("profile", PROFILES)
def test_docs_show_the_defaults_table_of_the_code(profile):
    text = DOCS.read_text()
    marker = f"<!-- defaults:{profile} -->\n"
    assert marker in text
    table = text.split(marker, 1)[1].split("\n\n", 1)[0].strip()
    assert table == methods_markdown(profile)


def test_methods_command_lists_every_method():
    result = CliRunner().invoke(main, ["methods"])
    assert result.exit_code == 0
    for name in available_methods():
        assert f"{name}: " in result.output


@pytest.mark.parametrize("name", CLOSED_FORM)
def test_closed_form_methods_refuse_the_d_objective_and_gradient_options(name):
    from lbhash.errors import InputError
    from lbhash.train import make_config

    for values, fragment in (({"lbhash": True}, "--lbhash"), ({"epochs": 3}, "epochs must be 1, got 3"),
                             ({"hidden": [32]}, "hidden must be empty"), ({"devices": 2}, "devices must be 1")):
        with pytest.raises(InputError, match=f"method {name} .*{re.escape(fragment)}"):
            make_config({"method": name, **values})


@pytest.mark.parametrize("name", CLOSED_FORM)
@pytest.mark.parametrize("multi_label", [False, True])
def test_closed_form_fit_contract(name, multi_label):
    """A (bits, d) weight and (bits,) bias, finite, the same for the same seed, a new draw or the
    same map for another seed; the loss parts are finite and sum to the total."""
    base, _ = make(name, multi_label)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 20)).astype(np.float32)
    labels = np.eye(C, dtype=bool)[rng.integers(0, C, 40)]
    if multi_label:
        labels[:5, 0] = True
    fit = base.fit_projection(x, labels, seed=3)
    assert fit.weight.shape == (BITS, 20) and fit.bias.shape == (BITS,)
    assert np.isfinite(fit.weight).all() and np.isfinite(fit.bias).all()
    again = base.fit_projection(x, labels, seed=3)
    np.testing.assert_array_equal(fit.weight, again.weight)
    np.testing.assert_array_equal(fit.bias, again.bias)
    u = torch.from_numpy(x @ fit.weight.T + fit.bias).float()
    out = base(u, torch.from_numpy(labels).float(), None)
    assert torch.isfinite(out.total) and float(out.total) == pytest.approx(float(sum(out.parts.values())))
    if not method_class(name).needs_labels:  # unsupervised: labels are not looked at
        blind = base.fit_projection(x, np.zeros((40, 0), bool), seed=3)
        np.testing.assert_array_equal(fit.weight, blind.weight)


# end to end for every variant in make test-slow; make test trains CSQ_D and ITQ (and refuses ITQ_D); CSQ
# on multi-label data: tests/methods/test_csq_ties.py::test_a_run_saves_its_tie_center_and_reports_the_bit_balance
FAST_VARIANTS = {("csq", True), ("itq", False), ("itq", True)}


@pytest.mark.parametrize("name, lbhash", [(n, d) if (n, d) in FAST_VARIANTS else pytest.param(n, d, marks=pytest.mark.slow)
                                          for d in (False, True) for n in available_methods()])
def test_every_variant_trains_on_multi_label_data(name, lbhash, tmp_path, monkeypatch):
    """Scene-like multi-label data (tiny, built here), end to end through the CLI."""
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    labels = np.zeros((160, 5), dtype=np.uint8)
    labels[np.arange(160), rng.integers(0, 5, 160)] = 1
    labels[rng.random(160) < 0.3, rng.integers(0, 5)] = 1
    # 24 features: PCA and ITQ need at least one per bit
    x = (labels @ rng.normal(size=(5, 24)) + 0.3 * rng.normal(size=(160, 24))).astype(np.float32)
    np.savez(tmp_path / "multi.npz", x=x, labels=labels, is_test=np.arange(160) >= 120)
    closed = method_class(name).closed_form
    args = ["train", "--data", f"features:{tmp_path / 'multi.npz'}", "--method", name, "--bits", "16",
            "--centers", "hadamard", "--out", str(tmp_path / "run"), "--no-progress"]
    args += ([] if closed else ["--epochs", "2", "--hidden", "32"]) + (["--lbhash"] if lbhash else [])
    result = CliRunner().invoke(main, args)
    if closed and lbhash:  # baselines have no _D variant: one line, exit 2, nothing written
        assert result.exit_code == 2 and result.output.startswith(f"error: method {name} is "), result.output
        assert not (tmp_path / "run").exists()
        return
    assert result.exit_code == 0, result.output
    import json
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["run"]["variant"] == name + ("_D" if lbhash else "") and 0 < metrics["map"] <= 1
    assert ("classifier_accuracy" in metrics) == (name in ("greedyhash", "dsdh", "orthohash"))


def test_dbdh_trains_at_its_validated_learning_rate_unless_the_paper_profile_is_asked():
    from lbhash.data.spec import load_data
    from lbhash.train.config import TrainConfig
    from lbhash.train.resolve import resolve_config

    dataset = load_data("digits")
    assert resolve_config(TrainConfig(data="digits", method="dbdh"), dataset).recipe.lr == 1e-4
    assert resolve_config(TrainConfig(data="digits", method="dbdh", defaults="paper"), dataset).recipe.lr == 1e-3
    assert resolve_config(TrainConfig(data="digits", method="dbdh", lr=0.01), dataset).recipe.lr == 0.01
    assert resolve_config(TrainConfig(data="digits", method="csq"), dataset).recipe.lr == 1e-3


# --- the contract of a deep method ----------------------------------------------------------------

SINGLE = torch.eye(C)[[0, 2, 0, 1]]
MULTI = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 1, 1], [0, 0, 0, 0]])  # the last item has no label

# (method, constants, the whole one-line message), each constant checked when the method is built
BAD_CONSTANTS = [
    ("dbdh", {"num_train": None}, "method dbdh keeps a memory bank of every training item and needs the "
                                  "training-set size (num_train)"),
    ("dbdh", {"p": 3}, "method dbdh: p must be 1 or 2, got 3"),
    ("dbdh", {"alpha": -1}, "method dbdh: alpha must be a finite number >= 0, got -1.0"),
    ("dbdh", {"binarize": "sign"}, "method dbdh: binarize must be one of ste, clamp, got 'sign'"),
    ("csq", {"quantization": -1}, "method csq: quantization must be a finite number >= 0, got -1"),
    ("dch", {"gamma": 0}, "dch: gamma must be > 0, got 0"),
    ("dsdh", {"nu": 0.0}, "method dsdh: nu must be a finite number > 0, got 0.0"),
    ("dsdh", {"mu": -1.0}, "method dsdh: mu must be a finite number > 0, got -1.0"),
    ("dsdh", {"eta": float("nan")}, "method dsdh: eta must be a finite number >= 0, got nan"),
    ("dsdh", {"dcc_iter": 0}, "method dsdh: dcc_iter must be a positive integer, got 0"),
    ("hashnet", {"continuation_step": 0}, "hashnet: continuation_step must be a positive integer, got 0"),
    ("orthohash", {"scale": 0}, "method orthohash: scale must be a finite number > 0, got 0.0"),
    ("orthohash", {"scale": float("nan")}, "method orthohash: scale must be a finite number > 0, got nan"),
    ("orthohash", {"scale": "big"}, "method orthohash: scale must be a number, got 'big'"),
    ("orthohash", {"margin": -0.1}, "method orthohash: margin must be a finite number >= 0, got -0.1"),
    ("orthohash", {"margin": 2.0}, "method orthohash: margin must be below 2, got 2.0"),
    ("orthohash", {"quantization": -1}, "method orthohash: quantization must be a finite number >= 0, got -1.0"),
    ("orthohash", {"quantization": float("inf")},
     "method orthohash: quantization must be a finite number >= 0, got inf"),
]


@pytest.mark.parametrize("name, constants, message", BAD_CONSTANTS,
                         ids=[f"{n}-{'-'.join(c)}" for n, c, _ in BAD_CONSTANTS])
def test_bad_constants(name, constants, message):
    with pytest.raises(ValueError) as info:
        make(name, **constants)
    assert str(info.value) == message


@pytest.mark.parametrize("name", DEEP)
def test_bad_shapes(name):
    loss, _ = make(name)
    u, labels, index = torch.zeros(2, BITS), torch.eye(C)[[0, 1]], torch.tensor([0, 1])
    with pytest.raises(ValueError, match=rf"^method {name}: u must have shape \(batch, {BITS}\), got \(2, 3\)$"):
        loss(torch.zeros(2, 3), labels, index)
    with pytest.raises(ValueError, match=rf"^method {name}: labels must have shape \(2, {C}\), got \(2, 2\)$"):
        loss(u, torch.zeros(2, 2), index)


@pytest.mark.parametrize("name", BANK_METHODS)
def test_memory_bank_methods_check_the_index_range(name):
    loss, _ = make(name)
    u, labels = torch.zeros(2, BITS), torch.eye(C)[[0, 1]]
    with pytest.raises(ValueError, match=rf"index values must lie in \[0, {N}\), got min 1, max {N}"):
        loss(u, labels, torch.tensor([1, N]))
    with pytest.raises(ValueError, match="index values"):
        loss(u, labels, torch.tensor([-1, 2]))


def fill_bank(loss):
    """Write every row of a memory bank (outputs inside DBDH's clamp range, every class),
    then end an epoch (DSDH fits its codes B, so that its quantization term is in force)."""
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(N, BITS, generator=gen, dtype=loss.U.dtype) * 1.6 - 0.8
    loss(u, torch.eye(C, dtype=loss.Y.dtype)[torch.arange(N) % C], torch.arange(N))
    loss.on_epoch_end(0)


# (id, method, constants, the epoch whose schedule is in force)
GRADIENT_CASES = [
    ("csq", "csq", {}, None),
    ("dbdh-clamp-p1", "dbdh", {"p": 1, "binarize": "clamp"}, None),
    ("dbdh-clamp-p2", "dbdh", {"p": 2, "binarize": "clamp"}, None),
    ("dch", "dch", {}, None),
    ("dsdh", "dsdh", {"eta": 2.0}, None),
    ("hashnet", "hashnet", {}, 20),  # the continuation scale has grown to sqrt(2)
    ("orthohash", "orthohash", {"scale": 5.0, "margin": 0.3, "quantization": 0.5}, None),
]
# methods whose gradient is not the derivative of their loss, checked by hand in their own file
# (DBDH's default straight-through sign too: test_method_dbdh.py)
STRAIGHT_THROUGH = {"greedyhash"}


@pytest.mark.parametrize("name, constants, epoch", [c[1:] for c in GRADIENT_CASES], ids=[c[0] for c in GRADIENT_CASES])
@pytest.mark.parametrize("multi_label", [False, True], ids=["single", "multi"])
def test_gradient_matches_finite_differences(name, constants, epoch, multi_label):
    loss = make(name, multi_label, **constants)[0].double()
    if epoch is not None:
        loss.on_epoch_start(epoch)
    bank = method_class(name).needs_index
    if bank:
        fill_bank(loss)
        before = loss.U.clone()
        loss._remember = lambda *args: None  # hold the bank fixed while gradcheck perturbs u
    labels = (MULTI if multi_label else SINGLE).double()
    index = torch.tensor([5, 1, 2, 11])
    torch.manual_seed(1)
    u = torch.randn(4, BITS, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: loss(x, labels, index).total, (u,), eps=1e-6, atol=1e-6)
    if bank:
        torch.testing.assert_close(loss.U, before)  # all bank writes go through _remember


# constants under which extreme outputs are hardest for a method
EXTREME = {"hashnet": {"alpha": 100.0}, "orthohash": {"quantization": 1.0}}


def extreme_outputs(name, u):
    loss, _ = make(name, **EXTREME.get(name, {}))
    u.requires_grad_()
    out = loss(u, SINGLE, torch.arange(4))
    out.total.backward()
    return out, u.grad


@pytest.mark.parametrize("name", DEEP)
def test_zero_output_is_finite_with_finite_gradient(name):
    torch.manual_seed(1)
    u = torch.randn(4, BITS)
    u[1] = 0.0
    out, grad = extreme_outputs(name, u)
    assert torch.isfinite(out.total) and torch.isfinite(grad).all()


@pytest.mark.parametrize("name", DEEP)
def test_large_outputs_stay_finite(name):
    torch.manual_seed(1)
    out, grad = extreme_outputs(name, torch.randn(4, BITS) * 1e4)
    assert torch.isfinite(out.total) and torch.isfinite(grad).all()


# (id, method, constants, the loss after 20 full-batch Adam steps is below this fraction of the first)
DIGITS_CASES = [
    ("csq", "csq", {}, 0.9),
    ("dch", "dch", {"bits": 32}, 0.95),
    ("greedyhash", "greedyhash", {}, 0.8),
    ("greedyhash-bce", "greedyhash", {"classifier_loss": "bce"}, 0.95),
    ("hashnet", "hashnet", {"bits": 32}, 0.95),
    ("orthohash", "orthohash", {}, 0.8),
]


@pytest.mark.parametrize("name, constants, factor", [c[1:] for c in DIGITS_CASES], ids=[c[0] for c in DIGITS_CASES])
def test_loss_decreases_on_digits(name, constants, factor):
    if method_class(name).uses_centers:  # 10 classes of random centers
        bits = constants.get("bits", 16)
        centers = torch.where(torch.randn(10, bits, generator=torch.Generator().manual_seed(0)) >= 0, 1.0, -1.0)
        constants = {**constants, "centers": centers}
    start, end = digits_loss_steps(name, **constants)
    assert end < factor * start


# memory-bank methods train over shuffled passes with their epoch hooks: (a first pass fills the
# bank and ends an epoch, the mean loss of the last of 5 passes is below factor * first - margin)
BANK_DIGITS = {
    # the first pass fills the bank (its empty rows cost log 2, less than the +/-1 codes of the
    # straight-through sign); the likelihood has a floor well above 0: expect steady, small steps
    "dbdh": (True, 1.0, 0.02),
    # the first pass fills the bank, so that every pass below has B fitted
    "dsdh": (True, 0.9, 0.0),
}


@pytest.mark.parametrize("name", BANK_METHODS)
def test_memory_bank_loss_decreases_on_digits(name):
    fill_first, factor, margin = BANK_DIGITS[name]
    torch.manual_seed(0)
    x, labels = digits_subset()
    loss = create_method(name, bits=16, num_classes=10, num_train=len(x))
    head = torch.nn.Linear(64, 16)
    if fill_first:
        with torch.no_grad():
            loss(head(x), labels, torch.arange(len(x)))
        loss.on_epoch_end(0)
    means = train_passes(loss, head, x, labels, passes=5)  # 20 steps
    assert all(b < a for a, b in zip(means, means[1:])) and means[-1] < factor * means[0] - margin, means


# (the state a memory-bank method saves, a part of it that a fresh module does not share:
# DBDH's bank starts at zeros, DSDH's codes B at other random signs)
BANK_STATE = {"dbdh": ({"U", "Y"}, "U"), "dsdh": ({"U", "Y", "B", "W", "fitted"}, "B")}


@pytest.mark.parametrize("name", BANK_METHODS)
def test_memory_bank_state_dict_restores_the_method_exactly(name, tmp_path):
    names, fresh_differs = BANK_STATE[name]
    torch.manual_seed(1)
    x, labels = digits_subset(128)
    loss = create_method(name, bits=8, num_classes=10, num_train=len(x))
    head = torch.nn.Linear(64, 8)
    train_passes(loss, head, x, labels, passes=2)
    torch.save(loss.state_dict(), tmp_path / "state.pt")
    torch.manual_seed(99)  # a fresh module starts from other random codes
    fresh = create_method(name, bits=8, num_classes=10, num_train=len(x))
    assert not torch.equal(getattr(fresh, fresh_differs), getattr(loss, fresh_differs))
    fresh.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert set(fresh.state_dict()) == names
    for key in names:
        assert torch.equal(getattr(fresh, key), getattr(loss, key)), key
    index = torch.tensor([3, 40, 77])
    with torch.no_grad():
        u = head(x[index])
    a, b = loss(u, labels[index], index), fresh(u, labels[index], index)
    assert all(float(a.parts[k]) > 0 for k in a.parts), a.parts  # every term is in force
    assert all(torch.equal(a.parts[k], b.parts[k]) for k in a.parts)
    loss.on_epoch_end(2)
    fresh.on_epoch_end(2)
    for key in names:
        assert torch.equal(getattr(fresh, key), getattr(loss, key)), key


# every bank method through a real checkpoint in make test-slow; make test resumes DSDH (its state,
# bank, codes B and W, holds DBDH's bank) with every option on (tests/train/test_objective_options.py),
# and each state's round trip in test_memory_bank_state_dict_restores_the_method_exactly
@pytest.mark.slow
@pytest.mark.parametrize("name", BANK_METHODS)
def test_interrupted_run_resumes_to_the_same_codes(name, tmp_path, monkeypatch):
    from lbhash.train import TrainConfig

    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    cfg = TrainConfig(data="digits", method=name, bits=16, epochs=4, hidden=[64], progress=False, lr_step=0)
    assert_resume_matches(cfg, tmp_path)


def test_every_deep_method_has_its_rows_in_the_contract_tables():
    """A new method adds its inputs to the tables above (or, for the gradient, says why not)."""
    assert {c[1] for c in GRADIENT_CASES} | STRAIGHT_THROUGH == set(DEEP)
    assert {c[1] for c in DIGITS_CASES} | set(BANK_DIGITS) == set(DEEP)
    assert set(BANK_DIGITS) == set(BANK_STATE) == set(BANK_METHODS)


@pytest.mark.parametrize("name", available_methods())
def test_each_profile_recipe_is_a_partial_recipe_the_options_validate(name):
    """A method's recipes are partial (what they change in the paper's setting), and its defaults
    under a profile are that setting with them, checked as RecipeOptions."""
    from lbhash.methods.base import PAPER_RECIPE
    from lbhash.methods.options import RecipeOptions

    cls = method_class(name)
    for profile, partial in (("paper", cls.recipe), ("benchmark", cls.benchmark_recipe),
                             ("recommended", cls.recommended_recipe)):
        assert set(partial) <= set(PAPER_RECIPE), (profile, partial)
        d = method_defaults(name, profile)
        assert d.recipe == RecipeOptions(**{**PAPER_RECIPE, **partial})
        assert {k: d.options[k] for k in partial} == partial


def test_a_bad_recipe_of_a_method_is_one_line_naming_it(monkeypatch):
    from lbhash.errors import InputError

    monkeypatch.setattr(method_class("dch"), "benchmark_recipe", {"lr": -1.0})
    with pytest.raises(InputError, match=r"^method dch: its benchmark recipe: lr must be a positive number, got -1.0$"):
        method_defaults("dch", "benchmark")
