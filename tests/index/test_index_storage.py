"""Index directories: round trips, checksums, and crashes during a save."""

import json
import os

import numpy as np
import pytest

from helpers import flip_last_byte
from index_reference import random_codes
from lbhash.errors import InputError
from lbhash.index import CodeIndex, SparseLabels
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
    assert sorted(os.listdir(tmp_path / "ix")) == ["ids.npy", "index.faiss", "labels_indices.npy",
                                                   "labels_indptr.npy", "manifest.json"]
    assert os.listdir(tmp_path) == ["ix"]  # no temporary directory left
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["kind"] == kind and manifest["ntotal"] == index.ntotal and manifest["version"] == 2
    assert set(manifest["files"]) == set(storage.FILES)
    # the loaded index keeps working: add, then save over the old directory
    loaded.add(random_codes(rng, 5, 32))
    loaded.save(tmp_path / "ix")
    assert CodeIndex.load(tmp_path / "ix").ntotal == index.ntotal + 5


def maps_a_file(array) -> bool:
    """Whether the array's memory is a file map (an np.memmap, or a view of one's mmap)."""
    import mmap
    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False


@pytest.mark.parametrize("change", ["append", "upsert", "insert below the largest id", "remove"])
def test_a_flat_index_loads_mapped_and_only_an_append_copies_it(rng, tmp_path, change):
    # nothing is read into memory on load: FAISS searches the mapped file, the codes, ids and
    # labels are read-only maps; any change then works as on an index built in memory
    index = sample_index(rng, n=400)
    index.save(tmp_path / "ix")
    loaded = CodeIndex.load(tmp_path / "ix")
    assert loaded._main.engine.mapped
    main = loaded._main
    for array in (main.rows.codes, main.rows.ids, main.labels.indptr, main.labels.indices):
        assert maps_a_file(array) and not array.flags.writeable
    queries = random_codes(rng, 12, 32)
    same_index(index, loaded, queries)
    new = random_codes(rng, 3, 32)
    free = [i for i in range(int(index.ids()[-1])) if not index.contains([i])[0]]
    ids = {"append": [10_000, 10_001, 10_002], "upsert": index.ids()[5:8],
           "insert below the largest id": free[:3], "remove": None}[change]
    for target in (index, loaded):
        if ids is None:
            target.remove(target.ids()[10:20])
        else:
            target.add(new, ids=ids, labels=np.array([1, 2, 3]), upsert=change == "upsert")
    # only an append copies the map in; the other changes go to tombstones and the tail
    assert loaded._main.engine.mapped == (change != "append")
    same_index(index, loaded, queries)
    loaded.save(tmp_path / "ix")  # over the directory it was mapped from
    same_index(index, CodeIndex.load(tmp_path / "ix"), queries)


def test_an_empty_flat_index_loads(tmp_path):
    CodeIndex(64).save(tmp_path / "ix")
    loaded = CodeIndex.load(tmp_path / "ix")
    assert loaded.ntotal == 0 and loaded.search(np.zeros((1, 8), np.uint8), 3)[1].tolist() == [[-1, -1, -1]]
    loaded.add(np.ones((2, 8), np.uint8))
    assert loaded.search(np.ones((1, 8), np.uint8), 3)[1].tolist() == [[0, 1, -1]]


def test_a_flat_file_whose_codes_do_not_end_it_is_refused(rng, tmp_path):
    # the codes are mapped from the end of index.faiss; extra bytes there (checksum updated, so
    # only the layout check can see them) must not shift them silently
    import hashlib

    sample_index(rng, n=50).save(tmp_path / "ix")
    faiss_file, manifest_file = tmp_path / "ix" / "index.faiss", tmp_path / "ix" / "manifest.json"
    data = faiss_file.read_bytes() + b"\0" * 4
    faiss_file.write_bytes(data)
    manifest = json.loads(manifest_file.read_text())
    manifest["files"]["index.faiss"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="index.faiss"):
        CodeIndex.load(tmp_path / "ix")


