"""Citations of the documentation in comments and docstrings (issue 89) point to a page that exists and to a
section that page holds: a `docs/PAGE.md` citation in src/, tests/, studies/, benchmarks/ or tools/ names an
existing page; one followed by `#anchor` names a heading's slug on it (as MkDocs makes it); one followed by a
quoted title (`, "Title"`, wrapped over lines or string pieces or not) names a heading of that page, or the bold
lead-in of one of its list items (`- **Title**`) or paragraphs (`**Title.**`), or the start of one. Runs without
MkDocs."""

import html
import re
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCANNED = ("src", "tests", "studies", "benchmarks", "tools")

# files that another change in flight holds, whose citations it fixes itself (none now)
EXEMPT: set[str] = set()

CITATION = re.compile(r"(?<![\w/.-])docs/((?:[\w.-]+/)*[\w.-]+)\.md(?:#([\w-]+))?")
# what may stand between a title's pieces: whitespace, a line break with the next line's comment marker, and
# the end of one Python string literal and the start of the next
GAP = re.compile(r"""(?:\s+(?:\#\s*)?|["']\s*\n\s*[rbfu]?["'])+""")
QUOTES = (r"\"", '"', "'")


def _strip_gaps(text: str) -> str:
    text = re.sub(r"""["']\s*\n\s*[rbfu]?["']""", " ", text)
    text = re.sub(r"\n\s*#+", " ", text)
    return " ".join(text.split())


def _title_at(text: str, pos: int, first: bool) -> tuple[str, int] | None:
    """The quoted title that starts at `pos` (after a comma, or after a space for the first one), and where it
    ends; None if none starts there."""
    m = re.compile(r",|\s+and\b" if not first else r",|(?= ['\"\\])").match(text, pos)
    if not m:
        return None
    pos = m.end()
    gap = GAP.match(text, pos)
    if gap:
        pos = gap.end()
    for quote in QUOTES:
        if text.startswith(quote, pos):
            end = text.find(quote, pos + len(quote))
            if end < 0 or end - pos > 300 or (quote == '"' and text[end - 1] == "\\"):
                return None
            title = _strip_gaps(text[pos + len(quote):end])
            if not title or (quote == "'" and not title[0].isupper()):
                return None
            return title, end + len(quote)
    return None


def citations():
    """(file:line, page, anchor, [titles]) of every citation in the scanned folders."""
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT or path == Path(__file__).resolve():
                continue
            text = path.read_text(encoding="utf-8")
            for m in CITATION.finditer(text):
                titles, pos = [], m.end()
                while m.group(2) is None and (found := _title_at(text, pos, first=not titles)):
                    titles.append(found[0])
                    pos = found[1]
                line = text.count("\n", 0, m.start()) + 1
                yield f"{rel}:{line}", m.group(1) + ".md", m.group(2), titles


def _plain(text: str) -> str:
    """A heading's or a lead-in's text as read: links to their text, no code or emphasis marks."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return html.unescape(text.replace("`", "").replace("**", "").replace("*", ""))


def _normal(text: str) -> str:
    return " ".join(_plain(text).split()).casefold()


def _slugify(text: str) -> str:
    try:
        from markdown.extensions.toc import slugify
    except ImportError:  # MkDocs' default, without the markdown package
        def slugify(value: str, separator: str) -> str:
            import unicodedata

            value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
            value = re.sub(r"[^\w\s-]", "", value).strip().lower()
            return re.sub(rf"[{separator}\s]+", separator, value)
    return slugify(_plain(text), "-")


@cache
def sections(page: str) -> tuple[set[str], list[str]]:
    """The slugs of a page's headings, and its headings' and bold lead-ins' normalised texts."""
    markdown = (DOCS / page).read_text(encoding="utf-8")
    if "<!-- lbhash: " in markdown:  # the reference's generated parts, as the build makes them
        sys.path.insert(0, str(ROOT / "tools"))
        import docs_hooks

        markdown = docs_hooks.on_page_markdown(markdown, None, None, None)
    markdown = re.sub(r"^(```|~~~).*?^\1", "", markdown, flags=re.M | re.S)  # no headings inside code
    headings = [h.strip() for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", markdown, re.M)]
    slugs, seen = set(), {}
    for heading in headings:  # a repeated slug gets _1, _2, ... as MkDocs' toc does
        slug = _slugify(heading)
        seen[slug] = seen.get(slug, -1) + 1
        slugs.add(slug if not seen[slug] else f"{slug}_{seen[slug]}")
    # bold lead-ins: a list item's (`- **Title**: ...`) or a paragraph's (`**Title.** ...`)
    leads = re.findall(r"^[ \t]*(?:[-*+]|\d+\.)[ \t]+\*\*([^*]+)\*\*", markdown, re.M)
    leads += re.findall(r"(?:\A|\n[ \t]*\n)[ \t]*\*\*([^*]+)\*\*", markdown)
    return slugs, [_normal(t) for t in headings + leads]


def _names_a_section(title: str, texts: list[str]) -> bool:
    title = _normal(title)
    return any(t == title or (t.startswith(title) and not t[len(title)].isalnum()) for t in texts)


def broken_citations() -> list[str]:
    broken = []
    for where, page, anchor, titles in citations():
        if not (DOCS / page).is_file():
            broken.append(f"{where}: docs/{page} is no page")
            continue
        if anchor is None and not titles:
            continue
        slugs, texts = sections(page)
        if anchor is not None and anchor not in slugs:
            broken.append(f"{where}: docs/{page} has no heading #{anchor}")
        broken += [f'{where}: docs/{page} has no section "{t}"' for t in titles if not _names_a_section(t, texts)]
    return broken


def test_the_scan_reads_citations_of_every_form():
    found = list(citations())
    assert len(found) > 150
    assert sum(1 for *_, titles in found if titles) > 50 and any(anchor for _, _, anchor, _ in found)
    text = '(docs/a.md, "Two\n    # words") x("docs/b.md, "\n   "\\"Ranking\\" x") (docs/c.md \'Of "\n "it\')'
    assert _title_at(text, text.index(".md") + 3, True)[0] == "Two words"
    assert _title_at(text, text.index("b.md") + 4, True)[0] == "Ranking"
    assert _title_at(text, text.index("c.md") + 4, True)[0] == "Of it"


def test_every_cited_page_and_section_exists():
    broken = broken_citations()
    assert not broken, f"{len(broken)} citations of the docs name no page or section:\n" + "\n".join(broken)
