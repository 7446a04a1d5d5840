"""The one codes-file schema (lbhash.codes_file): what every command writes and reads."""

import numpy as np
import pytest

from lbhash.codes import pack, unpack
from lbhash.codes_file import FORMAT, load_codes_file, only_part, part, save_codes_file, write_codes


def test_two_part_round_trip_fills_ids_and_keeps_topk(tmp_path, rng):
    q, d = rng.choice([-1, 1], size=(4, 12)), rng.choice([-1, 1], size=(6, 12))
    path = tmp_path / "codes.npz"
    save_codes_file(path, q, d, [0, 1, 0, 1], [1, 1, 0, 0, 1, 0], query_ids=[7, 8, 9, 10], topk=5)
    data = load_codes_file(path)
    assert data["bits"] == 12 and data["topk"] == 5 and data["parts"] == ["query", "db"]
    assert str(data["format"]) == FORMAT
    np.testing.assert_array_equal(unpack(data["query_codes"], 12), q)
    np.testing.assert_array_equal(unpack(data["db_codes"], 12), d)
    assert data["query_ids"].tolist() == [7, 8, 9, 10] and data["db_ids"].tolist() == list(range(6))
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_one_part_without_labels_is_a_codes_file(tmp_path, rng):
    codes = pack(rng.choice([-1, 1], size=(3, 16)))
    path = tmp_path / "c.npz"
    write_codes(path, None, {"items": {"codes": codes, "sources": np.array(["a.jpg", "b.jpg", "c.jpg"])}})
    data = load_codes_file(path, need=())
    assert data["parts"] == ["items"] and data["bits"] == 16 and data["topk"] is None
    fields = part(data, only_part(data, "db", path))
    assert fields["labels"] is None and fields["sources"].tolist() == ["a.jpg", "b.jpg", "c.jpg"]
    with pytest.raises(ValueError, match=r"c\.npz: no query part \(key query_codes; parts here: items\)"):
        load_codes_file(path)


def test_earlier_formats_are_read(tmp_path, rng):
    """Run files with query_index/db_index, and encode files with file names as ids."""
    q, d = pack(rng.choice([-1, 1], size=(2, 8))), pack(rng.choice([-1, 1], size=(3, 8)))
    run_file = tmp_path / "run.npz"
    np.savez(run_file, query_codes=q, db_codes=d, query_labels=[0, 1], db_labels=[1, 0, 1], bits=8,
             query_index=[5, 6], db_index=[0, 1, 2], topk=-1)
    data = load_codes_file(run_file)
    assert data["query_ids"].tolist() == [5, 6] and data["db_ids"].tolist() == [0, 1, 2]
    assert data["topk"] is None  # -1, the older spelling of the whole database
    enc_file = tmp_path / "enc.npz"
    np.savez(enc_file, codes=d, bits=8, ids=np.array(["x/a.png", "x/b.png", "y/c.png"]), labels=[0, 0, 1])
    data = load_codes_file(enc_file, need=())
    assert data["sources"].tolist() == ["x/a.png", "x/b.png", "y/c.png"] and data["ids"].tolist() == [0, 1, 2]


def test_npy_of_signs_or_packed_codes_is_one_part(tmp_path, rng):
    signs = rng.choice([-1.0, 1.0], size=(4, 16))  # DeepHash-pytorch saves float +/-1 arrays
    np.save(tmp_path / "s.npy", signs)
    np.save(tmp_path / "p.npy", pack(signs))
    a, b = load_codes_file(tmp_path / "s.npy", need=()), load_codes_file(tmp_path / "p.npy", need=())
    assert a["bits"] == b["bits"] == 16
    np.testing.assert_array_equal(a["codes"], b["codes"])


@pytest.mark.parametrize("arrays, message", [
    (dict(codes=np.zeros((2, 1), np.uint8)), "missing key bits"),
    (dict(codes=np.zeros((2, 2), np.uint8), bits=8), "8 bits per code|needs 1"),
    (dict(codes=np.zeros((2, 1), np.int8), bits=8), "'codes' must be packed uint8"),
    (dict(codes=np.zeros((2, 1), np.uint8), bits=8, labels=[0, 1, 2]), "'labels' has 3 rows but 'codes' has 2"),
    (dict(codes=np.zeros((2, 1), np.uint8), bits=8, ids=[0.5, 1]), "'ids' must be integers, found 0.5"),
    (dict(codes=np.zeros((2, 1), np.uint8), bits=8, ids=[0, 1, 2]), "'ids' must be 2 integers"),
    (dict(codes=np.zeros((2, 1), np.uint8), bits=8, topk=0), "'topk' must be a positive integer or 'all'"),
    (dict(codes=np.zeros((2, 1), np.uint8), bits=8, format="lbhash-codes/9"), "format 'lbhash-codes/9'"),
    (dict(bits=8, other=[1]), "holds no codes"),
])
def test_bad_files_name_file_and_key(tmp_path, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=rf"bad\.npz: .*({message})"):
        load_codes_file(path, need=())


def test_refuses_pickled_objects(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, query_codes=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="cannot read safely"):
        load_codes_file(path)