def test_faiss_file_is_faiss_format(rng, tmp_path):
    import faiss

    index = sample_index(rng)
    index.save(tmp_path / "ix")
    raw = faiss.read_index_binary(str(tmp_path / "ix" / "index.faiss"))
    assert raw.ntotal == index.ntotal and raw.d == 32


@pytest.mark.parametrize("name", storage.FILES)
def test_tampered_file_is_refused_naming_it(rng, tmp_path, name):
    sample_index(rng).save(tmp_path / "ix")
    path = tmp_path / "ix" / name
    flip_last_byte(path)
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


def write_version_1(index: CodeIndex, path):
    """The layout every index had before format version 2: labels.npy, a dense bool multi-hot
    (n, num_classes) matrix, beside index.faiss and ids.npy, with version 1 in the manifest."""
    import hashlib

    import faiss

    path.mkdir()
    index.apply_fold(index.prepare_fold())  # the FAISS structure then holds exactly the live items
    blobs = {"index.faiss": faiss.serialize_index_binary(index._main.engine.faiss_index()).tobytes(),
             "ids.npy": npy_bytes(index.ids()),
             "labels.npy": npy_bytes(index.get(index.ids())[1])}
    for name, data in blobs.items():
        (path / name).write_bytes(data)
    manifest = {"format": storage.FORMAT, "version": 1, "bits": index.bits, "kind": index.kind,
                "params": index.params, "ntotal": index.ntotal, "num_classes": index.num_classes,
                "next_id": index.next_id, "trained": index.is_trained, "metadata": index.metadata,
                "files": {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                          for name, data in blobs.items()}}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


@pytest.mark.parametrize("kind, params", [("flat", {}), ("multihash", {"nhash": 2, "nflip": 1})])
def test_an_index_written_in_the_old_dense_format_loads_and_searches_identically(rng, tmp_path, kind, params):
    """Issue 27, item 2: version 1 directories (labels.npy) are read, their labels converted."""
    index = CodeIndex(32, kind, **params)
    n = 400
    classes = [sorted(set(rng.choice(3000, rng.integers(0, 4), replace=False).tolist())) for _ in range(n)]
    dense = np.zeros((n, 3000), bool)
    for r, row in enumerate(classes):
        dense[r, row] = True
    index.add(random_codes(rng, n, 32), ids=rng.choice(4 * n, n, replace=False), labels=dense)
    index.remove(index.ids()[::7])
    index.metadata = {"wal_seq": 3}
    write_version_1(index, tmp_path / "old")
    loaded = CodeIndex.load(tmp_path / "old")
    queries = random_codes(rng, 12, 32)
    same_index(index, loaded, queries)
    assert loaded.num_classes == 3000 and loaded.labels_of(loaded.ids()) == index.labels_of(index.ids())
    rows = rng.integers(0, n, 12)
    for filters in (dense[rows], SparseLabels.from_lists([classes[r] or [5] for r in rows])):
        for x, y in zip(index.search(queries, 9, labels=filters), loaded.search(queries, 9, labels=filters)):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(index.range_search(queries, 12, labels=filters),
                        loaded.range_search(queries, 12, labels=filters)):
            np.testing.assert_array_equal(x, y)
    # saving writes version 2, and the dense file is gone
    loaded.save(tmp_path / "old")
    assert json.loads((tmp_path / "old" / "manifest.json").read_text())["version"] == 2
    assert not (tmp_path / "old" / "labels.npy").exists()
    same_index(index, CodeIndex.load(tmp_path / "old"), queries)


def test_old_format_labels_are_still_verified(rng, tmp_path):
    write_version_1(sample_index(rng), tmp_path / "old")
    path = tmp_path / "old" / "labels.npy"
    flip_last_byte(path)
    with pytest.raises(InputError, match="labels.npy: checksum mismatch"):
        CodeIndex.load(tmp_path / "old")


