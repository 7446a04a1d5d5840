"""`lbhash train` needs --data (no silent toy set), and its first lines name the profile and
what it changes from the paper."""

import pytest
from helpers import FAST_TRAIN, cli

from lbhash.methods import available_methods, method_class, method_defaults


def test_train_without_data_is_refused_in_one_line(tmp_path):
    result = cli("train", "--method", "csq", "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --data is required, e.g. --data features:PATH.npz (see docs/data.md); "
        "`lbhash demo` trains on the toy digits set"]
    assert not (tmp_path / "run").exists()
    assert "[required]" in cli("train", "--help").output


def test_data_from_a_config_file_is_enough(tmp_path):
    (tmp_path / "c.yaml").write_text("data: digits\nepochs: 1\n")
    result = cli("train", "--config", tmp_path / "c.yaml", *FAST_TRAIN[2:], "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output


def test_first_line_names_the_profile_and_its_differences_from_the_paper(tmp_path):
    paper = method_defaults("csq", "paper")
    assert paper.lbhash["multilabel_theta"] == "sum" and method_defaults("csq").lbhash["multilabel_theta"] == "sum"
    result = cli("train", *FAST_TRAIN, "--method", "csq", "--lbhash", "--epochs", "1",
                 "--out", tmp_path / "rec")
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("profile recommended: differs from the paper in ")
    for part in ("epochs 1 (paper 100)", "lr_step 0 (paper 10)"):
        assert part in first, first
    assert "multilabel_theta" not in first  # the recommended _D objective is the paper's
    result = cli("train", *FAST_TRAIN, "--method", "csq", "--defaults", "paper", "--epochs", "1",
                 "--out", tmp_path / "paper1")
    assert result.output.splitlines()[0] == "profile paper: differs from the paper in epochs 1 (paper 100)"


def test_profile_line_of_the_papers_own_recipe():
    from lbhash.train import make_config
    from lbhash.train.config import profile_line

    values = {"method": "csq", "lbhash": True, "defaults": "paper", "input_kind": "features", "input_dim": 4,
              "protocol": "digits", **{k: v for k, v in vars(method_defaults("csq", "paper")).items()
                                        if k not in ("lbhash", "constants")},
              **method_defaults("csq", "paper").lbhash}
    assert profile_line(make_config(values)) == "profile paper: the paper's recipe and _D objective"


def _rates(cfg, epochs):
    """The learning rate of every epoch of a run of `cfg`, from the scheduler the loop steps."""
    import torch

    from lbhash.train.optim import make_scheduler

    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=cfg.lr)
    scheduler = make_scheduler(optimizer, cfg)
    rates = []
    for _ in range(epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("epochs", [10, 30, 100])
@pytest.mark.parametrize("method", [m for m in available_methods() if not method_class(m).closed_form])
def test_the_recommended_schedule_uses_every_epoch_and_the_paper_keeps_its_own(method, epochs):
    from lbhash.train import make_config

    def config(profile):
        d = method_defaults(method, profile)
        return make_config({"method": method, "defaults": profile, "input_kind": "features", "input_dim": 4,
                            "protocol": "digits", "data": "digits",
                            **{k: v for k, v in vars(d).items() if k not in ("lbhash", "constants")},
                            "epochs": epochs})

    recommended = config("recommended")
    assert _rates(recommended, epochs) == [recommended.lr] * epochs  # the last epoch trains like the first
    paper = config("paper")
    # the paper's App. G: x0.1 every 10 epochs (1e-3 at epoch 0, 1e-4 at 10, 1e-12 at 99)
    assert _rates(paper, epochs) == pytest.approx([1e-3 * 0.1 ** (e // 10) for e in range(epochs)], rel=1e-9)


def test_hash_encoder_and_lbhash_train_train_with_the_same_recipe(tmp_path):
    import numpy as np

    from lbhash import HashEncoder
    from lbhash.train.rundir import load_run_config

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 6)).astype(np.float32), np.repeat(np.arange(3), 20)
    enc = HashEncoder(method="dbdh", bits=8, epochs=1, hidden=[8]).fit(X, y)
    result = cli("train", "--data", "digits", "--method", "dbdh", "--bits", "8", "--epochs", "1", "--hidden", "8",
                 "--no-progress", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    cli_cfg = load_run_config(tmp_path / "run")
    recipe = ("optimizer", "lr", "weight_decay", "lr_step", "lr_gamma", "schedule", "warmup_epochs", "batch_size")
    assert {k: getattr(enc.config_, k) for k in recipe} == {k: getattr(cli_cfg, k) for k in recipe}
    assert cli_cfg.lr == 3e-4 and cli_cfg.lr_step == 0
