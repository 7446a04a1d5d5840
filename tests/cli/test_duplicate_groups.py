"""`lbhash duplicates INDEX` (issue 88, item 1): the groups of copies inside an index, against the
connected components of every pair whose centred cosine passes the threshold, computed here by brute
force; its outputs (text, JSON, CSV) and its refusals."""

import csv
from pathlib import Path
import io
import json

import numpy as np
import pytest

from helpers import cli
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.instance import MARK_KEY
from lbhash.indexes.duplicates import find_duplicates
from lbhash.indexes.instance_codes import attach, fit_transform, payload_of


def components(n: int, pairs) -> list[list[int]]:
    """The connected components of `pairs` over items 0..n-1 with two items or more, by repeated merging."""
    groups = [{i} for i in range(n)]
    for a, b in pairs:
        ga, gb = next(g for g in groups if a in g), next(g for g in groups if b in g)
        if ga is not gb:
            ga |= gb
            groups.remove(gb)
    return sorted((sorted(g) for g in groups if len(g) > 1), key=lambda g: (-len(g), g[0]))


@pytest.fixture
def copies_index(tmp_path, rng):
    """60 photos' embeddings (positive, as pooled features are) and copies of some: 3 copies of item 0,
    2 of item 1, one of items 2 and 3, each a small step away; an index of all 67 with a calibrated mark."""
    base = np.abs(rng.standard_normal((60, 24))) + 0.2
    owners = [0, 0, 0, 1, 1, 2, 3]
    emb = np.concatenate([base, base[owners] + 0.05 * rng.standard_normal((len(owners), 24))])
    transform = fit_transform(emb, 16)
    index = CodeIndex(16, instance_bits=16, embedding_dim=24)
    attach(index, transform, "the test's items")
    rows, inst = payload_of(transform, index, emb, len(emb), "items")
    index.add(rng.integers(0, 256, (len(emb), 2), dtype=np.uint8), embeddings=rows, instance=inst)
    index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": 0.9}
    index.save(tmp_path / "ix")
    unit = np.asarray(index.get_embeddings(index.ids()), np.float64) - transform.mean
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    return tmp_path / "ix", unit @ unit.T


@pytest.mark.parametrize("threshold", [None, 0.8])
def test_the_groups_are_the_components_of_the_pairs_that_pass(copies_index, threshold):
    path, cosine = copies_index
    cut = 0.9 if threshold is None else threshold
    n = len(cosine)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if cosine[a, b] >= cut]
    want = components(n, pairs)
    assert [0, 60, 61, 62] in want and [1, 63, 64] in want  # the copies are found (and are not all there is)
    found = find_duplicates(path, threshold)
    assert [g["items"] for g in found.groups] == want
    assert found.pairs == len(pairs) and found.measure == "cosine" and found.threshold == cut
    for group in found.groups:
        for a, b, s in group["pairs"]:
            assert s == pytest.approx(cosine[a, b], abs=1e-3) and s >= cut - 1e-9


def test_the_command_prints_text_json_and_csv(copies_index):
    path, _ = copies_index
    text = cli("duplicates", path, "--no-progress")
    assert text.exit_code == 0, text.output
    assert text.output.startswith("67 items read, ") and "group 1: 4 items" in text.output
    body = json.loads(cli("duplicates", path, "--json", "--no-progress").output)
    assert body["groups"][0]["items"] == [0, 60, 61, 62] and body["measure"] == "cosine" and body["items"] == 67
    rows = list(csv.reader(io.StringIO(cli("duplicates", path, "--csv", "--no-progress").output)))
    assert rows[0] == ["group", "item", "source"] and rows[1:5] == [["1", str(i), ""] for i in (0, 60, 61, 62)]
    bigger = json.loads(cli("duplicates", path, "--json", "--min-group", "4", "--no-progress").output)
    assert [g["items"] for g in bigger["groups"]] == [[0, 60, 61, 62]]
    shown = cli("duplicates", path, "--json")  # progress goes to stderr, apart from the JSON
    assert "items searched" in shown.stderr and json.loads(shown.stdout) == body


def test_what_cannot_be_grouped_is_one_line(copies_index, tmp_path, rng):
    path, _ = copies_index
    for value in ("0", "1.5", "nan"):
        result = cli("duplicates", path, "--threshold", value)
        assert result.exit_code == 2 and "--threshold must be a number in (0, 1]" in result.output
    result = cli("duplicates", path, "--min-group", "1")
    assert result.exit_code == 2 and "--min-group must be an integer of at least 2" in result.output
    plain = CodeIndex(16)
    plain.add(rng.integers(0, 256, (5, 2), dtype=np.uint8))
    plain.save(tmp_path / "plain")
    result = cli("duplicates", tmp_path / "plain")
    assert result.exit_code == 2 and "keeps no instance codes" in result.output
    unmarked = CodeIndex.load(path)
    del unmarked.metadata[MARK_KEY]
    unmarked.save(tmp_path / "unmarked")
    result = cli("duplicates", tmp_path / "unmarked")
    assert result.exit_code == 2 and "no calibrated same-picture mark" in result.output and "--threshold" in result.output
    assert cli("duplicates", tmp_path / "unmarked", "--threshold", "0.9", "--no-progress").exit_code == 0


