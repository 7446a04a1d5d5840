"""Training: the typed config, one builder, one loop, one encoder, run directories, and the
HashEncoder front door for arrays.

- `config`: TrainConfig (validated), config files, `resolve_config`;
- `builder`: the model, objective and experiment of a run (training and loading);
- `loop`: the Alg. 1 loop on Lightning Fabric, with per-epoch metrics, checkpoints, resume;
- `encoder`: model + data -> codes, on one process or several;
- `run`: `train`, the one way to train a run end to end, and its metrics;
- `rundir`: reading a run directory back (config, model, `encode_run`);
- `hash_encoder`: `HashEncoder`, fit/encode/save/load on arrays;
- `timing`: time per epoch of several configurations, measured side by side.
"""

from lbhash.train.config import TrainConfig, build_config, load_config_file, make_config, resolve_config
from lbhash.train.hash_encoder import HashEncoder
from lbhash.train.run import evaluate_run, train

__all__ = ["HashEncoder", "TrainConfig", "build_config", "evaluate_run", "load_config_file",
           "make_config", "resolve_config", "train"]
