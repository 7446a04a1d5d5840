"""lbhash: learning binary hash codes with the lower-bound objective (NeurIPS 2022), and
searching them.

    from lbhash import HashEncoder
    codes = HashEncoder(method="csq", bits=64, lbhash=True).fit(X, y).encode(X_new)

Packages in an order where each imports only packages before it, and only those its row of the
import graph allows (docs/contributing.md; errors, _io, _lazy, arrays, checks, cpus,
labels, limits, options and ranking sit beside codes at the bottom):
codes -> centers -> surrogate -> methods -> models -> data -> encoders -> evaluate -> train -> index -> runs -> reproduce -> service -> cli
"""

__version__ = "0.2.0"

__all__ = ["HashEncoder", "InputError", "__version__"]


def __getattr__(name: str):
    # imported on first use: `import lbhash` stays light (no torch)
    if name == "HashEncoder":
        from lbhash.runs.hash_encoder import HashEncoder

        return HashEncoder
    if name == "InputError":
        from lbhash.errors import InputError

        return InputError
    raise AttributeError(f"module 'lbhash' has no attribute {name!r}")
