"""The import graph of `src/lbhash`, stated: which package may import which (siblings included),
with the two engines as leaves (`index` imports only the bottom layer; `train` nothing of `index`
or the application layer above it). docs/contributing.md draws the same graph; the README and
the package docstring list the packages in an order that respects it."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lbhash"
# the bottom layer: modules every package may import (and which import only each other)
BOTTOM = {"errors", "_io", "_lazy", "arrays", "checks", "cpus", "labels", "limits", "options", "codes", "codes_file",
          "ranking", "instance"}
# package -> the packages it may import besides the bottom layer and itself
ALLOWED = {
    "centers": set(),
    "surrogate": set(),
    "methods": {"surrogate"},
    "models": set(),
    "data": {"models"},
    "encoders": {"data"},
    "evaluate": set(),
    "index": set(),  # the search engine: codes and embeddings in, neighbours out
    "train": {"centers", "surrogate", "methods", "models", "data", "evaluate"},  # the training engine
    # the application layer: training runs, index directories (reading a run only through index_inputs), searching
    "runs": {"train", "index", "data", "encoders", "evaluate", "methods", "models", "centers"},
    "indexes": {"runs", "index", "data", "encoders"},
    "serving": {"indexes", "index", "data", "encoders", "evaluate"},
    "reproduce": {"runs", "train", "centers", "data", "evaluate", "methods", "surrogate"},
    "service": {"serving", "indexes", "encoders"},
    "cli": {"runs", "indexes", "serving", "reproduce", "service"},  # the commands parse and print; the application layer does the job
}
APPLICATION = {"runs", "indexes", "serving", "reproduce", "service", "cli"}


def top_module(path: Path, package: Path) -> str:
    return path.relative_to(package).parts[0].removesuffix(".py")


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


def graph_violations(package: Path = PACKAGE) -> list[str]:
    """Every import of one lbhash package by another that ALLOWED does not allow."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        if path.parent == package and path.name == "__init__.py":
            continue
        own = top_module(path, package)
        assert own in BOTTOM or own in ALLOWED, f"{path.relative_to(package)} is in no package of the graph"
        allowed = BOTTOM | {own} | (set() if own in BOTTOM else ALLOWED[own])
        for target, line in imported_lbhash_modules(path):
            if target not in allowed:
                bad.append(f"{path.relative_to(package)}:{line} imports lbhash.{target}")
    return bad


def test_every_import_follows_the_graph():
    assert graph_violations() == []


def test_the_graph_keeps_the_engines_leaves_and_has_no_cycle():
    assert ALLOWED["index"] == set()
    assert not ALLOWED["train"] & ({"index"} | APPLICATION)
    assert all(not ALLOWED[name] & APPLICATION for name in ALLOWED if name not in APPLICATION)
    order = topological_order()
    assert sorted(order) == sorted(ALLOWED)


def topological_order() -> list[str]:
    """The packages, each after every package it may import (an error on a cycle)."""
    done: list[str] = []
    while len(done) < len(ALLOWED):
        ready = [name for name in ALLOWED if name not in done and ALLOWED[name] <= set(done)]
        assert ready, f"the graph has a cycle among {sorted(set(ALLOWED) - set(done))}"
        done += sorted(ready)
    return done


@pytest.mark.parametrize("own, text, target", [
    ("index", "from lbhash.data import load_data\nfrom lbhash.codes import pack\n", "data"),
    ("index", "import lbhash.train.loop\n", "train"),
    ("train", "from lbhash.runs.run_files import SPLIT\n", "runs"),
    ("train", "from lbhash.index import CodeIndex\n", "index"),
])
def test_the_graph_check_sees_an_engine_import_it_forbids(tmp_path, own, text, target):
    package = tmp_path / "lbhash"
    (package / own).mkdir(parents=True)
    (package / own / "x.py").write_text(text)
    assert graph_violations(package) == [f"{own}/x.py:1 imports lbhash.{target}"]


ARROW = re.compile(r"^\s*`?codes`? -> .*")


def layer_line(text: str) -> list[str]:
    """The packages of the first 'codes -> centers -> ...' line of a text."""
    line = next(m.group(0) for m in map(ARROW.match, text.splitlines()) if m)
    return [part.strip().strip("`") for part in line.split("->")]


def test_contributing_and_package_docstring_list_the_packages_in_an_order_the_graph_allows():
    import lbhash

    contributing = (PACKAGE.parents[1] / "docs" / "contributing.md").read_text()
    for where, text in (("lbhash.__doc__", lbhash.__doc__), ("docs/contributing.md", contributing)):
        line = layer_line(text)
        assert line[0] == "codes" and sorted(line[1:]) == sorted(ALLOWED), where
        for i, name in enumerate(line[1:], 1):
            assert ALLOWED[name] <= set(line[1:i]), f"{where}: {name} comes before what it imports"


