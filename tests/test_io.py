"""Atomic writes (lbhash._io): a write goes through a temporary file beside its target, and the
temporaries that killed writers left behind are removed by the next write."""

import os
import subprocess
import sys

from lbhash._io import atomic_path


def test_killed_writes_leave_no_temporaries_behind_for_long(tmp_path):
    target = tmp_path / "x.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".x.json.{dead.pid}.abcd1234.tmp"
    stale.write_bytes(b"")
    live = tmp_path / f".x.json.{os.getpid()}.live.tmp"  # a write in progress elsewhere is kept
    live.write_bytes(b"")
    with atomic_path(target) as tmp:
        tmp.write_text("{}")
    assert not stale.exists() and live.exists() and target.read_text() == "{}"
