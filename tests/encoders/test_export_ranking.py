"""The export carries the ranking (docs/export.md, "What the exported encoder does"): an image run's
ONNX graph outputs the embedding beside the hash layer, so a server without torch (`serve --encoder`)
ranks image searches by both codes as the run does, and `/items/image` keeps the instance codes and
float rows that the run path keeps. An export made before the graph had that output still searches in
Hamming order, and says in one line why it cannot rank by both codes."""

import io
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from helpers import cli, one_line_error
from lbhash.data.edits import grayscale
from lbhash.data.views import blurred, framed_view, item_embedding
from lbhash.encoders.exported import EMBEDDING_NAME, MANIFEST, ExportedEncoder
from lbhash.instance import mark_why
from lbhash.runs import RunDirectory
from lbhash.runs.encoder import RunEncoder
from lbhash.indexes.index_dir import open_index
from lbhash.indexes.instance_codes import index_transform
from serve_helpers import LOCAL, same_ranking

K = 12  # with the service's default factor (4) the candidates are the whole 48-item database


@pytest.fixture(scope="module")
def ranked(tiny_image_run, tiny_image_export, tmp_path_factory):
    """The tiny image run (CIFAR ResNet-8 on 32 px PNGs: 96-wide embeddings), its export (conftest's,
    and the warnings making it gave), an index with instance codes and float rows (the defaults) and
    one with instance codes alone."""
    tree, run = tiny_image_run
    root = tmp_path_factory.mktemp("export-ranking")
    assert cli("index", "build", run, "--out", root / "idx").exit_code == 0
    assert cli("index", "build", run, "--out", root / "idx-codes", "--no-embeddings").exit_code == 0
    files = sorted((tree / "test").rglob("*.png"))
    return SimpleNamespace(tree=tree, run=run, export=tiny_image_export[0], export_warnings=tiny_image_export[1],
                           root=root, files=files,
                           images=[np.array(Image.open(f).convert("RGB")) for f in files])


def copies(images, rng):
    """Edited copies of `images` that no index holds: noise, and another size (the encoder resizes it)."""
    out = []
    for i, img in enumerate(images):
        noisy = np.clip(img.astype(np.int16) + rng.integers(-25, 26, img.shape), 0, 255).astype(np.uint8)
        out.append(noisy if i % 2 else np.array(Image.fromarray(noisy).resize((45, 37))))
    return out


def png(img) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def uploads(images):
    return [("files", (f"q{i}.png", png(img), "image/png")) for i, img in enumerate(images)]


def test_an_image_export_outputs_the_embedding_the_run_gives(ranked):
    """Its graph's second output is the run's embedding (the pooled backbone features) to float32
    rounding, and the index's transform makes the run's instance codes of it, bit for bit, because no
    projection of these items lies within the two encoders' difference of the sign's boundary."""
    manifest = json.loads((ranked.export / MANIFEST).read_text())
    assert manifest["onnx"]["embedding"] == EMBEDDING_NAME
    exported, torch_run = ExportedEncoder.load(ranked.export), RunEncoder.load(ranked.run)
    assert exported.no_embeddings_ is None
    u_run, emb_run = torch_run.outputs(ranked.images)
    u_exp, emb_exp = exported.outputs(ranked.images)
    assert emb_exp.dtype == np.float32 and emb_exp.shape == emb_run.shape == (len(ranked.images), 96)
    gap = float(np.abs(emb_exp - emb_run).max())
    assert gap < 1e-4 * float(np.abs(emb_run).max()), gap
    np.testing.assert_array_equal(exported.encode(ranked.images), torch_run.encode(ranked.images))
    transform = index_transform(open_index(ranked.root / "idx", "faiss", None))
    # the real values whose signs are the instance codes (InstanceTransform.apply before its sign): an
    # embedding moved by delta moves its unit row by at most 2 |delta| / |e|, and a projection by that
    # times its column's norm; the margin must dwarf that bound, or equality would be luck
    norms = np.linalg.norm(emb_run, axis=1)
    margin = np.abs((emb_run / norms[:, None] - transform.mean) @ transform.projection).min()
    bound = 2 * gap * np.sqrt(emb_run.shape[1]) / norms.min() * np.linalg.norm(transform.projection, axis=0).max()
    assert margin > 10 * bound, (margin, bound)
    np.testing.assert_array_equal(transform.apply(emb_exp), transform.apply(emb_run))


