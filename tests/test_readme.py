"""The README is a test (issue 26, item 6): every snippet in README.md, and then in docs/tour.md (the tour
the README hands on to, issue 89), runs as written. The two are one contract, read as one text: README.md's
lines, then the tour's (`CONTRACT`); a message names the file and its own line (`loc`).

What runs, in README order, in ONE temporary working directory:

- fenced ```python blocks, executed in one namespace (a later block sees an earlier block's
  names), with the file name README.md and README's own line numbers in tracebacks;
- fenced ``` blocks without a language (or bash/sh/console) that hold `lbhash ...` command
  lines: each command (backslash continuations joined, comment lines dropped) runs with
  `bash -c` and the venv's bin first on PATH.

A command fails the test when it exits non-zero or prints "Traceback (most recent call last)";
a Python block when it raises or prints a traceback. The message names the block's line in
README.md and shows the output.

A block is skipped only when the line right before its fence is
`<!-- readme-test: skip (reason) -->`. The skipped `lbhash serve` blocks (the feature index's,
and the last step of the own-folder recipe) are run here instead: each server starts in the
background on 127.0.0.1 with a free port, the block's curl lines run against that port
(bounded waits), and the server is stopped. The skipped synopsis block is
checked against each command's --help (its commands and options exist).

Setup (fixture `readme_inputs`), the files the README's commands name:

- `features.npz`: 3,000 rows of ../shared/data/cifar10-mobilenetv1-features.npz (or
  $LBHASH_SHARED_DATA): the first 250 training rows and the first 50 test rows of each class,
  with its keys feat (uint8), labels, is_test, scale, zero_point;
- `queries.npy`: five raw uint8 `feat` rows of it, the first test row of each of the classes
  0 to 4;
- `scene.npz`: a copy of ../shared/data/scene-multilabel.npz;
- `cifar-small.npz`: the first 100 training and 20 test JPEGs of each class of
  ../shared/data/cifar10-jpg.tar.gz as an image array (tools/cifar_small.py);
- `photos/`: a folder of one's own photos, `photos/<class>/NNNN.jpg` without a test part: the
  first 40 training JPEGs of four classes of that tarball (tools/cifar_small.py).

The README's figures are checked against what its snippets print (FIGURES): a figure written
with d decimals passes when it lies within half a unit of its last decimal plus FIGURE_SLACK
(0.002: floating-point differences between CPUs and BLAS builds) of the measured value; a
count must match exactly. The Python blocks' figures are checked by both tests below, the
commands' by the whole run.

The tests that need them skip when the shared data is missing. The Python blocks alone need
only scikit-learn's digits and run in `make test`; the whole README in order (trainings,
index, search, the service) is marked slow (`make test-slow`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TOUR = REPO / "docs" / "tour.md"
CONTRACT = (README, TOUR)  # run in this order, in one directory and one Python namespace
BIN = Path(sys.executable).parent  # the venv's bin: lbhash lives beside its python
TRACEBACK = "Traceback (most recent call last)"
SHELL_LANGS = ("", "bash", "sh", "console", "shell")
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
COMMAND_TIMEOUT = 900  # seconds per command: the fine-tuned photos run takes 400-600 s on 2 cores without native bf16
SERVER_START_TIMEOUT = 90


def shared_data_dir() -> Path:
    """../shared/data beside the repository, or $LBHASH_SHARED_DATA (as conftest.py reads it)."""
    return Path(os.environ.get("LBHASH_SHARED_DATA", REPO.parent / "shared" / "data"))


@dataclass
class Block:
    lang: str
    line: int  # line of the opening fence in README.md (1-based)
    text: str
    skip: str | None  # the reason, when marked skip

    @property
    def runs_as_python(self) -> bool:
        return self.skip is None and self.lang == "python"

    @property
    def runs_as_shell(self) -> bool:
        return self.skip is None and self.lang in SHELL_LANGS

    def commands(self) -> list[tuple[int, str]]:
        """(README line, command) for each command of a shell block: continuations joined,
        blank and comment lines dropped, a leading `$ ` prompt removed."""
        out, pending, start = [], "", None
        for offset, raw in enumerate(self.text.splitlines(), start=1):
            line = raw.rstrip()
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if start is None:
                start = self.line + offset
            if line.startswith("$ "):
                line = line[2:]
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            out.append((start, pending + line))
            pending, start = "", None
        assert not pending, f"{loc(self.line)}: a command ends in a backslash"
        return out


def parse_readme(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"{loc(start + 1)}: a fence is never closed"
        marker = SKIP.match(lines[start - 1].strip()) if start > 0 else None
        if start > 0 and "readme-test" in lines[start - 1] and not marker:
            raise AssertionError(f"{loc(start)}: malformed marker {lines[start - 1]!r}; "
                                 "write <!-- readme-test: skip (reason) -->")
        blocks.append(Block(m["lang"].lower(), start + 1, "\n".join(body),
                            marker["reason"].strip() if marker else None))
        i += 1
    return blocks


def _contract_text() -> tuple[str, list[tuple[Path, int]]]:
    """README.md then the tour as one text, and each file's first line in it (0-based)."""
    parts, starts, at = [], [], 0
    for path in CONTRACT:
        text = path.read_text(encoding="utf-8")
        text = text if text.endswith("\n") else text + "\n"
        starts.append((path, at))
        parts.append(text)
        at += text.count("\n")
    return "".join(parts), starts


