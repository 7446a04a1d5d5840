"""The unseen-class protocol `unseen:K[:BASE]` (Sablayrolles et al., ICASSP 2017: on the usual
protocols supervised hashing reduces to classification; judge it on classes left out of
training).

K classes, drawn by the seed, are held out. The BASE protocol (the data set's own when not
named) is drawn first; then its training items of the other classes train, its query and
database items of the held-out classes are the query and database (the headline numbers),
and its query and database items of the training classes form a second, seen-class
evaluation (`seen_query`, `seen_database`). Training items of held-out classes are not used.
"""

from __future__ import annotations

import re

import numpy as np

from lbhash.errors import InputError

PREFIX = "unseen:"
_UNSEEN = re.compile(r"^unseen:(\d+)(?::(.+))?$")
FORMS = "unseen:K or unseen:K:BASE (K held-out classes; BASE a protocol, default the data set's)"


def parse_unseen(text: str) -> tuple[int, str | None]:
    """(K, base protocol or None) of 'unseen:K[:BASE]'."""
    m = _UNSEEN.match(text)
    if m is None:
        raise InputError(f"protocol {text!r}: expected {FORMS}")
    k, base = int(m.group(1)), m.group(2)
    if k < 1:
        raise InputError(f"protocol {text!r}: K (held-out classes) must be at least 1, got {k}")
    if base is not None and base.startswith(PREFIX):
        raise InputError(f"protocol {text!r}: the base protocol cannot itself be unseen:")
    return k, base


def with_base(protocol: str, base: str) -> str:
    """'unseen:K' completed with the base protocol `base` (other protocols unchanged)."""
    if protocol.startswith(PREFIX) and parse_unseen(protocol)[1] is None:
        return f"{protocol}:{base}"
    return protocol


def class_label(c: int, class_names) -> str:
    return f"class {c}" + (f" ({class_names[c]!r})" if class_names is not None else "")


def held_out_classes(num_classes: int, k: int, seed: int, protocol: str) -> np.ndarray:
    """The K held-out class ids (sorted), drawn from the seed alone."""
    if k >= num_classes:
        raise InputError(f"protocol {protocol!r}: K={k} held-out classes leaves no training class "
                         f"(the data has {num_classes}); K must be below {num_classes}")
    chosen = np.random.default_rng([seed, 23]).choice(num_classes, size=k, replace=False)
    return np.sort(chosen).astype(np.int64)


def unseen_parts(labels: np.ndarray, base, spec, seed: int, name: str, class_names=None) -> dict[str, np.ndarray]:
    """The parts of the unseen split `spec` (a ProtocolSpec: its `held_out` classes) from the parts of
    its `base` split (a Split; database order kept). Both types are lbhash.data.protocols', which
    imports this module: they are not imported back."""
    train, query, database = base.train, base.query, base.database
    k, protocol = spec.held_out, spec.name
    per_item = labels.sum(1)
    if (per_item != 1).any():
        raise InputError(f"protocol {protocol!r} holds out whole classes and needs single-label data; "
                         f"{int((per_item != 1).sum())} items of {name} have no label or several")
    ids = labels.argmax(1)
    unseen = held_out_classes(labels.shape[1], k, seed, protocol)
    is_unseen = np.isin(ids, unseen)
    parts = {"train": train[~is_unseen[train]], "query": query[is_unseen[query]],
             "database": database[is_unseen[database]], "seen_query": query[~is_unseen[query]],
             "seen_database": database[~is_unseen[database]], "unseen_classes": unseen}

    for c in range(labels.shape[1]):
        held = c in unseen
        needs = ("query", "database") if held else ("train",)
        for part in needs:
            if not (ids[parts[part]] == c).any():
                kind = "held-out" if held else "training"
                raise InputError(f"protocol {protocol!r}: {kind} {class_label(c, class_names)} of {name} has no "
                                 f"{part} item in the base split; it has too few items for this protocol")
    return parts
