"""`lbhash export` and the exported encoder (ONNX Runtime and numpy): its codes are the run's,
bit for bit, on feature and image runs, at batch sizes 1 and many; `lbhash serve --encoder`
answers as `--run` does, and its process never loads torch (docs/export.md)."""

import json
import shutil
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from helpers import cli, one_line_error
from lbhash.codes import pack, to_signs
from lbhash.codes_file import load_codes_file
from lbhash.data import load_data
from lbhash.data.augment import BatchTransform
from lbhash.data import eval_images
from lbhash.data.eval_images import eval_inputs
from lbhash.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from lbhash.encoders import Encoder
from lbhash.encoders import exported as exported_module
from lbhash.encoders.exported import MANIFEST, MODEL, ExportedEncoder, current_export
from lbhash.errors import LbhashWarning
from lbhash.index import CodeIndex
from lbhash.runs import RunDirectory
from lbhash.runs.encoder import RunEncoder
from serve_helpers import LOCAL, ServeProcess, post_json


@pytest.fixture(scope="session")
def digits_export(tmp_path_factory, runs):
    """A copy of the bank's 16-bit CSQ digits run, its export (RUN/export) and an index of its
    database."""
    root = tmp_path_factory.mktemp("digits-export")
    run = runs.copy("csq", root / "run")
    RunDirectory(run).export()
    assert cli("index", "build", run, "--out", root / "idx").exit_code == 0
    return SimpleNamespace(run=run, export=run / "export", idx=root / "idx", root=root)


@pytest.fixture(scope="session")
def image_export(tiny_image_run, tiny_image_export):
    """The session's tiny image run (CIFAR ResNet-8, 32 px PNGs) and its export (conftest's)."""
    tree, run = tiny_image_run
    return SimpleNamespace(tree=tree, run=run, export=tiny_image_export[0])


def run_items(run, encoder, batch):
    """The run's stored codes (queries, then database) and the encoder's codes of the same
    items, `batch` rows per call."""
    stored = load_codes_file(run / "codes.npz")
    data = load_data(RunEncoder.load(run).config_.dataset.data, labels_required=False)
    ids = np.concatenate([stored["query_ids"], stored["db_ids"]])
    rows = data.x[ids] if data.input_kind == "features" else np.stack([data.image(int(i)) for i in ids])
    got = np.concatenate([encoder.encode(rows[i:i + batch]) for i in range(0, len(rows), batch)])
    return np.concatenate([stored["query_codes"], stored["db_codes"]]), got


@pytest.mark.parametrize("batch", [1, 500])
def test_exported_feature_run_gives_the_run_codes_bit_for_bit(digits_export, batch):
    encoder = ExportedEncoder.load(digits_export.export)
    want, got = run_items(digits_export.run, encoder, batch)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch", [1, 40])
def test_exported_image_run_gives_the_run_codes_bit_for_bit(image_export, batch):
    encoder = ExportedEncoder.load(image_export.export)
    want, got = run_items(image_export.run, encoder, batch)
    np.testing.assert_array_equal(got, want)


def test_both_encoders_share_one_interface(digits_export, image_export, rng):
    """encode and embed apart; encode = the packed signs of embed (0 -> +1); the torch and the
    ONNX encoders agree on real outputs to float32 rounding and on codes exactly."""
    x = load_data("digits").x[:64]
    for path, run, inputs in ((digits_export.export, digits_export.run, x),
                              (image_export.export, image_export.run,
                               rng.integers(0, 256, (5, 45, 37, 3), dtype=np.uint8))):  # resized to 32 px
        exported, torch_run = ExportedEncoder.load(path), RunEncoder.load(run)
        assert isinstance(exported, Encoder) and isinstance(torch_run, Encoder)
        u = exported.embed(inputs)
        assert u.dtype == np.float32 and u.shape == (len(inputs), exported.bits_)
        np.testing.assert_array_equal(exported.encode(inputs), pack(to_signs(u)))
        np.testing.assert_allclose(u, torch_run.embed(inputs), atol=1e-4)
        np.testing.assert_array_equal(exported.encode(inputs), torch_run.encode(inputs))
        assert exported.identity() == torch_run.identity() and exported.run_info() == torch_run.run_info()


