"""`make test-serve-env`: an environment with only the serve dependencies (requirements-serve.txt,
lbhash installed --no-deps; no torch) serves an exported digits run, and /search answers as the
run's own torch encoder does (tests/serve_env_fixture.py made the run, its export, the index and
those answers beforehand). Outside that environment, with no fixture named, it is skipped."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from serve_helpers import ServeProcess, post_json

FIXTURE = os.environ.get("LBHASH_SERVE_ENV_FIXTURE")


@pytest.mark.skipif(FIXTURE is None, reason="make test-serve-env runs it (LBHASH_SERVE_ENV_FIXTURE names its inputs)")
def test_an_environment_without_torch_serves_an_export(tmp_path):
    fixture = Path(FIXTURE)
    assert importlib.util.find_spec("torch") is None, "this environment must not hold torch"
    shutil.copytree(fixture / "idx", tmp_path / "idx")
    expected = json.loads((fixture / "expected.json").read_text())
    server = ServeProcess(tmp_path / "idx", "--encoder", fixture / "run" / "export")
    try:
        answers = [post_json(f"{server.url}/search", body) for body in expected["requests"]]
        maps = server.mapped_files()
    finally:
        log = server.stop()
    assert [status for status, _ in answers] == [200] * len(answers), answers
    assert [answer for _, answer in answers] == expected["answers"]
    assert "libtorch" not in maps and "torch imported: False" in log, log
    print(f"\nserver answered /health {server.start_s:.2f} s after it was started")
