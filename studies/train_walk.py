"""Walk `lbhash train` of a photo run and count its stops, its climbs and its holder types (issue 71).

    python studies/train_walk.py [OUT] [-- TRAIN OPTIONS]

OUT (a temporary folder if left out) gets a class-folder tree of 32 synthetic photos (4 colours) and the
run; the training options default to a small photo run (resnet8 at 32 px, CSQ 16 bits, 2 epochs); any
given after `--` replace them. The walk is traced in process (sys.setprofile): every call into an
lbhash module from another lbhash module (the nearest lbhash frame up the stack: a call through torch
counts from the module that made it).

- a stop: a distinct (caller function, callee function) pair whose modules differ (a module's import
  not counted);
- a climb: a stop into a package that the caller's package may not import (tests/test_architecture.py's
  graph: a call back up, through a callback or an object handed down), made by the caller itself: a
  library's call back into lbhash (logging's handlers, pydantic's validators) is listed, not counted,
  and so are calls into a module above the caller's inside one package (a module that imports the
  caller's, directly or through others: a base class's call into its subclass, a registry's factory);
- a holder type: a dataclass of lbhash.train or lbhash.runs built during the walk.

About 20 s on 2 cores (the trace slows every Python call).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_architecture import ALLOWED, BOTTOM, import_graph  # noqa: E402  (the graph the tests state)

COLOURS = {"blue": (40, 60, 200), "green": (40, 180, 60), "red": (200, 40, 40), "yellow": (220, 200, 40)}
TRAIN = ["--protocol", "all-train", "--backbone", "resnet8", "--image-size", "32", "--method", "csq", "--bits", "16",
         "--epochs", "2", "--centers", "hadamard", "--batch-size", "16", "--no-progress"]


def photos(root: Path, per_class: int = 8) -> Path:
    rng = np.random.default_rng(0)
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for k in range(per_class):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, (32, 32, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{k:03d}.png")
    return root


def package(module: str) -> str:
    return module.split(".")[1]


def above(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """module -> the modules that import it, directly or through others."""
    importers: dict[str, set[str]] = {m: set() for m in graph}
    for module, targets in graph.items():
        for t in targets:
            importers.setdefault(t, set()).add(module)
    closed = {}
    for module in importers:
        seen, todo = set(), [module]
        while todo:
            for up in importers.get(todo.pop(), ()):
                if up not in seen:
                    seen.add(up)
                    todo.append(up)
        closed[module] = seen
    return closed


def out_of_graph(caller: str, callee: str) -> bool:
    """A call into a package that the caller's package may not import."""
    own, target = package(caller), package(callee)
    return not (target in BOTTOM or target == own or (own not in BOTTOM and target in ALLOWED[own]))


class Walk:
    def __init__(self):
        self.edges: Counter = Counter()
        self.holders: set[str] = set()

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith("lbhash."):
            return
        if frame.f_code.co_name == "__init__":
            made = type(frame.f_locals.get("self"))
            if dataclasses.is_dataclass(made) and made.__module__.split(".")[1:2] in (["train"], ["runs"]):
                self.holders.add(f"{made.__module__}.{made.__qualname__}")
        up = frame.f_back
        while up is not None and not up.f_globals.get("__name__", "").startswith("lbhash."):
            up = up.f_back
        if up is None or up.f_globals["__name__"] == callee or frame.f_code.co_name == "<module>":
            return
        direct = up is frame.f_back
        self.edges[(up.f_globals["__name__"], up.f_code.co_qualname, callee, frame.f_code.co_qualname, direct)] += 1


def main(argv: list[str]) -> None:
    cut = argv.index("--") if "--" in argv else len(argv)
    out_arg, options = argv[:cut], argv[cut + 1:] or TRAIN
    out = Path(out_arg[0]) if out_arg else Path(tempfile.mkdtemp(prefix="train-walk-"))
    data = photos(out / "photos")
    from lbhash.cli import main as cli

    walk = Walk()
    sys.setprofile(walk)
    try:
        cli(["train", "--data", f"images:{data}", *options, "--out", str(out / "run")], standalone_mode=False)
    finally:
        sys.setprofile(None)
    stops = list(walk.edges)
    importers = above(import_graph())
    climbs = [e for e in stops if e[4] and out_of_graph(e[0], e[2])]
    through = [e for e in stops if not e[4] and out_of_graph(e[0], e[2])]
    inside = [e for e in stops if e[4] and not out_of_graph(e[0], e[2]) and e[2] in importers.get(e[0], set())]
    crossings = Counter((package(e[0]), package(e[2])) for e in stops if package(e[0]) != package(e[2]))
    print(f"stops {len(stops)}, climbs {len(climbs)}, holder types {len(walk.holders)}")
    print("climbs (caller -> callee):")
    for caller, where, callee, what, _ in sorted(climbs):
        print(f"  {caller}.{where} -> {callee}.{what}")
    print("calls up made by a library, not counted (logging's handlers, pydantic's validators):")
    for caller, where, callee, what, _ in sorted(through):
        print(f"  {caller}.{where} -> {callee}.{what}")
    print(f"calls up inside a package, not counted ({len(inside)}: a base class's call into its subclass, "
          "a registry's factory, a closure handed down):")
    for caller, where, callee, what, _ in sorted(inside):
        print(f"  {caller}.{where} -> {callee}.{what}")
    print("holder types:", ", ".join(sorted(walk.holders)))
    print("package crossings (distinct stops):",
          ", ".join(f"{a}->{b} {n}" for (a, b), n in sorted(crossings.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
