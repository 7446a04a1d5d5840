"""meta.json: each experiment's own settings and command line, and the software that ran them.

Format 2: {"format": 2, "software": {...}, "created": "...", "experiments": {"grid": {"data": ...,
"protocol": ..., "seeds": [...], "epochs": ..., "command": "...", "spec": {...}, "overrides": {...}}}};
an experiment records only the settings it has, and a study is keyed "study:NAME". Older files
are read into the same shape by `read_meta`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbhash._io import write_json
from lbhash.errors import InputError

META_FILE = "meta.json"
FORMAT = 2
DEFAULT_PROTOCOL = "the data set's default"
METHOD_DEFAULT = "method default"
SETTINGS = ("data", "protocol", "seeds", "epochs")  # the per-experiment settings the report shows
NO_EXPERIMENT = "all tables"  # an old file that names no experiment: its settings cover the directory


@dataclass
class Meta:
    """meta.json read and checked: experiment key -> its record (every key optional)."""

    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    software: dict[str, str] = field(default_factory=dict)
    created: str = ""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None


def software_versions() -> dict[str, str]:
    import lightning_fabric
    import numpy
    import torch

    from lbhash import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "lightning": lightning_fabric.__version__, "lbhash": __version__}


def experiment_settings(spec: dict, overrides: dict, data: str | None, protocol: str | None) -> dict:
    """The settings an experiment has: data, protocol and epochs when it trains on data (`data`
    given), seeds when its spec has seeds or a seed."""
    out: dict[str, Any] = {}
    if data:
        out["data"] = data
        out["protocol"] = protocol or DEFAULT_PROTOCOL
    if "seeds" in spec:
        out["seeds"] = list(spec["seeds"])
    elif "seed" in spec:
        out["seeds"] = [spec["seed"]]
    if data:  # timing's spec holds the epochs it measures; training runs take --epochs / --set
        out["epochs"] = spec["epochs"] if "epochs" in spec else overrides.get("epochs", METHOD_DEFAULT)
    return out


def update_meta(out: Path, experiment: str, spec, ctx, command: str) -> None:
    """Record this experiment's settings and command line in out/meta.json (others are kept)."""
    path = out / META_FILE
    meta = read_meta(path) if path.is_file() else Meta()
    values = dataclasses.asdict(spec)
    meta.experiments.pop(experiment, None)  # a rerun moves to the end, in the order run
    meta.experiments[experiment] = {**experiment_settings(values, ctx.overrides, ctx.data, ctx.protocol),
                                    "command": command, "spec": values, "overrides": dict(ctx.overrides)}
    write_json(path, {"format": FORMAT, "experiments": meta.experiments, "software": software_versions(),
                      "created": datetime.datetime.now().isoformat(timespec="seconds")})


def read_meta(path: Path) -> Meta:
    """meta.json of any version, checked; a problem is one InputError naming the file and key."""
    if not path.is_file():
        raise InputError(f"{path}: no such file (a results directory needs {META_FILE})")
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a JSON object")
    missing = [k for k in ("software", "created") if k not in raw]
    if missing:
        raise InputError(f"{path}: missing key(s) {', '.join(missing)}")
    _check_type(path, "software", raw["software"], dict)
    _check_type(path, "created", raw["created"], str)
    version = raw.get("format", 1)
    if version == FORMAT:
        if "experiments" not in raw:
            raise InputError(f"{path}: missing key(s) experiments")
        experiments = raw["experiments"]
        _check_type(path, "experiments", experiments, dict)
    elif version == 1:
        experiments = _from_format_1(path, raw)
    else:
        raise InputError(f"{path}: unknown format {version!r} (this lbhash reads 1 and {FORMAT})")
    for key, record in experiments.items():
        _check_record(path, f"experiments.{key}", record)
    return Meta(dict(experiments), dict(raw["software"]), raw["created"])


def _from_format_1(path: Path, raw: dict) -> dict[str, dict]:
    """Per-experiment records from an old file: its top-level data and protocol go to every
    experiment but the toy; seeds and epochs come from each experiment's spec where recorded,
    else the top-level ones are the grid's."""
    top = {k: raw[k] for k in SETTINGS if k in raw}
    _check_record(path, "", top)
    commands, specs = raw.get("commands", {}), raw.get("experiments", {})
    _check_type(path, "commands", commands, dict)
    _check_type(path, "experiments", specs, dict)
    if not commands and not specs:
        return {NO_EXPERIMENT: top} if top else {}
    out = {}
    for key in dict.fromkeys([*specs, *commands]):
        recorded = specs.get(key, {})
        _check_type(path, f"experiments.{key}", recorded, dict)
        for part in ("spec", "overrides"):
            _check_type(path, f"experiments.{key}.{part}", recorded.get(part, {}), dict)
        data = None if key == "toy" else top.get("data")
        protocol = top.get("protocol")
        if "spec" in recorded:
            record = experiment_settings(recorded["spec"], recorded.get("overrides", {}), data, protocol)
        else:
            record = {k: v for k, v in top.items() if key != "toy" and (key == "grid" or k in ("data", "protocol"))}
        out[key] = {**record, **recorded, **({"command": commands[key]} if key in commands else {})}
    return out


def _check_record(path: Path, where: str, record) -> None:
    _check_type(path, where, record, dict)
    prefix = f"{where}." if where else ""
    for key in ("data", "protocol", "command"):
        if key in record:
            _check_type(path, prefix + key, record[key], str)
    seeds = record.get("seeds", [])
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise InputError(f"{path}: '{prefix}seeds' must be a list of integers, got {seeds!r}")
    epochs = record.get("epochs", METHOD_DEFAULT)
    if isinstance(epochs, bool) or not isinstance(epochs, (int, str)):
        raise InputError(f"{path}: '{prefix}epochs' must be an integer or {METHOD_DEFAULT!r}, got {epochs!r}")


def _check_type(path: Path, key: str, value, kind: type) -> None:
    if not isinstance(value, kind):
        what = {dict: "a JSON object", str: "a string"}[kind]
        raise InputError(f"{path}: '{key}' must be {what}, got {value!r}")