def test_without_float_rows_pairs_are_those_within_the_marked_instance_distance(tmp_path, rng):
    """An index of the two codes alone marks by the instance distance: items whose codes differ in at most
    threshold x bits pair, found here by brute force over every pair."""
    from index_reference import hamming

    inst = rng.integers(0, 256, (60, 4), dtype=np.uint8)  # 32 bits: unrelated items differ in about 16
    copies = inst[[0, 0, 5, 9]].copy()
    copies[:, 0] ^= np.array([1, 3, 16, 7], np.uint8)  # 1, 2, 1 and 3 bits flipped
    inst = np.concatenate([inst, copies])
    transform = fit_transform(rng.standard_normal((100, 40)), 32)
    index = CodeIndex(16, instance_bits=32)
    attach(index, transform, "the test's items")
    index.add(rng.integers(0, 256, (len(inst), 2), dtype=np.uint8), instance=inst)
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 2.5 / 32}
    index.save(tmp_path / "ix")
    distance = hamming(inst, inst)
    pairs = [(a, b) for a in range(len(inst)) for b in range(a + 1, len(inst)) if distance[a, b] <= 2]
    found = find_duplicates(tmp_path / "ix")
    assert found.measure == "instance" and [g["items"] for g in found.groups] == components(len(inst), pairs)
    assert [0, 60, 61] in [g["items"] for g in found.groups] and [5, 62] in [g["items"] for g in found.groups]
    assert not any(9 in g["items"] for g in found.groups)  # 3 bits off: past the mark


def test_by_margin_the_default_cut_is_the_null_of_the_items_best_margins(copies_index, monkeypatch):
    """The folder's measure on an index: each pair's margin over the two items' second-best neighbours (by
    brute force), the default cut the median of every item's best margin plus 3.09 robust sd, and the
    groups those of the pairs over it (every other item a candidate here, as the brute force has them)."""
    from lbhash.indexes import duplicates
    from lbhash.indexes.duplicates import index_groups
    from lbhash.indexes.index_dir import open_index

    monkeypatch.setattr(duplicates, "K", 100)
    path, cosine = copies_index
    margins = brute_margins(cosine, 2)
    best = margins.max(axis=1)
    cut = np.median(best) + 3.09 * 1.4826 * np.median(np.abs(best - np.median(best)))
    n = len(cosine)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if margins[a, b] >= cut or cosine[a, b] >= 0.995]
    found = index_groups(open_index(path), str(path), by_margin=True)
    assert found.measure == "margin" and found.threshold == pytest.approx(cut, abs=1e-3)
    assert [g["items"] for g in found.groups] == components(n, pairs)
    assert [1, 63, 64] in [g["items"] for g in found.groups]


def test_an_index_whose_mark_is_a_margin_groups_by_the_margin_at_its_mark(copies_index, monkeypatch, tmp_path):
    """An index calibrated to mark by margin: its pairs are those whose margin (by brute force) reaches the
    mark's threshold, or `--threshold` in that measure."""
    from lbhash.indexes import duplicates

    monkeypatch.setattr(duplicates, "K", 100)
    given, cosine = copies_index
    index, path = CodeIndex.load(given), tmp_path / "by-margin"
    index.metadata[MARK_KEY] = {"mark": "margin", "threshold": 0.12}
    index.save(path)
    margins, n = brute_margins(cosine, 2), len(cosine)
    for threshold, cut in ((None, 0.12), (0.3, 0.3)):
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if margins[a, b] >= cut or cosine[a, b] >= 0.995]
        found = find_duplicates(path, threshold)
        assert found.measure == "margin" and found.threshold == pytest.approx(cut)
        assert [g["items"] for g in found.groups] == components(n, pairs)
    assert [0, 60, 61, 62] in [g["items"] for g in find_duplicates(path).groups]