TEXT, STARTS = _contract_text()


def source(line: int) -> tuple[Path, int]:
    """(the file, its own 1-based line) of a 1-based line of TEXT."""
    path, start = [(p, s) for p, s in STARTS if s < line][-1]
    return path, line - start


def loc(line: int) -> str:
    path, own = source(line)
    return f"{path.relative_to(REPO).as_posix()}:{own}"


BLOCKS = parse_readme(TEXT)


def lbhash_lines(block: Block) -> list[tuple[int, str]]:
    return [(n, c) for n, c in block.commands() if c.startswith("lbhash ") or c == "lbhash"]


# --- the README's shape (no execution) --------------------------------------------------------


def test_every_block_runs_or_says_why_not():
    assert BLOCKS, "README.md has no code blocks"
    for b in BLOCKS:
        where = f"{loc(b.line)}"
        if b.skip is not None:
            assert b.skip, f"{where}: a skip marker needs a reason"
            continue
        assert b.lang == "python" or b.lang in SHELL_LANGS, (
            f"{where}: a ```{b.lang} block is neither run nor marked skip")
        if b.lang in SHELL_LANGS:
            assert lbhash_lines(b), (f"{where}: a shell block without `lbhash` command lines; run one "
                                     "or mark it <!-- readme-test: skip (reason) -->")
    skipped = [b for b in BLOCKS if b.skip]
    assert len(skipped) <= 5, f"skip markers are for a few blocks only: {[b.line for b in skipped]}"


def test_the_first_commands_say_how_to_enter_the_venv():
    """Issue 69 item 7: the first command after `make` failed (`No module named 'PIL'`): the README
    never said to activate .venv. The block that makes it ends by activating it, before any block
    that runs `lbhash` or `python`, and the text says how to do without activating."""
    first_use = next(b for b in BLOCKS if b.lang == "python" or any(
        c.startswith(("lbhash", "python ")) for _, c in b.commands()))
    setup = next(b for b in BLOCKS if any(c.startswith("make ") for _, c in b.commands()))
    assert setup.line < first_use.line
    assert setup.commands()[-1][1].split(" #")[0].strip() == ". .venv/bin/activate", setup.commands()
    assert TEXT.index("`.venv/bin/lbhash`") < TEXT.index(first_use.text)
    assert (REPO / "Makefile").read_text().count("-m venv $(VENV)") == 1  # the .venv the line activates


