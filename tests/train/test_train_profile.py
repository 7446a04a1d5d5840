"""`lbhash train` needs --data (no silent toy set), and its first lines name the profile and
what it changes from the paper, then what the run loaded (data.json); off a terminal it prints
one line per epoch, and --quiet prints only the results."""

import contextlib
import json

import numpy as np
import pytest
from helpers import FAST_TRAIN, Killed, cli, stop_before_the_first_epoch

from lbhash.methods import available_methods, method_class, method_defaults


def test_train_without_data_is_refused_in_one_line(tmp_path):
    result = cli("train", "--method", "csq", "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --data is required, e.g. --data features:PATH.npz (see docs/data.md); "
        "`lbhash demo` trains on the toy digits set"]
    assert not (tmp_path / "run").exists()
    assert "[required]" in cli("train", "--help").output


def test_first_line_names_the_profile_and_its_differences_from_the_paper(tmp_path, monkeypatch):
    from lbhash.train import make_config
    from lbhash.train.config import profile_line

    paper = method_defaults("csq", "paper")
    assert paper.lbhash["multilabel_theta"] == "sum" and method_defaults("csq").lbhash["multilabel_theta"] == "sum"
    (tmp_path / "c.yaml").write_text("data: digits\nepochs: 1\n")  # data from a config file is enough
    stop_before_the_first_epoch(monkeypatch)  # the line is printed before training
    result = cli("train", "--config", tmp_path / "c.yaml", *FAST_TRAIN[2:], "--method", "csq", "--lbhash",
                 "--out", tmp_path / "rec")
    assert isinstance(result.exception, Killed), result.output
    first = result.output.splitlines()[0]
    assert first.startswith("profile recommended: differs from the paper in ")
    for part in ("epochs 1 (paper 100)", "lr_step 0 (paper 10)"):
        assert part in first, first
    assert "multilabel_theta" not in first  # the recommended _D objective is the paper's
    # the paper's profile, without a run
    assert profile_line(make_config({"data": "digits", "method": "csq", "defaults": "paper", "epochs": 1})) == \
        "profile paper: differs from the paper in epochs 1 (paper 100)"


def test_profile_line_of_the_papers_own_recipe():
    from lbhash.train import make_config
    from lbhash.train.config import profile_line

    values = {"method": "csq", "lbhash": True, "defaults": "paper",
              "protocol": "digits", **method_defaults("csq", "paper").options}
    assert profile_line(make_config(values)) == "profile paper: the paper's recipe and _D objective"


