"""The command table of `lbhash`: each command is imported when it runs, `--help` lists them all
from the table, the commands that need no model never import torch, and those that only read
a trained run import neither Lightning, scikit-learn, numba nor the training loop."""

import json
import subprocess
import sys
import textwrap

import click
from click.testing import CliRunner
import numpy as np
import pytest

from lbhash.cli import COMMANDS, main
from lbhash.codes_file import save_codes_file


def test_every_listed_line_starts_its_commands_own_help():
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name, (_, _, line) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        own = " ".join((command.help or "").split())
        assert own.startswith(line), f"{name}: the table says {line!r}, the command {own[:len(line) + 20]!r}"


def test_an_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(main, ["trian"])
    assert result.exit_code == 2
    assert "No such command 'trian'" in result.output


@pytest.fixture(scope="module")
def codes_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup")
    rng = np.random.default_rng(0)
    queries = rng.integers(0, 256, (5, 4), dtype=np.uint8)
    database = rng.integers(0, 256, (40, 4), dtype=np.uint8)
    save_codes_file(root / "codes.npz", queries, database, rng.integers(0, 3, 5), rng.integers(0, 3, 40))
    np.save(root / "q.npy", queries)
    return root


# run in one process, each command after the other: modules stay loaded, so each line covers the
# commands before it too (a process a command took a second of start-up each)
PROBE = textwrap.dedent("""
    import json, sys
    from lbhash.cli import main
    for args in json.loads(sys.argv[1]):
        try:
            main(args)
        except SystemExit as stop:
            code = stop.code
        print("probe", args, "exit", code, "torch", "torch" in sys.modules, file=sys.stderr)
""")

NO_MODEL = [
    ["--help"],
    ["evaluate", "codes.npz", "--topk", "all"],
    ["index", "build", "codes.npz", "--out", "idx"],
    ["index", "info", "idx"],
    ["search", "idx", "--codes", "q.npy", "-k", "3"],
    ["index", "remove", "idx", "--ids", "1,2"],
]
TRAINS = ["train", "--help"]


@pytest.fixture(scope="module")
def probed(codes_dir):
    """The probe's line of each command: NO_MODEL in order (build before info, search and remove),
    then TRAINS, in one process."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps([*NO_MODEL, TRAINS])], cwd=codes_dir,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stderr.splitlines() if line.startswith("probe ")]
    assert len(lines) == len(NO_MODEL) + 1, done.stderr[-2000:]
    return lines, done.stderr[-2000:]


@pytest.mark.slow  # a child Python process of several commands (5 s); make test-slow, in CI
def test_commands_that_need_no_model_do_not_import_torch(probed):
    lines, stderr = probed
    for args, line in zip(NO_MODEL, lines):
        assert line == f"probe {args} exit 0 torch False", (line, stderr)


@pytest.mark.slow  # a child Python process of several commands (5 s); make test-slow, in CI
def test_a_command_that_trains_imports_torch(probed):
    lines, stderr = probed
    assert lines[-2].endswith("torch False")  # not loaded before it
    assert lines[-1] == f"probe {TRAINS} exit 0 torch True", (lines[-1], stderr)


def test_a_long_line_is_cut_at_a_word_with_an_ellipsis():
    from lbhash.cli.common import short_line

    assert short_line("Evaluate codes.", 40) == "Evaluate codes."
    assert short_line("Search INDEX_DIR; print each query's ids", 20) == "Search INDEX_DIR..."
    assert short_line("one two three four", 12) == "one two..."


def test_the_search_layer_loads_neither_torch_nor_the_metric_kernels():
    code = "import sys, lbhash.index, lbhash.cli.search; print(sorted({'torch', 'numba'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_index_layer_loads_neither_the_data_readers_nor_pydantic():
    """What an exported run's search imports (docs/results/benchmarks.md, "Start-up"): the index directory layer
    reads the perceptual hashes' and the edits' modules but not the rest of lbhash.data, whose names load on first
    use, each from its own module."""
    code = ("import sys, lbhash.indexes.index_dir, lbhash.data.perceptual, lbhash.data.edits; "
            "print(sorted({'pydantic', 'lbhash.options', 'lbhash.data.spec'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    import lbhash.data

    assert lbhash.data.load_data.__module__ == "lbhash.data.spec"  # (first use imports the name's module)
    for name in lbhash.data.__all__:  # every public name is found in the module it is mapped to
        assert getattr(lbhash.data, name) is not None, name


READ_ONLY = textwrap.dedent("""
    import sys
    from lbhash.cli import main
    WATCHED = ("lightning_fabric", "sklearn", "scipy", "numba", "lbhash.train.loop", "lbhash.train.fit",
               "lbhash.runs.hash_encoder")
    for args in (["index", "info", "idx"], ["train", "--out", "run", "--resume"],
                 ["encode", "run", "--data", "features:rows5.npy", "--out", "rows5.npz"],
                 ["search", "idx", "--features", "rows5.npy", "--run", "run", "-k", "3"]):
        main(args, standalone_mode=False)
        print("after", args[0], "loaded", [m for m in WATCHED if m in sys.modules], file=sys.stderr)
""")


@pytest.mark.slow  # a child Python process of several commands (5 s); make test-slow, in CI
def test_commands_that_only_read_a_run_import_only_what_they_use(tmp_path, runs):
    """Issue 47 item 5, in one process (modules stay loaded, so each line covers the commands
    before it): a finished run's --resume, encode and search --features --run of a digits run
    load its model with torch, but not the training stack; a search this small scans with numpy, and ranks
    by its embeddings with the ranking's compiled kernels (lbhash.index._blend_kernel)."""
    from helpers import cli
    from lbhash.data import load_digits

    runs.copy("csq", tmp_path / "run")
    assert cli("index", "build", tmp_path / "run", "--out", tmp_path / "idx").exit_code == 0
    np.save(tmp_path / "rows5.npy", load_digits().x[:5])
    done = subprocess.run([sys.executable, "-c", READ_ONLY], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("after ")]
    # the search ranks by the stored embeddings: the ranking's kernels are numba's (which loads scipy)
    assert lines == [f"after {name} loaded []" for name in ("index", "train", "encode")] + \
        ["after search loaded ['scipy', 'numba']"], done.stderr
    assert "nothing to do" in done.stderr and (tmp_path / "rows5.npz").is_file()
    assert done.stdout.count(": 3 results") == 5  # the queries were encoded and searched