def test_commands_name_concrete_files():
    """Runnable commands hold no placeholders (PATH, RUN, RUN_DIR, HOST, ...): a reader pastes them."""
    for b in BLOCKS:
        if not b.runs_as_shell:
            continue
        for line, command in b.commands():
            code = re.sub(r"'[^']*'|\"[^\"]*\"", "", command.split(" #")[0])
            found = re.findall(r"\b[A-Z][A-Z_]{2,}\b", code)
            assert not found, f"{loc(line)}: placeholder {found} in `{command}`"


def _command(words: list[str], line: int):
    """The click command that `lbhash WORDS...` names, and the words that name it."""
    from lbhash.cli import main

    import click

    cmd, path = main, ["lbhash"]
    for word in words:
        if not isinstance(cmd, click.Group):
            break
        # get_command, as click resolves a name: lazy groups import a command when it is named
        ctx = click.Context(cmd)
        found = [cmd.get_command(ctx, n) for n in word.split("|")]
        if not all(found):
            assert word.startswith("-"), f"{loc(line)}: `{' '.join(path)}` has no command {word!r}"
            break
        path.append(word)
        cmd = found[0] if len(found) == 1 else found
        if isinstance(cmd, list):
            return cmd, path
    return [cmd], path


def test_synopsis_and_commands_match_help():
    """Every `lbhash` line of the README (the synopsis included) names a command that exists,
    and each option it shows is one of that command's options."""
    checked = 0
    for b in BLOCKS:
        for line, command in lbhash_lines(b):
            words = command.split(" #")[0].split()[1:]
            commands, path = _command(words, line)
            assert all(c is not None for c in commands), f"{loc(line)}: unknown command in `{command}`"
            rest = " ".join(words[len(path) - 1:])
            for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest):
                for c in commands:
                    opts = {o for p in c.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
                    assert option in opts, (f"{loc(line)}: `{' '.join(path)}` has no option {option} "
                                            f"(it has {sorted(opts)})")
                checked += 1
    assert checked > 20


# --- running the blocks -----------------------------------------------------------------------


def _environment() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_python(block: Block, namespace: dict, capfd) -> None:
    path, own = source(block.line)
    code = compile("\n" * own + block.text + "\n", str(path), "exec")
    try:
        exec(code, namespace)
    except BaseException:
        out, err = capfd.readouterr()
        pytest.fail(f"{loc(block.line)}: the Python block raised\n{traceback.format_exc()}\n"
                    f"--- output ---\n{(out + err)[-4000:]}", pytrace=False)
    out, err = capfd.readouterr()
    if TRACEBACK in out + err:
        pytest.fail(f"{loc(block.line)}: the Python block printed a traceback\n{(out + err)[-6000:]}",
                    pytrace=False)


def run_shell(line: int, command: str, cwd: Path, timeout: float = COMMAND_TIMEOUT) -> str:
    started = time.monotonic()
    try:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=_environment(), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{loc(line)}: `{command}` ran past {timeout} s\n{e.stdout or ''}{e.stderr or ''}",
                    pytrace=False)
    output = done.stdout + done.stderr
    TIMES.append((line, command, time.monotonic() - started))
    if done.returncode != 0 or TRACEBACK in output:
        why = f"exited {done.returncode}" if done.returncode != 0 else "printed a traceback"
        pytest.fail(f"{loc(line)}: `{command}` {why}\n{output[-6000:]}", pytrace=False)
    return done.stdout


TIMES: list[tuple[int, str, float]] = []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_serve_block(block: Block) -> bool:
    """A skipped block that starts the service and talks to it with curl."""
    commands = [c for _, c in block.commands()]
    return any(c.startswith("lbhash serve ") for c in commands) and any(c.startswith("curl ") for c in commands)


