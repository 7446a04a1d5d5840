"""benchmarks/gpu_suite.sh: the one-command GPU suite, run here with --smoke (tiny sizes, on the
CPU when there is no CUDA device) as a subprocess, exactly as a user runs it.

The data is a synthetic CIFAR-10-shaped tarball (10 classes, train/ and test/, 32x32 PNGs whose
colour depends on the class) built in tmp_path, so these tests need no shared data; the real
JPEG tarball is what the suite reads on a GPU. The timing part runs with smallcnn, so that
`lbhash reproduce timing` is exercised without torchvision. No timing assertions.
"""

import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image
from conftest import REPO

from lbhash.errors import InputError
from lbhash.models import available_backbones, create_backbone

SUITE = REPO / "benchmarks" / "gpu_suite.sh"
CLASSES = [f"class{c}" for c in range(10)]


def synthetic_cifar(path, train=8, test=3, seed=0):
    """A tarball laid out like cifar10-jpg.tar.gz: PART/CLASS/NNNN.png, 32x32 RGB."""
    rng = np.random.default_rng(seed)
    with tarfile.open(path, "w") as tf:
        for part, n in (("train", train), ("test", test)):
            for c, name in enumerate(CLASSES):
                base = np.array([25 * c, 255 - 25 * c, (80 * c) % 256], dtype=np.int16)
                for k in range(n):
                    px = np.clip(base + rng.integers(-40, 41, (32, 32, 3)), 0, 255).astype(np.uint8)
                    buf = io.BytesIO()
                    Image.fromarray(px).save(buf, format="PNG")
                    info = tarfile.TarInfo(f"{part}/{name}/{k:04d}.png")
                    info.size = buf.tell()
                    buf.seek(0)
                    tf.addfile(info, buf)
    return path


def run_suite(args, tmp_path, timeout=900):
    env = {**os.environ, "LBHASH_CACHE_DIR": str(tmp_path / "cache"), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SUITE), *map(str, args)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-suite")
    data = synthetic_cifar(tmp / "tiny.tar")
    done = run_suite(["--smoke", "--data", data, "--out", tmp / "out", "--timing-backbone", "smallcnn"], tmp)
    return done, tmp / "out"


