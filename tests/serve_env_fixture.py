"""Make the inputs of tests/service/test_serve_env.py with the full environment (torch):

    python tests/serve_env_fixture.py DIR

writes DIR/run (a small digits run) with its export (DIR/run/export), DIR/idx (its database)
and DIR/expected.json: feature-row searches and the answers the service gives with the run's
own torch encoder (what `lbhash serve DIR/idx --run DIR/run` answers). `make test-serve-env`
runs it, then the test in an environment without torch."""

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


if __name__ == "__main__":
    make(Path(sys.argv[1]))