def npy_bytes(arr) -> bytes:
    import io
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def rewrite(ix, name, arr):
    """Replace one file of an index with matching checksums: only its contents can be refused."""
    import hashlib

    data = npy_bytes(arr)
    (ix / name).write_bytes(data)
    manifest = json.loads((ix / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (ix / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("name, arr, fragment", [
    ("labels_indices.npy", lambda ind: ind[::-1].copy(), "must ascend without repeats"),
    ("labels_indices.npy", lambda ind: ind + 10, "outside 0..4"),
    ("labels_indices.npy", lambda ind: ind.astype(np.float32), "int32 or int64"),
    ("labels_indptr.npy", lambda ptr: ptr[:-1].copy(), "row pointers for"),
    ("labels_indptr.npy", lambda ptr: ptr[::-1].copy(), "must rise from 0"),
])
def test_inconsistent_label_files_are_refused_in_one_line(rng, tmp_path, name, arr, fragment):
    sample_index(rng).save(tmp_path / "ix")
    rewrite(tmp_path / "ix", name, arr(np.load(tmp_path / "ix" / name)))
    with pytest.raises(InputError, match=fragment) as err:
        CodeIndex.load(tmp_path / "ix")
    assert name in str(err.value) and "\n" not in str(err.value)


def test_label_files_follow_the_labels_held_not_the_largest_class_id(rng, tmp_path):
    index = CodeIndex(32)
    index.add(random_codes(rng, 2000, 32))
    index.add(random_codes(rng, 1, 32), labels=[65535])
    index.save(tmp_path / "ix")
    sizes = {name: (tmp_path / "ix" / name).stat().st_size for name in ("labels_indptr.npy", "labels_indices.npy")}
    assert sizes["labels_indptr.npy"] < 8 * 2002 + 200 and sizes["labels_indices.npy"] < 4 + 200, sizes
    loaded = CodeIndex.load(tmp_path / "ix")
    assert loaded.num_classes == 65536 and loaded.labels_of([2000, 0]) == [[65535], []]


@pytest.mark.parametrize("bits", [64, 16])
def test_a_manifest_whose_bits_disagree_with_the_codes_is_one_line(tmp_path, rng, bits):
    from helpers import cli, one_line_error

    index = CodeIndex(32)
    index.add(random_codes(rng, 10, 32))
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps({**manifest, "bits": bits}))
    with pytest.raises(InputError, match=f"index.faiss: holds 32-bit codes, the manifest says {bits}"):
        CodeIndex.load(tmp_path / "idx")
    one_line_error(cli("index", "info", tmp_path / "idx"), f"holds 32-bit codes, the manifest says {bits}")


@pytest.mark.parametrize("n", [10, 3000])  # an ivf of nlist 4 trains at 156 codes: both sides of it
def test_a_flat_index_whose_manifest_says_ivf_is_one_line(tmp_path, rng, n):
    from helpers import cli, one_line_error

    index = CodeIndex(16)
    index.add(random_codes(rng, n, 16))
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps({**manifest, "kind": "ivf",
                                                                 "params": {"nlist": 4, "nprobe": 2}}))
    with pytest.raises(InputError, match="not an ivf index|the manifest says trained"):
        CodeIndex.load(tmp_path / "idx")
    one_line_error(cli("index", "info", tmp_path / "idx"), "index.faiss")


@pytest.mark.parametrize("next_id", [3, 9, "10", True])  # ids 0..9: a default id at or below 9 would collide
def test_a_manifest_whose_next_id_is_not_above_the_ids_is_one_line(tmp_path, rng, next_id):
    index = CodeIndex(16)
    index.add(random_codes(rng, 10, 16))
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["next_id"] == 10
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps({**manifest, "next_id": next_id}))
    with pytest.raises(InputError, match="next_id must be an integer above the largest id"):
        CodeIndex.load(tmp_path / "idx")


def test_saving_through_a_link_to_an_index_keeps_the_link(tmp_path):
    """Issue 87: a symlinked index directory was replaced by a real one on save (the served index then
    diverged from the link's target)."""
    codes = np.arange(16, dtype=np.uint8).reshape(8, 2)
    index = CodeIndex(16)
    index.add(codes[:4])
    index.save(tmp_path / "real")
    os.symlink(tmp_path / "real", tmp_path / "link")
    again = CodeIndex.load(tmp_path / "link")
    again.add(codes[4:])
    again.save(tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and os.path.realpath(tmp_path / "link") == str(tmp_path / "real")
    assert CodeIndex.load(tmp_path / "real").ntotal == 8
