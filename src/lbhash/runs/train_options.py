"""The options of a training run as users give and read them (lbhash.train.config declares them and
reads no file): YAML (config files, `--set` values), a TrainConfig from a config file and flags
(`build_config`, which `lbhash train` trains: lbhash.runs.run_dir.train_from_options), what each
option is on the command line and in the docs (`option_schema`), each method's defaults (`methods_text`)."""

from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from lbhash.errors import InputError
from lbhash.methods import available_methods, method_class, method_defaults
from lbhash.methods.options import schedule_text
from lbhash.train.config import FIELDS, OWNERS, SETS, TrainConfig, make_config


class _Aliases(yaml.YAMLError):
    """An anchor or alias where lbhash reads YAML."""


class _Refused(yaml.YAMLError):
    """YAML lbhash reads but refuses: nesting too deep, a key given twice."""


MAX_YAML_BYTES = 1 << 20  # a config file: option: value lines (10,000 deep or 50 MB took the reader down)
MAX_YAML_DEPTH = 32       # lists and mappings inside each other (a config nests two or three)


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 1e-3 (no dot) as a string; read it as the number everyone means. Anchors
    and aliases are refused as they are met, before anything expands them: a config is option:
    value, and 600 bytes of nested aliases ("billion laughs") expand to 9^9 strings, which the
    checks of the values then ran through for minutes. Nesting deeper than MAX_YAML_DEPTH is
    refused as it is met (the composer recurses: 10,000 levels raised RecursionError), and a key
    given twice in one mapping (YAML would keep the last silently)."""

    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Aliases(f"line {event.start_mark.line + 1}")
        if self._depth >= MAX_YAML_DEPTH:
            raise _Refused(f"nested deeper than {MAX_YAML_DEPTH} levels at line {event.start_mark.line + 1}")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _Refused(f"key {key!r} is given twice (lines {seen[key]} and {line})")
                seen[key] = line
            except TypeError:  # an unhashable key: the constructor below refuses it
                continue
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def parse_yaml(text: str, where: str) -> Any:
    """Safe YAML (no tags that build objects, no anchors or aliases); one line naming `where`
    when it is not valid."""
    try:
        return yaml.load(text, Loader=_Loader)
    except _Aliases as err:
        raise InputError(f"{where}: YAML anchors and aliases (&NAME, *NAME) are not accepted ({err}); write "
                         "each value out") from None
    except _Refused as err:
        raise InputError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise InputError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from None


def read_yaml_mapping(path: Path, not_mapping: str) -> dict:
    """The mapping a YAML file holds ({} when empty); one line naming `path` when it cannot be read,
    is not valid YAML, or is not a mapping (`not_mapping` says what it should be)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)  # never more: a 50 MB file took 5.5 GB to parse
        if len(data) > MAX_YAML_BYTES:
            raise InputError(f"{path}: larger than {MAX_YAML_BYTES >> 20} MB; a config holds option: value lines")
        text = data.decode()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read it ({err})") from None
    values = parse_yaml(text, str(path))
    if not isinstance(values if values is not None else {}, dict):
        raise InputError(f"{path}: {not_mapping}")
    return values or {}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config; keys may use '-' or '_'. Unknown keys and bad values are errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    raw = read_yaml_mapping(path, "a config file must be a mapping of option: value")
    out = {str(key).replace("-", "_"): value for key, value in raw.items()}
    make_config(out, str(path))  # every key and value checked here, naming the file
    return out


