"""Where codes and encoders come from: every call into the training layer is here, so that a change
there is rewired here alone; and the refusal to encode an index's queries with another model
(`check_index_model`).
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
    """The identity of the weights a run encodes with (run_files.model_identity); None for a directory of codes."""
    from lbhash.runs.run_files import CONFIG, model_identity

    return model_identity(run_dir) if (Path(run_dir) / CONFIG).is_file() else None


def check_index_model(metadata: dict | None, index_dir, run_dir: Path | None = None, export_path: Path | None = None,
                      force: bool = False) -> None:
    """Refuse to encode queries for an index with a model other than the one that made its codes:
    their distances would mean nothing. The model is a run directory's or an export's (at most one).

    The refusal names what tells the two models apart (run, method, bits, input kind, epoch), and
    its advice never replaces what the user has. `force` searches anyway with a warning, except
    across input kinds, which is refused. An image export made before exports carried the embedding,
    given for an index that keeps instance codes, is warned of in one line: its searches keep the
    Hamming order (`hamming_only`).
    """
    _check_same_model(metadata, index_dir, run_dir, export_path, force)
    why = None if run_dir is not None or export_path is None else hamming_only(metadata, index_dir, export_path)
    if why is not None:
        import warnings

        from lbhash.errors import LbhashWarning

        warnings.warn(why, LbhashWarning, stacklevel=2)


def hamming_only(metadata: dict | None, index_dir, export_path) -> str | None:
    """Why image searches of the index through `export_path` keep the Hamming order where the run ranks by both
    codes: an export of an image run whose graph outputs the hash layer only (made before exports carried the
    embedding) and an index that keeps instance codes; None otherwise."""
    from lbhash.encoders.exported import read_manifest
    from lbhash.indexes.instance_codes import METADATA_KEY

    manifest = read_manifest(export_path)
    if (manifest.get("input") or {}).get("kind") != "images" or (manifest.get("onnx") or {}).get("embedding") or \
            not isinstance((metadata or {}).get(METADATA_KEY), dict):
        return None
    return (f"{export_path}: this export of an image run outputs the hash layer only (it was made before exports "
            f"carried the embedding), so its image searches of {index_dir} keep the Hamming order instead of ranking "
            "by the class and instance codes as the run does; export the run again (lbhash export RUN --overwrite)")


def _check_same_model(metadata: dict | None, index_dir, run_dir: Path | None, export_path: Path | None,
                      force: bool) -> None:
    recorded, exported = (metadata or {}).get(MODEL_KEY), run_dir is None
    source = export_path if exported else run_dir
    if not isinstance(recorded, dict) or source is None:
        return
    from lbhash.encoders.exported import current_export

    # a run that its current export encodes for (query_encoder) has that export's identity, read without torch
    # (run_model reads the run's config through the training stack)
    own = None if exported else current_export(source)
    now = exported_model(own or source) if exported or own else run_model(source)
    if now is None or now.get("sha256") == recorded.get("sha256"):
        return
    mine, theirs = _input_kind(recorded, metadata), now.get("input_kind")
    if mine and theirs and mine != theirs:
        raise InputError(f"{source}: its model encodes {KIND_WORDS.get(theirs, theirs)} but the codes of {index_dir} "
                         f"are of {KIND_WORDS.get(mine, mine)} ({describe_model(recorded)}); no search can compare "
                         f"them (--force does not apply): {_remedy(recorded, source, index_dir, exported)}")
    what = f"{source}: its model ({describe_model(now)}) did not make the codes of {index_dir} ({describe_model(recorded)})"
    if force:
        import warnings

        from lbhash.errors import LbhashWarning

        warnings.warn(f"{what}; searching anyway (--force): its codes and the index's are not comparable, "
                      "so the hits may mean nothing", LbhashWarning, stacklevel=2)
        return
    raise InputError(f"{what}: {_remedy(recorded, source, index_dir, exported)}, or pass --force")


KIND_WORDS = {"features": "feature rows", "images": "images"}


def _input_kind(recorded: dict, metadata: dict) -> str | None:
    """What the index's model took: recorded with it (indexes since issue 60), else read from the
    data kind the index records (None when neither says)."""
    if recorded.get("input_kind"):
        return str(recorded["input_kind"])
    data = (metadata or {}).get("data")
    if not isinstance(data, str) or data.split(":", 1)[0] == "arrays":
        return None
    return "features" if data.split(":", 1)[0] in _FEATURE_KINDS else "images"


def describe_model(model: dict) -> str:
    """A model as a reader tells it apart: `csq_D 64 bits on images (efficientnet_lite0), epoch 5,
    run /abs/runs/photos`; older records give what they hold (the epoch at least)."""
    parts = []
    if model.get("variant") and model.get("bits"):
        on = f" on {KIND_WORDS.get(model.get('input_kind'), model.get('input_kind'))}" if model.get("input_kind") else ""
        backbone = f" ({model['backbone']})" if model.get("backbone") else ""
        parts.append(f"{model['variant']} {model['bits']} bits{on}{backbone}")
    parts.append(f"epoch {model.get('epoch')}")
    if model.get("run"):
        parts.append(f"run {model['run']}")
    return ", ".join(parts)


def _remedy(recorded: dict, source, index_dir, exported: bool) -> str:
    """Advice that is safe to follow as written: it names the run that built the index, or a
    new index or export under a name nothing holds yet; it never overwrites either."""
    built_by = recorded.get("run")
    if exported:
        if built_by is None:
            return "pass --encoder an export of the run that built the index"
        new = free_name(Path(built_by) / "export")
        return (f"pass --run {built_by} (the run that built it), or export it to a new folder "
                f"(`lbhash export {built_by} --out {new}`) and pass --encoder {new}")
    run = Path(str(source))
    fresh = f"index this run's codes under a new name (`lbhash index build {source} --out {free_name(index_dir, run)}`)"
    if built_by is not None and run.resolve() == Path(built_by):
        return f"the run trained on since the index was built; {fresh}"
    if built_by is None:
        return f"search with the run that built it, or {fresh}"
    return f"search with the run that built it (--run {built_by}), or {fresh}"


def free_name(path, run: Path | None = None) -> str:
    """`PATH-RUNNAME` (or `PATH-new`), with -2, -3, ... until nothing is there: a new index or
    export that replaces nothing."""
    base = f"{path}-{run.name if run is not None and run.name else 'new'}"
    name, n = base, 1
    while Path(name).exists() or Path(f"{name}.wal").exists():
        n += 1
        name = f"{base}-{n}"
    return name


def load_encoder(run_dir: str | Path):
    """The fitted encoder of a trained run (`RunDirectory.encoder`: a RunEncoder)."""
    from lbhash.runs.run_dir import RunDirectory

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    return RunDirectory(run_dir).encoder()


def query_encoder(run_dir: Path | None = None, export_path: Path | None = None):
    """The encoder of the run or else the export given (lbhash.encoders.Encoder); None without either. A
    run's own export encodes for it where it is current (`current_export`): the same codes, without torch."""
    if run_dir is not None:
        from lbhash.encoders.exported import current_export

        own = current_export(run_dir)
        return load_encoder(run_dir) if own is None else load_exported(own)
    return None if export_path is None else load_exported(export_path)


