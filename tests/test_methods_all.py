"""Properties every registered method must have, and the defaults table in the docs."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lbhash.cli import main
from lbhash.cli.methods import markdown_table
from lbhash.methods import PROFILES
from lbhash.methods import LowerBoundObjective, available_methods, create_method, method_class
from lbhash.methods.defaults import method_defaults
from lbhash.surrogate import BlockSurrogate

DOCS = Path(__file__).resolve().parents[1] / "docs" / "methods.md"
C, BITS, N = 4, 16, 12


def make(name, multi_label=False):
    torch.manual_seed(0)
    centers = torch.where(torch.randn(C, BITS) >= 0, 1.0, -1.0)
    constants = method_defaults(name).constants
    return create_method(name, BITS, C, num_train=N, centers=centers, multi_label=multi_label,
                         **constants), centers


DEEP = [n for n in available_methods() if not method_class(n).closed_form]
CLOSED_FORM = [n for n in available_methods() if method_class(n).closed_form]


def test_the_seven_deep_methods_and_four_baselines_are_registered():
    # the paper's six, and OrthoHash (our addition)
    assert DEEP == ["csq", "dbdh", "dch", "dsdh", "greedyhash", "hashnet", "orthohash"]
    assert CLOSED_FORM == ["itq", "linear", "lsh", "pca"]
    assert [n for n in available_methods() if not method_class(n).needs_labels] == ["itq", "lsh", "pca"]


@pytest.mark.parametrize("name", DEEP)
@pytest.mark.parametrize("multi_label", [False, True])
def test_lbhash_adds_exactly_l_theta_for_every_method(name, multi_label):
    base, centers = make(name, multi_label)
    surrogate = BlockSurrogate(BITS)
    mode = method_defaults(name).lbhash_mode
    wrapped = LowerBoundObjective(base, centers, surrogate, weight=0.5, mode=mode).eval()
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
    assert table == markdown_table(profile)


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


@pytest.mark.parametrize("name", available_methods())
@pytest.mark.parametrize("lbhash", [False, True])
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
    from lbhash.train.config import TrainConfig, resolve_config

    dataset = load_data("digits")
    assert resolve_config(TrainConfig(data="digits", method="dbdh"), dataset).lr == 3e-4
    assert resolve_config(TrainConfig(data="digits", method="dbdh", defaults="paper"), dataset).lr == 1e-3
    assert resolve_config(TrainConfig(data="digits", method="dbdh", lr=0.01), dataset).lr == 0.01
    assert resolve_config(TrainConfig(data="digits", method="csq"), dataset).lr == 1e-3
