"""The application layer over the two engines: run directories over the in-memory training
core (lbhash.train), the front doors that read and write them, and what turns runs and raw
inputs into what the search engine (lbhash.index) takes.

- `run`: `train` (and `train_run`), the one way to train into a run directory: a new run, a
  resumed one, or nothing left;
- `training`: opening and training a run directory (`open_run`, `train_open_run`), `write_run`,
  and its codes.npz;
- `store`: the run directory as the core's store (log lines, checkpoints, best.pt, resume);
- `rundir`: a run directory's files, lock and manifest, and reading it back (config, log, model);
- `metrics`: metrics.json and the manifest of a finished run (`evaluate_run`);
- `codes`: the codes of any data with a finished run's model (`encode_run`, with its real outputs
  and embeddings on request);
- `encoder`: `RunEncoder`, a run's model as an encoder of arrays (load, encode);
- `hash_encoder`: `HashEncoder`, a RunEncoder with fit/transform/save, scikit-learn style;
- `export`: a run's model as ONNX (`export_run`);
- `searcher`: raw inputs to a search's `Queries` (`QueryEncoder`), and `Searcher`;
- `index_inputs`: what an index is built from: a run's items, codes, embeddings and model, a
  codes file, and the check that queries use the index's model;
- `origins`: where each indexed item came from, and reading its image back from there.
"""

from lbhash._lazy import lazy_names

# public name -> its module, imported on first use: a command that only reads a run imports
# lbhash.runs.<module> without the training loop, Lightning and scikit-learn
_HOMES = {"HashEncoder": "hash_encoder", "train": "run", "train_run": "run", "evaluate_run": "metrics"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
