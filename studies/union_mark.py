"""The mark by either of two calibrated measures (issue 86; built since as the `margin_or_instance` mark), against
each alone. On an index whose
calibration record holds usable thresholds of both the cosine's margin and the instance distance, each copy of
`lbhash evaluate-copies`' sample is searched in the default order twice, marked by each measure alone (its
calibrated threshold, as `lbhash.instance.mark_rule` applies it), and marked by the union; then again with the
sample's originals taken out of the index (every mark there is false unless the data holds the picture twice).

    python studies/union_mark.py IDX RUN --seed S

Prints, per edit, the share of first hits that are the original and marked by the margin, the instance
distance and either, the marked first hits that are not the original, and the marks with the originals out.
"""

from __future__ import annotations

import copy

import numpy as np


def main() -> None:
    from lbhash.instance import MARK_BY, MARK_KEY
    from lbhash.serving.copies_evaluation import ranked

    from false_marks import evaluation_sample

    _, index, copies, absent = evaluation_sample(__doc__.splitlines()[0])
    record = index.metadata[MARK_KEY]

    def first(where, by: str, queries):  # (first hit, marked) with the mark by `by` alone
        saved = where.metadata
        where.metadata = copy.deepcopy(saved)
        where.metadata[MARK_KEY] = {**{m: record[m] for m in MARK_BY if m in record}, **record[by], "mark": by}
        try:
            ids, marks = ranked(where, queries, "blend", 1)
        finally:
            where.metadata = saved
        return ids[:, 0], marks[:, 0]

    print({m: (round(record[m]["threshold"], 4), round(record[m]["recall"], 3)) for m in MARK_BY if m in record})
    union = []
    for edit, queries in copies.queries.items():
        ids, by_margin = first(index, "margin", queries)
        by_instance = first(index, "instance", queries)[1]
        right, either = ids == copies.ids, by_margin | by_instance
        out = first(absent, "margin", queries)[1] | first(absent, "instance", queries)[1]
        union.append(float(np.mean(right & either)))
        print(f"{edit}: margin {np.mean(right & by_margin):.3f}, instance {np.mean(right & by_instance):.3f}, either "
              f"{union[-1]:.3f}; marked not the original {int((either & ~right).sum())}; originals out, marked "
              f"{int(out.sum())}")
    print(f"either, mean over the edits: {np.mean(union):.3f}")


if __name__ == "__main__":
    main()
