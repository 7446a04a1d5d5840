"""Brute-force reference metrics, written from the definitions in docs/evaluation.md and independent of
lbhash: full distance matrices, a full stable sort per query, plain Python loops (or numpy's cumulative
sums, which add in a loop's order)."""

from __future__ import annotations

import itertools

import numpy as np


def multihot(labels, width=None):
    labels = np.asarray(labels)
    if labels.ndim == 2:
        return labels.astype(int)
    width = width or labels.max() + 1
    out = np.zeros((len(labels), width), dtype=int)
    out[np.arange(len(labels)), labels] = 1
    return out


def distances(q, db):
    q, db = np.asarray(q, dtype=np.int64), np.asarray(db, dtype=np.int64)
    return (q.shape[1] - q @ db.T) // 2


def relevance(ql, dl):
    return (ql @ dl.T) > 0


def ap_of_order(rel_in_order):
    """The precision at each relevant position, summed in order (cumsum adds as a loop would), over
    the relevant count."""
    rel = np.asarray(rel_in_order, dtype=bool)
    hits = np.cumsum(rel, dtype=np.int64)
    if not len(rel) or not hits[-1]:
        return 0.0
    precisions = hits[rel] / (np.flatnonzero(rel) + 1)
    return float(np.cumsum(precisions)[-1] / hits[-1])


def average_precision(q, db, ql, dl, topk=None):
    d, rel = distances(q, db), relevance(ql, dl)
    out = []
    for i in range(len(q)):
        order = np.argsort(d[i], kind="stable")[: topk or len(db)]
        out.append(ap_of_order(rel[i][order]))
    return np.array(out)


def tie_orders(dist_row):
    """Every ranking that sorts by distance, over all orders inside tied groups."""
    groups = [np.flatnonzero(dist_row == v) for v in np.unique(dist_row)]
    for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield np.concatenate([np.array(p, dtype=int) for p in perms])


def tie_averaged_ap_exact(dist_row, rel_row, topk=None):
    aps = [ap_of_order(rel_row[o][: topk or len(o)]) for o in tie_orders(dist_row)]
    return float(np.mean(aps))


def tie_averaged_ap_monte_carlo(dist_row, rel_row, topk, draws, rng):
    # each draw orders by (distance, a uniform key): one uint64 per item, the distance's rank above the
    # key's 53 bits, sorted stably (as np.lexsort((keys, dist_row)) orders, in a third of its time)
    rank = np.unique(dist_row, return_inverse=True)[1].astype(np.uint64) << np.uint64(53)
    aps = []
    for _ in range(draws):
        keys = (rng.random(len(dist_row)) * 2.0**53).astype(np.uint64)
        order = np.argsort(rank | keys, kind="stable")[: topk or len(dist_row)]
        aps.append(ap_of_order(rel_row[order]))
    return float(np.mean(aps))


def pr_curve(q, db, ql, dl, bits):
    d, rel = distances(q, db), relevance(ql, dl)
    precision, recall, filled = [], [], []
    for r in range(bits + 1):
        ps, rs, nonempty, with_rel = 0.0, 0.0, 0, 0
        for i in range(len(q)):
            ball = d[i] <= r
            if ball.sum():
                ps += rel[i][ball].sum() / ball.sum()
                nonempty += 1
            if rel[i].sum():
                rs += rel[i][ball].sum() / rel[i].sum()
                with_rel += 1
        precision.append(ps / nonempty if nonempty else np.nan)
        recall.append(rs / with_rel if with_rel else np.nan)
        filled.append(nonempty / len(q))
    return np.array(precision), np.array(recall), np.array(filled)


def precision_within_radius(q, db, ql, dl, radius):
    d, rel = distances(q, db), relevance(ql, dl)
    total, empty = 0.0, 0
    for i in range(len(q)):
        ball = d[i] <= radius
        if ball.sum():
            total += rel[i][ball].sum() / ball.sum()
        else:
            empty += 1
    return total / len(q), empty / len(q)


def precision_at_k(q, db, ql, dl, ks):
    d, rel = distances(q, db), relevance(ql, dl)
    prec, rec = [], []
    for k in ks:
        kk = min(k, len(db))
        ps, rs, with_rel = 0.0, 0.0, 0
        for i in range(len(q)):
            top = np.argsort(d[i], kind="stable")[:kk]
            hits = rel[i][top].sum()
            ps += hits / kk
            if rel[i].sum():
                rs += hits / rel[i].sum()
                with_rel += 1
        prec.append(ps / len(q))
        rec.append(rs / with_rel if with_rel else np.nan)
    return np.array(prec), np.array(rec)


def knn_accuracy(q, db, ql, dl, k):
    d = distances(q, db)
    correct = 0
    for i in range(len(q)):
        top = np.argsort(d[i], kind="stable")[: min(k, len(db))]
        votes, spread = {}, {}
        for j in top:
            for c in np.flatnonzero(dl[j]):
                votes[c] = votes.get(c, 0) + 1
                spread[c] = spread.get(c, 0) + d[i, j]
        if not votes:  # neighbours without labels: no prediction, counted wrong
            continue
        # most votes, then smallest summed distance, then smallest class id
        pred = min(votes, key=lambda c: (-votes[c], spread[c], c))
        correct += int(ql[i, pred] > 0)
    return correct / len(q)


def lower_bound(codes, labels, percentile):
    codes = np.asarray(codes)
    classes = [c for c in range(labels.shape[1]) if labels[:, c].any()]
    centers = {}
    for c in classes:
        members = codes[labels[:, c] > 0]
        centers[c] = np.where(members.sum(axis=0) >= 0, 1, -1)  # majority, ties -> +1
    inter = [int(np.sum(centers[a] != centers[b])) for a, b in itertools.combinations(classes, 2)]
    intra = [int(np.sum(codes[i] != centers[c])) for i in range(len(codes))
             for c in classes if labels[i, c]]
    lo = np.percentile(inter, 100 - percentile)
    hi = np.percentile(intra, percentile)
    return lo, hi
