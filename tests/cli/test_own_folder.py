"""A user's own folder of photos to a search (issue 60, items 2 and 4): a class-folder tree
without a test part trains, indexes and searches in three commands, from any working
directory, and the refusals on the way name the exact fix."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import cli, one_line_error
from PIL import Image

from page_helpers import COLORS, noisy

PER_CLASS = 8
TRAIN = ["--backbone", "resnet8", "--image-size", 32, "--method", "csq", "--bits", 16, "--epochs", 2,
         "--centers", "hadamard", "--batch-size", 16, "--no-progress"]


def photo_folder(root: Path) -> Path:
    """ROOT/<colour>/NNN.png: a class-folder tree with no train/test part, as a user's photos."""
    rng = np.random.default_rng(3)
    for name, color in COLORS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for k in range(PER_CLASS):
            Image.fromarray(noisy(rng, color)).save(root / name / f"{k:03d}.png")
    return root


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    """(base, run): base/data/photos, and base/project/runs/photos trained from base/project on
    the data spec as a user types it there (`images:../data/photos`), protocol all-train."""
    base = tmp_path_factory.mktemp("own-folder")
    photo_folder(base / "data" / "photos")
    (base / "project").mkdir()
    here = os.getcwd()
    os.chdir(base / "project")
    try:
        done = cli("train", "--data", "images:../data/photos", "--protocol", "all-train", *TRAIN,
                   "--out", "runs/photos")
    finally:
        os.chdir(here)
    assert done.exit_code == 0, done.output
    return base, base / "project" / "runs" / "photos"


def test_training_a_folder_without_a_test_part_suggests_the_protocols(tmp_path, monkeypatch):
    photo_folder(tmp_path / "photos")
    monkeypatch.chdir(tmp_path)
    line = one_line_error(cli("train", "--data", "images:photos", *TRAIN, "--out", "runs/x"),
                          "--protocol all-train", "--protocol per-class:")
    assert not (tmp_path / "runs" / "x").exists()
    # the suggested per-class protocol fits this data: its split draws queries and a database
    suggested = line.split("--protocol per-class:")[1].split()[0].rstrip(",;:.)`")
    from lbhash.data import load_data, make_split

    split = make_split(load_data("images:photos"), f"per-class:{suggested}", 0)
    assert len(split.query) and len(split.database) == len(COLORS) * PER_CLASS - len(split.query)


def test_an_all_train_run_indexes_every_item_without_part_all(own_run, tmp_path):
    base, run = own_run
    built = cli("index", "build", run, "--out", tmp_path / "idx")
    assert built.exit_code == 0, built.output
    assert f"indexed {len(COLORS) * PER_CLASS} 16-bit codes" in built.output, built.output
    info = json.loads(cli("index", "info", tmp_path / "idx", "--json").output)
    assert info["ntotal"] == len(COLORS) * PER_CLASS


