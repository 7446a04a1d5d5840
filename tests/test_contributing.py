"""docs/contributing.md: its code runs as written, and its tables name what exists."""

import re
from pathlib import Path

import lbhash
from lbhash.cli import COMMANDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "contributing.md"


def test_the_objective_in_a_loop_of_ones_own_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path))
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks
    for block in blocks:
        scope = {}
        exec(compile(block, str(DOC), "exec"), scope)  # noqa: S102 - our own documentation
        assert scope["loss"].total.isfinite() and scope["loss_pi"].isfinite()


def test_the_house_table_names_every_package():
    text = DOC.read_text()
    package = Path(lbhash.__file__).parent
    for path in package.iterdir():
        name = path.stem if path.suffix == ".py" else path.name
        if name.startswith("__") or not (path.suffix == ".py" or (path / "__init__.py").is_file()):
            continue
        assert f"`{name}`" in text, f"docs/contributing.md does not place {name}"
    assert "`lbhash.cli.COMMANDS`" in text and "train" in COMMANDS