def build_config(file_values: dict[str, Any] | None = None,
                 flag_values: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, overridden by the config file, overridden by explicit flags (None: not given)."""
    flags = {k: v for k, v in (flag_values or {}).items() if v is not None}
    return make_config({**(file_values or {}), **flags})


@dataclass(frozen=True)
class OptionInfo:
    """An option of TrainConfig as help texts and the docs show it."""
    owner: str  # the option set that declares it: a field of TrainConfig
    declared_by: tuple[str, str]  # that set's class and module
    help: str
    default: str  # on/off, none, required or the value
    kind: Any  # the annotation without None: int, float, bool, str, a Literal (`choices`), ...
    choices: list[str] | None
    cli: bool  # a flag of `lbhash train` (the others have flags of their own: --method-option, ...)


@functools.cache
def option_schema() -> dict[str, OptionInfo]:
    """Every option of TrainConfig by its flat key, in the order config.yaml lists them."""
    schema = {}
    for name in FIELDS:
        owner, field = SETS[OWNERS[name]], SETS[OWNERS[name]].model_fields[name]
        default = field.json_schema_extra.get("shown", field.default)
        if isinstance(default, bool):
            default = "on" if default else "off"
        args = [a for a in typing.get_args(field.annotation) if a is not type(None)]  # X | None: X
        optional = typing.get_origin(field.annotation) in (typing.Union, types.UnionType) and len(args) == 1
        kind = args[0] if optional else field.annotation
        choices = [str(a) for a in typing.get_args(kind)] if typing.get_origin(kind) is Literal else None
        schema[name] = OptionInfo(OWNERS[name], (owner.__name__, owner.__module__.removeprefix("lbhash.")),
                                  field.description, "none" if default is None else str(default), kind, choices,
                                  field.json_schema_extra["cli"])
    return schema


HEADER = ("method", "optimizer", "lr", "weight decay", "schedule", "epochs", "batch", "_D mode",
          "_D objective", "constants")


def _objective(options: dict) -> str:
    """The _D options in a short form, e.g. 'lambda 1, sum, 0 flips, contiguous
    blocks, average target, sum over labels'."""
    text = (f"lambda {options['lbhash_weight']:g}, {options['lbhash_reduction']}, "
            f"{options['surrogate_flips']} flips, {options['block_assignment']} blocks, "
            f"{options['multilabel_target']} target, {options['multilabel_theta']} over labels")
    if options["surrogate_weight_decay"]:
        text += f", surrogate wd {options['surrogate_weight_decay']:g}"
    return text


def _defaults_rows(profile: str) -> list[tuple[str, ...]]:
    """One row per method: its recipe, _D mode and options, and constants."""
    rows = []
    for name in available_methods():
        d = method_defaults(name, profile)
        constants = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.constants.items())
        if method_class(name).closed_form:  # one fit: no optimizer, schedule or _D variant
            rows.append((name, "closed form", "-", "-", "-", "1", "-", "-", "-", constants or "-"))
            continue
        r = d.recipe
        rows.append((name, r.optimizer, f"{r.lr:g}", f"{r.weight_decay:g}", schedule_text(r), str(r.epochs),
                     str(r.batch_size), d.lbhash_mode, _objective(d.lbhash), constants or "-"))
    return rows


def methods_markdown(profile: str) -> str:
    """Each method's defaults under `profile` as a markdown table (docs/methods.md shows them)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in _defaults_rows(profile)]
    return "\n".join(lines)


def methods_text(profile: str) -> str:
    """Each method with its description and defaults under `profile`, as `lbhash methods` lists them."""
    lines = [f"defaults profile: {profile} (every deep method also trains as <method>_D with --lbhash)\n"]
    for name, opt, lr, wd, schedule, epochs, batch, mode, objective, constants in _defaults_rows(profile):
        cls = method_class(name)
        lines.append(f"{name}: {cls.description}")
        if cls.closed_form:
            lines.append(f"    fitted in closed form in one pass ({'supervised' if cls.needs_labels else 'no labels'})"
                         "; no _D variant")
        else:
            lines += [f"    {opt} lr {lr}, weight decay {wd}, lr schedule {schedule}, {epochs} epochs, batch {batch}",
                      f"    _D: {mode} L_theta; {objective}"]
            if cls.finetune_epochs:
                lines.append(f"    fine-tuning a pretrained backbone: {cls.finetune_epochs[0]} probe epochs, then "
                             f"{cls.finetune_epochs[1]} tuning epochs")
        lines.append(f"    constants: {constants}")
        if cls.defaults_source:
            lines.append(f"    source: {cls.defaults_source}")
    return "\n".join(lines)
