"""Index directories: round trips, checksums, and crashes during a save."""

import json
import os

import numpy as np
import pytest

from index_reference import random_codes
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.index import storage


def sample_index(rng, kind="flat", n=300, **params):
    index = CodeIndex(32, kind, **params)
    index.add(random_codes(rng, n, 32), ids=rng.choice(5 * n, n, replace=False),
              labels=(rng.random((n, 5)) < 0.3))
    index.metadata = {"wal_seq": 7}
    return index


def same_index(a: CodeIndex, b: CodeIndex, queries):
    assert (a.bits, a.kind, a.params, a.ntotal, a.next_id, a.num_classes, a.metadata, a.is_trained) == \
           (b.bits, b.kind, b.params, b.ntotal, b.next_id, b.num_classes, b.metadata, b.is_trained)
    np.testing.assert_array_equal(a.ids(), b.ids())
    for x, y in zip(a.get(a.ids()), b.get(b.ids())):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a.search(queries, 9), b.search(queries, 9)):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a.range_search(queries, 10), b.range_search(queries, 10)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind, params", [("flat", {}), ("ivf", {"nlist": 4, "nprobe": 2}),
                                          ("ivf", {"nlist": 64, "nprobe": 2}),  # too few: untrained
                                          ("multihash", {"nhash": 2, "nflip": 1})])
def test_round_trip(rng, tmp_path, kind, params):
    index = sample_index(rng, kind, **params)
    index.remove(index.ids()[:3])
    index.save(tmp_path / "ix")
    loaded = CodeIndex.load(tmp_path / "ix")
    same_index(index, loaded, random_codes(rng, 12, 32))
    assert sorted(os.listdir(tmp_path / "ix")) == ["ids.npy", "index.faiss", "labels.npy", "manifest.json"]
    assert os.listdir(tmp_path) == ["ix"]  # no temporary directory left
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["kind"] == kind and manifest["ntotal"] == index.ntotal and manifest["version"] == 1
    # the loaded index keeps working: add, then save over the old directory
    loaded.add(random_codes(rng, 5, 32))
    loaded.save(tmp_path / "ix")
    assert CodeIndex.load(tmp_path / "ix").ntotal == index.ntotal + 5


def test_faiss_file_is_faiss_format(rng, tmp_path):
    import faiss

    index = sample_index(rng)
    index.save(tmp_path / "ix")
    raw = faiss.read_index_binary(str(tmp_path / "ix" / "index.faiss"))
    assert raw.ntotal == index.ntotal and raw.d == 32


@pytest.mark.parametrize("name", ["index.faiss", "ids.npy", "labels.npy"])
def test_tampered_file_is_refused_naming_it(rng, tmp_path, name):
    sample_index(rng).save(tmp_path / "ix")
    path = tmp_path / "ix" / name
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=f"{name}: checksum mismatch") as err:
        CodeIndex.load(tmp_path / "ix")
    assert "\n" not in str(err.value)


def test_truncated_missing_and_inconsistent_files_refused(rng, tmp_path):
    sample_index(rng).save(tmp_path / "ix")
    ix = tmp_path / "ix"
    manifest = json.loads((ix / "manifest.json").read_text())
    # consistent checksums but a count that does not match: still refused
    manifest["ntotal"] += 1
    (ix / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="holds 300 codes but ids.npy has 300 and the manifest says 301"):
        CodeIndex.load(ix)
    (ix / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="manifest.json: not valid JSON"):
        CodeIndex.load(ix)
    (ix / "manifest.json").unlink()
    with pytest.raises(InputError, match="not an index directory"):
        CodeIndex.load(ix)
    with pytest.raises(InputError, match="no such index directory"):
        CodeIndex.load(tmp_path / "none")


def test_save_refuses_to_replace_a_non_index_directory(rng, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("x")
    with pytest.raises(InputError, match="is not an index directory"):
        sample_index(rng).save(tmp_path / "data")
    assert (tmp_path / "data" / "keep.txt").read_text() == "x"


def test_crash_while_writing_leaves_old_index(rng, tmp_path, monkeypatch):
    old = sample_index(rng)
    old.save(tmp_path / "ix")
    new = sample_index(rng, n=50)
    calls = []
    real = storage._write_synced

    def crash_on_second(path, data):
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(storage, "_write_synced", crash_on_second)
    with pytest.raises(OSError, match="disk full"):
        new.save(tmp_path / "ix")
    monkeypatch.undo()
    same_index(old, CodeIndex.load(tmp_path / "ix"), random_codes(rng, 5, 32))
    assert os.listdir(tmp_path) == ["ix"]


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_crash_during_fallback_rename_dance_leaves_a_complete_index(rng, tmp_path, monkeypatch, crash_at):
    """Without renameat2: old -> aside, new -> place. A crash after any step is recoverable."""
    old, new = sample_index(rng), sample_index(rng, n=40)
    old.save(tmp_path / "ix")
    monkeypatch.setattr(storage, "_exchange", lambda a, b: False)
    renames = []
    real_rename, real_rmtree = os.rename, storage.shutil.rmtree

    def rename(a, b):
        renames.append((a, b))
        if len(renames) == crash_at:
            raise KeyboardInterrupt("power cut")
        real_rename(a, b)

    def rmtree(path, ignore_errors=False):
        if crash_at == 3:
            raise KeyboardInterrupt("power cut")
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(storage.os, "rename", rename)
    monkeypatch.setattr(storage.shutil, "rmtree", rmtree)
    with pytest.raises(KeyboardInterrupt):
        new.save(tmp_path / "ix")
    monkeypatch.undo()
    loaded = CodeIndex.load(tmp_path / "ix")
    expected = new if crash_at == 3 else old
    same_index(expected, loaded, random_codes(rng, 5, 32))
    new.save(tmp_path / "ix")  # the next save clears what the crash left
    assert sorted(os.listdir(tmp_path)) == ["ix"]


def test_exchange_swaps_directories(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b" / "x").write_text("b")
    if not storage._exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
    assert (tmp_path / "a" / "x").read_text() == "b" and (tmp_path / "b" / "x").read_text() == "a"
