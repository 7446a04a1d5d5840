"""Training, in memory: it writes no run directory (lbhash.runs does, through the store it gives the
loop). Modules: `config`, `resolve`, `builder`, `processes`, `loop` (`Trainer`), `fit` (the core),
`closed_form`, `selection`, `forward`, `split_codes`, `results`, `prefix_cache`, `summary` and
`timing`.
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run (`lbhash
# encode`, `search --run`) imports lbhash.train.<module> without the training loop, Lightning
# and scikit-learn that these names bring (docs/results/benchmarks.md#start-up)
_HOMES = {"RunConfig": "config", "TrainConfig": "config", "make_config": "config", "resolve_config": "resolve"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
