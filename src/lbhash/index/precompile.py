"""Compile the searches' numba kernels (lbhash.ranking, lbhash.index._lookup_kernel, _blend_kernel) into
numba's cache beside the package, for every type they are called with: codes packed in 8-, 16-, 32- or
64-bit words, in memory or read-only (an index's memory-mapped segments are), so that neither a user's
first search nor a fresh clone's test run waits for the compiler (seconds a kernel, about a minute for the
29 signatures; docs/results/test-suite.md).

`make install` runs `python -m lbhash.index.precompile` (and `python -m lbhash.evaluate.report` for the
metrics'). A kernel called with a type not listed here still works: it compiles on its first call, once.
"""

from __future__ import annotations

from numba import types

_WORDS = (types.uint8, types.uint16, types.uint32, types.uint64)


def _array(dtype, ndim: int, readonly: bool = False) -> types.Array:
    return types.Array(dtype, ndim, "C", readonly=readonly)


def signatures() -> dict[str, list[tuple]]:
    """The argument types each kernel is compiled for, by kernel name."""
    i32, i64, u16, u64, f64 = types.int32, types.int64, types.uint16, types.uint64, types.float64
    flat_rows, nearest, union = [], [], []
    for word in _WORDS:  # (the class code's word: the instance code is read in 64-bit words)
        for readonly in (False, True):
            flat_rows.append((_array(word, 1), _array(word, 2, readonly), _array(u16, 1)))
            nearest.append((_array(word, 2), _array(word, 2, readonly), _array(types.boolean, 1), i64,
                            _array(i64, 2), _array(i32, 2)))
            union.append((_array(word, 2), _array(word, 2, readonly), _array(u64, 2), _array(u64, 2, readonly),
                          _array(i64, 2), _array(i64, 2), _array(i32, 3)))
    lookup, cosines = [], []
    for readonly in (False, True):
        lookup.append((_array(u64, 2), _array(types.uint8, 2), _array(i64, 2), _array(i32, 2),
                       _array(u64, 2, readonly), i64, _array(types.boolean, 1), _array(i64, 1),
                       _array(i64, 2), _array(i32, 2)))
        cosines.append((_array(u16, 2, readonly), _array(i64, 2), _array(f64, 2), _array(f64, 1),
                        types.boolean, _array(f64, 2)))
    out = types.Tuple((_array(f64, 2), _array(i32, 2), _array(i32, 2), _array(i64, 2),
                       _array(types.boolean, 2)))
    found = types.Tuple((_array(i64, 2), _array(i32, 2), _array(i32, 2), _array(f64, 2), _array(types.boolean, 2)))
    ranked = [(found, _array(f64, 1), types.Tuple((i64, i64, f64, i64, i64, i64, f64)), out)]
    return {
        "fill_distances": [(_array(u64, 1), _array(u64, 2), _array(u16, 1))],
        "fill_distances_rows": flat_rows,
        "nearest_rows_chunk": nearest,
        "_guess_cutoff": [(_array(u16, 1), i64, _array(i64, 1))],
        "_collect_within": [(_array(u16, 1), i64, _array(u64, 1), _array(position, 1)) for position in (i32, i64)],
        "rank_distances": [(_array(u16, 1), i64, _array(i64, 1), _array(u64, 1), _array(position, 1),
                            _array(i64, 1), _array(i64, 1)) for position in (i32, i64)],
        "lookup_knn": lookup,
        "union_distances": union,
        "candidate_cosines": cosines,
        "ranked_top": ranked,
    }


def kernels() -> dict:
    """The kernels `signatures` names, by name."""
    from lbhash import ranking
    from lbhash.index import _blend_kernel, _lookup_kernel

    return {name: getattr(module, name) for module in (ranking, _lookup_kernel, _blend_kernel)
            for name in signatures() if hasattr(module, name)}


def precompile() -> int:
    """Compile (or load from numba's cache) every kernel for every signature; the number compiled."""
    found, count = kernels(), 0
    for name, sigs in signatures().items():
        for sig in sigs:
            found[name].compile(sig)
            count += 1
    return count


if __name__ == "__main__":
    precompile()
