"""CSQ's multi-label tie rule (its reference `label2center`): tied bits of the summed centers
take the bits of one fixed random center drawn from the run's seed; runs saved before the rule
keep +1 ties (and the mean over labels of L_theta) when they load and resume."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from helpers import Killed, stop_before_the_first_epoch

from lbhash.centers import generate_centers
from lbhash.methods import LowerBoundObjective, ObjectiveOptions, create_method
from lbhash.methods.csq import majority_targets, tie_center
from lbhash.surrogate import BlockSurrogate
from lbhash.runs import RunDirectory
from lbhash.train import make_config
from lbhash.runs.run_files import load_run_config


def brute_force_targets(centers: np.ndarray, labels: np.ndarray, ties: np.ndarray | None) -> np.ndarray:
    """A plain loop: per item and bit, the sum of its labels' center bits; sign; a tie takes
    the random center's bit (or +1 without one)."""
    out = np.zeros((len(labels), centers.shape[1]))
    for i, row in enumerate(labels):
        for bit in range(centers.shape[1]):
            total = sum(centers[c, bit] for c in range(len(row)) if row[c])
            out[i, bit] = 1 if total > 0 else -1 if total < 0 else (1 if ties is None else ties[bit])
    return out


def random_problem(seed, items=40, classes=6, bits=16):
    rng = np.random.default_rng(seed)
    centers = rng.choice([-1.0, 1.0], size=(classes, bits))
    labels = np.zeros((items, classes))
    for row in labels:
        row[rng.choice(classes, rng.integers(1, 5), replace=False)] = 1
    return centers, labels


@pytest.mark.parametrize("seed", [0, 1])
def test_majority_targets_match_a_brute_force_loop(seed):
    centers, labels = random_problem(seed)
    ties = tie_center(16, seed).numpy()
    got = majority_targets(torch.tensor(centers), torch.tensor(labels), torch.tensor(ties))
    want = brute_force_targets(centers, labels, ties)
    np.testing.assert_array_equal(got.numpy(), want)
    assert (brute_force_targets(centers, labels, None) != want).any()  # ties occurred and mattered
    np.testing.assert_array_equal(majority_targets(torch.tensor(centers), torch.tensor(labels)).numpy(),
                                  brute_force_targets(centers, labels, None))


