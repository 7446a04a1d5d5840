"""`make test-milvus` (and so CI) sets LBHASH_MILVUS_REQUIRED=1: a Milvus run that cannot reach a
store must fail, not pass as skipped. Runs the Milvus suite's fixture in a child pytest with a
server binary that does not exist, so no server is ever started here. The child runs without
conftest.py (PYTHONPATH gives it the shared helpers of tests/, as `make test-serve-env` does): the
fixture uses nothing of it, and its session fixtures import the training stack (seconds a child)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def run_milvus_suite(tmp_path, required: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LBHASH_MILVUS_URI", "LBHASH_MILVUS_REQUIRED")}
    env["LBHASH_MILVUS_SERVER"] = str(tmp_path / "no-such-milvus-server")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    if required:
        env["LBHASH_MILVUS_REQUIRED"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
                           "-m", "milvus", "-k", "writes_are_read_back", str(TESTS / "index" / "test_milvus.py")],
                          cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # a child pytest (2 s each); make test-slow, in CI
@pytest.mark.parametrize("required", [False, True])
def test_a_milvus_run_without_a_server_fails_only_when_required(tmp_path, required):
    out = run_milvus_suite(tmp_path, required)
    text = out.stdout + out.stderr
    if required:
        assert out.returncode == 1, text
        assert "1 error" in text and "LBHASH_MILVUS_REQUIRED is set, but" in text, text
    else:
        assert out.returncode == 0, text
        assert "1 skipped" in text and "error" not in text, text


def test_make_test_milvus_requires_the_server():
    makefile = (TESTS.parent / "Makefile").read_text()
    recipe = makefile.split("\ntest-milvus:", 1)[1].split("\n\n", 1)[0]
    assert "LBHASH_MILVUS_REQUIRED=1" in recipe
    assert "make test-milvus" in (TESTS.parent / ".ci" / "run").read_text()
