"""`lbhash train` needs --data (no silent toy set), and its first lines name the profile and
what it changes from the paper."""

from helpers import FAST_TRAIN, cli

from lbhash.methods import method_defaults


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
    assert paper.lbhash["multilabel_theta"] == "sum" and method_defaults("csq").lbhash["multilabel_theta"] == "mean"
    result = cli("train", *FAST_TRAIN, "--method", "csq", "--lbhash", "--epochs", "1", "--lr-step", "0",
                 "--out", tmp_path / "rec")
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("profile recommended: differs from the paper in ")
    for part in ("epochs 1 (paper 100)", "lr_step 0 (paper 10)", "multilabel_theta mean (paper sum)"):
        assert part in first, first
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
