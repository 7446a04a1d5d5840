"""Static checks run as tests: pyflakes' rules through ruff (undefined names, unused imports),
and in the package a cap on each function's complexity (C901 <= 15, PLR0915 <= 50 statements).

A name used only on an error path (`raise InputError(...)` without its import) passes every
test that never takes that path; the linter sees it anyway.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff(*paths, config=None):
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed; it is in the test extra: make install")
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           *(["--config", str(config)] if config else []), *map(str, paths)], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_code_passes_the_pyflakes_rules():
    result = ruff("src", "tests", "benchmarks", "studies", "tools")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_missing_import_on_an_error_path_is_caught(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def check(x):\n    if x < 0:\n        raise InputError(f'x must be >= 0, got {x}')\n"
                   "    return x\n")
    result = ruff(bad)
    assert result.returncode == 1 and "F821 Undefined name `InputError`" in result.stdout, result.stdout


def test_a_function_that_decides_too_much_is_caught(tmp_path):
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(16))
    bad = tmp_path / "bad.py"
    bad.write_text(f"def decide(x):\n{branches}    return -1\n")
    result = ruff(bad, config=ROOT / "pyproject.toml")
    assert result.returncode == 1 and "C901 `decide` is too complex (17 > 15)" in result.stdout, result.stdout
