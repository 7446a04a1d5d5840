"""A pixel cache that cannot be written (issue 27, item 7): a read-only directory, no permission,
a full disk, or a corrupt entry that cannot be removed. Images are then decoded into memory (or
per item when too large for memory) with a warning naming the cache and why: the cache never
makes a run fail, and no message names a temporary file."""

import errno
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import cli
from lbhash.data import check_images, load_data, pixel_cache

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tree(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    for split in ("train", "test"):
        for c in "ab":
            (root / split / c).mkdir(parents=True)
            for k in range(4):
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / split / c / f"{k}.png")
    return root


def decoded(ds):
    """The reference: each file decoded on its own by PIL."""
    return np.stack([np.asarray(Image.open(ds.where(i)).convert("RGB")) for i in range(len(ds))])


def corrupt_entry(root):
    ds = load_data(f"images:{root}?cache=disk")
    assert ds.preload()
    entry = pixel_cache.entry_dir(ds.cache_key, pixel_cache.source_fingerprint(ds.source))
    raw = bytearray((entry / "pixels.npy").read_bytes())
    raw[-5] ^= 0xFF
    (entry / "pixels.npy").write_bytes(bytes(raw))
    return entry


def read_only(monkeypatch):
    """What a read-only cache directory does to a process that may not write there (tests run as
    root, where chmod does not stop writes): nothing can be created or removed."""
    def refuse(path, *args):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    monkeypatch.setattr(pixel_cache, "_new_tmp", lambda path: refuse(path.parent / f".{path.name}.1.x.tmp"))
    monkeypatch.setattr(pixel_cache, "_remove", lambda path: None)


def warned(caplog, cache, *fragments):
    lines = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    for fragment in (str(cache), *fragments):
        assert fragment in lines[0], (fragment, lines[0])
    assert ".tmp" not in caplog.text


def test_a_corrupt_entry_in_a_read_only_cache(tmp_path, cache_dir, monkeypatch, caplog):
    root = tree(tmp_path)
    entry = corrupt_entry(root)
    read_only(monkeypatch)
    ds = load_data(f"images:{root}?cache=disk")
    with caplog.at_level(logging.WARNING, logger="lbhash"):
        good, bad = check_images(ds)
    assert ds.pixels is not None and not isinstance(ds.pixels, np.memmap) and bad == 0 and len(good) == len(ds)
    np.testing.assert_array_equal(ds.pixels, decoded(ds))
    warned(caplog, cache_dir, entry.name, "checksum differs", "cannot be removed", "into memory")


@pytest.mark.parametrize("step, err", [("_publish", errno.ENOSPC), ("_reserve", errno.ENOSPC),
                                       ("_publish", errno.EROFS), ("_new_tmp", errno.EACCES)])
def test_a_cache_that_cannot_be_written(tmp_path, cache_dir, monkeypatch, caplog, step, err):
    root = tree(tmp_path)

    def fail(*args):
        raise OSError(err, os.strerror(err), str(cache_dir / "pixels" / ".x.123.abc.tmp"))
    monkeypatch.setattr(pixel_cache, step, fail)
    ds = load_data(f"images:{root}?cache=disk")
    with caplog.at_level(logging.WARNING, logger="lbhash"):
        assert ds.preload()
    np.testing.assert_array_equal(ds.pixels, decoded(ds))
    warned(caplog, cache_dir, os.strerror(err), "into memory")
    left = [p.name for p in (cache_dir / "pixels").iterdir()] if (cache_dir / "pixels").is_dir() else []
    assert left == []  # no entry, no temporary left behind


def test_too_large_for_memory_and_no_cache_decodes_per_item(tmp_path, cache_dir, monkeypatch, caplog):
    root = tree(tmp_path)
    read_only(monkeypatch)
    monkeypatch.setattr(pixel_cache, "memory_budget", lambda: 100)  # the set is larger: the disk would hold it
    ds = load_data(f"images:{root}")
    with caplog.at_level(logging.WARNING, logger="lbhash"):
        assert not ds.preload()
    warned(caplog, cache_dir, "each image when it is needed")
    np.testing.assert_array_equal(np.stack([ds.image(i) for i in range(len(ds))]), decoded(ds))


@pytest.mark.slow  # a training run on images: about 40 s on a busy 2-core machine
def test_training_goes_on_without_the_cache(tmp_path, cache_dir, monkeypatch):
    root = tree(tmp_path)
    corrupt_entry(root)
    read_only(monkeypatch)
    result = cli("train", "--data", f"images:{root}?cache=disk", "--protocol", "given", "--epochs", "1",
                 "--bits", "16", "--out", tmp_path / "run", "--no-progress")
    assert result.exit_code == 0, result.output
    assert f"{cache_dir}: the pixel cache cannot be used" in result.output and ".tmp" not in result.output
    assert (tmp_path / "run" / "codes.npz").is_file()


def _unprivileged() -> list[str] | None:
    """How to run a process that chmod stops: as it is when not root; as root, inside a user
    namespace (`unshare -U`: no capability over the files outside it); None when neither works."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") and subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-U"]
    return None


def test_a_chmod_read_only_cache_directory(tmp_path, cache_dir):
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root, where chmod does not stop writes, and no user namespace (unshare -U) "
                    "to run without that privilege; the monkeypatched tests above stand in")
    root = tree(tmp_path)
    corrupt_entry(root)
    for folder in (cache_dir, cache_dir / "pixels", *(cache_dir / "pixels").iterdir()):
        folder.chmod(0o555)
    code = ("import sys, numpy as np; from lbhash.data import load_data; "
            f"ds = load_data({f'images:{root}?cache=disk'!r}); assert ds.preload(); "
            "np.save(sys.argv[1], np.asarray(ds.pixels))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "LBHASH_CACHE_DIR": str(cache_dir)}
    out = tmp_path / "pixels.npy"
    try:
        done = subprocess.run([*prefix, sys.executable, "-c", code, str(out)], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        for folder in (cache_dir, cache_dir / "pixels", *(cache_dir / "pixels").iterdir()):
            folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert f"{cache_dir}: the pixel cache cannot be used" in done.stderr and ".tmp" not in done.stderr
    np.testing.assert_array_equal(np.load(out), decoded(load_data(f"images:{root}?cache=off")))