def _rates(cfg, epochs):
    """The learning rate of every epoch of a run of `cfg`, from the scheduler the loop steps."""
    import torch

    from lbhash.train.optim import make_scheduler

    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=cfg.recipe.lr)
    scheduler = make_scheduler(optimizer, cfg.recipe)
    rates = []
    for _ in range(epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("epochs", [10, 30, 100])
# distill (label-free, not the paper's) trains with one recipe in every profile: a constant rate
@pytest.mark.parametrize("method", [m for m in available_methods()
                                    if not method_class(m).closed_form and method_class(m).needs_labels])
def test_the_recommended_schedule_uses_every_epoch_and_the_paper_keeps_its_own(method, epochs):
    from lbhash.train import make_config

    def config(profile):
        d = method_defaults(method, profile)
        return make_config({"method": method, "defaults": profile, "protocol": "digits", "data": "digits",
                            **d.recipe.model_dump(exclude_unset=True), "epochs": epochs})

    recommended = config("recommended")
    assert _rates(recommended, epochs) == [recommended.recipe.lr] * epochs  # the last epoch trains like the first
    paper = config("paper")
    # the paper's App. G: x0.1 every 10 epochs (1e-3 at epoch 0, 1e-4 at 10, 1e-12 at 99)
    assert _rates(paper, epochs) == pytest.approx([1e-3 * 0.1 ** (e // 10) for e in range(epochs)], rel=1e-9)


def test_hash_encoder_and_lbhash_train_train_with_the_same_recipe(monkeypatch):
    import numpy as np

    from lbhash import HashEncoder
    from lbhash.data import load_data
    from lbhash.runs.train_options import build_config
    from lbhash.train import resolve_config

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 6)).astype(np.float32), np.repeat(np.arange(3), 20)
    stopped = stop_before_the_first_epoch(monkeypatch)  # what fit resolves, before it trains
    with pytest.raises(Killed):
        HashEncoder(method="dbdh", bits=8, epochs=1, hidden=[8]).fit(X, y)
    # what `lbhash train` resolves, without training: its flags -> build_config -> resolve_config
    cli_cfg = resolve_config(build_config(None, {"data": "digits", "method": "dbdh", "bits": 8, "epochs": 1,
                                                 "hidden": [8]}), load_data("digits"))
    recipe = ("optimizer", "lr", "weight_decay", "lr_step", "lr_gamma", "schedule", "warmup_epochs", "batch_size")
    assert {k: stopped[0].cfg.value(k) for k in recipe} == {k: cli_cfg.value(k) for k in recipe}
    assert (cli_cfg.recipe.optimizer, cli_cfg.recipe.lr, cli_cfg.recipe.lr_step) == ("rmsprop", 1e-4, 0)  # DBDH recommended


# --- issue 19, 15: what a run loaded, --quiet, one line per epoch in a log ------------------------

DIGITS_LINE = ("data digits: features, 1797 items, 10 classes, 64 features (used as stored); "
               "split digits: 900 train, 100 validation, 300 query, 1497 database (validation included)")
# 10 per class held out to choose the epoch, which stay in the database (issue 60)


def run_args(out, *extra):
    return ["train", "--data", "digits", "--bits", 16, "--hidden", 64, "--centers", "hadamard", "--epochs", 3,
            "--eval-every", 2, "--out", out, *extra]


BEATS = []  # what the printed run's evaluations announced as their heartbeats (lbhash.train.summary.heartbeat)


@pytest.fixture(scope="module")
def printed_run(tmp_path_factory):
    """(run, output): `lbhash train` of 3 epochs evaluated at epochs 2 and 3, progress on (the
    default; CliRunner is no terminal), its validation mAPs scripted as 0.9 then 0.5: the run
    keeps epoch 2; a step line at every step, as if each took STEP_EVERY_S."""
    import lbhash.train.loop as loop
    import lbhash.train.summary as summary

    scripted = iter([0.9, 0.5])
    out = tmp_path_factory.mktemp("printed") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "mean_average_precision", lambda *args, **kw: next(scripted))
        patch.setattr(summary, "STEP_EVERY_S", 0.0)  # a step line at every step (tests/train/test_progress_lines.py)
        patch.setattr(loop, "heartbeat", lambda what: (BEATS.append(what), contextlib.nullcontext())[1])
        result = cli(*run_args(out))
    assert result.exit_code == 0, result.output
    return out, result.output


def test_a_run_says_what_it_loaded_and_prints_one_line_per_epoch_off_a_terminal(printed_run):
    run, output = printed_run
    lines = output.splitlines()
    assert lines[0] == ("profile recommended: differs from the paper in epochs 3 (paper 100), lr_step 0 (paper 10), "
                        "validation 0.1 (paper 0), eval_every 2 (paper 10)")
    assert lines[1] == DIGITS_LINE and "\r" not in output
    epochs = [line for line in lines if line.startswith("csq epoch ") and ": step " not in line]
    assert [line.split(":")[0] for line in epochs] == ["csq epoch 1/3", "csq epoch 2/3", "csq epoch 3/3"]
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert epochs[1] == (f"csq epoch 2/3: loss {log[1]['loss']['total']:.4f}, {log[1]['seconds']:.1f} s, "
                         "validation mAP@all 0.9000")
    summary = json.loads((run / "data.json").read_text())
    assert summary == {"data": "digits", "name": "digits", "kind": "features", "items": 1797, "classes": 10,
                       "multi_label": False, "feature_dim": 64, "dequantized": False,
                       "split": {"protocol": "digits", "seed": 0, "train": 900, "query": 300, "database": 1497,
                                 "validation": 100, "validation_in_database": 100}}
    resumed = cli("train", "--resume", "--out", run)
    assert resumed.exit_code == 0 and DIGITS_LINE not in resumed.output  # finished: nothing loaded


def test_a_log_gets_step_lines_inside_each_epoch(printed_run):
    """Issue 69, item 11: in a log a line every STEP_EVERY_S inside an epoch (tests/train/test_progress_lines.py)."""
    import math

    import yaml

    run, output = printed_run  # off a terminal, a step line at every step
    config = yaml.safe_load((run / "config.yaml").read_text())
    steps = math.ceil(900 / config["batch_size"])  # digits' 900 training items
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    for epoch in (1, 2, 3):
        lines = [line for line in output.splitlines() if line.startswith(f"csq epoch {epoch}/3: step ")]
        assert [line.split(",")[0] for line in lines] == [f"csq epoch {epoch}/3: step {s}/{steps}"
                                                          for s in range(1, steps + 1)]
        # the last step's mean so far is the epoch's mean loss, as its record has it
        assert f"loss {log[epoch - 1]['loss']['total']:.4f} so far" in lines[-1], (lines[-1], log[epoch - 1])
    assert "\r" not in output  # no bar
    assert BEATS == ["csq epoch 2/3: evaluating", "csq epoch 3/3: evaluating"]  # a line every HEARTBEAT_S while each runs


def test_quiet_prints_only_the_results(tmp_path):
    result = cli(*run_args(tmp_path / "run", "--quiet"))
    assert result.exit_code == 0, result.output
    assert "data digits" not in result.output and "epoch" not in result.output
    assert result.output.splitlines()[0].startswith("codes ") and "mAP@all" in result.output
    assert (tmp_path / "run" / "data.json").is_file()
    both = cli(*run_args(tmp_path / "other", "--quiet", "--progress"))
    assert both.exit_code == 2 and "--quiet" in both.output and not (tmp_path / "other").exists()


def test_the_data_line_says_when_features_were_dequantized(tmp_path):
    # the line a run prints second (test above), made from the experiment: no training needed
    from lbhash.train import make_config
    from lbhash.train.builder import build_experiment
    from lbhash.train.summary import data_summary, describe_data

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "q.npz", x=rng.integers(0, 255, (120, 8), dtype=np.uint8), labels=np.arange(120) % 3,
             is_test=np.arange(120) >= 100, scale=np.float32(0.02), zero_point=np.float32(128))
    exp = build_experiment(make_config({"data": f"features:{tmp_path / 'q.npz'}", "protocol": "given", "bits": 8,
                                        "hidden": [16], "epochs": 1, "progress": False}))
    summary = data_summary(exp)
    assert describe_data(summary) == ("data features:" + str(tmp_path / "q.npz") + ": features, 120 items, "
                                      "3 classes, 8 features (dequantized); split given: 91 train, "
                                      "9 validation, 20 query, 100 database (validation included)")  # 34/33/33: 3 each
    assert summary["dequantized"] is True


