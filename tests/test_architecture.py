"""Each layer imports only the layers below it; the README and the package docstring list the
same layers in the same order."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lbhash"
# lowest first; modules on one line share a level
LAYERS = [
    {"errors", "_io", "checks", "labels", "limits", "codes", "codes_file"},
    {"centers"},
    {"surrogate"},
    {"methods"},
    {"models"},
    {"data"},
    {"evaluate"},
    {"train"},
    {"index"},
    {"reproduce"},
    {"service"},
    {"cli"},
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def top_module(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def imported_lbhash_modules(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "lbhash" and len(parts) > 1:
                yield parts[1], node.lineno


def test_layers_import_only_lower_layers():
    bad = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue
        own = top_module(path)
        assert own in LEVEL, f"{path.relative_to(PACKAGE)} is in no layer: add it to LAYERS"
        for target, line in imported_lbhash_modules(path):
            if LEVEL[target] > LEVEL[own]:
                bad.append(f"{path.relative_to(PACKAGE)}:{line} imports lbhash.{target}")
    assert not bad, "\n".join(bad)


ARROW = re.compile(r"^\s*`?codes`? -> .*")


def layer_line(text: str) -> list[str]:
    """The layers of the first 'codes -> centers -> ...' line of a text."""
    line = next(m.group(0) for m in map(ARROW.match, text.splitlines()) if m)
    return [part.strip().strip("`") for part in line.split("->")]


def test_readme_and_package_docstring_list_the_layers_of_this_test():
    import lbhash

    expected = ["codes" if "codes" in names else sorted(names)[0] for names in LAYERS]
    readme = (PACKAGE.parents[1] / "README.md").read_text()
    assert layer_line(lbhash.__doc__) == expected
    assert layer_line(readme) == expected


def test_every_layer_of_this_test_exists():
    for names in LAYERS:
        for name in names:
            assert (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file(), name
