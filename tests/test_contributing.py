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


def test_every_file_and_module_it_names_exists():
    """Each path (`indexes/index_dir.py`, `tests/test_lint.py`) and dotted name (`lbhash.service.access`,
    `lbhash.runs.RunDirectory`) in docs/contributing.md is a file of the repository, of `src/` or of the
    package, or a module and the attribute it names (issue 71, item 7)."""
    import importlib

    root = DOC.parents[1]
    text = DOC.read_text()
    paths = set(re.findall(r"`((?:[\w.]+/)+[\w.]+\.py)`", text))
    assert "indexes/index_dir.py" in paths
    for path in sorted(paths):
        assert any((base / path).is_file() for base in (root, root / "src", root / "src" / "lbhash")), \
            f"docs/contributing.md names {path}, which is no file"
    dotted = set(re.findall(r"`(lbhash(?:\.\w+)+)`", text))
    assert "lbhash.service.access" in dotted
    for name in sorted(dotted):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                target = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attr in parts[cut:]:
                assert hasattr(target, attr), f"docs/contributing.md names {name}, which does not exist"
                target = getattr(target, attr)
            break