@pytest.mark.parametrize("preset,size,shapes", [("cifar", 160, [(32, 32), (40, 57), (300, 200)]),
                                                ("imagenet", 224, [(32, 32), (500, 375), (61, 300)]),
                                                ("cifar-augment", 32, [(32, 32), (17, 45)])])
@pytest.mark.parametrize("budget", [None, 1000])  # (1000 bytes: a row or column of the output a block)
def test_numpy_eval_transform_equals_the_torch_one(rng, monkeypatch, preset, size, shapes, budget):
    """The exported encoder's pixels (lbhash.data.eval_images) are training's, bit for bit, however
    small the blocks the resize filters at a time."""
    if budget is not None:
        monkeypatch.setattr(eval_images, "FILTER_BUDGET", budget)
    for h, w in shapes:
        images = rng.integers(0, 256, (2, h, w, 3), dtype=np.uint8)
        want = BatchTransform(preset, size, train=False)(torch.from_numpy(images)).contiguous().numpy()
        got = eval_inputs(images, preset, size, IMAGENET_MEAN, IMAGENET_STD)
        assert got.shape == want.shape == (2, 3, size, size)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_huge_photo_is_resized_in_bounded_memory(monkeypatch):
    """Issue 87: one upload of two 6000x6600 photos through an export took 4.5 GB, the resize's gathered
    filter taps of each whole photo at once (int32, 73 taps a value, and their products); a block of
    rows or columns at a time holds at most FILTER_BUDGET of them."""
    import tracemalloc

    monkeypatch.setattr(eval_images, "FILTER_BUDGET", 4 << 20)
    images = np.full((2, 1500, 1650, 3), 77, np.uint8)  # 15 MB; its taps at once were 470 MB
    tracemalloc.start()
    try:
        got = eval_inputs(images, "imagenet", 160, IMAGENET_MEAN, IMAGENET_STD)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (4 << 20) + (8 << 20), peak  # the budget, one image's first pass (1500 x 183 x 3) and the output
    want = (77 / 255 - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD, np.float32)  # flat grey
    np.testing.assert_allclose(got, np.broadcast_to(want.astype(np.float32)[None, :, None, None], got.shape), rtol=1e-6)


def test_an_export_of_a_bf16_run_says_its_codes_differ_where_it_is_loaded(image_export, tmp_path):
    """Issue 87: `lbhash export` warned that a bf16 backbone's export answers in float32, and `serve
    --encoder` said nothing; the manifest records the run's precision and loading it warns."""
    import warnings

    assert json.loads((image_export.export / MANIFEST).read_text())["run_precision"] == "fp32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ExportedEncoder.load(image_export.export)  # a float32 run: nothing to say
    copy = shutil.copytree(image_export.export, tmp_path / "export")
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps({**manifest, "run_precision": "bf16"}))
    with pytest.warns(LbhashWarning, match="computes in bf16; the export computes in float32"):
        ExportedEncoder.load(copy)


def test_the_manifest_says_what_serving_needs(digits_export, image_export):
    feature, image = (json.loads((p / MANIFEST).read_text()) for p in (digits_export.export, image_export.export))
    assert feature["bits"] == 16 and feature["input"]["kind"] == "features" and feature["input"]["width"] == 64
    assert feature["images"] is None and feature["onnx"]["file"] == MODEL
    # the identity an index records, the one `serve --force` checks
    assert feature["model"] == CodeIndex.load(digits_export.idx).metadata["model"]
    assert image["images"] == {"preset": "cifar-augment", "size": 32, "mean": list(IMAGENET_MEAN),
                               "std": list(IMAGENET_STD)}
    assert image["bits"] == 16 and image["input"]["kind"] == "images"


