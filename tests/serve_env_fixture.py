"""Make the inputs of tests/service/test_serve_env.py with the full environment (torch):

    python tests/serve_env_fixture.py DIR

writes DIR/run (a small digits run) with its export (DIR/run/export), DIR/idx (its database)
and DIR/expected.json: feature-row searches and the answers the service gives with the run's
own torch encoder (what `lbhash serve DIR/idx --run DIR/run` answers); and the same for images:
DIR/image-run (the tests' tiny image run) with its export, DIR/image-idx (instance codes and float
rows, the defaults), the query and upload PNGs and DIR/expected-images.json, the run's answers to
/search/image, /items/image and /search/image of what it added. `make test-serve-env` runs it, then
the test in an environment without torch."""

import json
import shutil
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from lbhash.cli import main
from lbhash.data import load_data
from lbhash.service import create_app
from lbhash.runs import RunDirectory
from lbhash.train import TrainConfig
from lbhash.runs.encoder import RunEncoder
from serve_helpers import LOCAL


def make(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    run = out / "run"
    RunDirectory(run).train(TrainConfig(data="digits", method="csq", bits=32, epochs=3, hidden=(64,), centers="hadamard",
                      progress=False))
    RunDirectory(run).export()
    main(["index", "build", str(run), "--out", str(out / "idx")], standalone_mode=False)
    rows = load_data("digits").x[[0, 11, 222, 1333]].tolist()
    bodies = [{"features": rows, "k": 10}, {"features": rows, "radius": 4, "labels": [[1, 3]] * 4}]
    with TestClient(create_app(out / "idx", RunEncoder.load(run)), base_url=LOCAL) as client:
        answers = [client.post("/search", json=body).json() for body in bodies]
    (out / "expected.json").write_text(json.dumps({"requests": bodies, "answers": answers}))
    make_images(out)


def make_images(out: Path) -> None:
    """The image half: the run's answers to the image searches and adds that the export must repeat."""
    import numpy as np
    from PIL import Image

    from page_helpers import make_image_tree, train_tiny_run

    tree, run = make_image_tree(out / "imgs"), out / "image-run"
    train_tiny_run(tree, run)
    RunDirectory(run).export()
    main(["index", "build", str(run), "--out", str(out / "image-idx")], standalone_mode=False)
    queries = sorted(str(f.relative_to(out)) for f in (tree / "test").rglob("*.png"))
    rng, uploads = np.random.default_rng(0), []
    for i, name in enumerate(queries[::3]):  # edited copies, none of them in the index: noise, another size
        img = np.array(Image.open(out / name).convert("RGB")).astype(np.int16)
        copy = Image.fromarray(np.clip(img + rng.integers(-25, 26, img.shape), 0, 255).astype(np.uint8))
        (copy if i % 2 else copy.resize((45, 37))).save(out / f"upload{i}.png")
        uploads.append(f"upload{i}.png")
    files = [[("files", (name, (out / name).read_bytes(), "image/png")) for name in names] for names in (queries, uploads)]
    shutil.copytree(out / "image-idx", out / "image-idx-run")  # its adds leave the index the test serves as it is
    with TestClient(create_app(out / "image-idx-run", RunEncoder.load(run)), base_url=LOCAL) as client:
        answers = [client.post("/search/image", files=files[0], data={"k": "12"}).json(),
                   client.post("/items/image", files=files[1]).json(),
                   client.post("/search/image", files=files[1], data={"k": "12"}).json()]
    (out / "expected-images.json").write_text(json.dumps({"queries": queries, "uploads": uploads, "k": 12,
                                                          "answers": answers}))


if __name__ == "__main__":
    make(Path(sys.argv[1]))
