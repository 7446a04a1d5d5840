"""The application layer over the two engines: run directories over the in-memory training core
(lbhash.train), their front doors, and what turns runs and raw inputs into what the search engine
(lbhash.index) takes. Modules: `run_dir` (`RunDirectory`: the one way to each file job of a run), `training`,
`rundir`, `train_options` (config files and flags), `metrics`, `demo`, `codes`, `encoder`, `hash_encoder`,
`searcher`, `index_dir`, `index_store` (with `wal`: the live index the service serves), `serving` (what the service asks of the engines), `uploads`
(the images it keeps beside an index), `index_inputs`, `origins` and `defaults` (the values searches and indexes take
for options left out, which help texts state).
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run imports
# lbhash.runs.<module> without the training loop, Lightning and scikit-learn
_HOMES = {"HashEncoder": "hash_encoder", "RunDirectory": "run_dir"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
