"""Training: the typed config, one builder, one loop, one encoder, run directories, and the
HashEncoder front door for arrays.

- `config`: TrainConfig (validated, composed of the parts' option sets), RunConfig (resolved),
  config files; `options`: the recipe's and runtime's option sets; `resolve`: `resolve_config`;
- `builder`: the model, objective and experiment of a run (training and loading);
- `processes`: this process's rank, Lightning Fabric, the end of a process group;
- `loop`: the Alg. 1 loop (`Trainer`), in memory, with per-epoch records and an optional store;
- `fit`: the in-memory training core (`prepare`, `train_to_end`, `fit` -> `Trained`);
- `closed_form`: the one fit of the closed-form baselines, recorded as the loop's epochs are;
- `selection`: model selection on the validation share (`select: best-val`, patience);
- `encoder`: model + data -> codes (`encode`) or real outputs (`embed`), on one process or several;
- `run`: `train`, the run directory over the core: a new run, a resumed one, or nothing left;
- `run_training`: opening and training a run directory (`open_run`, `train_open_run`); `write_run`;
- `run_store`: the run directory as the core's store (log lines, checkpoints, best.pt, resume);
- `split_codes`: the codes of a split's query and database, in memory, and codes.npz;
- `run_codes`: the codes of any data with a finished run's model (`encode_run`, `embed_run`);
- `run_metrics`: metrics.json and the manifest of a finished run (`evaluate_run`);
- `rundir`: a run directory's files, lock and manifest, and reading it back (config, log, model);
- `summary`: what a run tells its user (the data line, epoch lines, the result line);
- `run_encoder`: `RunEncoder`, a run's model as an encoder of arrays (load, encode);
- `hash_encoder`: `HashEncoder`, a RunEncoder with fit/transform/save, scikit-learn style;
- `timing`: time per epoch of several configurations, measured side by side.
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run (`lbhash
# encode`, `search --run`) imports lbhash.train.<module> without the training loop, Lightning
# and scikit-learn that these names bring (docs/benchmarks.md#start-up)
_HOMES = {"HashEncoder": "hash_encoder", "RunConfig": "config", "TrainConfig": "config", "build_config": "config",
          "load_config_file": "config", "make_config": "config", "resolve_config": "resolve",
          "train": "run", "evaluate_run": "run_metrics"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