@pytest.mark.parametrize("index", ["idx", "idx-codes"])
def test_served_export_ranks_image_searches_and_adds_as_the_run(ranked, tmp_path, rng, index):
    """The issue's done-when: /search/image and /items/image through the export answer with the ids,
    order, distances and same-picture marks of the run's torch path (scores to float32 rounding), on
    the index with float rows (cosine) and the one with the codes alone; the adds keep the instance
    codes that the index's transform makes of the run's own embeddings."""
    from fastapi.testclient import TestClient

    from lbhash.service import create_app

    queries, added = ranked.images, copies(ranked.images[:6], rng)
    answers = {}
    for name, encoder in (("run", RunEncoder.load(ranked.run)), ("export", ExportedEncoder.load(ranked.export))):
        shutil.copytree(ranked.root / index, tmp_path / name)
        with TestClient(create_app(tmp_path / name, encoder), base_url=LOCAL) as client:
            before = client.post("/search/image", files=uploads(queries), data={"k": str(K)})
            adds = client.post("/items/image", files=uploads(added))
            after = client.post("/search/image", files=uploads(added), data={"k": str(K)})
            assert before.status_code == adds.status_code == after.status_code == 200, (before.text, adds.text)
            answers[name] = before.json()["results"], adds.json()["ids"], after.json()["results"]
    (run_before, run_ids, run_after), (exp_before, exp_ids, exp_after) = answers["run"], answers["export"]
    assert exp_ids == run_ids == list(range(48, 54))
    for got, want in ((exp_before, run_before), (exp_after, run_after)):
        for served, own in zip(got, want, strict=True):
            assert served["code"] == own["code"] and all("instance_distance" in h for h in served["hits"])
            # the run's hits, fields and order, but where two scores lie within float32 rounding (the
            # documented tolerance: serve_helpers.same_ranking)
            assert same_ranking(served["hits"], own["hits"])
    # the ranking is the blend, not the Hamming order it fell back to: scores descend, and no hit is marked
    # (48 photos are too few to calibrate a mark on). Whether an added copy finds itself first is not asked
    # here: these tiny images are noise on one colour, whose blurred, grayscale and framed views (three
    # fifths of the item embedding: lbhash.data.views) coincide across a colour's images; the adds' instance codes are checked
    # below, bit for bit. With the codes alone the copies tie (score 1) with the train images of their colour.
    index_now = open_index(tmp_path / "export", "faiss", None)
    for query, result in enumerate(exp_after):
        scores = [h["score"] for h in result["hits"]]
        assert scores == sorted(scores, reverse=True) and len(scores) == K
        if index == "idx":
            assert not any(h["same"] for h in result["hits"])
            assert "too few" in mark_why(index_now.metadata)
            assert scores[0] > scores[1]
    run_encoder = RunEncoder.load(ranked.run)
    views = [run_encoder.outputs([see(img) for img in added])[1] for see in (blurred, grayscale, framed_view)]
    want = index_transform(index_now).apply(item_embedding(run_encoder.outputs(added)[1], views))
    np.testing.assert_array_equal(index_now.get_instance_codes(np.arange(48, 54)), want)


def test_search_through_the_export_blends_as_the_run(ranked, tmp_path):
    """`lbhash search --encoder` gives the run's hits and marks; --rescore-factor now re-scores too."""
    for i, img in enumerate(ranked.images[:5]):
        Image.fromarray(img).save(tmp_path / f"q{i}.png")
    found = {}
    for model in ("--run", "--encoder"):
        source = ranked.run if model == "--run" else ranked.export
        result = cli("search", ranked.root / "idx", "--images", tmp_path, model, source, "-k", 8, "--json")
        assert result.exit_code == 0, result.output
        found[model] = json.loads(result.output)
    assert len(found["--run"]) == len(found["--encoder"]) == 5
    for served, own in zip(found["--encoder"], found["--run"]):
        hits = [[{"id": i, "distance": d, "instance_distance": t, "same": m, "score": s} for i, d, t, m, s in
                 zip(r["ids"], r["distances"], r["instance_distances"], r["same"], r["scores"])] for r in (served, own)]
        assert same_ranking(*hits)


