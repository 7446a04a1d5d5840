"""The application layer over the two engines: run directories over the in-memory training
core (lbhash.train), the front doors that read and write them, and what turns runs and raw
inputs into what the search engine (lbhash.index) takes.

Modules: `run` (the one way to train into a run directory), `training`, `store`, `rundir`,
`metrics`, `codes`, `encoder` (`RunEncoder`), `hash_encoder` (`HashEncoder`), `export` (ONNX),
`searcher` (`QueryEncoder`, `Searcher`), `index_dir` (an index directory: build, open, add,
remove, describe), `index_inputs` (what an index is built from) and `origins` (where each
indexed item came from).
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run imports
# lbhash.runs.<module> without the training loop, Lightning and scikit-learn
_HOMES = {"HashEncoder": "hash_encoder", "train": "run", "train_run": "run", "evaluate_run": "metrics"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
