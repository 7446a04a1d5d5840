"""The values the search engine applies where a command leaves an option out, for the help texts that
state them (`lbhash search --help`, `lbhash index build --help`): read from the constants the code
uses, when the help is shown (the search engine loads FAISS, which no other help needs)."""

from __future__ import annotations


def search_default(name: str) -> int:
    """What a search takes for `name` ('k', 'rescore_factor') when a request leaves it out."""
    from lbhash.index.hits import DEFAULT_K
    from lbhash.index.rescore import RESCORE_FACTOR

    return {"k": DEFAULT_K, "rescore_factor": RESCORE_FACTOR}[name]


def index_default(kind: str, name: str, bits: int) -> int:
    """The parameter `name` that an index of `kind` ('ivf', 'multihash') of `bits`-bit codes takes
    when `lbhash index build` leaves it out."""
    from lbhash.index import CodeIndex

    return CodeIndex(bits, kind).params[name]


def index_default_text(kind: str, name: str) -> str:
    """`index_default` as a help text states it: the value, or the values at common code lengths
    where it depends on the length."""
    lengths = (16, 32, 64, 128)
    values = [index_default(kind, name, bits) for bits in lengths]
    if len(set(values)) == 1:
        return str(values[0])
    return "by the code length: " + ", ".join(f"{v} at {b}" + " bits" * (b == lengths[-1])
                                              for v, b in zip(values, lengths))