def run_serve_block(block: Block, cwd: Path) -> None:
    """Start the block's `lbhash serve` on 127.0.0.1 and a free port, run its curl lines against
    that port, stop the server; fail on a non-zero exit or a traceback anywhere."""
    pytest.importorskip("fastapi", reason="lbhash serve needs the serve extra: pip install 'lbhash[serve]'")
    pytest.importorskip("uvicorn", reason="lbhash serve needs the serve extra: pip install 'lbhash[serve]'")
    commands = block.commands()
    serve = [(n, c) for n, c in commands if c.startswith("lbhash serve ")]
    assert len(serve) == 1, f"{loc(block.line)}: expected one `lbhash serve` line"
    line, command = serve[0]
    port = _free_port()
    command = command.split(" #")[0] + f" --host 127.0.0.1 --port {port}"
    log = cwd / f".serve-{port}.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env=_environment(), stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{loc(line)}: `{command}` exited {proc.returncode} before serving\n"
                            f"{log.read_text()[-6000:]}", pytrace=False)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{loc(line)}: `{command}` did not listen within {SERVER_START_TIMEOUT} s\n"
                                f"{log.read_text()[-6000:]}", pytrace=False)
                time.sleep(0.3)
        curls = [(n, c) for n, c in commands if c.startswith("curl ")]
        assert curls, f"{loc(block.line)}: the serve block has no curl line"
        for n, c in curls:
            if shutil.which("curl") is None:
                pytest.skip("curl is not installed: the README's curl lines cannot run")
            c = re.sub(r"(https?://)?localhost:8000", f"127.0.0.1:{port}", c.split(" #")[0])
            out = run_shell(n, c + " --fail-with-body --max-time 60", cwd)
            answer = json.loads(out)
            assert "results" in answer, f"{loc(n)}: unexpected answer {out[:2000]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    text = log.read_text()
    if TRACEBACK in text:
        pytest.fail(f"{loc(line)}: `{command}` printed a traceback\n{text[-6000:]}", pytrace=False)


def check_same_as_before(line: int, command: str, out: str, previous: dict) -> None:
    """A command whose comment says "the same results" or "the same numbers" prints what the
    previous command of its kind (`lbhash search`, `lbhash evaluate`) printed, but for the line
    that says where R came from."""
    kind = " ".join(command.split()[:2])
    comment = command.partition(" #")[2]
    if "the same" in comment:
        assert kind in previous, f"{loc(line)}: `{command}` says 'the same' but follows no `{kind}`"
        before_line, before = previous[kind]

        def body(text):
            return [t for t in text.splitlines() if not t.startswith("R = ")]

        assert body(out) == body(before), (f"{loc(line)}: `{command}` promises the output of "
                                           f"{loc(before_line)}\n--- {loc(before_line)} ---\n{before[-3000:]}\n"
                                           f"--- {loc(line)} ---\n{out[-3000:]}")
    previous[kind] = (line, out)


# --- the README's figures against what its snippets print (issue 60, item 5) -----------------

FIGURE_SLACK = 0.002  # beyond a figure's own rounding: float differences between machines


@dataclass
class Figure:
    pattern: str  # a regular expression matching once in README.md; its group 1 is the figure
    measured: Callable[[dict, Path, dict], float]  # (namespace, working directory, outputs) -> value
    python_only: bool = False  # measured by the Python blocks alone (test_readme_python_blocks)
    # where the figure depends on the CPU's bf16 (the pretrained backbone computes in bf16 where it is native,
    # lbhash.cpus.bf16_native, else in float32): the pattern of the figure the README gives for a CPU without it
    without_bf16: str | None = None


def _metric(run: str, *keys: str) -> Callable[[dict, Path, dict], float]:
    def read(namespace, cwd, outputs):
        value = json.loads((cwd / run / "metrics.json").read_text())
        for key in keys:
            value = value[key]
        return value
    return read


FIGURES = [
    Figure(r'print\(metrics\["map"\]\) +# (\d\.\d+): the demo', lambda ns, cwd, out: ns["metrics"]["map"],
           python_only=True),
    Figure(r"This run reaches mAP@all\s+(\d\.\d+)\s+on its 200 queries", _metric("runs/photos", "map")),  # (fp32)
    Figure(r"The fine-tuned run reaches mAP@all\s+(\d\.\d+)", _metric("runs/photos-tuned", "map"),
           without_bf16=r"(\d\.\d+)\s+on a CPU without native bf16, where its backbone computes in float32"),
    Figure(r"the run's\s+mAP@all on its\s+500 queries is\s+(\d\.\d+)", _metric("runs/csq_D-64", "map")),
    Figure(r"its kNN accuracy\s+(\d\.\d+)", _metric("runs/csq_D-64", "knn_accuracy", "accuracy")),
]


