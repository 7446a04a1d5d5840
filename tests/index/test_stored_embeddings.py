"""An index's stored embeddings are finite: every add refuses NaN and infinity, and loading refuses
a file that holds one (another writer, its checksum recomputed), naming the file, row and column,
before anything searches (issue 69: a NaN row gave empty answers on the CLI and a bare 500 over
HTTP, since it scores NaN against every query)."""

import json

import numpy as np
import pytest
from helpers import cli

from index_reference import random_codes
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.index.storage import _file_digests

BITS = 16


def nan_stored(tmp_path, rng, value=np.nan):
    """An index of 20 items with embeddings, row 7 column 2 of its file set to `value`, the
    manifest's checksum made to match (what another writer would leave)."""
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 20, BITS), embeddings=rng.standard_normal((20, 5)))
    index.save(tmp_path / "ix")
    file = tmp_path / "ix" / "embeddings.npy"
    emb = np.load(file)
    emb[7, 2] = value
    np.save(file, emb, allow_pickle=False)
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    manifest["files"]["embeddings.npy"] = {"sha256": _file_digests(tmp_path / "ix", ["embeddings.npy"])["embeddings.npy"],
                                           "bytes": file.stat().st_size}
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path / "ix"


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_an_index_whose_stored_embeddings_are_not_finite_is_refused_on_load(tmp_path, rng, value):
    path = nan_stored(tmp_path, rng, value)
    with pytest.raises(InputError, match=rf"embeddings.npy: embedding of row 7 holds {value} at column 2; an index "
                                         r"keeps finite unit rows \(rebuild the index\)$"):
        CodeIndex.load(path)


def test_a_nan_stored_embedding_is_one_line_exit_2_on_the_cli(tmp_path, rng):
    path = nan_stored(tmp_path, rng)
    np.save(tmp_path / "q.npy", random_codes(rng, 2, BITS))
    result = cli("search", path, "--codes", tmp_path / "q.npy", "-k", "3")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {path / 'embeddings.npy'}: embedding of row 7 holds nan at column 2; an index keeps finite unit rows "
        "(rebuild the index)"]


def test_adds_refuse_non_finite_embeddings(rng):
    index = CodeIndex(BITS)
    emb = rng.standard_normal((4, 5))
    emb[2, 1] = np.nan
    with pytest.raises(InputError, match="embeddings holds nan at row 2, column 1; only finite numbers are allowed"):
        index.add(random_codes(rng, 4, BITS), embeddings=emb)
    assert index.ntotal == 0
