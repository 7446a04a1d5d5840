"""Properties every registered method must have, and the defaults table in the docs."""

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


def test_all_six_methods_are_registered():
    assert available_methods() == ["csq", "dbdh", "dch", "dsdh", "greedyhash", "hashnet"]


@pytest.mark.parametrize("name", available_methods())
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
    assert float(out.parts["lower_bound"]) == pytest.approx(0.5 * float(l_theta), rel=1e-6)
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


@pytest.mark.parametrize("name", available_methods())
@pytest.mark.parametrize("lbhash", [False, True])
def test_every_variant_trains_on_multi_label_data(name, lbhash, tmp_path, monkeypatch):
    """Scene-like multi-label data (tiny, built here), end to end through the CLI."""
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    labels = np.zeros((160, 5), dtype=np.uint8)
    labels[np.arange(160), rng.integers(0, 5, 160)] = 1
    labels[rng.random(160) < 0.3, rng.integers(0, 5)] = 1
    x = (labels @ rng.normal(size=(5, 12)) + 0.3 * rng.normal(size=(160, 12))).astype(np.float32)
    np.savez(tmp_path / "multi.npz", x=x, labels=labels, is_test=np.arange(160) >= 120)
    args = ["train", "--data", f"features:{tmp_path / 'multi.npz'}", "--method", name, "--bits", "16",
            "--epochs", "2", "--hidden", "32", "--centers", "hadamard", "--out", str(tmp_path / "run"),
            "--no-progress"] + (["--lbhash"] if lbhash else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    import json
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["run"]["variant"] == name + ("_D" if lbhash else "") and 0 < metrics["map"] <= 1
    assert ("classifier_accuracy" in metrics) == (name in ("greedyhash", "dsdh"))


def test_dbdh_trains_at_its_validated_learning_rate_unless_the_paper_profile_is_asked():
    from lbhash.data.spec import load_data
    from lbhash.train.config import TrainConfig, resolve_config

    dataset = load_data("digits")
    assert resolve_config(TrainConfig(data="digits", method="dbdh"), dataset).lr == 3e-4
    assert resolve_config(TrainConfig(data="digits", method="dbdh", defaults="paper"), dataset).lr == 1e-3
    assert resolve_config(TrainConfig(data="digits", method="dbdh", lr=0.01), dataset).lr == 0.01
    assert resolve_config(TrainConfig(data="digits", method="csq"), dataset).lr == 1e-3
