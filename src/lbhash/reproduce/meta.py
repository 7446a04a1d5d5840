"""meta.json: what data, protocol, seeds and software produced the tables, and how."""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from pathlib import Path

from lbhash._io import write_json


def software_versions() -> dict[str, str]:
    import lightning
    import numpy
    import torch

    from lbhash import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "lightning": lightning.__version__, "lbhash": __version__}


def update_meta(out: Path, experiment: str, spec, ctx, command: str) -> None:
    """Merge this experiment's settings and command line into out/meta.json."""
    path = out / "meta.json"
    meta = json.loads(path.read_text()) if path.is_file() else {}
    several = "several (see the commands)"
    if ctx.data:
        protocol = ctx.protocol or "the data set's default"
        meta["data"] = ctx.data if meta.get("data", ctx.data) == ctx.data else several
        meta["protocol"] = protocol if meta.get("protocol", protocol) == protocol else several
    values = dataclasses.asdict(spec)
    if experiment == "grid":
        meta["seeds"] = list(values["seeds"])
        meta["epochs"] = ctx.overrides.get("epochs", meta.get("epochs", "method default"))
    elif "seeds" in values:  # the other experiments fill them in only where the grid has not
        meta.setdefault("seeds", list(values["seeds"]))
        meta.setdefault("epochs", ctx.overrides.get("epochs", "method default"))
    meta.setdefault("seeds", [])
    meta.setdefault("epochs", "method default")
    meta.setdefault("experiments", {})[experiment] = {"spec": values, "overrides": ctx.overrides}
    meta.setdefault("commands", {})[experiment] = command
    meta["software"] = software_versions()
    meta["created"] = datetime.datetime.now().isoformat(timespec="seconds")
    write_json(path, meta)