# --- issue 42 item 8: the recommended profile keeps the best validation epoch ----------------------

def _resolved(data=None, **values):
    from lbhash.data import load_data
    from lbhash.train.config import make_config
    from lbhash.train.resolve import resolve_config

    cfg = make_config({"data": "digits", **values})
    return resolve_config(cfg, load_data("digits") if data is None else data)


def test_the_recommended_profile_holds_out_a_tenth_and_keeps_the_best_validation_epoch():
    cfg = _resolved()
    assert (cfg.recipe.validation, cfg.recipe.select, cfg.recipe.eval_every) == (0.1, "best-val", 5)
    for profile in ("paper", "benchmark"):  # the paper keeps its last epoch and all its training items
        cfg = _resolved(defaults=profile)
        assert (cfg.recipe.validation, cfg.recipe.select, cfg.recipe.eval_every) == (0.0, "last", 10)
    assert (_resolved(validation=0.0).recipe.select, _resolved(select="last").recipe.validation) == ("last", 0.1)
    assert _resolved(defaults="paper", validation=0.2).recipe.select == "best-val"  # a share you hold out chooses
    itq = _resolved(method="itq")  # one closed-form pass: no epoch to choose
    assert (itq.recipe.validation, itq.recipe.select) == (0.0, "last")
    from lbhash import InputError

    with pytest.raises(InputError, match="select best-val and patience need a validation split"):
        _resolved(defaults="paper", select="best-val")


