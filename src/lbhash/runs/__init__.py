"""Training runs, over the in-memory training core (lbhash.train): a run directory and every job on its
files. `run_dir` (`RunDirectory`: the one way to each file job of a run: train, fit, resume, encode,
export), `run_files` (its files: the lock, manifest, config, log, metrics, `DirectoryStore`),
`train_options` (config files and flags), `metrics` (`lbhash evaluate`, `lbhash centers`), `demo`,
`codes` (the forward pass of encoding), `encoder` (`RunEncoder`: a run's model as an encoder) and
`hash_encoder` (`HashEncoder`). It imports nothing of lbhash.indexes or lbhash.serving, which read a run
only through `lbhash.indexes.index_inputs` (tests/test_architecture.py).
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run imports
# lbhash.runs.<module> without the training loop, Lightning and scikit-learn
_HOMES = {"HashEncoder": "hash_encoder", "RunDirectory": "run_dir"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