def test_a_mark_by_the_margin_or_the_instance_distance_groups_the_pairs_either_passes(copies_index, monkeypatch,
                                                                                    tmp_path):
    """An index calibrated to mark by the margin or the instance distance: a pair passes where its margin (by
    brute force) reaches the margin's threshold or its instance codes differ in at most the instance
    threshold's share of bits; `--threshold` is the margin's alone."""
    from lbhash.codes import hamming_distance
    from lbhash.indexes import duplicates

    monkeypatch.setattr(duplicates, "K", 100)
    given, cosine = copies_index
    index, path = CodeIndex.load(given), tmp_path / "either"
    index.metadata[MARK_KEY] = {"mark": "margin_or_instance", "threshold": 0.3, "instance_threshold": 2.5 / 16}
    index.save(path)
    codes = index.get_instance_codes(index.ids())
    margins, bits, n = brute_margins(cosine, 2), hamming_distance(codes, codes, 16), len(cosine)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)
             if margins[a, b] >= 0.3 or bits[a, b] <= 2 or cosine[a, b] >= 0.995]
    found = find_duplicates(path)
    assert found.measure == "margin_or_instance" and found.threshold == pytest.approx(0.3)
    assert found.to_dict()["instance_threshold"] == pytest.approx(2.5 / 16)
    assert [g["items"] for g in found.groups] == components(n, pairs)
    by_margin = [(a, b) for a, b in pairs if margins[a, b] >= 0.3 or cosine[a, b] >= 0.995]
    assert components(n, by_margin) != components(n, pairs)  # (the instance distance adds pairs here)
    alone = find_duplicates(path, 0.3)
    assert alone.measure == "margin" and [g["items"] for g in alone.groups] == components(n, by_margin)
    shown = cli("duplicates", path)
    assert shown.exit_code == 0 and "margin >= 0.3 or instance bits differing <= 0.1562" in shown.output


def test_the_components_are_those_of_repeated_merging(rng):
    """The numpy union (hook and jump) against merging sets edge by edge, on random graphs: a long chain,
    self-loops, repeated edges and isolated nodes included."""
    from lbhash.indexes.duplicates import _components

    for _ in range(100):
        n, m = int(rng.integers(1, 40)), int(rng.integers(0, 60))
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
        label = _components(n, a, b)
        want = {frozenset(g) for g in components(n, zip(a.tolist(), b.tolist()))}
        got = {frozenset(np.nonzero(label == root)[0].tolist()) for root in np.unique(label)}
        assert {g for g in got if len(g) > 1} == want
        assert all(label[i] == min(np.nonzero(label == label[i])[0]) for i in range(n))
    chain = _components(1000, np.arange(999)[::-1], np.arange(1, 1000)[::-1])
    assert (chain == 0).all()


def test_a_photo_many_times_is_one_group(tmp_path, rng):
    """200 copies of one photo (margins all 0: each is as near its neighbours as its pair) and 60 others:
    the copies are one group by IDENTICAL, each listing at most GROUP_PAIRS pairs."""
    from lbhash.indexes import duplicates

    emb = np.concatenate([np.repeat(rng.random((1, 24)) + 0.2, 200, axis=0), rng.random((60, 24)) + 0.2])
    transform = fit_transform(emb, 16)
    index = CodeIndex(8, instance_bits=16, embedding_dim=24)
    attach(index, transform, "the test's items")
    rows, inst = payload_of(transform, index, emb, len(emb), "items")
    index.add(np.zeros((len(emb), 1), np.uint8), embeddings=rows, instance=inst)
    found = duplicates.index_groups(index, "memory", by_margin=True, threshold=0.5)
    assert [g["items"] for g in found.groups] == [list(range(200))]
    assert found.groups[0]["pair_count"] == found.pairs >= 199 and len(found.groups[0]["pairs"]) <= 1000


@pytest.fixture(scope="module")
def jpeg_folder(cifar_sample, tmp_path_factory):
    """30 CIFAR-10 training JPEGs (10 of each of 3 classes: the first of each in the shared tarball,
    conftest's cifar_sample) in a flat folder, and a colour-edited copy of three of them: {copy's
    name: its original's name}."""
    from PIL import Image

    from lbhash.data.edits import edited

    folder = tmp_path_factory.mktemp("folder") / "photos"
    folder.mkdir()
    for c in ("cat", "ship", "truck"):
        for photo in sorted((cifar_sample / "train" / c).iterdir())[:10]:
            (folder / f"{c}-{photo.name}").write_bytes(photo.read_bytes())
    copies = {}
    for name in sorted(p.name for p in folder.iterdir())[::10]:
        img = np.asarray(Image.open(folder / name).convert("RGB"))
        Image.fromarray(edited(img, "colour")).save(folder / f"copy-{name}.png")
        copies[f"copy-{name}.png"] = name
    return folder, copies


def brute_margins(cosine: np.ndarray, neighbour: int) -> np.ndarray:
    """Each pair's cosine less the mean of the two items' `neighbour`-th best cosine to a third item, by
    looping over the items (the duplicates module's margin, independently)."""
    n = len(cosine)
    margins = np.full((n, n), -np.inf)
    for a in range(n):
        for b in range(n):
            if a != b:
                third_a = sorted((cosine[a, c] for c in range(n) if c not in (a, b)), reverse=True)[neighbour - 1]
                third_b = sorted((cosine[b, c] for c in range(n) if c not in (a, b)), reverse=True)[neighbour - 1]
                margins[a, b] = cosine[a, b] - (third_a + third_b) / 2
    return margins


