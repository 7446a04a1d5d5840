"""Float rows kept as int8 (issue 68 item 3): the quantization by hand, an int8 index ranking as a
float16 index of the same directions (whose ranking test_instance_codes.py checks against its
definition), the saved file and its manifest, the service's log replay, and the command line."""

import json
import os

import numpy as np
import pytest
from helpers import cli
from index_reference import brute_blend, random_codes, tied_items
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.index.blend import SIMILARITY_POWER
from lbhash.index.rescore import quantized, scoring_rows, unit_rows
from lbhash.index.storage import _file_digests


def test_quantized_rows_by_hand():
    units = unit_rows(np.array([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    # [0.6, -0.8, 0] -> x 127 / 0.8: [95.25, -127, 0]; zero stays zero; equal values all reach 127
    assert quantized(units).tolist() == [[95, -127, 0], [0, 0, 0], [127, 127, 127]]
    assert quantized(units).dtype == np.int8
    # scored as the unit rows of their directions
    np.testing.assert_array_equal(scoring_rows(np.array([[95, -127, 0]], np.int8)),
                                  unit_rows(np.array([[95.0, -127.0, 0.0]])))


def test_quantizing_a_quantized_rows_unit_row_gives_it_back():
    rows = quantized(unit_rows(np.random.default_rng(0).standard_normal((2000, 64))))
    np.testing.assert_array_equal(quantized(scoring_rows(rows)), rows)


def test_an_int8_index_ranks_as_a_float16_index_of_the_same_directions(tmp_path):
    codes, inst, _ = tied_items(200)
    emb = np.abs(np.random.default_rng(3).standard_normal((200, 12)))
    small = CodeIndex(8, embedding_dtype="int8")
    small.add(codes, embeddings=emb, instance=inst)
    stored = small.get_embeddings(np.arange(200))
    assert stored.dtype == np.int8
    np.testing.assert_array_equal(stored, quantized(unit_rows(emb)))
    twin = CodeIndex(8)  # float16 rows: the unit rows of the int8 rows' directions
    twin.add(codes, embeddings=stored.astype(np.float64), instance=inst)
    np.testing.assert_array_equal(twin.get_embeddings(np.arange(200)), scoring_rows(stored))
    center = emb.mean(axis=0) / np.linalg.norm(emb.mean(axis=0))
    q, qi, qe = codes[:5], inst[:5], emb[:5]
    for looks_like in (0.0, 0.7, 1.0):
        got = blended_search(small, Queries(q, qe, qi, center), 10, looks_like=looks_like, factor=4)
        want = blended_search(twin, Queries(q, qe, qi, center), 10, looks_like=looks_like, factor=4)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.scores, want.scores)
        for r, (ids, scores) in enumerate(brute_blend(twin, q, qi, 10, looks_like, 4, SIMILARITY_POWER, qe, center)):
            assert got.ids[r].tolist() == ids.tolist()
    assert got.ids[:, 0].tolist() == [0, 1, 2, 3, 4]  # each finds itself
    # saved and loaded: the same rows, the manifest saying how they are kept
    small.save(tmp_path / "ix")
    assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["embedding_dtype"] == "int8"
    loaded = CodeIndex.load(tmp_path / "ix")
    assert loaded.embedding_dtype == "int8" and loaded.stats()["embedding_dtype"] == "int8"
    np.testing.assert_array_equal(loaded.get_embeddings(np.arange(200)), stored)
    assert (tmp_path / "ix" / "embeddings.npy").stat().st_size < 200 * 12 + 200  # a byte a value, and the header


def test_a_float16_index_saves_as_before(tmp_path):
    index = CodeIndex(8)
    index.add(random_codes(np.random.default_rng(1), 5, 8), embeddings=np.ones((5, 3)))
    assert index.embedding_dtype == "float16" and index.get_embeddings([0]).dtype == np.float16
    index.save(tmp_path / "ix")  # its manifest names no dtype, as before int8 rows existed
    assert "embedding_dtype" not in json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert CodeIndex.load(tmp_path / "ix").get_embeddings([0]).dtype == np.float16


def _resealed(path, name, data):
    """`path`/`name` replaced by `data`, its checksum in the manifest made to match."""
    np.save(path / name, data, allow_pickle=False)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": _file_digests(path, [name])[name], "bytes": (path / name).stat().st_size}
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_mismatched_dtype_is_refused_in_one_line(tmp_path):
    index = CodeIndex(8, embedding_dtype="int8")
    index.add(random_codes(np.random.default_rng(2), 6, 8), embeddings=np.random.default_rng(2).random((6, 4)))
    index.save(tmp_path / "ix")
    _resealed(tmp_path / "ix", "embeddings.npy", np.zeros((6, 4), np.float16))
    with pytest.raises(InputError, match=r"embeddings.npy: must hold int8 embeddings \(n, 4\), got float16"):
        CodeIndex.load(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    manifest["embedding_dtype"] = "int4"
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="embedding_dtype must be one of float16, int8, got 'int4'"):
        CodeIndex.load(tmp_path / "ix")
    with pytest.raises(InputError, match="embedding_dtype must be one of float16, int8, got 'float32'"):
        CodeIndex(8, embedding_dtype="float32")


def test_the_service_log_replays_int8_rows_exactly(tmp_path):
    from lbhash.serving.index_store import IndexStore

    rng = np.random.default_rng(4)
    index = CodeIndex(16, embedding_dtype="int8")
    index.add(random_codes(rng, 10, 16), embeddings=rng.standard_normal((10, 8)))
    index.save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix", compact_every=1000)
    added = rng.standard_normal((3, 8))
    store.add(random_codes(rng, 3, 16), embeddings=added)
    ids = np.arange(13)
    before = store.index.get_embeddings(ids).copy()
    np.testing.assert_array_equal(before[10:], quantized(unit_rows(added)))
    np.testing.assert_array_equal(store.embeddings(ids[10:]), scoring_rows(before[10:]))  # what GET /items shows
    os.close(store._owner.fd)  # a crash: no close, no compaction; a new store replays the log
    again = IndexStore(tmp_path / "ix")
    assert again.pending == 1
    np.testing.assert_array_equal(again.index.get_embeddings(ids), before)
    again.close()  # compacts: the saved index holds them
    np.testing.assert_array_equal(CodeIndex.load(tmp_path / "ix").get_embeddings(ids), before)


def test_the_command_line_builds_int8_rows_and_says_their_bytes(tmp_path):
    rng = np.random.default_rng(5)
    file = tmp_path / "codes.npz"
    np.savez(file, codes=random_codes(rng, 30, 16), bits=16, labels=rng.integers(0, 3, 30),
             embeddings=rng.standard_normal((30, 24)))
    result = cli("index", "build", str(file), "--out", str(tmp_path / "ix"), "--embedding-dtype", "int8",
                 "--instance-bits", "0")
    assert result.exit_code == 0, result.output
    assert "with their 24-dimensional embeddings (int8)" in result.output
    info = json.loads(cli("index", "info", str(tmp_path / "ix"), "--json").output)
    assert info["float_bytes_per_item"] == 24 and info["embedding_dtype"] == "int8"
    refused = cli("index", "build", str(file), "--out", str(tmp_path / "iy"), "--embedding-dtype", "int8",
                  "--no-embeddings")
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines()[-1] == \
        "error: --embedding-dtype int8: --no-embeddings keeps no embeddings to store so"
    assert not (tmp_path / "iy").exists()
