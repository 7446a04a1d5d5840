"""What training leaves on the screen and in a log (issue 69, item 11): on a terminal the per-batch
bar is erased as its epoch ends, so every epoch prints its line (loss, validation); in a log, where
no bar shows, a line at least every STEP_EVERY_S inside an epoch besides the epoch lines (a run's
step lines in a log: test_train_profile.py, whose printed run has them)."""

import json
import logging

from helpers import cli

import lbhash.train.fit as fit
import lbhash.train.summary as summary

ARGS = ["train", "--data", "digits", "--bits", 16, "--hidden", 64, "--centers", "hadamard", "--epochs", 3,
        "--eval-every", 2]


def test_step_lines_come_every_so_many_seconds_of_an_epoch(caplog):
    now = [0.0]
    report = summary.step_lines("csq", 2, every_s=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="lbhash"):
        for epoch in (1, 2):
            for step in range(1, 15):  # 14 steps 7 s apart: lines 35 s and 70 s into the epoch
                now[0] += 7.0 if step > 1 else 0.0
                report(epoch, step, 14, 1.0 / step)
            now[0] += 100.0  # evaluation between epochs: the next epoch's clock starts at its first step
    assert [r.getMessage() for r in caplog.records] == [
        "csq epoch 1/2: step 6/14, loss 0.1667 so far, 35 s", "csq epoch 1/2: step 11/14, loss 0.0909 so far, 70 s",
        "csq epoch 2/2: step 6/14, loss 0.1667 so far, 35 s", "csq epoch 2/2: step 11/14, loss 0.0909 so far, 70 s"]


def test_on_a_terminal_every_epoch_leaves_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(fit, "on_a_terminal", lambda: True)
    result = cli(*ARGS, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    kept = [line.rsplit("\r", 1)[-1] for line in result.output.splitlines() if "csq epoch" in line]
    epochs = [line[line.index("csq epoch"):] for line in kept if ": loss " in line]
    assert [line.split(":")[0] for line in epochs] == ["csq epoch 1/3", "csq epoch 2/3", "csq epoch 3/3"]
    for line, record in zip(epochs, log):
        assert line.startswith(f"csq epoch {record['epoch']}/3: loss {record['loss']['total']:.4f}, "), line
    assert "validation mAP@all" in epochs[1] and "validation mAP@all" in epochs[2]  # evaluated epochs 2 and 3
    assert not any(": step " in line for line in result.output.splitlines())  # the bar counts the steps there


def test_a_heartbeat_logs_while_its_block_runs_and_stops_with_it():
    """In a log, an epoch's evaluation (encoding the validation and training items) prints a line
    every HEARTBEAT_S while it runs; here every 10 ms, the block waiting for the first two lines."""
    import threading

    lines, two = [], threading.Event()

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
            if len(lines) >= 2:
                two.set()

    handler = Collect()
    logger = logging.getLogger("lbhash")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with summary.heartbeat("csq epoch 2/3: evaluating", every_s=0.01):
            assert two.wait(60)
        after = len(lines)
        with summary.heartbeat("unused", every_s=3600):  # a block shorter than its period prints nothing
            pass
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert len(lines) == after  # the thread is joined when the block ends
    assert all(line.startswith("csq epoch 2/3: evaluating, ") and line.endswith(" s") for line in lines), lines