GRAPH_ROW = re.compile(r"^\| `(\w+)` \| (.*) \|$")


def test_contributing_draws_this_graph():
    text = (PACKAGE.parents[1] / "docs" / "contributing.md").read_text()
    drawn = {}
    table = text[text.index("| package | may import |"):]
    for line in table[:table.index("\n\n")].splitlines():
        match = GRAPH_ROW.match(line)
        if match and match.group(1) in ALLOWED:
            names = set(re.findall(r"`(\w+)`", match.group(2)))
            drawn[match.group(1)] = names
    assert drawn == ALLOWED


def test_every_package_of_the_graph_exists():
    for name in BOTTOM | set(ALLOWED):
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


FILE_CALLS = {"open", "save", "load", "savez", "savez_compressed", "write_text", "read_text", "write_bytes",
              "read_bytes", "dump", "mkdir", "unlink", "os.replace", "os.rename", "os.remove"}


def file_calls(package: Path) -> list[str]:
    """Calls that read or write files (by name: open, torch.save, np.load, Path.write_text, ...)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                owner = getattr(getattr(node.func, "value", None), "id", "")
                if name in FILE_CALLS or f"{owner}.{name}" in FILE_CALLS:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {name}")
    return found


def test_the_training_engine_does_no_file_io():
    """lbhash.train writes and reads through the store it is given (lbhash.runs.run_files.DirectoryStore)."""
    assert file_calls(PACKAGE / "train") == []


def test_the_file_io_check_sees_a_save(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "x.py").write_text("import torch\ntorch.save({}, 'best.pt')\n")
    assert file_calls(tmp_path / "train") == ["train/x.py:2 save"]


# ---- the application layer reads a run in one module: lbhash.indexes.index_inputs ----

MEETING = "lbhash.indexes.index_inputs"  # where indexes and searches read a run: its codes, embeddings, data and model


def run_readers(graph: dict[str, set[str]]) -> list[str]:
    """Imports of lbhash.runs (the package or a module of it) by a module of lbhash.indexes or lbhash.serving
    other than MEETING (the package graph already keeps lbhash.runs from importing either)."""
    def reads_a_run(target: str) -> bool:
        return target == "lbhash.runs" or target.startswith("lbhash.runs.")

    return [f"{name} imports {target}" for name, targets in sorted(graph.items())
            if name.startswith(("lbhash.indexes", "lbhash.serving")) and name != MEETING
            for target in sorted(filter(reads_a_run, targets))]


def test_indexes_and_searches_read_a_run_only_through_index_inputs():
    graph = import_graph()  # (every module parsed: once)
    assert MEETING in graph
    assert run_readers(graph) == []


def test_the_run_reader_check_sees_an_index_module_reading_a_run_directly():
    graph = {"lbhash.indexes.index_dir": {"lbhash.runs.codes", MEETING}, MEETING: {"lbhash.runs.run_dir"},
             "lbhash.serving.searcher": {"lbhash.runs", "lbhash.indexes.origins"}}
    assert run_readers(graph) == ["lbhash.indexes.index_dir imports lbhash.runs.codes",
                                  "lbhash.serving.searcher imports lbhash.runs"]


def module_names_alike(root: Path) -> list[list[str]]:
    """The modules (and subpackages) of each package under `root` whose names differ only by underscores
    or case."""
    alike = []
    for package in [root, *(p for p in root.rglob("*") if p.is_dir() and (p / "__init__.py").is_file())]:
        names: dict[str, list[str]] = {}
        for entry in package.iterdir():
            if entry.suffix == ".py" or (entry.is_dir() and (entry / "__init__.py").is_file()):
                names.setdefault(entry.stem.replace("_", "").lower(), []).append(entry.stem)
        alike += [sorted(v) for v in names.values() if len(v) > 1]
    return alike


def test_no_two_modules_of_a_package_differ_only_by_an_underscore(tmp_path):
    """Issue 89: `run_dir` and `rundir` were two modules of lbhash.runs; a name says one thing."""
    assert module_names_alike(PACKAGE) == []
    (tmp_path / "pkg").mkdir()
    for name in ("__init__.py", "run_dir.py", "rundir.py", "other.py"):
        (tmp_path / "pkg" / name).write_text("")
    assert module_names_alike(tmp_path / "pkg") == [["run_dir", "rundir"]]


def test_no_two_test_files_share_a_name():
    """The test folders are not packages: two files of one name collide when pytest imports them in one
    process (a clean clone's `make test` failed on tests/cli and tests/service's test_duplicates.py)."""
    names: dict[str, list[str]] = {}
    for path in (PACKAGE.parents[1] / "tests").rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.parent.name))
    assert {n: d for n, d in names.items() if len(d) > 1} == {}
