"""The copies inside an index or a folder: every item searched against the others, the pairs that pass a
threshold, and their groups (`lbhash duplicates`; docs/duplicates.md, "Finding the copies").

Each item is a query made of what the index keeps of it: no model runs, so an index needs neither its
run nor its export here. Its `K` nearest other items by instance code are its candidates (an exact scan,
or the chunk tables of multi-index hashing in a large index: lbhash.index._lookup), found `CHUNK` items
at a time in bounded memory; each candidate's similarity is the centred cosine of their float rows where
the index keeps them, else the share of instance bits they agree on. Two measures decide a pair:

- `cosine` / `instance` (an index): the similarity itself, at the index's calibrated same-picture mark
  (the one its searches mark hits by) or `--threshold`;
- `margin` (a folder with no run: lbhash.indexes.folder_copies; an index whose mark is a margin, at that
  mark or `--threshold`): the similarity less the mean of the two
  items' `NEIGHBOUR`-th best similarity to any other item (each leaving the other out), the score
  normalisation of copy detection (the similarity to a near neighbour subtracted, as SSCD, Pizzi et al.
  2022, and cross-domain similarity local scaling do): a copy stands out of its photo's neighbours where
  a look-alike in a crowded part of the space does not. Its threshold by default is the folder's own
  null: each item's best margin is, for all but its few copies, a non-copy's, so the cut is their median
  plus `NULL_Z` robust standard deviations (1.4826 x the median absolute deviation; the share of normal
  values above is 0.1%). A pair at least `IDENTICAL` similar passes whatever its neighbours (a photo
  twice, or many times: their margins are all 0).

A pair is symmetric (found from either side, with the same score). The groups are the connected
components of the pairs, largest first; a chain of look-alikes can join two items that do not pass
together, and each group lists the pairs that made it (the strongest `GROUP_PAIRS`), so that it shows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from lbhash.errors import InputError
from lbhash.index.blend import perceptually_near
from lbhash.index.rescore import scoring_rows
from lbhash.index.storage import MANIFEST as INDEX_MANIFEST
from lbhash.instance import MARGIN_MARKS, NO_MARK, mark_rule, mark_why
from lbhash.indexes.index_dir import open_index
from lbhash.indexes.instance_codes import index_transform
from lbhash.indexes.instance_learning import cosine_rows
from lbhash.indexes.origins import read_sources

K = 10             # each item's candidates: its nearest other items by instance code
CHUNK = 1024       # items searched at a time (a quarter of it where float rows are read)
WIDER = 4          # with float rows: the candidates by instance code, K x this, before the cosine keeps K
NEIGHBOUR = 2      # the margin's neighbour: the 2nd best other item (a photo with two copies keeps its margin)
NULL_Z = 3.09      # the margin's default cut: the items' best margins' median + this many robust sd
MIN_NULL_ITEMS = 50  # fewer items: no default cut (give --threshold)
IDENTICAL = 0.995  # a pair at least this similar passes under any measure
GROUP_PAIRS = 1000  # the pairs a group lists (its strongest); `pair_count` says how many joined it


@dataclass
class Groups:
    """What `find_duplicates` found: `groups`, each a dict of `items` (ids, ascending), their `sources`
    (None where the index records none), `pairs` ([id, id, score], by descending score, at most
    GROUP_PAIRS) and `pair_count`; the `measure` (one of lbhash.instance.MARK_BY) and `threshold` used (and
    "margin_or_instance"'s `instance_threshold`, a share of the instance bits that may differ); `items` read;
    `pairs` found; where the mark has a perceptual part (lbhash.instance.Mark), its `perceptual_threshold`,
    which a pair passes too. A pair's score is its measure's (the margin's, for "margin_or_instance")."""

    groups: list[dict] = field(default_factory=list)
    measure: str = "cosine"
    threshold: float = 0.0
    items: int = 0
    pairs: int = 0
    instance_threshold: float | None = None
    perceptual_threshold: float | None = None

    def to_dict(self) -> dict:
        found = {"groups": self.groups, "measure": self.measure, "threshold": self.threshold, "items": self.items,
                 "pairs": self.pairs}
        more = {"instance_threshold": self.instance_threshold, "perceptual_threshold": self.perceptual_threshold}
        return {**found, **{k: v for k, v in more.items() if v is not None}}


def find_duplicates(path, threshold: float | None = None, min_group: int = 2, progress=None) -> Groups:
    """The groups of copies among the items of the index at `path` (measured by its mark), or among the
    photos of the folder at `path` (lbhash.indexes.folder_copies: an index of them made in memory, measured
    by the margin). `threshold`: the score a pair must reach, in (0, 1] (None: the index's mark, or the
    folder's null); `progress(done, total)` is called after each chunk."""
    _check(threshold, min_group)  # (before a folder's photos are embedded: minutes, where a bad option is not)
    if Path(path).is_dir() and not (Path(path) / INDEX_MANIFEST).is_file():
        from lbhash.indexes.folder_copies import folder_index

        return index_groups(folder_index(path), str(path), threshold, min_group, progress, by_margin=True)
    return index_groups(open_index(path), str(path), threshold, min_group, progress)


def _check(threshold, min_group) -> None:
    if isinstance(min_group, bool) or not isinstance(min_group, int) or min_group < 2:
        raise InputError(f"--min-group must be an integer of at least 2, got {min_group!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not np.isfinite(threshold) or not 0 < threshold <= 1):
        raise InputError(f"--threshold must be a number in (0, 1], got {threshold!r}")


def index_groups(index, index_dir: str, threshold: float | None = None, min_group: int = 2, progress=None,
                 by_margin: bool = False) -> Groups:
    """The groups of copies among the items of the open `index` (found at `index_dir`, named in errors)."""
    _check(threshold, min_group)
    transform = index_transform(index, str(index_dir))
    if transform is None:
        raise InputError(f"{index_dir}: the index keeps no instance codes, so it cannot tell copies apart from look-"
                         "alikes; build it with them (lbhash index build without --instance-bits 0)")
    floats = index.embedding_dim is not None
    agreeing = None  # (the mark by the margin or the instance distance: the share of instance bits that passes)
    hashes = NO_MARK  # (the mark's perceptual part, where the index's mark has one and no --threshold is given)
    if not by_margin:  # (before the search: an index that cannot answer says so at once)
        mark = mark_rule(index.metadata, floats, str(index_dir))
        cut, by = mark.threshold, mark.by
        if threshold is None and cut < 0:
            raise InputError(f"{index_dir}: no calibrated same-picture mark ({mark_why(index.metadata)}); give "
                             "--threshold")
        by_margin, by_cosine = by in MARGIN_MARKS, by != "instance"
        hashes = mark if threshold is None else NO_MARK
        if by_margin and threshold is None:
            threshold = cut  # (the pair's margin is the mean of the margins its two searches would mark it by)
            agreeing = 1.0 - mark.instance_threshold if by == "margin_or_instance" else None
    ids = index.ids()
    rep = _representatives(index, ids)
    searched = np.nonzero(rep == np.arange(len(ids)))[0]  # (positions in `ids`)
    others, sims, shares = _candidates(index, transform, ids, searched, floats, progress)
    if by_margin:
        measure, scores = "margin", _margins(searched, rep, others, sims, index_dir)
    else:
        if threshold is not None:
            cut, by_cosine = float(threshold), floats
        measure, scores = ("cosine" if by_cosine else "instance"), sims
        # (an instance mark is a share of bits that may differ: agreeing on at least 1 - cut of them)
        threshold = cut if by_cosine else 1.0 - cut
    if threshold is None:
        threshold = _null_cut(scores, index_dir)
    passes = (scores >= threshold - 1e-12) | (sims >= IDENTICAL)
    if agreeing is not None:
        passes |= shares >= agreeing - 1e-12
        measure = "margin_or_instance"
    if hashes.perceptual_bits:
        passes |= _perceptual_near(index, ids, searched, others, hashes)
    found = Groups(measure=measure, threshold=float(threshold if measure != "instance" else 1.0 - threshold),
                   items=len(ids), instance_threshold=None if agreeing is None else 1.0 - agreeing,
                   perceptual_threshold=hashes.perceptual_threshold if hashes.perceptual_bits else None)
    rows, cols = np.nonzero(passes)
    a, b, s = searched[rows], others[rows, cols], scores[rows, cols]
    tail = np.nonzero(rep != np.arange(len(ids)))[0]  # items sharing a code with more than K others: with its first
    if len(tail):
        alike = _similarity(index, transform, ids, tail, rep[tail], floats)
        # (an item that shares its representative's instance code is 0 bits from it: an instance mark, and a
        # perceptual one, passes it)
        keep = (alike >= IDENTICAL) | (agreeing is not None or hashes.perceptual_bits > 0) | \
            ((alike >= threshold - 1e-12) & (measure not in MARGIN_MARKS))
        a, b, s = np.r_[a, tail[keep]], np.r_[b, rep[tail][keep]], np.r_[s, alike[keep]]
    a, b, s = _each_pair_once(a, b, s)
    found.pairs = len(a)
    found.groups = _grouped(index, ids, a, b, s, min_group)
    return found


class ServedGroups:
    """The groups of copies of a served `Store`'s index (`lbhash serve`'s GET /duplicates), found once per
    state of the index and threshold, and kept: `store.changes` counts the changes the store applied, and
    a search for the groups reads the index under `store.reading()`, so no change lands halfway (a change
    waits for it). One search at a time; the answers of the last KEEP thresholds at the index's state kept
    (a `min_group` above 2 filters the groups kept at 2)."""

    KEEP = 4

    def __init__(self, store, name: str = "the served index"):
        self.store, self.name = store, name
        self._kept: dict[tuple, Groups] = {}  # (store.changes, threshold) -> the groups of at least 2 items
        self._searching = threading.Lock()

    def groups(self, threshold: float | None = None, min_group: int = 2) -> Groups:
        """As `find_duplicates` gives them for the index as it stands (InputError: what it cannot answer)."""
        _check(threshold, min_group)
        if self.store.backend != "faiss":
            raise InputError(f"the {self.store.backend} backend cannot list its items for duplicates; serve an index "
                             "directory (or run lbhash duplicates on one)")
        cut = None if threshold is None else float(threshold)
        found = self._kept.get((self.store.changes, cut))
        if found is None:
            with self._searching, self.store.reading():
                key = (self.store.changes, cut)
                found = self._kept.get(key)  # (found by the search this one waited for)
                if found is None:
                    found = index_groups(self.store.index, self.name, cut)
                    kept = [(k, v) for k, v in self._kept.items() if k[0] == key[0]][-(self.KEEP - 1):]
                    self._kept = {**dict(kept), key: found}  # (an older state's answers are dropped)
        if min_group == 2:
            return found
        return replace(found, groups=[g for g in found.groups if len(g["items"]) >= min_group])


def _each_pair_once(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> tuple:
    """The pairs (a, b) with scores s, each once (the smaller position first, its best score: a pair is found
    from either side), ordered by a, then b."""
    a, b = np.minimum(a, b), np.maximum(a, b)
    order = np.lexsort((-s, b, a))
    a, b, s = a[order], b[order], s[order]
    first = np.ones(len(a), bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[first], b[first], s[first]


def _perceptual_near(index, ids: np.ndarray, searched: np.ndarray, others: np.ndarray, mark) -> np.ndarray:
    """Whether each candidate pair's perceptual hashes pass the mark's perceptual part (as a search marks them:
    lbhash.index.blend.perceptually_near), the rows of `others` (positions in `ids`) CHUNK at a time."""
    near = np.zeros(others.shape, bool)
    for start in range(0, len(searched), CHUNK):
        part = others[start:start + CHUNK]
        theirs = np.where(part >= 0, ids[np.maximum(part, 0)], -1)
        mine = index.get_instance_codes(ids[searched[start:start + CHUNK]])
        near[start:start + len(part)] = perceptually_near(index, mine, theirs, mark)
    return near


def _representatives(index, ids: np.ndarray) -> np.ndarray:
    """Each item's representative (a position in `ids`): itself, or where more than K items share its
    instance code the first of them (the others are not searched: a million copies of a photo would each
    find only their own kind, in buckets of a million)."""
    rep = np.arange(len(ids))
    codes = np.ascontiguousarray(index.get_instance_codes(ids))
    _, first, inverse, counts = np.unique(codes.view(np.dtype((np.void, codes.shape[1]))).ravel(),
                                          return_index=True, return_inverse=True, return_counts=True)
    shared = counts[inverse] > K
    rep[shared] = first[inverse][shared]
    return rep


def _similarity(index, transform, ids: np.ndarray, a: np.ndarray, b: np.ndarray, floats: bool) -> np.ndarray:
    """The similarity of the items at positions `a` and `b` of `ids`, pair by pair, CHUNK at a time."""
    out = np.empty(len(a))

    def fetch(get, at: np.ndarray) -> np.ndarray:  # (the ids repeat: a representative stands for many)
        held, where = np.unique(at, return_inverse=True)
        return get(held)[where]

    for start in range(0, len(a), CHUNK):
        pa, pb = ids[a[start:start + CHUNK]], ids[b[start:start + CHUNK]]
        if floats:
            ra = cosine_rows(transform, scoring_rows(fetch(index.get_embeddings, pa)), kept=True)
            rb = cosine_rows(transform, scoring_rows(fetch(index.get_embeddings, pb)), kept=True)
            out[start:start + len(pa)] = np.einsum("pd,pd->p", ra, rb)
        else:
            ca, cb = fetch(index.get_instance_codes, pa), fetch(index.get_instance_codes, pb)
            out[start:start + len(pa)] = 1.0 - np.unpackbits(ca ^ cb, axis=1).sum(axis=1) / index.instance_bits
    return out


def _candidates(index, transform, ids: np.ndarray, searched: np.ndarray, floats: bool, progress):
    """(positions in `ids` (len(searched), K) of each searched item's nearest other items, -1 where fewer;
    their similarities, float64, -inf where none; the shares of instance bits they agree on, -inf where none),
    a chunk at a time. With float rows, the WIDER x K nearest by instance code, the K most similar of them kept
    (the margin's neighbours are the cosine's)."""
    n, k = len(searched), min(K, max(len(ids) - 1, 1))
    wide, step = (min(WIDER * k, len(ids) - 1), CHUNK // WIDER) if floats else (k, CHUNK)
    others, sims = np.full((n, k), -1, np.int64), np.full((n, k), -np.inf)
    shares = np.full((n, k), -np.inf)
    for start in range(0, n, step):
        part = ids[searched[start:start + step]]
        top = index.instance_search(index.get_instance_codes(part), wide + 1)
        keep = (top.ids >= 0) & (top.ids != part[:, None])
        found, agree = np.full(keep.shape, -np.inf), np.full(keep.shape, -np.inf)
        q, c = np.nonzero(keep)
        agree[q, c] = 1.0 - top.distances[q, c] / index.instance_bits
        if floats:
            held = np.unique(top.ids[q, c])
            mine = cosine_rows(transform, scoring_rows(index.get_embeddings(part)), kept=True)
            theirs = cosine_rows(transform, scoring_rows(index.get_embeddings(held)), kept=True)
            found[q, c] = np.einsum("pd,pd->p", mine[q], theirs[np.searchsorted(held, top.ids[q, c])])
        else:
            found = agree
        best = np.argsort(-found, axis=1, kind="stable")[:, :k]  # (by similarity, then instance distance, id)
        chosen = np.take_along_axis(found, best, axis=1)
        sims[start:start + len(part), :best.shape[1]] = chosen
        shares[start:start + len(part), :best.shape[1]] = np.take_along_axis(agree, best, axis=1)
        at = np.take_along_axis(top.ids, best, axis=1)
        others[start:start + len(part), :best.shape[1]] = np.where(np.isfinite(chosen), np.searchsorted(ids, at), -1)
        if progress is not None:
            progress(min(start + step, n), n)
    return others, sims, shares


def _margins(searched: np.ndarray, rep: np.ndarray, others: np.ndarray, sims: np.ndarray, index_dir: str):
    """Each candidate's similarity less the mean of the two items' NEIGHBOUR-th best other similarity, each
    leaving the other out (a function of the pair's similarity and each item's best: symmetric). Rows: the
    `searched` items; a candidate's best are its representative's (`rep`, both positions in the ids)."""
    if len(rep) < NEIGHBOUR + 2:
        raise InputError(f"{index_dir}: {len(rep)} photos are too few to measure a copy's margin over its neighbours "
                         f"(at least {NEIGHBOUR + 2})")
    ranked = -np.sort(-sims, axis=1)
    kth, after = ranked[:, NEIGHBOUR - 1], ranked[:, NEIGHBOUR]
    row = np.full(len(rep), -1)
    row[searched] = np.arange(len(searched))
    theirs = row[rep[np.maximum(others, 0)]]  # (-1: no candidate; its similarity is -inf)

    def other(rows) -> np.ndarray:  # each row item's NEIGHBOUR-th best, the pair's other left out
        return np.where(sims >= kth[rows], after[rows], kth[rows])

    with np.errstate(invalid="ignore"):
        margins = sims - (other(np.arange(len(searched))[:, None]) + other(theirs)) / 2
    return np.where(np.isfinite(sims), margins, -np.inf)


def _null_cut(margins: np.ndarray, index_dir: str) -> float:
    """The margin's default cut: the items' best margins' median + NULL_Z robust standard deviations."""
    best = margins.max(axis=1)
    best = best[np.isfinite(best)]
    if len(best) < MIN_NULL_ITEMS:
        raise InputError(f"{index_dir}: {len(best)} photos are too few to set the copies' threshold on (at least "
                         f"{MIN_NULL_ITEMS}); give --threshold")
    middle = float(np.median(best))
    return middle + NULL_Z * 1.4826 * float(np.median(np.abs(best - middle)))


def _grouped(index, ids: np.ndarray, a: np.ndarray, b: np.ndarray, s: np.ndarray, min_group: int) -> list[dict]:
    """The connected components of the pairs (positions a, b in `ids`) of at least `min_group` items,
    largest first, each with its items' sources and its strongest pairs."""
    n = len(ids)
    label = _components(n, a, b)
    size = np.bincount(label, minlength=n)
    sources = getattr(index, "folder_sources", None) or read_sources(index)  # (a folder's: a list by id)
    source = (lambda i: sources[i]) if isinstance(sources, list) else \
        (lambda i: None if sources is None else sources.source(i))
    pair_label = label[a]
    groups = []
    for group in np.nonzero(size >= max(min_group, 2))[0]:
        members = ids[label == group]
        inside = np.nonzero(pair_label == group)[0]
        inside = inside[np.lexsort((b[inside], a[inside], -s[inside]))][:GROUP_PAIRS]
        groups.append({"items": members.tolist(), "sources": [source(int(i)) for i in members],
                       "pairs": [[int(ids[a[p]]), int(ids[b[p]]), round(float(s[p]), 6)] for p in inside],
                       "pair_count": int((pair_label == group).sum())})
    groups.sort(key=lambda g: (-len(g["items"]), g["items"][0]))
    return groups


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each of `n` nodes' component (its smallest node) in the graph of edges a-b: each edge hooks the
    larger of its two roots under the smaller, then every node jumps to its root, until no edge joins two
    roots (numpy alone: the service's environment has no SciPy)."""
    label = np.arange(n)
    while True:
        la, lb = label[a], label[b]
        low = np.minimum(la, lb)
        hooked = label.copy()
        np.minimum.at(hooked, la, low)
        np.minimum.at(hooked, lb, low)
        while True:
            jumped = hooked[hooked]
            if np.array_equal(jumped, hooked):
                break
            hooked = jumped
        if np.array_equal(hooked, label):
            return label
        label = hooked