def old_export(ranked, tmp_path):
    """The export as lbhash wrote it before its graph output the embedding: the same graph, its
    manifest without onnx.embedding (an ONNX Runtime session runs only the outputs it is asked for)."""
    old = tmp_path / "old-export"
    shutil.copytree(ranked.export, old)
    manifest = json.loads((old / MANIFEST).read_text())
    del manifest["onnx"]["embedding"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    return old


def test_an_older_export_keeps_the_hamming_order_and_says_why(ranked, tmp_path):
    """Searches and adds work as before (Hamming order; adds refused where the index keeps what it
    cannot give), each limit stated in one line that says how to get the ranking."""
    from fastapi.testclient import TestClient

    from lbhash.service import create_app

    old = old_export(ranked, tmp_path)
    Image.fromarray(ranked.images[0]).save(tmp_path / "q.png")
    result = cli("search", ranked.root / "idx", "--images", tmp_path / "q.png", "--encoder", old, "-k", 5, "--json")
    assert result.exit_code == 0, result.output
    hamming = cli("search", ranked.root / "idx", "--images", tmp_path / "q.png", "--run", ranked.run, "-k", 5,
                  "--no-rescore", "--json")
    assert json.loads(result.stdout)[0]["ids"] == json.loads(hamming.stdout)[0]["ids"]
    assert "scores" not in json.loads(result.stdout)[0]
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "outputs the hash layer only" in warning[0] and "--overwrite" in warning[0], warning
    one_line_error(cli("search", ranked.root / "idx", "--images", tmp_path / "q.png", "--encoder", old,
                       "--rescore-factor", 2), "outputs the hash layer only", "lbhash export RUN --overwrite")
    shutil.copytree(ranked.root / "idx", tmp_path / "idx")
    with TestClient(create_app(tmp_path / "idx", ExportedEncoder.load(old)), base_url=LOCAL) as client:
        searched = client.post("/search/image", files=uploads(ranked.images[:2]), data={"k": "5"})
        added = client.post("/items/image", files=uploads(ranked.images[:1]))
    assert searched.status_code == 200 and "score" not in searched.json()["results"][0]["hits"][0]
    assert added.status_code == 400 and "outputs the hash layer only" in added.json()["detail"], added.text
    assert "\n" not in added.json()["detail"]


def test_a_manifest_naming_an_output_the_graph_lacks_is_refused(ranked, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ranked.export, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["onnx"]["embedding"] = "features"
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(Exception) as err:
        ExportedEncoder.load(copy)
    assert "no output 'features'" in str(err.value) and "\n" not in str(err.value)
    manifest["onnx"]["embedding"] = 3
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(Exception) as err:
        ExportedEncoder.load(copy)
    assert "onnx.embedding 3 is not an image graph's output name" in str(err.value)


def test_exporting_a_bf16_run_says_that_its_answers_will_differ(ranked, tmp_path, monkeypatch):
    """ONNX Runtime's CPU provider computes in float32, so the export of a run whose backbone computes
    in bf16 ranks otherwise than the run for many queries (docs/export.md): said in one line."""
    import warnings

    from lbhash.errors import LbhashWarning

    loaded = RunDirectory.encoder

    def bf16(self):
        encoder = loaded(self)
        encoder.model_.bf16_backbone = True  # as `backbone_precision: bf16` (auto, on a CPU with native bf16)
        return encoder

    monkeypatch.setattr(RunDirectory, "encoder", bf16)
    copy = shutil.copytree(ranked.export, tmp_path / "export")  # replaced by the bf16 run's export
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RunDirectory(ranked.run).export(copy, overwrite=True)
    lines = [str(w.message) for w in caught if issubclass(w.category, LbhashWarning)]
    assert len(lines) == 1 and "bf16" in lines[0] and "float32" in lines[0] and "\n" not in lines[0], lines
    assert ranked.export_warnings == []  # the float32 run's own export said nothing
    # the manifest records the run's precision (it recorded fp32 for every run: the graph's model had its bf16
    # turned off first), so that serving the export says so too, and the float32 run's export does not
    assert json.loads((copy / MANIFEST).read_text())["run_precision"] == "bf16"
    for where, says in ((copy, True), (ranked.export, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ExportedEncoder.load(where)
        said = [str(w.message) for w in caught if issubclass(w.category, LbhashWarning) and "bf16" in str(w.message)]
        assert len(said) == int(says), said


def test_the_tolerance_lets_near_ties_trade_places_and_nothing_else():
    """serve_helpers.same_ranking: places traded within SWAP_TOLERANCE pass; wider swaps, another
    field, or a score moved beyond SCORE_TOLERANCE fail."""
    from serve_helpers import SWAP_TOLERANCE

    def hits(*rows):
        return [{"id": i, "distance": 1, "score": s} for i, s in rows]

    want = hits((4, 0.9), (7, 0.5), (2, 0.5 - SWAP_TOLERANCE / 2), (9, 0.1))
    assert same_ranking(hits((4, 0.9), (2, 0.5), (7, 0.5 - SWAP_TOLERANCE / 2), (9, 0.1)), want)
    assert same_ranking(hits((4, 0.9), (7, 0.5), (2, 0.5 - SWAP_TOLERANCE / 2), (5, 0.1)),
                        hits((4, 0.9), (7, 0.5), (2, 0.5 - SWAP_TOLERANCE / 2), (9, 0.1)))  # tied at the cut
    for bad in (hits((7, 0.9), (4, 0.5), (2, 0.5), (9, 0.1)), hits((4, 0.9), (7, 0.5), (2, 0.5), (9, 0.2)),
                [{**h, "distance": 2} if h["id"] == 9 else h for h in want]):
        with pytest.raises(AssertionError):
            same_ranking(bad, want)
