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

from serve_helpers import ServeProcess, post_files, post_json, same_ranking

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


@pytest.mark.skipif(FIXTURE is None, reason="make test-serve-env runs it (LBHASH_SERVE_ENV_FIXTURE names its inputs)")
def test_an_environment_without_torch_ranks_images_as_the_run(tmp_path):
    """The export carries the ranking: /search/image and /items/image through an image export, served
    without torch, give the run's answers (its torch path, in the full environment): the same ids,
    order, class and instance distances and same-picture marks, but where two hits' scores lie within
    float32 rounding of each other (serve_helpers.same_ranking: ONNX Runtime sums in another order than
    torch, so a score moves by a few 1e-6; docs/export.md, "The ranking")."""
    fixture = Path(FIXTURE)
    shutil.copytree(fixture / "image-idx", tmp_path / "idx")
    expected = json.loads((fixture / "expected-images.json").read_text())
    files = [[(name, (fixture / name).read_bytes()) for name in expected[key]] for key in ("queries", "uploads")]
    server = ServeProcess(tmp_path / "idx", "--encoder", fixture / "image-run" / "export")
    try:
        k = {"k": str(expected["k"])}
        answers = [post_files(f"{server.url}/search/image", files[0], k), post_files(f"{server.url}/items/image", files[1]),
                   post_files(f"{server.url}/search/image", files[1], k)]
        maps = server.mapped_files()
    finally:
        log = server.stop()
    assert [status for status, _ in answers] == [200] * 3, answers
    (_, before), (_, added), (_, after) = answers
    assert added == expected["answers"][1]
    identical = 0
    for got, want in ((before, expected["answers"][0]), (after, expected["answers"][2])):
        assert len(got["results"]) == len(want["results"]) > 0
        for served, own in zip(got["results"], want["results"]):
            assert served["code"] == own["code"] and all("instance_distance" in hit for hit in served["hits"])
            assert same_ranking(served["hits"], own["hits"])
            identical += [h["id"] for h in served["hits"]] == [h["id"] for h in own["hits"]]
    print(f"\nimage searches through the export: {identical} of {len(before['results']) + len(after['results'])} "
          "with the run's ids in the run's order (the rest within the tolerance of serve_helpers.same_ranking)")
    assert "libtorch" not in maps and "torch imported: False" in log, log