def readme_figure(figure: Figure) -> tuple[int, str]:
    """(its line in TEXT, the figure as written) of a Figure; it must match exactly once in the README and
    the tour."""
    found = list(re.finditer(figure.pattern, TEXT))
    assert len(found) == 1, f"README.md and docs/tour.md: {len(found)} matches of {figure.pattern!r} (one expected)"
    return TEXT.count("\n", 0, found[0].start()) + 1, found[0].group(1)


def figure_misses(namespace: dict, cwd: Path, outputs: dict, python_only: bool) -> list[str]:
    """The figures that differ from what the snippets printed by more than their tolerance."""
    misses = []
    for figure in FIGURES:
        if python_only and not figure.python_only:
            continue
        line, written = readme_figure(figure)
        if figure.without_bf16 is not None and not _bf16_native():
            line, written = readme_figure(Figure(figure.without_bf16, figure.measured))
        measured = figure.measured(namespace, cwd, outputs)
        decimals = len(written.partition(".")[2])
        allowed = 0.5 * 10 ** -decimals + FIGURE_SLACK if decimals else 0
        if abs(float(written) - measured) > allowed + 1e-12:
            misses.append(f"{loc(line)}: {written}, but the snippets measure {measured:.4f} "
                          f"(tolerance {allowed:g})")
    return misses


def _bf16_native() -> bool:
    from lbhash.cpus import bf16_native

    return bf16_native()


def test_every_readme_figure_is_found_once():
    for figure in FIGURES:
        readme_figure(figure)
        if figure.without_bf16 is not None:
            readme_figure(Figure(figure.without_bf16, figure.measured))


# --- the fixtures and the tests that run ------------------------------------------------------


