"""Training, in memory: the typed config, one builder, one loop, one forward loop over items
(`forward`). It writes no run directory (lbhash.runs does, through the store it gives the loop).

- `config`: TrainConfig (validated, one field per part's option set), RunConfig (resolved),
  config files, the runtime's option set; `resolve`: `resolve_config`;
- `builder`: the model, objective and experiment of a run (training and loading);
- `processes`: this process's rank, Lightning Fabric, the end of a process group;
- `loop`: the Alg. 1 loop (`Trainer`), in memory, with per-epoch records and an optional store;
- `fit`: the in-memory training core (`prepare`, `train_to_end`, `fit` -> `Trained`);
- `closed_form`: the one fit of the closed-form baselines, recorded as the loop's epochs are;
- `selection`: model selection on the validation share (`select: best-val`, patience);
- `encoder`: model + data -> codes (`encode`) or real outputs (`embed`), on one process or several;
- `split_codes`: the codes of a split's query and database, in memory;
- `results`: what a training returns (`Fitted`) and its metrics (`run_metrics`);
- `prefix_cache`: the frozen stages' activations computed once (`train_stages` without crops);
- `summary`: what a run tells its user (the data line, epoch lines, the result line);
- `timing`: time per epoch of several configurations, measured side by side.
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run (`lbhash
# encode`, `search --run`) imports lbhash.train.<module> without the training loop, Lightning
# and scikit-learn that these names bring (docs/benchmarks.md#start-up)
_HOMES = {"RunConfig": "config", "TrainConfig": "config", "build_config": "config",
          "load_config_file": "config", "make_config": "config", "resolve_config": "resolve"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
