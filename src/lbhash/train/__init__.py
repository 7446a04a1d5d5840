"""Training: the typed config, one builder, one loop, one encoder, run directories, and the
HashEncoder front door for arrays.

- `config`: TrainConfig (validated), config files; `resolve`: `resolve_config`;
- `builder`: the model, objective and experiment of a run (training and loading);
- `processes`: this process's rank, Lightning Fabric, the end of a process group;
- `loop`: the Alg. 1 loop (`Trainer`), in memory, with per-epoch records and an optional store;
- `fit`: the in-memory training core (`prepare`, `train_to_end`, `fit` -> `Trained`);
- `closed_form`: the one fit of the closed-form baselines, recorded as the loop's epochs are;
- `selection`: model selection on the validation share (`select: best-val`, patience);
- `encoder`: model + data -> codes, on one process or several;
- `run`: `train`, the run directory over the core: open the run, then train it; `write_run`;
- `run_store`: the run directory as the core's store (log lines, checkpoints, best.pt, resume);
- `split_codes`: the codes of a split's query and database, in memory;
- `run_codes`: a run's codes: codes.npz at the end of training, `encode_run` afterwards;
- `run_metrics`: metrics.json and the manifest of a finished run (`evaluate_run`);
- `rundir`: a run directory's files, lock and manifest, and reading it back (config, log, model);
- `summary`: what a run tells its user (the data line, epoch lines, the result line);
- `hash_encoder`: `HashEncoder`, fit/transform/encode/save/load on arrays;
- `timing`: time per epoch of several configurations, measured side by side.
"""

from lbhash.train.config import TrainConfig, build_config, load_config_file, make_config
from lbhash.train.resolve import resolve_config
from lbhash.train.hash_encoder import HashEncoder
from lbhash.train.run import train
from lbhash.train.run_metrics import evaluate_run

__all__ = ["HashEncoder", "TrainConfig", "build_config", "evaluate_run", "load_config_file",
           "make_config", "resolve_config", "train"]
