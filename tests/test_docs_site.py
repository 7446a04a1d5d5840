"""The documentation site (issue 89): its reference covers the code, its navigation every guide page, and
the counts the docs state are the code's. `make docs` builds it strictly (CI); these run without MkDocs."""

import importlib
import re
import sys
from pathlib import Path

import click
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tools"))
import docs_hooks  # noqa: E402

WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
         "eleven": 11, "twelve": 12}


def reference_entries() -> list[str]:
    return re.findall(r"^::: ([\w.]+)$", (DOCS / "reference" / "python.md").read_text(), re.M)


def test_every_public_name_has_a_reference_entry_that_resolves():
    import lbhash

    entries = {}
    for dotted in reference_entries():
        module, _, name = dotted.rpartition(".")
        entries[dotted] = getattr(importlib.import_module(module), name)  # (an entry that does not resolve fails)
    documented = set(map(id, entries.values()))
    public = [n for n in lbhash.__all__ if not n.startswith("__")]
    assert public and all(id(getattr(lbhash, n)) in documented for n in public), public
    from lbhash.index import CodeIndex, blended_search
    from lbhash.serving.searcher import Searcher

    assert {id(CodeIndex), id(blended_search), id(Searcher)} <= documented


def test_the_cli_reference_holds_every_command_the_group_lists():
    """The hook's walk against `--help` as a user reads it: every command listed under `lbhash` and under
    each group appears, with its own help."""
    from lbhash.cli import main

    rendered = dict(docs_hooks.cli_commands())
    ctx = click.Context(main, info_name="lbhash")
    for name in main.list_commands(ctx):
        assert f"lbhash {name}" in rendered, name
        sub = main.get_command(ctx, name)
        if isinstance(sub, click.Group):
            for inner in sub.list_commands(click.Context(sub, info_name=name, parent=ctx)):
                assert f"lbhash {name} {inner}" in rendered
    assert "Usage: lbhash duplicates [OPTIONS] PATH" in rendered["lbhash duplicates"]
    assert "<!-- lbhash: cli -->" in (DOCS / "reference" / "cli.md").read_text()


def test_the_http_reference_holds_every_route_of_the_app():
    """The schema's routes against the service's source: every route decorator of lbhash/service (but those
    kept out of the schema: the page, its files, the API pages) has its entry."""
    declared = set()
    for source in (ROOT / "src" / "lbhash" / "service").glob("*.py"):
        for m in re.finditer(r'@\w+\.(get|post|put|delete|patch)\("([^"]+)"([^\n]*)', source.read_text()):
            if "include_in_schema=False" not in m.group(3):
                declared.add((m.group(1).upper(), m.group(2)))
    documented = {(m, p) for m, p, _ in docs_hooks.http_routes(docs_hooks.openapi())}
    assert len(declared) >= 10 and declared == documented, (declared ^ documented)
    text = docs_hooks.http_reference()
    assert all(f"## `{m} {p}`" in text for m, p in documented)


def test_the_navigation_lists_every_guide_page():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)
        elif isinstance(node, list):
            for value in node:
                yield from pages(value)

    listed = set(pages(nav))
    guides = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "results" not in p.parts}
    assert guides <= listed, guides - listed
    assert all((DOCS / p).is_file() for p in listed)


def test_the_counts_the_docs_state_are_the_codes():
    """"N methods train with or without `--lbhash`" (the deep methods) and "the eleven edits" (the named
    edits of a copy) wherever the README or a guide states them."""
    from lbhash.data.edits import EDITS
    from lbhash.methods import available_methods, method_class

    deep = [m for m in available_methods() if not method_class(m).closed_form]
    texts = {p: p.read_text() for p in [ROOT / "README.md", *DOCS.glob("*.md")]}
    said = [(p.name, m.group(1)) for p, t in texts.items()
            for m in re.finditer(r"\b(\w+) methods train with or without", t)]
    assert said and all(WORDS.get(n.lower(), n) == len(deep) for _, n in said), (said, deep)
    edits = [(p.name, m.group(1)) for p, t in texts.items() for m in re.finditer(r"\bthe (\w+) (?:named )?edits\b", t)
             if m.group(1).lower() in WORDS]
    assert edits and all(WORDS[n.lower()] == len(EDITS) for _, n in edits), (edits, len(EDITS))


GUIDE_PAGE_MAX_LINES = 400
GUIDES_MAX_LINES = 3500


def test_the_guide_pages_are_short():
    """Issue 89, "Docs a user reads in minutes": no guide page (docs/*.md; the measurements live in
    docs/results/, the generated and detailed reference in docs/reference/) over 400 lines, and the
    guide pages together at most 3,500."""
    lines = {p.name: len(p.read_text().splitlines()) for p in sorted(DOCS.glob("*.md"))}
    assert lines
    too_long = {name: n for name, n in lines.items() if n > GUIDE_PAGE_MAX_LINES}
    assert not too_long, f"guide pages over {GUIDE_PAGE_MAX_LINES} lines: {too_long}"
    total = sum(lines.values())
    assert total <= GUIDES_MAX_LINES, f"the guide pages hold {total} lines, more than {GUIDES_MAX_LINES}: {lines}"