def test_tie_center_is_a_fixed_function_of_the_seed():
    a, b, c = tie_center(64, 3), tie_center(64, 3), tie_center(64, 4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert set(a.tolist()) == {-1.0, 1.0}
    assert torch.equal(tie_center(64, 3, "random-center"), a) and tie_center(64, 3, "plus-one") is None  # +1 ties


def test_csq_and_the_majority_objective_use_the_tie_center():
    centers, labels = random_problem(5)
    ties = tie_center(16, 5)
    want = torch.tensor(brute_force_targets(centers, labels, ties.numpy())).float()
    csq = create_method("csq", bits=16, num_classes=6, centers=torch.tensor(centers).float(), tie_center=ties)
    u = torch.randn(len(labels), 16)
    bce = F.binary_cross_entropy_with_logits(2 * u, (want + 1) / 2)
    assert float(csq(u, torch.tensor(labels).float(), None).parts["center"]) == pytest.approx(float(bce), rel=1e-6)
    assert torch.equal(csq.state_dict()["tie_center"], ties)
    surrogate = BlockSurrogate(16)
    obj = LowerBoundObjective(csq, torch.tensor(centers).float(), surrogate,
                              ObjectiveOptions(lbhash_mode="replace", multilabel_target="majority"), tie_center=ties)
    patterns, _ = obj._targets(torch.tensor(labels).float())
    assert torch.equal(patterns, surrogate.pattern_index(want))
    plain = create_method("csq", bits=16, num_classes=6, centers=torch.tensor(centers).float())
    assert "tie_center" not in plain.state_dict()  # a run with +1 ties: its checkpoints as before


@pytest.fixture(scope="module")
def multilabel_features(tmp_path_factory):
    """240 + 60 items, 12 features, 4 classes, every training item with 2 labels (ties)."""
    rng = np.random.default_rng(0)
    y = np.zeros((300, 4), dtype=np.uint8)
    for row in y:
        row[rng.choice(4, 2, replace=False)] = 1
    x = (y @ rng.normal(size=(4, 12)) + 0.3 * rng.normal(size=(300, 12))).astype(np.float32)
    path = tmp_path_factory.mktemp("ml") / "pairs.npz"
    np.savez(path, x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    return path


def test_a_run_saves_its_tie_center_and_reports_the_bit_balance(multilabel_features, tmp_path, monkeypatch):
    cfg = make_config({"data": f"features:{multilabel_features}", "method": "csq", "bits": 16, "epochs": 1,
                       "seed": 7, "progress": False, "validation": 0.0})  # every item trains: the brute force's
    stopped = stop_before_the_first_epoch(monkeypatch)  # the rule and its summary are fixed before training
    with pytest.raises(Killed):
        RunDirectory(tmp_path / "run").train(cfg)
    learner = stopped[0].learner.state_dict()  # what each checkpoint saves as "learner"
    assert load_run_config(tmp_path / "run").objective.csq_ties == "random-center"
    summary = json.loads((tmp_path / "run" / "data.json").read_text())["target_balance"]
    centers = generate_centers(16, 4, kind="auto", seed=7)
    labels = np.load(multilabel_features)["y_train"]
    want = brute_force_targets(centers, labels, tie_center(16, 7).numpy())
    assert summary["ties"] == "random-center" and summary["multi_label_items"] == 240
    assert summary["targets_plus"] == pytest.approx((want > 0).mean(), abs=1e-4)
    assert summary["centers_plus"] == pytest.approx((centers > 0).mean(), abs=1e-4)
    assert torch.equal(learner["objective.tie_center"], tie_center(16, 7))


OLD_RULES = {"multilabel_target": "majority", "csq_ties": "plus-one", "multilabel_theta": "mean"}


def test_a_config_saved_before_the_options_loads_and_builds_their_old_rules(multilabel_features, tmp_path):
    """config.yaml without csq_ties and multilabel_theta (keys in another order) loads as +1 ties and
    the mean over labels, and builds objectives without a tie center; without them a new config
    takes the random center."""
    from lbhash.data import load_data
    from lbhash.train.builder import build_experiment
    from lbhash.train.resolve import resolve_config
    from lbhash.runs.run_files import save_run_config

    values = {"data": f"features:{multilabel_features}", "method": "csq", "lbhash": True, "bits": 16, "seed": 1}
    dataset = load_data(values["data"])
    save_run_config(tmp_path, resolve_config(make_config({**values, **OLD_RULES}), dataset))
    config = tmp_path / "config.yaml"
    saved = yaml.safe_load(config.read_text())
    del saved["csq_ties"], saved["multilabel_theta"]
    config.write_text(yaml.safe_dump(saved, sort_keys=True))
    old = load_run_config(tmp_path)
    assert (old.objective.csq_ties, old.objective.multilabel_theta, old.objective.multilabel_target) == ("plus-one", "mean", "majority")
    objective = build_experiment(old, dataset=dataset).learner.objective
    assert objective.tie_center is None and objective.base.tie_center is None
    assert objective.multilabel_theta == "mean"
    new = resolve_config(make_config({**values, "multilabel_target": "majority"}), dataset)
    assert new.objective.csq_ties == "random-center"
    built = build_experiment(new, dataset=dataset).learner.objective
    assert torch.equal(built.tie_center, tie_center(16, 1)) and torch.equal(built.base.tie_center, tie_center(16, 1))


# the resume from such a run, end to end (three trainings): make test-slow; the fast test above loads
# and builds its rules, tests/train/test_train_resume.py resumes runs bit-exactly
@pytest.mark.slow
def test_runs_saved_before_the_options_keep_their_old_rules(multilabel_features, tmp_path):
    """An 'old' run: made with +1 ties and the mean over labels, its config.yaml then stripped
    of both keys as runs saved before them are, and its keys in another order; it loads with those rules and resumes to the
    codes of the uninterrupted run."""
    values = {"data": f"features:{multilabel_features}", "method": "csq", "lbhash": True, "bits": 16,
              "epochs": 2, "seed": 1, "progress": False, "multilabel_target": "majority",
              "csq_ties": "plus-one", "multilabel_theta": "mean"}
    cfg = make_config(values)
    RunDirectory(tmp_path / "full").train(cfg)

    def die(epoch):
        if epoch == 1:
            raise Killed

    with pytest.raises(Killed):
        RunDirectory(tmp_path / "cut").train(cfg, on_epoch_end=die)
    config = tmp_path / "cut" / "config.yaml"
    saved = yaml.safe_load(config.read_text())
    del saved["csq_ties"], saved["multilabel_theta"]
    config.write_text(yaml.safe_dump(saved, sort_keys=True))  # key order is free: it changed with the option sets
    old = load_run_config(tmp_path / "cut")
    assert (old.objective.csq_ties, old.objective.multilabel_theta) == ("plus-one", "mean")
    RunDirectory(tmp_path / "cut").resume()
    a, b = (np.load(tmp_path / d / "codes.npz") for d in ("full", "cut"))
    np.testing.assert_array_equal(a["db_codes"], b["db_codes"])
    np.testing.assert_array_equal(a["query_codes"], b["query_codes"])
    new = make_config({k: v for k, v in values.items() if k not in ("csq_ties", "multilabel_theta")})
    assert new.objective.csq_ties == "random-center"
