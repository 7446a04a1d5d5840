"""lbhash: learning binary hash codes with the lower-bound objective (NeurIPS 2022), and
searching them.

    from lbhash import HashEncoder
    codes = HashEncoder(method="csq", bits=64, lbhash=True).fit(X, y).encode(X_new)

Packages in an order where each imports only packages before it, and only those its row of the
import graph allows (docs/contributing.md; errors, _io, _lazy, arrays, checks, cpus,
labels, limits, options and ranking sit beside codes at the bottom):
codes -> centers -> surrogate -> methods -> models -> data -> encoders -> evaluate -> train -> index -> runs -> indexes -> serving -> reproduce -> service -> cli
"""

from lbhash._lazy import lazy_names

__version__ = "0.2.0"

__all__ = ["HashEncoder", "InputError", "__version__"]

# imported on first use: `import lbhash` stays light (no torch)
__getattr__ = lazy_names(__name__, {"HashEncoder": "runs.hash_encoder", "InputError": "errors"}, globals())[0]