def test_export_refusals_are_one_line(digits_export, tmp_path):
    np.save(tmp_path / "q.npy", load_data("digits").x[:2])
    one_line_error(cli("export", digits_export.run), "export: already exists", "--overwrite")
    one_line_error(cli("export", tmp_path), "not a run directory")
    copy = tmp_path / "copy"
    shutil.copytree(digits_export.export, copy)
    with open(copy / MODEL, "ab") as fh:
        fh.write(b"\0")
    one_line_error(cli("search", digits_export.idx, "--features", tmp_path / "q.npy", "--encoder", copy),
                   "model.onnx: its SHA-256 does not match export.json")
    one_line_error(cli("search", digits_export.idx, "--features", tmp_path / "q.npy", "--encoder", tmp_path),
                   "not an export (no export.json")


def test_search_with_the_export_equals_search_with_the_run(digits_export, tmp_path, monkeypatch):
    """--run of a run whose export is current searches through it (current_export); the run's torch
    model, its export set aside, gives the same answers."""
    np.save(tmp_path / "q.npy", load_data("digits").x[:7])

    def searched(model, *options, through_torch=False):
        with monkeypatch.context() as patched:
            if through_torch:
                patched.setattr(exported_module, "current_export", lambda run_dir: None)
            result = cli("search", digits_export.idx, "--features", tmp_path / "q.npy", *model, *options, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    for options in (["-k", 5], ["--radius", 4]):
        outputs = [searched(["--run", digits_export.run], *options, through_torch=True)]
        outputs += [searched(model, *options) for model in (["--run", digits_export.run], ["--encoder", digits_export.export],
                                                            ["--encoder", digits_export.run])]
        assert outputs[0] == outputs[1] == outputs[2] == outputs[3] and len(outputs[0]) == 7
    # re-ranked: the same hits; the scores, sums of real outputs, agree to float32 rounding
    torch_run, exported = (searched(["--run", digits_export.run], "-k", 5, "--rescore-factor", 3, through_torch=torch)
                           for torch in (True, False))
    assert [q["ids"] for q in torch_run] == [q["ids"] for q in exported]
    np.testing.assert_allclose([q["scores"] for q in torch_run], [q["scores"] for q in exported], rtol=1e-5)
    # another model's export is refused (its identity is not the index's), --force searches anyway
    other = tmp_path / "other"
    shutil.copytree(digits_export.export, other)
    manifest = json.loads((other / MANIFEST).read_text())
    manifest["model"] = {**manifest["model"], "sha256": "0" * 64, "epoch": 99}
    (other / MANIFEST).write_text(json.dumps(manifest))
    line = one_line_error(cli("search", digits_export.idx, "--features", tmp_path / "q.npy", "--encoder", other),
                          "epoch 99, run", "did not make the codes of", f"--run {digits_export.run.resolve()}",
                          f"lbhash export {digits_export.run.resolve()} --out {digits_export.run.resolve()}/export-new`")
    assert "--overwrite" not in line  # the advice replaces no export: the run's own stays as it is
    assert cli("search", digits_export.idx, "--features", tmp_path / "q.npy", "--encoder", other, "--force").exit_code == 0
    one_line_error(cli("search", digits_export.idx, "--features", tmp_path / "q.npy", "--encoder", other,
                       "--run", digits_export.run), "at most one of --run and --encoder")


def test_a_run_encodes_through_its_export_only_while_it_is_current(digits_export, tmp_path, monkeypatch):
    """Issue 89: `--run` loads no torch where the run's own export encodes as the run does (current_export):
    made from this run directory's weights as they are now, from a float32 model, ONNX Runtime installed."""
    from lbhash.indexes.index_inputs import query_encoder

    assert current_export(digits_export.run) == digits_export.export
    assert isinstance(query_encoder(digits_export.run), ExportedEncoder)
    run = shutil.copytree(digits_export.run, tmp_path / "run")
    assert current_export(run) is None  # made from the run at its first place
    manifest = json.loads((run / "export" / MANIFEST).read_text())
    model = manifest["model"]

    def export_with(**changes):
        (run / "export" / MANIFEST).write_text(json.dumps({**manifest, **changes}))
        return current_export(run)

    assert export_with(model={**model, "run": str(run.resolve())}) == run / "export"
    assert isinstance(query_encoder(run), ExportedEncoder)
    assert export_with(model={**model, "run": str(run.resolve())}, run_precision="bf16") is None
    assert export_with(model={**model, "run": str(run.resolve()), "file": "../run/" + model["file"]}) is None
    assert export_with(model={**model, "run": str(run.resolve()), "sha256": "0" * 64}) is None
    (run / "export" / MANIFEST).write_text("{")  # broken: left to --encoder to name
    assert current_export(run) is None and isinstance(query_encoder(run), RunEncoder)
    assert export_with(model={**model, "run": str(run.resolve())}) == run / "export"
    with open(run / model["file"], "ab") as weights:  # the run's weights changed since the export
        weights.write(b"\0")
    assert current_export(run) is None
    with monkeypatch.context() as patched:
        patched.setattr("importlib.util.find_spec", lambda name, *a: None if name == "onnxruntime" else object())
        assert current_export(digits_export.run) is None


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_served_export_answers_as_the_run_and_never_loads_torch(digits_export, tmp_path):
    """Issue 45's done-when: /search with feature rows through the export gives the hits that the
    run's own encoder gives, and the server process has no libtorch mapped, nor torch imported; here
    served with --run, whose current export (RUN/export) encodes for it as --encoder RUN would."""
    from fastapi.testclient import TestClient

    from lbhash.service import create_app

    index_dir = tmp_path / "idx"
    shutil.copytree(digits_export.idx, index_dir)
    rows = load_data("digits").x[[3, 500, 1200]].tolist()
    bodies = [{"features": rows, "k": 10}, {"features": rows, "k": 5, "rescore_factor": 4},
              {"features": rows, "radius": 3}]
    app = create_app(digits_export.idx, RunEncoder.load(digits_export.run))  # the run's torch model
    with TestClient(app, base_url=LOCAL) as client:
        want = [client.post("/search", json=body).json() for body in bodies]
    server = ServeProcess(index_dir, "--run", digits_export.run, "--read-only")  # through its current export
    try:
        got = [post_json(f"{server.url}/search", body) for body in bodies]
        maps = server.mapped_files()
        with urllib.request.urlopen(f"{server.url}/about", timeout=30) as answer:
            status, about = answer.status, json.loads(answer.read())
    finally:
        log = server.stop()
    assert {status for status, _ in got} == {200}
    assert got[0][1] == want[0] and got[2][1] == want[2]  # top k and radius: the same hits exactly
    for served, own in zip(got[1][1]["results"], want[1]["results"]):  # re-ranked: scores to float32 rounding
        assert [(h["id"], h["distance"]) for h in served["hits"]] == [(h["id"], h["distance"]) for h in own["hits"]]
        np.testing.assert_allclose([h["score"] for h in served["hits"]], [h["score"] for h in own["hits"]], rtol=1e-5)
    assert about["run"]["method"] == "csq" and about["input_kind"] == "features" and status == 200
    assert "onnxruntime" in maps and "libtorch" not in maps
    assert "torch imported: False" in log, log


def tree_images(tree, split="test"):
    """The decoded images of the tiny run's PNG tree (one split), with their file names."""
    from PIL import Image

    files = sorted((tree / split).rglob("*.png"))
    return files, np.stack([np.array(Image.open(f).convert("RGB")) for f in files])


def test_search_takes_an_image_array_named_by_row(image_export, tmp_path):
    """Issue 45 item 7: `lbhash search --images` reads image arrays (.npz, or an image-array:
    spec), as the features reader's hint says; their rows are named `FILE row N`."""
    tree, run = image_export.tree, image_export.run
    files, images = tree_images(tree)
    np.savez(tmp_path / "queries.npz", x=images[:4])  # x: a key both readers look for
    assert cli("index", "build", run, "--out", tmp_path / "idx").exit_code == 0
    each = [part for f in files[:4] for part in ("--images", f)]
    # through the run as through the export, ranked by both codes (an image export outputs the embedding)
    by_files = json.loads(cli("search", tmp_path / "idx", *each, "--run", run, "--json").output)
    for given in (tmp_path / "queries.npz", f"image-array:{tmp_path / 'queries.npz'}"):
        result = cli("search", tmp_path / "idx", "--images", given, "--encoder", image_export.export, "--json")
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)
        assert [r["name"] for r in rows] == [f"queries.npz row {i}" for i in range(4)]
        assert [r["ids"] for r in rows] == [r["ids"] for r in by_files]
    # the hint names something search takes: an image run's queries are images (issue 60, item 7)
    one_line_error(cli("search", tmp_path / "idx", "--features", tmp_path / "queries.npz", "--run", run),
                   "queries.npz", "the run encodes images", "--images", "an image array")