def test_search_images_takes_a_class_folder_tree(own_run, tmp_path, monkeypatch):
    base, run = own_run
    monkeypatch.chdir(base / "project")  # where the run trained
    assert cli("index", "build", run, "--out", tmp_path / "idx", "--part", "all").exit_code == 0
    result = cli("search", tmp_path / "idx", "--images", base / "data" / "photos", "--run", run, "-k", 3, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    names = [Path(q["name"]) for q in answer]
    assert len(answer) == len(COLORS) * PER_CLASS
    assert names == sorted((base / "data" / "photos").rglob("*.png"))
    # each photo finds itself first (distance 0) among its indexed copies
    assert all(q["distances"][0] == 0 for q in answer)


def test_a_run_is_indexed_from_any_working_directory(own_run, tmp_path, monkeypatch):
    """The run recorded `images:../data/photos` as typed in base/project; built from another
    folder, the index still finds the photos: every item has its source, and --part all works."""
    base, run = own_run
    monkeypatch.chdir(tmp_path)
    for part in (["--part", "all"], []):
        out = tmp_path / f"idx{len(part)}"
        built = cli("index", "build", run, "--out", out, *part)
        assert built.exit_code == 0 and "note" not in built.output, built.output
        info = json.loads(cli("index", "info", out, "--json").output)
        assert info["sources"] == f"{len(COLORS) * PER_CLASS} items of images:{base / 'data' / 'photos'}", info
        hits = json.loads(cli("search", out, "--images", base / "data" / "photos" / "red", "--run", run,
                              "-k", 2, "--json").output)
        for q in hits:
            assert all(Path(s).is_file() and (base / "data" / "photos") in Path(s).parents for s in q["sources"]), q
    summary = json.loads((run / "data.json").read_text())  # the spec as typed, and where it led
    assert (summary["data"], summary["resolved"]) == ("images:../data/photos", f"images:{base / 'data' / 'photos'}")
    assert cli("encode", run, "--out", tmp_path / "codes.npz", "--no-progress").exit_code == 0
    copy = shutil.copytree(run, tmp_path / "copy")  # resumed from here: trains on, on the same photos
    resumed = cli("train", "--out", copy, "--resume", "--epochs", 3, "--no-progress")
    assert resumed.exit_code == 0, resumed.output


def test_moved_data_is_one_line_naming_the_path_and_the_fix(own_run, tmp_path, monkeypatch):
    base, run = own_run
    photos, moved = base / "data" / "photos", tmp_path / "moved-photos"
    shutil.copytree(photos, moved)
    shutil.move(photos, tmp_path / "away")
    try:
        monkeypatch.chdir(tmp_path)
        for part in (["--part", "all"], []):
            line = one_line_error(cli("index", "build", run, "--out", tmp_path / "idx", *part),
                                  str(photos), "--data")
            assert "note" not in line
            assert not (tmp_path / "idx").exists()
        built = cli("index", "build", run, "--out", tmp_path / "idx", "--data", "images:moved-photos")
        assert built.exit_code == 0, built.output
        hits = json.loads(cli("search", tmp_path / "idx", "--images", moved / "red", "--run", run, "-k", 1,
                              "--json").output)
        assert all(moved in Path(q["sources"][0]).parents for q in hits), hits
        # other data than the run's (another number of items) is refused, not indexed by position
        (moved / "red" / "000.png").unlink()
        one_line_error(cli("index", "build", run, "--out", tmp_path / "idx2", "--data", "images:moved-photos"),
                       "items")
    finally:
        shutil.move(tmp_path / "away", photos)


def test_a_run_that_recorded_only_the_typed_path_says_where_it_is_relative_to(own_run, tmp_path, monkeypatch):
    """Runs made before the resolved path was recorded: the typed relative path is named as such."""
    from lbhash.runs.run_files import write_manifest

    base, run = own_run
    old = shutil.copytree(run, tmp_path / "old-run")
    summary = json.loads((old / "data.json").read_text())
    del summary["resolved"]
    (old / "data.json").write_text(json.dumps(summary))
    write_manifest(old)
    monkeypatch.chdir(tmp_path)
    one_line_error(cli("index", "build", old, "--out", tmp_path / "idx"), "not at ../data/photos",
                   "relative to where the run trained", "--data images:PATH")
    monkeypatch.chdir(base / "project")  # where it trained: found
    assert cli("index", "build", old, "--out", tmp_path / "idx").exit_code == 0


def _encoded(path: Path) -> dict:
    from lbhash.codes_file import load_codes_file, only_part, part

    data = load_codes_file(path, need=())
    return part(data, only_part(data, "query", path))


def test_encode_takes_what_search_images_takes(own_run, tmp_path):
    """Issue 68 item 7: `lbhash encode` refused a flat folder of photos ("not inside a class folder")
    that `lbhash search --images` takes. It takes the same inputs with --images (image files, folders,
    image arrays, in order), and --data images:FOLDER encodes a flat folder too: without labels where
    there are no class folders, with the class folders' labels where there are, and each photo gets
    the code the run gives it as an item of its own data."""
    base, run = own_run
    photos = base / "data" / "photos"
    assert cli("encode", run, "--out", tmp_path / "own.npz", "--no-progress").exit_code == 0
    own = _encoded(tmp_path / "own.npz")
    code_of = {Path(s).relative_to(photos).as_posix(): c.tobytes() for s, c in zip(own["sources"], own["codes"])}
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in code_of:
        shutil.copy(photos / name, flat / name.replace("/", "-"))
    for args in (["--images", flat], ["--data", f"images:{flat}"]):
        out = tmp_path / f"flat{args[0]}.npz"
        done = cli("encode", run, *args, "--out", out, "--no-progress")
        assert done.exit_code == 0, done.output
        encoded = _encoded(out)
        assert encoded["labels"] is None and encoded["ids"].tolist() == list(range(len(code_of)))
        assert [Path(s).name for s in encoded["sources"]] == sorted(n.replace("/", "-") for n in code_of)
        assert [c.tobytes() for c in encoded["codes"]] == [code_of[Path(s).name.replace("-", "/", 1)]
                                                          for s in encoded["sources"]]
    # a class-folder tree: labelled by its folders, as the run's own items are
    assert cli("encode", run, "--images", photos, "--out", tmp_path / "tree.npz", "--no-progress").exit_code == 0
    tree = _encoded(tmp_path / "tree.npz")
    assert np.array_equal(tree["labels"], own["labels"]) and np.array_equal(tree["codes"], own["codes"])
    # files and an image array, in the order given (the array's rows named as search names them)
    np.save(tmp_path / "rows.npy", np.stack([np.asarray(Image.open(photos / "red" / "001.png").convert("RGB"))] * 2))
    files = [photos / "red" / "000.png", photos / "blue" / "003.png"]
    done = cli("encode", run, "--images", files[0], "--images", tmp_path / "rows.npy", "--images", files[1],
               "--out", tmp_path / "mixed.npz", "--no-progress")
    assert done.exit_code == 0, done.output
    mixed = _encoded(tmp_path / "mixed.npz")
    assert [str(s) for s in mixed["sources"]] == [str(files[0]), "rows.npy row 0", "rows.npy row 1", str(files[1])]
    assert [c.tobytes() for c in mixed["codes"]] == [code_of["red/000.png"], code_of["red/001.png"],
                                                     code_of["red/001.png"], code_of["blue/003.png"]]
    assert mixed["labels"] is None
    one_line_error(cli("encode", run, "--images", flat, "--data", f"images:{flat}", "--out", tmp_path / "x.npz"),
                   "--images", "--data")
    one_line_error(cli("encode", run, "--images", tmp_path / "none", "--out", tmp_path / "x.npz"),
                   "--images", "none: no such file or directory")
    assert not (tmp_path / "x.npz").exists()
    # a class-folder tree is still required to train on
    one_line_error(cli("train", "--data", f"images:{flat}", "--protocol", "all-train", *TRAIN,
                       "--out", tmp_path / "runs" / "x"), "not inside a class folder")


def command_of(args):
    """The click command that `lbhash ARGS` runs (a group's subcommand followed)."""
    import click

    from lbhash.cli import main

    command, ctx, words = main, None, [str(a) for a in args]
    while isinstance(command, click.Group):
        ctx = click.Context(command)
        command, words = command.get_command(ctx, words[0]), words[1:]
    return command


def accepted_options(args) -> set[str]:
    return {opt for p in command_of(args).params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}


def named_options(line: str) -> list[str]:
    import re

    return re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line)