def table_names(markdown: str, heading: str) -> list[str]:
    """First column of the table under `heading` (a '## ' line starting with it)."""
    section = markdown.split("\n## " + heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [row.split("|")[1].strip() for row in rows[1:]]   # rows[0] is the header


@pytest.mark.slow  # the CPU smoke run of the whole suite, about 25 s
def test_smoke_suite_writes_json_and_markdown(smoke):
    done, out = smoke
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    result = json.loads((out / "gpu_suite.json").read_text())
    markdown = (out / "gpu_suite.md").read_text()
    assert not list(out.glob(".*.tmp"))   # atomic writes leave no temporary files
    assert result["smoke"] is True and result["ok"] is True and result["failed"] == []
    assert result["torch"] == torch.__version__
    assert result["device"] == (torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    assert re.match(r"\d{4}-\d\d-\d\dT", result["date"])
    assert set(result) >= {"backbones", "e2e", "target", "timing", "settings", "total_seconds"}
    assert table_names(markdown, "One training step") == [r["name"] for r in result["backbones"]]
    assert table_names(markdown, "CIFAR-10 end to end") == [r["name"] for r in result["e2e"]]


@pytest.mark.slow  # the CPU smoke run of the whole suite, about 25 s
def test_every_backbone_trains_a_step_or_needs_missing_torchvision(smoke):
    done, out = smoke
    rows = {r["name"]: r for r in json.loads((out / "gpu_suite.json").read_text())["backbones"]}
    assert sorted(rows) == available_backbones()
    for name, row in rows.items():
        if row["status"] == "ok":
            assert row["batch"] == 4 and math.isfinite(row["loss"]) and row["step_seconds"] > 0
            continue
        # only a backbone that cannot be built for want of torchvision may be skipped
        assert row["status"] == "skipped" and "torchvision does not import" in row["reason"], (name, row)
        with pytest.raises(InputError, match="torchvision"):
            create_backbone(name)
    assert rows["resnet20"]["status"] == rows["smallcnn"]["status"] == "ok"


@pytest.mark.slow  # the CPU smoke run of the whole suite, about 25 s
def test_end_to_end_runs_report_map_and_speed(smoke):
    done, out = smoke
    result = json.loads((out / "gpu_suite.json").read_text())
    e2e = {r["name"]: r for r in result["e2e"]}
    assert sorted(e2e) == ["resnet20-csq", "resnet20-csq_D", "smallcnn-csq"]
    assert e2e["resnet20-csq_D"]["variant"] == "csq_D" and e2e["smallcnn-csq"]["backbone"] == "smallcnn"
    for row in e2e.values():
        assert row["status"] == "ok", row
        assert math.isfinite(row["map"]) and 0.0 <= row["map"] <= 1.0
        assert row["train_images_per_second"] > 0 and row["encode_images_per_second"] > 0
        assert row["n_train"] == 40 and row["encoded_items"] == 70   # per-class:4,2 on 10 x (8 + 3) images
    target = result["target"]
    assert target["status"] == "ok" and target["protocol"] == "cifar10-2" and target["n_train"] == 80
    assert isinstance(target["target_met"], bool) and target["median_epoch_seconds"] > 0
    timing = result["timing"]
    assert timing["status"] == "ok" and timing["backbone"] == "smallcnn"
    assert sorted(r["variant"] for r in timing["rows"]) == ["bce", "cauchy", "ours"]
    assert all(r["seconds_per_epoch"] > 0 for r in timing["rows"])


@pytest.mark.slow  # the suite's script in a process of its own (3 s); make test-slow, in CI
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_the_full_suite_refuses_in_one_line(tmp_path):
    done = run_suite(["--out", tmp_path / "out"], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: no CUDA device (use --smoke to run the suite on the CPU at tiny sizes)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the suite's script in a process of its own (3 s); make test-slow, in CI
def test_a_missing_tarball_is_one_line_naming_it(tmp_path):
    done = run_suite(["--smoke", "--data", tmp_path / "nope.tar.gz", "--out", tmp_path / "out"], tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: no CIFAR-10 tarball") and str(tmp_path / "nope.tar.gz") in lines[0]


@pytest.mark.slow  # the suite's script in a process of its own (3 s); make test-slow, in CI
def test_a_failing_part_is_recorded_and_the_exit_status_says_so(tmp_path):
    data = synthetic_cifar(tmp_path / "tiny.tar", train=2, test=1)
    out = tmp_path / "out"
    done = run_suite(["--smoke", "--data", data, "--out", out, "--only", "e2e", "--protocol", "per-class:50,1"],
                     tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((out / "gpu_suite.json").read_text())
    assert [r["status"] for r in result["e2e"]] == ["failed"] * 3
    assert all(r["error"] and "\n" not in r["error"] for r in result["e2e"])
    assert result["backbones"] == [] and result["timing"]["status"] == "skipped"
    assert result["failed"] == [f"e2e {r['name']}" for r in result["e2e"]]
    assert "FAILED" in (out / "gpu_suite.md").read_text()


@pytest.mark.slow  # the suite's script in a process of its own (3 s); make test-slow, in CI
def test_parts_after_the_budget_are_skipped_not_failed(tmp_path):
    data = synthetic_cifar(tmp_path / "tiny.tar", train=2, test=1)
    out = tmp_path / "out"
    # a budget spent before the first part starts: a millisecond was not, on a fast machine (the
    # first part ran and was skipped for want of torchvision, not for the budget)
    done = run_suite(["--smoke", "--data", data, "--out", out, "--budget", "1e-9"], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((out / "gpu_suite.json").read_text())
    rows = result["backbones"] + result["e2e"] + [result["target"], result["timing"]]
    assert len(rows) == len(available_backbones()) + 5
    assert all(r["status"] == "skipped" and "budget" in r["reason"] for r in rows)
    # the summary says so, not "all parts ok"
    assert len(result["skipped"]) == len(rows) and f"ok, {len(rows)} skipped: " in (out / "gpu_suite.md").read_text()