def test_codes_of_an_image_array_carry_their_sources(image_export, tmp_path):
    """Issue 45 item 7: a codes file encoded from an image array names each row, as an index
    built from a run on it does (`FILE row N`)."""
    _, images = tree_images(image_export.tree)
    np.savez(tmp_path / "arr.npz", images=images[:3], labels=np.arange(3))
    result = cli("encode", image_export.run, "--data", f"image-array:{tmp_path / 'arr.npz'}", "--out",
                 tmp_path / "c.npz", "--no-progress")
    assert result.exit_code == 0, result.output
    encoded = load_codes_file(tmp_path / "c.npz", need=())
    assert encoded["sources"].tolist() == ["arr.npz row 0", "arr.npz row 1", "arr.npz row 2"]
    np.testing.assert_array_equal(encoded["codes"], ExportedEncoder.load(image_export.export).encode(images[:3]))


def test_an_undecodable_image_is_named_without_pillows_buffer(image_export, tmp_path):
    """Issue 45 item 7: one line naming the file, never `<_io.BytesIO object at 0x...>`: the
    command line, the service's searches, adds and encodes."""
    from fastapi.testclient import TestClient

    from lbhash.service import create_app

    bad = tmp_path / "holiday.jpg"
    bad.write_bytes(b"this is not a JPEG")
    assert cli("index", "build", image_export.run, "--out", tmp_path / "idx").exit_code == 0
    for model in (["--run", image_export.run], ["--encoder", image_export.export]):
        line = one_line_error(cli("search", tmp_path / "idx", "--images", bad, *model),
                              "holiday.jpg: cannot decode image (not an image in a format Pillow reads)")
        assert "BytesIO" not in line
    with TestClient(create_app(tmp_path / "idx", ExportedEncoder.load(image_export.export)), base_url=LOCAL) as client:
        for path in ("/search/image", "/items/image"):
            answer = client.post(path, files=[("files", ("holiday.jpg", bad.read_bytes(), "image/jpeg"))])
            assert answer.status_code == 400, (path, answer.text)
            detail = answer.json()["detail"]
            assert detail == "holiday.jpg: cannot decode image (not an image in a format Pillow reads)", detail


def test_the_serve_requirements_are_the_packages_dependencies():
    """requirements-serve.txt (make test-serve-env) names only dependencies or serve extras of
    pyproject.toml, with the same bounds, and no part of the training stack."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = set(project["dependencies"]) | set(project["optional-dependencies"]["serve"])
    wanted = [line.strip() for line in (root / "requirements-serve.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert wanted and not set(wanted) - declared, set(wanted) - declared
    assert not {w for w in wanted if w.split(">")[0] in ("torch", "lightning", "lightning-fabric", "scikit-learn", "scipy")}