def test_every_bad_image_refusal_advises_an_option_its_command_takes(own_run, tmp_path, monkeypatch):
    """Issue 69 item 6: a folder with a bad image trains with --skip-bad-images, then `index build`
    and `encode` failed on the same file and advised --skip-bad-images, which they did not take.
    Each command that can meet an unreadable image refuses it in one line naming the file; every
    option the line names is one that command accepts, and following the advice works: the bad
    photo is left out, counted, and the others keep their codes."""
    from helpers import Killed, stop_before_the_first_epoch

    base, run = own_run
    bad = shutil.copytree(base / "data" / "photos", tmp_path / "bad")
    (bad / "red" / "003.png").write_bytes(b"not a png")
    monkeypatch.chdir(tmp_path)
    refusals = {
        "train": ["train", "--data", f"images:{bad}", "--protocol", "all-train", *TRAIN, "--out", tmp_path / "r"],
        "reproduce": ["reproduce", "grid", "--data", f"images:{bad}", "--protocol", "all-train", "--methods", "csq",
                      "--bits", 16, "--seeds", 0, "--epochs", 1, "--set", "backbone=resnet8", "--set", "image_size=32",
                      "--set", "centers=hadamard", "--out", tmp_path / "rep"],
        "encode --data": ["encode", run, "--data", f"images:{bad}", "--out", tmp_path / "d.npz", "--no-progress"],
        "encode --images": ["encode", run, "--images", bad, "--out", tmp_path / "i.npz", "--no-progress"],
        "index build": ["index", "build", run, "--data", f"images:{bad}", "--out", tmp_path / "idx"],
    }
    for name, args in refusals.items():
        result = cli(*args)
        errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, (name, result.output)
        line = errors[0]  # (reproduce says what it will run first)
        assert str(bad / "red" / "003.png") in line, (name, line)
        advised = named_options(line)
        assert "--skip-bad-images" in advised, (name, line)
        assert set(advised) <= accepted_options(args), (name, set(advised) - accepted_options(args), line)
    # the advice, followed
    assert cli("encode", run, "--out", tmp_path / "own.npz", "--no-progress").exit_code == 0
    own = _encoded(tmp_path / "own.npz")
    sources = [Path(s).relative_to(base / "data" / "photos").as_posix() for s in own["sources"]]
    for name in ("encode --data", "encode --images"):
        done = cli(*refusals[name], "--skip-bad-images")
        assert done.exit_code == 0 and "skipped 1 unreadable image(s) (--skip-bad-images)" in done.output, done.output
        encoded = _encoded(refusals[name][-2])
        kept = [k for k, s in enumerate(sources) if s != "red/003.png"]
        assert encoded["ids"].tolist() == kept and np.array_equal(encoded["codes"], own["codes"][kept])
    built = cli(*refusals["index build"], "--skip-bad-images")
    assert built.exit_code == 0 and f"indexed {len(sources) - 1} 16-bit codes" in built.output, built.output
    stop_before_the_first_epoch(monkeypatch)  # past the check of every image: training would start
    assert isinstance(cli(*refusals["train"], "--skip-bad-images").exception, Killed)