def load_exported(path: str | Path):
    """The encoder of an export, or of a run directory's export (lbhash.encoders.exported.ExportedEncoder)."""
    from lbhash.encoders.exported import ExportedEncoder

    return ExportedEncoder.load(path)


def exported_model(path: str | Path) -> dict | None:
    """The identity of the model an export holds (its run's, as an index records it)."""
    from lbhash.encoders.exported import read_manifest

    manifest = read_manifest(path)
    model = manifest.get("model")
    if not isinstance(model, dict):
        return None
    kind = (manifest.get("input") or {}).get("kind") if isinstance(manifest.get("input"), dict) else None
    return {**model, "input_kind": kind} if kind and not model.get("input_kind") else model


def run_part(run_dir: str | Path, part: str | None = None) -> str:
    """The part of a run an index holds: `part` as given, else "database" (its codes.npz),
    except for a run without a database (protocol all-train: every item trained), whose index
    is every item ("all"). A run with no codes to read is one line naming the fix."""
    run_dir = Path(run_dir)
    if part is not None and part not in PARTS:
        raise InputError(f"--part must be one of {', '.join(PARTS)}, got {part!r}")
    from lbhash.runs.run_files import CODES, CONFIG, MANIFEST, load_run_config

    if part == "all" or (run_dir / CODES).is_file():
        return part or "database"
    if not (run_dir / CONFIG).is_file():
        raise InputError(f"{run_dir}: no codes.npz (not a run directory)")
    if not (run_dir / MANIFEST).is_file():
        raise InputError(f"{run_dir}: no codes.npz (the run has not finished; `lbhash train --out {run_dir} --resume` "
                         "finishes it)")
    protocol = load_run_config(run_dir).dataset.protocol
    if protocol == "all-train" and part is None:
        return "all"
    why = ("protocol all-train has no database part" if protocol == "all-train"
           else "the run trained with test: false, which writes no codes")
    raise InputError(f"{run_dir}: no codes.npz ({why}); index every item of its data, encoded anew, with --part all")


