"""Where codes and encoders come from. Every call into the training layer is in this module,
so that a change there is rewired here alone.

- `load_encoder(run_dir)`: a run's torch model as an encoder (lbhash.encoders.Encoder), and
  `load_exported(path)`: an export's (ONNX Runtime, no torch).
- `run_codes(run_dir, part)`: the codes, ids and labels of a run's items.
- `codes_file(path)`: the codes, ids, labels and sources of a codes file (lbhash.codes_file):
  `lbhash encode`'s output, or a run's codes.npz (its database).
- `run_model(run_dir)` and `check_index_model(metadata, source, index_dir, force, exported)`: the
  model an index's codes came from (recorded by `lbhash index build`), and the refusal to encode
  queries for that index with another model (a run's, or an export's: `exported_model(path)`).
"""

from __future__ import annotations

from pathlib import Path

from lbhash.codes_file import load_codes_file, only_part
from lbhash.codes_file import part as part_fields
from lbhash.errors import InputError
from lbhash.index import _checks

PARTS = ("database", "all")
MODEL_KEY = "model"  # in an index's metadata: the run's model_identity at build time


def run_model(run_dir: str | Path) -> dict | None:
    """{"file", "sha256", "epoch"} of the weights a run encodes with; None for a directory
    that holds codes but no trained run."""
    from lbhash.train.rundir import CONFIG, model_identity

    return model_identity(run_dir) if (Path(run_dir) / CONFIG).is_file() else None


def check_index_model(metadata: dict, source: str | Path, index_dir, force: bool = False,
                      exported: bool = False) -> None:
    """Refuse to encode queries for an index with a model other than the one that made its
    codes: their distances would mean nothing (an item's own image far from itself). `source`
    is a run directory, or with `exported` an export (lbhash export). Indexes built from a codes
    file, or before lbhash recorded the model, have nothing to compare."""
    recorded = (metadata or {}).get(MODEL_KEY)
    if force or not isinstance(recorded, dict):
        return
    now = exported_model(source) if exported else run_model(source)
    if now is not None and now.get("sha256") != recorded.get("sha256"):
        remedy = ("export the run that built it again (`lbhash export RUN_DIR --overwrite`)" if exported else
                  f"rebuild the index with `lbhash index build {source} --out {index_dir} --overwrite`")
        raise InputError(f"{source}: its model ({now.get('file')}, epoch {now.get('epoch')}) did not make the codes of "
                         f"{index_dir} (epoch {recorded.get('epoch')}): {remedy}, or pass --force")


def load_encoder(run_dir: str | Path):
    """The fitted encoder of a trained run (lbhash.train.run_encoder.RunEncoder: HashEncoder's
    attributes and `encode`, without scikit-learn or the training loop)."""
    from lbhash.train.run_encoder import RunEncoder

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    return RunEncoder.load(run_dir)


def load_exported(path: str | Path):
    """The encoder of an export (lbhash.encoders.exported.ExportedEncoder: ONNX Runtime and
    numpy, no torch): an export directory, or a run directory holding one (RUN_DIR/export)."""
    from lbhash.encoders.exported import ExportedEncoder

    return ExportedEncoder.load(path)


def exported_model(path: str | Path) -> dict | None:
    """The identity of the model an export holds (its run's, as an index records it)."""
    from lbhash.encoders.exported import read_manifest

    model = read_manifest(path).get("model")
    return model if isinstance(model, dict) else None


def run_codes(run_dir: str | Path, part: str = "database") -> dict:
    """Codes of a run's items: part="database" reads its codes.npz; part="all" encodes
    every item of its data with its model. ids are the items' positions in the data set."""
    run_dir = Path(run_dir)
    if part not in PARTS:
        raise InputError(f"--part must be one of {', '.join(PARTS)}, got {part!r}")
    if part == "database":
        from lbhash.train.rundir import CODES, verify_files

        path = run_dir / CODES
        if not path.is_file():
            raise InputError(f"{run_dir}: no codes.npz (not a finished run directory)")
        verify_files(run_dir, (CODES,))
        data = load_codes_file(path, need=("db",))
        return _checked(path, data["bits"], part_fields(data, "db"))
    from lbhash.train.run_codes import encode_run

    encoded = encode_run(run_dir, None, "all", progress=False)
    return _checked(run_dir, encoded["bits"], encoded)


def run_data(run_dir: str | Path) -> str | None:
    """The data spec a run trained on (its index ids are positions in that data); None for a
    directory that holds codes but no run config."""
    from lbhash.train.rundir import CONFIG, load_run_config

    return load_run_config(run_dir).data if (Path(run_dir) / CONFIG).is_file() else None


def item_sources(data_spec: str, ids) -> list[str | None]:
    """Where items of a data set came from (its file or archive member), by position; None
    for ids past its end (items added later) and for data without sources (feature rows)."""
    from lbhash.data import DATA_KINDS, load_data, parse_data_spec

    ids = [int(i) for i in ids]
    if not DATA_KINDS[parse_data_spec(data_spec).kind].item_sources:  # feature rows: nothing to load
        return [None] * len(ids)
    dataset = load_data(data_spec, labels_required=False)
    inside = [i for i in ids if 0 <= i < len(dataset)]
    found = dataset.item_sources(inside) if inside else None
    where = {} if found is None else dict(zip(inside, found.tolist()))
    return [where.get(i) for i in ids]


def codes_file(path: str | Path) -> dict:
    """The items of a codes file (lbhash.codes_file): its database part, or its only part."""
    data = load_codes_file(path, need=())
    return _checked(path, data["bits"], part_fields(data, only_part(data, "db", path)))


def _checked(where, bits: int, fields: dict) -> dict:
    """One part's codes, bits, ids, labels and sources, as an index takes them."""
    ids = _checks.item_ids(fields["ids"], len(fields["codes"]), f"{where}: ids")
    if bits % 8:
        raise InputError(f"{where}: {bits}-bit codes; indexes hold codes of a multiple of 8 bits")
    return {"codes": fields["codes"], "bits": int(bits), "ids": ids, "labels": fields["labels"],
            "sources": fields["sources"]}