def test_a_folder_with_no_run_is_embedded_by_the_pretrained_backbone_and_grouped(jpeg_folder):
    """Issue 88: `lbhash duplicates FOLDER`, no run and no labels: the pretrained backbone's features and
    pHash, the folder's own code, and the groups: each colour-edited copy with its original, the groups those
    of every pair whose margin passes the threshold, by brute force over the same float rows (folder_rows:
    their dot products are the pairs' similarities, below)."""
    from lbhash.indexes import duplicates, folder_copies

    folder, copies = jpeg_folder
    index = folder_copies.folder_index(folder)
    transform = index_transform_of(index)
    assert transform.method == "itq"  # (33 photos: too few to learn a code on)
    names = [Path(s).name for s in index.folder_sources]
    rows = np.asarray(index.get_embeddings(index.ids()), np.float64)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1, atol=1e-3)  # (unit rows, as stored)
    cosine = rows @ rows.T
    margins = brute_margins(cosine, duplicates.NEIGHBOUR)
    n = len(names)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if margins[a, b] >= 0.2]
    found = duplicates.index_groups(index, str(folder), 0.2, by_margin=True)  # (what find_duplicates(folder) does)
    assert found.measure == "margin" and found.pairs == len(pairs)
    assert [g["items"] for g in found.groups] == components(n, pairs)
    grouped = {frozenset(Path(s).name for s in g["sources"]) for g in found.groups}
    assert all(frozenset({c, o}) in grouped for c, o in copies.items()), (grouped, copies, sorted(margins.max(1)))
    for group in found.groups:
        for a, b, s in group["pairs"]:
            assert s == pytest.approx(margins[a, b], abs=2e-3)
    shown = json.loads(cli("duplicates", folder, "--threshold", "0.2", "--json", "--no-progress").stdout)
    assert shown["measure"] == "margin" and [g["items"] for g in shown["groups"]] == [g["items"] for g in found.groups]
    # too few photos for the folder's own threshold: one line asking for one
    with pytest.raises(InputError, match="too few to set the copies' threshold on .*give --threshold"):
        duplicates.index_groups(index, str(folder), by_margin=True)


def test_a_folder_pair_is_scored_by_its_cosine_and_its_phash_agreement(rng):
    """folder_rows: two photos' rows meet in (1 - LOOK_WEIGHT) x the cosine of their embeddings (centred, for
    an ITQ code) + LOOK_WEIGHT x (the pHash bits they share - those they do not) / 64, by hand."""
    from lbhash.indexes.folder_copies import LOOK_WEIGHT, folder_rows
    from lbhash.instance import InstanceTransform

    emb = rng.standard_normal((6, 40))
    signs = np.where(rng.random((6, 64)) < 0.5, 1.0, -1.0).astype(np.float32)
    signs[1] = signs[0]
    signs[2, :16] = -signs[0, :16]  # 48 of 64 bits agree with photo 0's
    transform = InstanceTransform.fit(emb, 16, "itq")
    rows = folder_rows(transform, emb, signs).astype(np.float64)
    centred = emb / np.linalg.norm(emb, axis=1, keepdims=True) - transform.mean
    centred /= np.linalg.norm(centred, axis=1, keepdims=True)
    for a, b in ((0, 1), (0, 2), (3, 5)):  # (the same hash, 48 bits of 64 alike: 0.5, any two)
        agree = sum(1 if x == y else -1 for x, y in zip(signs[a], signs[b])) / 64
        want = (1 - LOOK_WEIGHT) * float(centred[a] @ centred[b]) + LOOK_WEIGHT * agree
        assert rows[a] @ rows[b] == pytest.approx(want, abs=1e-5)


def index_transform_of(index):
    from lbhash.indexes.instance_codes import index_transform

    return index_transform(index)


def test_a_folder_too_small_or_empty_is_one_line(tmp_path):
    from PIL import Image

    (tmp_path / "empty").mkdir()
    result = cli("duplicates", tmp_path / "empty", "--threshold", "0.9")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    few = tmp_path / "few"
    few.mkdir()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(few / "a.png")
    (few / "b.jpg").write_bytes(b"bad")  # 3 bytes: a reader's signature test once raised struct.error on it
    (few / "c.jpg").write_bytes(b"not an image at all")
    result = cli("duplicates", few, "--threshold", "0.9")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "2 of 3 files in" in result.output and "skipped (they do not decode as images)" in result.output
    assert result.output.strip().splitlines()[-1].endswith("1 photo(s) that decode; finding copies needs two at least")