def run_codes(run_dir: str | Path, part: str = "database", data: str | None = None,
              skip_bad_images: bool = False) -> dict:
    """Codes of a run's items: part="database" reads its codes.npz; part="all" encodes every
    item of its data with its model (and gives their embeddings) (`data`: the spec that loads it, `run_data`'s; default the
    run's own; `skip_bad_images`: but its unreadable images). ids are the items' positions in the data set."""
    run_dir = Path(run_dir)
    part = run_part(run_dir, part)
    if part == "all":
        from lbhash.runs.run_dir import RunDirectory

        # the embeddings come from the same forward pass: the index keeps them, and a second pass
        # would run the backbone (or read its cache) again
        encoded = RunDirectory(run_dir).encode(data, "all", progress=False, embeddings=True,
                                               skip_bad_images=skip_bad_images)
        return _checked(run_dir, encoded["bits"], encoded)
    from lbhash.runs.run_files import CODES, verify_files

    path = run_dir / CODES
    verify_files(run_dir, (CODES,))
    codes = load_codes_file(path, need=("db",))
    return _checked(path, codes["bits"], part_fields(codes, "db"))


def run_embeddings(run_dir: str | Path, ids, data: str | None = None):
    """The embeddings an index keeps of a run's items `ids` (lbhash.runs.codes.item_embeddings)."""
    from lbhash.runs.codes import item_embeddings

    return item_embeddings(run_dir, ids, data)


def run_training_items(run_dir: str | Path):
    """The positions in its data of the items a run trained on (its split's train part), int64 ascending."""
    from lbhash.data import load_split
    from lbhash.runs.run_files import SPLIT

    return load_split(Path(run_dir) / SPLIT).train


