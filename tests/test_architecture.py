"""Each layer imports only the layers below it, and the two engines are leaves: `index` imports
only the bottom layer (codes in, neighbours out) and `train` nothing of `index` or `runs`. The
README and the package docstring list the same layers in the same order."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lbhash"
# lowest first; modules on one line share a level
LAYERS = [
    {"errors", "_io", "_lazy", "arrays", "checks", "cpus", "labels", "limits", "options", "codes", "codes_file", "ranking"},
    {"centers"},
    {"surrogate"},
    {"methods"},
    {"models"},
    {"data"},
    {"encoders"},
    {"evaluate"},
    {"train"},
    {"index"},
    {"runs"},
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


# what an engine may import besides itself: index is a leaf over the bottom layer; train sits
# below index and runs in LAYERS, so the order alone keeps it from them
LEAVES = {"index": LAYERS[0]}


def test_the_search_engine_imports_only_the_bottom_layer():
    bad = []
    for own, allowed in LEAVES.items():
        for path in (PACKAGE / own).rglob("*.py"):
            for target, line in imported_lbhash_modules(path):
                if target != own and target not in allowed:
                    bad.append(f"{path.relative_to(PACKAGE)}:{line} imports lbhash.{target}")
    assert not bad, "\n".join(bad)


def test_the_leaf_rule_sees_an_import_of_data_from_index(tmp_path, monkeypatch):
    package = tmp_path / "lbhash"
    (package / "index").mkdir(parents=True)
    (package / "index" / "x.py").write_text("from lbhash.data import load_data\nfrom lbhash.codes import pack\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    import pytest

    with pytest.raises(AssertionError, match="index/x.py:1 imports lbhash.data"):
        test_the_search_engine_imports_only_the_bottom_layer()


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


# ---- no module imports one that imports it back (imports inside functions count) ----

def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """lbhash module -> the lbhash modules it imports anywhere in its text (relative imports
    resolved; `from pkg import name` counts as pkg.name when that is a module, else as pkg)."""
    paths = {module_name(p, package): p for p in package.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names if a.name.split(".")[0] == "lbhash"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                if base.split(".")[0] != "lbhash":
                    continue
                targets |= {known(f"{base}.{a.name}") if f"{base}.{a.name}" in paths else known(base)
                            for a in node.names}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_cycle_through_an_import_inside_a_function(tmp_path):
    package = tmp_path / "lbhash"
    (package / "train").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "train" / "__init__.py").write_text("")
    (package / "train" / "loop.py").write_text("from lbhash.train.run import go\n")
    (package / "train" / "run.py").write_text("def go():\n    from . import summary\n")
    (package / "train" / "summary.py").write_text("from lbhash.train import loop\n")
    (package / "train" / "alone.py").write_text("import lbhash.train.loop\n")
    graph = import_graph(package)
    assert graph["lbhash.train.run"] == {"lbhash.train.summary"}
    assert cycles(graph) == [["lbhash.train.loop", "lbhash.train.run", "lbhash.train.summary"]]
