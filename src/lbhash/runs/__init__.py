"""The application layer over the two engines, in two sides that meet in one module.

Run side, over the in-memory training core (lbhash.train): `run_dir` (`RunDirectory`: the one way to each
file job of a run), `run_files` (its files), `train_options` (config files and flags), `metrics`, `demo`,
`codes`, `encoder`, `hash_encoder`. Index side, over the search engine (lbhash.index): `index_dir`,
`index_store` (with `wal`: the live index the service serves), `serving` (what the service asks of the
engines), `uploads` (the images it keeps beside an index), `searcher`, `instance_codes`, `origins`,
`duplicates`, `copies_evaluation`, `instance_learning` and `defaults` (the values searches and indexes take for options left out, which help texts
state). The index side reads a run only through `index_inputs` (tests/test_architecture.py).
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run imports
# lbhash.runs.<module> without the training loop, Lightning and scikit-learn
_HOMES = {"HashEncoder": "hash_encoder", "RunDirectory": "run_dir"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