def run_data(run_dir: str | Path, data: str | None = None, part: str | None = None) -> str | None:
    """The data spec that loads a run's items from here (its index ids are positions in it):
    `data`, the run's data at a new location, checked to hold as many items as the run's; else
    the spec with absolute paths the run recorded (lbhash.runs.run_files.run_data_spec). None for
    a directory that holds codes but no run config. With `part` (an index is built), where the
    data is read (to encode every item, or to record where image items came from) and its path
    is not there, one line names the path and the fix: `--data` with where the data is now."""
    from lbhash.data import absolute_spec, load_data, missing_paths, parse_data_spec
    from lbhash.runs.run_files import CONFIG, read_data_summary, run_data_spec

    if not (Path(run_dir) / CONFIG).is_file():
        if data is not None:
            raise InputError(f"--data applies to a run directory; {run_dir} is not one (no {CONFIG})")
        return None
    if data is None:
        spec = run_data_spec(run_dir)
        kind = parse_data_spec(spec).kind
        missing = missing_paths(spec) if part == "all" or (part and has_sources(spec)) else []
        if missing:
            typed = "" if Path(missing[0]).expanduser().is_absolute() else (
                ", a path relative to where the run trained (runs before issue 60 recorded only that): run this there, "
                "or")
            raise InputError(f"{run_dir}: its data is not at {missing[0]} any more (data {spec}){typed or ';'} if it "
                             f"moved, give its new location with --data {kind}:PATH")
        if part and not missing_paths(spec):
            _same_count(run_dir, spec, read_data_summary(run_dir).get("items"))
        return spec
    missing = missing_paths(data)
    if missing:
        raise InputError(f"--data {data}: {missing[0]}: no such file or directory")
    spec = absolute_spec(data)
    items = read_data_summary(run_dir).get("items")
    found = len(load_data(spec, labels_required=False))
    if isinstance(items, int) and found != items:
        raise InputError(f"--data {data}: {found} items, but {run_dir} trained on {items}: ids are positions in "
                         "the run's data, so --data must be that data (moved), not other data")
    return spec


def _same_count(run_dir, spec: str, items) -> None:
    """A run's own data, read again to index it, holds as many items as when the run trained: a folder that
    grew or shrank would shift the positions that are the index's ids (and the run's split), so that items
    got other items' embeddings and the run's training items were others; refused, saying what it found."""
    from lbhash.data import load_data

    if not isinstance(items, int):
        return
    found = len(load_data(spec, labels_required=False))
    if found != items:
        change = f"{found - items} more" if found > items else f"{items - found} fewer"
        raise InputError(f"{run_dir}: its data {spec} now holds {found} items, {change} than the {items} it trained "
                         "on: ids are positions in the run's data, so an index of it would give items other items' "
                         "embeddings; restore the data as it was, add the new photos to an index of the run "
                         "(`lbhash encode --images`, `lbhash index add`, or POST /items/image), or train again")


def run_class_names(run_dir: str | Path) -> list[str] | None:
    """The class names a run recorded of its data (data.json, runs since issue 60), or None."""
    from lbhash.runs.run_files import read_data_summary

    names = read_data_summary(run_dir).get("class_names")
    return [str(n) for n in names] if isinstance(names, list) else None


_FEATURE_KINDS = ("features", "digits")  # data kinds whose items are feature rows (lbhash.data.spec)


def has_sources(data_spec: str) -> bool:
    """Whether a data set's items are images with a source to record (a file, a member, a row of
    an image array); feature rows have none."""
    return data_spec.split(":", 1)[0] not in (*_FEATURE_KINDS, "arrays")


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
    """One part's codes, bits, ids, labels, sources and embeddings (None: absent), as an index
    takes them."""
    ids = _checks.item_ids(fields["ids"], len(fields["codes"]), f"{where}: ids")
    if bits % 8:
        raise InputError(f"{where}: {bits}-bit codes; indexes hold codes of a multiple of 8 bits")
    return {"codes": fields["codes"], "bits": int(bits), "ids": ids, "labels": fields["labels"],
            "sources": fields["sources"], "embeddings": fields.get("embeddings")}


def run_photos(run_dir: str | Path, spec: str):
    """The image data set of a run's items (`spec`: `run_data`'s), its pixels decoded once where the store
    rule allows: the photos an index's instance code learns from and its mark is calibrated on."""
    from lbhash.data import load_data

    dataset = load_data(spec, labels_required=False)
    dataset.preload(progress=False)
    return dataset


def photo_embedder(run_dir: str | Path):
    """The run's photos-to-embeddings function (lbhash.runs.codes.photo_embedder)."""
    from lbhash.runs.codes import photo_embedder as embedder

    return embedder(run_dir)


def backbone_embedder(name: str, size: int):
    """A pretrained backbone's photos-to-features function, with no run (lbhash.runs.codes.backbone_embedder)."""
    from lbhash.runs.codes import backbone_embedder as embedder

    return embedder(name, size)