def test_the_search_page_shows_the_quality_an_all_train_run_measured(own_run, tmp_path):
    """Issue 69 item 8: the page said "mAP not measured" for the own-folder flow while the run's
    metrics.json held its validation mAP: a run without queries (protocol all-train) records it
    under `run`, and the run's summary read it from the top level only. /about now carries it
    with the number of held-out items, and the page shows it in place of the query mAP."""
    pytest.importorskip("fastapi", reason="the service needs the serve extra")
    from fastapi.testclient import TestClient

    import lbhash.service
    from lbhash.indexes.index_inputs import load_encoder
    from lbhash.service import create_app
    from serve_helpers import LOCAL

    base, run = own_run
    recorded = json.loads((run / "metrics.json").read_text())["run"]
    assert 0 <= recorded["validation_map"] <= 1 and recorded["n_validation"] > 0
    assert cli("index", "build", run, "--out", tmp_path / "idx").exit_code == 0
    with TestClient(create_app(tmp_path / "idx", load_encoder(run)), base_url=LOCAL) as client:
        about = client.get("/about").json()["run"]
    assert about["map"] is None and about["protocol"] == "all-train"  # no query part: no query mAP
    assert (about["validation_map"], about.get("n_validation")) == (recorded["validation_map"],
                                                                    recorded["n_validation"])
    page = (Path(lbhash.service.__file__).parent / "static" / "page.js").read_text()
    shown = page[page.index('["mAP"'):page.index('["lower bound"')]
    assert shown.index("run.validation_map") < shown.index('"not measured"')  # shown before giving up