def make_inputs(folder: Path, shared: Path) -> None:
    """The README's input files, written by the script the README names for them
    (tools/readme_inputs.py), so that the test and a reader make the same files."""
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "tools" / "readme_inputs.py"
    spec = importlib.util.spec_from_file_location("readme_inputs", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.make_inputs(folder, shared)


@pytest.fixture
def readme_inputs(tmp_path, monkeypatch):
    shared = shared_data_dir()
    needed = ("cifar10-mobilenetv1-features.npz", "scene-multilabel.npz", "cifar10-jpg.tar.gz")
    missing = [n for n in needed if not (shared / n).is_file()]
    if missing:
        pytest.skip(f"shared data not found: {', '.join(str(shared / n) for n in missing)} "
                    "(set LBHASH_SHARED_DATA)")
    make_inputs(tmp_path, shared)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_inputs_script_runs_from_anywhere_and_writes_what_the_readme_describes(tmp_path):
    """`python tools/readme_inputs.py OUT_DIR` from another directory finds the shared data
    beside the checkout ($LBHASH_SHARED_DATA when set) and writes the four files and `photos/` into
    OUT_DIR and nowhere else; without OUT_DIR it writes nothing (issue 60, item 7: it worked only from the
    repository root and left four untracked files there). The files hold what the README says (one run of
    the script: it reads the whole CIFAR-10 tarball)."""
    shared = shared_data_dir()
    if not all((shared / n).is_file() for n in ("cifar10-mobilenetv1-features.npz", "scene-multilabel.npz",
                                                "cifar10-jpg.tar.gz")):
        pytest.skip(f"shared data not found at {shared} (set LBHASH_SHARED_DATA)")
    script = REPO / "tools" / "readme_inputs.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "LBHASH_SHARED_DATA": str(shared)}
    refused = subprocess.run([sys.executable, str(script)], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "out" in refused.stderr and not any(elsewhere.iterdir())
    done = subprocess.run([sys.executable, str(script), "inputs"], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["inputs"]
    written = ("features.npz", "queries.npy", "scene.npz", "cifar-small.npz", "photos")
    out = elsewhere / "inputs"
    assert sorted(p.name for p in out.iterdir()) == sorted(written)
    assert not any((REPO / name).exists() for name in written)  # nothing left in the checkout
    with np.load(out / "features.npz") as f:
        assert f["feat"].shape == (3000, 1024) and f["feat"].dtype == np.uint8
        assert set(np.unique(f["is_test"])) == {False, True} and f["is_test"].sum() == 500
        assert np.bincount(f["labels"]).tolist() == [300] * 10
        assert f["label_names"].tolist()[:3] == ["airplane", "automobile", "bird"]  # `lbhash search` names them
        q = np.load(out / "queries.npy")
        assert q.dtype == np.uint8 and q.shape == (5, 1024)
        test_rows = f["feat"][f["is_test"]]
        test_labels = f["labels"][f["is_test"]]
        for c in range(5):
            np.testing.assert_array_equal(q[c], test_rows[test_labels == c][0])
    photos = sorted(p.relative_to(out / "photos") for p in (out / "photos").rglob("*") if p.is_file())
    assert len(photos) == 160 and {p.parts[0] for p in photos} == {"airplane", "cat", "ship", "truck"}


@pytest.mark.slow  # test_readme_runs_in_order runs them too; this one needs only the digits set
def test_readme_python_blocks(tmp_path, monkeypatch, capfd):
    """The Python blocks alone, in order, in one namespace. They need only the digits set."""
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    blocks = [b for b in BLOCKS if b.runs_as_python]
    assert len(blocks) >= 5
    for block in blocks:
        run_python(block, namespace, capfd)
    assert (tmp_path / "runs" / "my-encoder").is_dir() and (tmp_path / "my-index").exists()
    # the README's digits run trains to the demo's quality (CSQ_D, 32 bits: 0.978 at 50 epochs)
    assert namespace["metrics"]["map"] > 0.95, namespace["metrics"]["map"]
    misses = figure_misses(namespace, tmp_path, {}, python_only=True)
    assert not misses, "the README's figures are not what its snippets print:\n" + "\n".join(misses)


@pytest.mark.slow
@pytest.mark.timeout(2700)  # every command in order: 6-15 minutes on 2 idle cores (the fine-tuned photos the most;
# 26 minutes on 2 cores shared with two other jobs, 2026-11-28, without native bf16)
def test_readme_runs_in_order(readme_inputs, capfd):
    """Every block of README.md in order: Python blocks, command lines, the service."""
    TIMES.clear()
    namespace = {"__name__": "__readme__"}
    started = time.monotonic()
    ran = 0
    previous: dict[str, tuple[int, str]] = {}
    outputs: dict[str, str] = {}  # command (without its comment) -> what it printed on stdout
    for block in BLOCKS:
        if block.runs_as_python:
            t = time.monotonic()
            run_python(block, namespace, capfd)
            TIMES.append((block.line, "python block", time.monotonic() - t))
        elif block.runs_as_shell:
            for line, command in block.commands():
                out = run_shell(line, command, readme_inputs)
                check_same_as_before(line, command, out, previous)
                outputs[command.split(" #")[0].strip()] = out
        elif is_serve_block(block):
            run_serve_block(block, readme_inputs)
        else:
            continue
        ran += 1
    assert ran >= 8
    # the service twice, with curl: over the feature index, and as the own-folder recipe's last step
    assert sum(is_serve_block(b) for b in BLOCKS) == 2, "README.md should show the service twice, with curl"
    misses = figure_misses(namespace, readme_inputs, outputs, python_only=False)
    assert not misses, "the README's figures are not what its snippets print:\n" + "\n".join(misses)
    with capfd.disabled():
        print(f"\nREADME ran in {time.monotonic() - started:.0f} s; slowest steps:")
        for line, command, seconds in sorted(TIMES, key=lambda t: -t[2])[:6]:
            print(f"  {seconds:6.1f} s  {loc(line)}  {command[:90]}")