def test_a_split_too_small_for_the_default_share_trains_on_every_item():
    from lbhash.data.features import ArrayDataset

    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    singles = ArrayDataset(x, np.eye(6, dtype=bool)[:, :6], np.array([0, 0, 0, 1, 1, 1], bool), "six")
    cfg = _resolved(singles, protocol="given")  # one training item per class: none to spare
    assert (cfg.recipe.validation, cfg.recipe.select) == (0.0, "last")
    unlabelled = ArrayDataset(x, np.zeros((6, 0), bool), np.array([0, 0, 0, 1, 1, 1], bool), "none")
    assert _resolved(unlabelled, method="csq", protocol="given").recipe.validation == 0.0
    from lbhash import InputError
    from lbhash.train.builder import build_experiment
    from lbhash.train.config import make_config

    with pytest.raises(InputError, match="leaves no validation"):  # a share asked for is not dropped
        build_experiment(make_config({"data": "digits", "protocol": "given", "validation": 0.1}), dataset=singles)


def test_the_default_run_keeps_its_best_validation_epoch(printed_run):
    import torch

    run, _ = printed_run  # the recommended profile's defaults; validation mAP 0.9 at epoch 2, 0.5 at 3
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["eval"]["val_map"] for r in log if "eval" in r] == [0.9, 0.5]
    summary = json.loads((run / "metrics.json").read_text())["run"]
    assert (summary["select"], summary["selected_epoch"], summary["epochs_trained"], summary["validation_map"]) == \
        ("best-val", 2, 3, 0.9)
    assert summary["n_validation"] == 100  # 10 of each digit's 100 training items
    assert torch.load(run / "best.pt", weights_only=True)["epoch"] == 2


def test_epoch_lines_show_first_last_evaluated_and_a_line_every_ten_seconds(caplog):
    import logging

    from lbhash.train.summary import epoch_lines

    now = [0.0]
    report = epoch_lines("csq", 8, every_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="lbhash"):
        for epoch in range(1, 9):
            now[0] += 4.0  # an epoch takes 4 s: a line at most every 10 s between the others
            record = {"loss": {"total": 1.0 / epoch}, "seconds": 4.0}
            if epoch == 6:
                record["eval"] = {"val_map": 0.5}
            report(epoch, record)
    shown = [int(r.getMessage().split()[2].split("/")[0]) for r in caplog.records]
    assert shown == [1, 4, 6, 8]  # first; 12 s after it; evaluated; last
    assert caplog.records[2].getMessage() == "csq epoch 6/8: loss 0.1667, 4.0 s, validation mAP@all 0.5000"


def test_the_done_line_gives_the_lower_bound_its_scale():
    from lbhash.train.summary import result_line

    metrics = {"run": {"variant": "csq_D", "bits": 32, "epochs_trained": 100}, "map": 0.9281, "topk": "all",
               "n_query": 300, "n_db": 1497, "lower_bound": {"ratio": 1.6667}}
    assert result_line(metrics) == ("done: csq_D 32 bits, 100 epochs, mAP@all 0.9281 (300 queries, 1497 database "
                                    "items), lower bound 1.667 (over the database items, not the queries; 0: two "
                                    "class centers coincide, above 4: the database's classes fully apart)")
    all_train = {"run": {"variant": "csq", "bits": 64, "epochs_trained": 30, "validation_map": 0.81234,
                         "selected_epoch": 27}}  # (an all-train run: no query part, no "map")
    assert result_line(all_train) == ("done: csq 64 bits, 30 epochs, validation mAP 0.8123 (epoch 27 kept; no query "
                                      "part to measure mAP on)")


def test_a_run_draws_its_split_once_and_resolves_its_validation_share_on_it(monkeypatch):
    """Issue 71, item 2: the split is drawn once, before the config is resolved, and handed to both (the
    validation share is decided on it, and the run splits by it)."""
    from lbhash.data import make_split
    from lbhash.train import TrainConfig, builder, resolve
    from lbhash.train.builder import build_experiment

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1:])
        return make_split(*args, **kwargs)

    monkeypatch.setattr(builder, "make_split", counted)
    monkeypatch.setattr(resolve, "make_split", counted)
    exp = build_experiment(TrainConfig(data="digits", method="csq", bits=8, epochs=1, hidden=[8]))
    assert calls == [("digits", 0)] and exp.cfg.recipe.validation == 0.1 and len(exp.split.validation)
    want = make_split(exp.dataset, "digits", 0)  # the run's split is that draw, less its validation items
    np.testing.assert_array_equal(np.sort(np.concatenate([exp.split.train, exp.split.validation])), want.train)
