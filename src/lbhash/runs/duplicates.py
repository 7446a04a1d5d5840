"""The copies inside an index: every item searched against the others, pairs the same-picture mark
passes, and their groups (`lbhash duplicates`; docs/search.md, "Finding the copies in an index").

Each item is a query made of what the index keeps of it (its class code, instance code and float rows):
no model runs, so an index needs neither its run nor its export here. Its `K` nearest other items by
the default ranking (lbhash.index.blend) are its candidates; a candidate is paired with it when their
similarity passes the threshold (the index's calibrated mark by default: the centred cosine of their
float rows, or the share of instance bits they agree on), a symmetric measure, so a pair is found from
either side. The groups are the connected components of the pairs, largest first; a chain of
look-alikes can join two items that do not pass the threshold together, and each group lists the
pairs that made it with their similarities, so that such a chain shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lbhash.errors import InputError
from lbhash.index.blend import blended_search
from lbhash.index.hits import Queries
from lbhash.index.rescore import scoring_rows
from lbhash.index.storage import MANIFEST as INDEX_MANIFEST
from lbhash.instance import mark_rule, mark_why
from lbhash.runs.index_dir import open_index
from lbhash.runs.instance_codes import index_transform
from lbhash.runs.instance_learning import cosine_rows
from lbhash.runs.origins import read_sources

K = 10          # each item's candidates: its nearest other items by the default ranking
CHUNK = 1024    # items searched at a time


@dataclass
class Groups:
    """What `find_duplicates` found: `groups`, each a dict of `items` (ids, ascending), their `sources`
    (None where the index records none) and `pairs` ([id, id, similarity], by descending similarity);
    the `measure` ("cosine" or "instance") and `threshold` used; `items` read; `pairs` found."""

    groups: list[dict] = field(default_factory=list)
    measure: str = "cosine"
    threshold: float = 0.0
    items: int = 0
    pairs: int = 0

    def to_dict(self) -> dict:
        return {"groups": self.groups, "measure": self.measure, "threshold": self.threshold, "items": self.items,
                "pairs": self.pairs}


def find_duplicates(path, threshold: float | None = None, min_group: int = 2, progress=None) -> Groups:
    """The groups of copies among the items of the index at `path` (the module says how), or among the
    photos of the folder at `path` (lbhash.runs.folder_copies: an index of them made in memory).
    `threshold`: the similarity a pair must reach, in the measure of the index's calibrated mark (None:
    the mark's own threshold; an index without a mark needs one: a cosine in 0..1 where it keeps float
    rows, else a share of the instance bits in 0..1, a pair passing at distance <= share x bits).
    `progress(done, total)` is called after each chunk."""
    if isinstance(min_group, bool) or not isinstance(min_group, int) or min_group < 2:
        raise InputError(f"--min-group must be an integer of at least 2, got {min_group!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not np.isfinite(threshold) or not 0 < threshold <= 1):
        raise InputError(f"--threshold must be a number in (0, 1], got {threshold!r}")
    if Path(path).is_dir() and not (Path(path) / INDEX_MANIFEST).is_file():
        from lbhash.runs.folder_copies import folder_index

        index = folder_index(path, calibrate=threshold is None)
    else:
        index = open_index(path)
    return _groups(index, str(path), threshold, min_group, progress)


def _groups(index, index_dir: str, threshold: float | None, min_group: int, progress) -> Groups:
    transform = index_transform(index, str(index_dir))
    if transform is None:
        raise InputError(f"{index_dir}: the index keeps no instance codes, so it cannot tell copies apart from look-"
                         "alikes; build it from a run with its instance codes (lbhash index build)")
    floats = index.embedding_dim is not None
    cut, by_cosine = mark_rule(index.metadata, floats, str(index_dir))
    if threshold is None:
        if cut < 0:
            raise InputError(f"{index_dir}: no calibrated same-picture mark ({mark_why(index.metadata)}); give "
                             "--threshold")
    else:
        cut, by_cosine = float(threshold), floats
    ids = index.ids()
    found = Groups(measure="cosine" if by_cosine else "instance", threshold=cut, items=len(ids))
    pairs = []
    for start in range(0, len(ids), CHUNK):
        pairs += _pairs(index, transform, ids[start:start + CHUNK], cut, by_cosine)
        if progress is not None:
            progress(min(start + CHUNK, len(ids)), len(ids))
    best = {}
    for a, b, s in pairs:  # each pair once (found from both sides: the same similarity)
        key = (min(a, b), max(a, b))
        best[key] = max(s, best.get(key, -np.inf))
    found.pairs = len(best)
    sources = getattr(index, "folder_sources", None) or read_sources(index)  # (a folder's: a list by id)
    source = (lambda i: sources[i]) if isinstance(sources, list) else \
        (lambda i: None if sources is None else sources.source(i))
    for members in _components(best):
        if len(members) < min_group:
            continue
        inside = sorted(((a, b, s) for (a, b), s in best.items() if a in members), key=lambda p: (-p[2], p[0], p[1]))
        found.groups.append({"items": sorted(members), "sources": [source(i) for i in sorted(members)],
                             "pairs": [[a, b, round(float(s), 6)] for a, b, s in inside]})
    found.groups.sort(key=lambda g: (-len(g["items"]), g["items"][0]))
    return found


def _pairs(index, transform, ids: np.ndarray, cut: float, by_cosine: bool) -> list[tuple[int, int, float]]:
    """(id, other id, similarity) of the pairs the threshold passes among `ids`' K nearest other items."""
    codes, inst = index.get_codes(ids), index.get_instance_codes(ids)
    stored = rows = center = None
    if index.embedding_dim is not None:  # (the rows read once: the queries' floats and their centred cosines)
        stored = scoring_rows(index.get_embeddings(ids))
        rows, center = cosine_rows(transform, stored, kept=True), None if transform.maps_floats else transform.mean
    queries = Queries(codes, stored, inst, center)
    hits = blended_search(index, queries, min(K + 1, index.ntotal), looks_like=1.0)
    ok = (hits.ids >= 0) & (hits.ids != ids[:, None])
    if by_cosine:
        held = np.unique(hits.ids[ok])
        at = np.searchsorted(held, np.where(ok, hits.ids, held[0] if len(held) else 0))
        similarity = np.einsum("qd,qkd->qk", rows, cosine_rows(transform, scoring_rows(index.get_embeddings(held)), kept=True)[at]) if len(held) else \
            np.zeros(hits.ids.shape)
        passes = ok & (similarity >= cut)
    else:
        similarity = 1.0 - hits.instance_distances / index.instance_bits
        passes = ok & (hits.instance_distances <= cut * index.instance_bits)
    q, c = np.nonzero(passes)
    return [(int(ids[i]), int(hits.ids[i, j]), float(similarity[i, j])) for i, j in zip(q, c)]


def _components(pairs: dict) -> list[set[int]]:
    """The connected components of the pairs' graph (union-find)."""
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, set[int]] = {}
    for x in list(parent):
        groups.setdefault(root(x), set()).add(x)
    return list(groups.values())
