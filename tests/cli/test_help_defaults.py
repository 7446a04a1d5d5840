"""Every default a command's help states is the value the code applies (issue 68, item 7):
`lbhash search --help` said `[default: 16]` for --rescore-factor while searches re-scored the top
k x 4 (`RESCORE_FACTOR`). The help of every command is read, each stated default is checked
against the constant the code uses, and a stated default with a number that this file does not
know fails, so that a new literal cannot slip in beside a constant."""

import inspect
import re

import click
import pytest
from click.testing import CliRunner

from lbhash.cli import main

STATED = re.compile(r"\[default: ([^\]]*)\]")
RANGE = re.compile(r";\s*[-\d.]*\s*<?=?\s*x\s*[<>]?=?\s*[-\d.]*$")  # click's "; x>=1", "; 0<=x<=65535"


def every_command(group=main, path=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from every_command(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def stated_defaults():
    """(command, option's first flag, the option, its help's stated default) of every option whose
    help states one, as `--help` prints it (the help record)."""
    for name, command in every_command():
        ctx = click.Context(command, info_name=name)
        for param in command.params:
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            found = STATED.search(record[1]) if record else None
            if found:
                yield name, param.opts[0], param, RANGE.sub("", found.group(1)).strip()


def expected_defaults() -> dict[tuple[str, str], str]:
    """What the help must state, read from the code's constants (and the functions that apply them)."""
    from lbhash.data import MIN_NATIVE_SIDE
    from lbhash.evaluate import evaluate_codes
    from lbhash.index import CodeIndex
    from lbhash.index.hits import DEFAULT_K
    from lbhash.index.rescore import RESCORE_FACTOR
    from lbhash.methods import method_defaults
    from lbhash.reproduce.experiments.registry import EXPERIMENTS
    from lbhash.train.resolve import DEFAULT_FEATURE_HIDDEN, DEFAULT_IMAGE_BACKBONE

    ivf, multihash = (CodeIndex(64, kind).params for kind in ("ivf", "multihash"))
    nhash = ", ".join(f"{CodeIndex(bits, 'multihash').params['nhash']} at {bits}" for bits in (16, 32, 64, 128))
    evaluate = {name: p.default for name, p in inspect.signature(evaluate_codes).parameters.items()}
    recommended, paper, benchmark = (method_defaults("csq", profile).recipe for profile in
                                     ("recommended", "paper", "benchmark"))
    assert paper.eval_every == benchmark.eval_every and paper.validation == benchmark.validation
    from lbhash.instance import (INSTANCE_BITS, LOOKS_LIKE, LOOKS_LIKE_APART, LOOKS_LIKE_CODES, LOOKS_LIKE_CODES_LEARNED,
                                 LOOKS_LIKE_LEARNED)
    from lbhash.serving.copies_evaluation import evaluate_copies

    looks_like = (f"{LOOKS_LIKE_LEARNED} with float rows of a learned instance code, {LOOKS_LIKE} with other float "
                  f"rows, {LOOKS_LIKE_CODES_LEARNED} with a learned instance code alone, {LOOKS_LIKE_CODES} with another, "
                  f"raised query by query up to {LOOKS_LIKE_APART} where a query's look-alikes do not share its class code")

    duplicates = {name: p.default for name, p in inspect.signature(evaluate_copies).parameters.items()}
    return {
        ("search", "-k"): str(DEFAULT_K),
        ("search", "--looks-like"): looks_like,
        ("index build", "--instance-bits"): str(INSTANCE_BITS),
        ("evaluate-copies", "--items"): str(duplicates["items"]),
        ("evaluate-copies", "--seed"): str(duplicates["seed"]),
        ("evaluate-copies", "--looks-like"): looks_like,
        ("evaluate-copies", "--edits"): ",".join(duplicates["edits"]),
        ("evaluate-copies", "--factor"): str(duplicates["factor"]),
        ("search", "--rescore-factor"): str(RESCORE_FACTOR),
        ("index build", "--nlist"): str(ivf["nlist"]),
        ("index build", "--nprobe"): str(ivf["nprobe"]),
        ("index build", "--nhash"): f"by the code length: {nhash} bits",
        ("index build", "--nflip"): str(multihash["nflip"]),
        ("evaluate", "--ks"): ",".join(map(str, evaluate["ks"])),
        ("evaluate", "--radius"): str(evaluate["radius"]),
        ("evaluate", "--knn"): str(evaluate["knn"]),
        ("evaluate", "--percentile"): str(evaluate["percentile"]),
        ("reproduce", "--seeds"): "0..4 for grid, 0..2 for centers and baselines, 0..1 for study"
        if [EXPERIMENTS[n].seeds for n in ("grid", "centers", "baselines", "study")]
        == [(0, 1, 2, 3, 4), (0, 1, 2), (0, 1, 2), (0, 1)] else "the experiments' seeds changed: update this test",
        ("train", "--hidden"): f"{','.join(map(str, DEFAULT_FEATURE_HIDDEN))} for features and frozen backbones, "
                               "none for backbones that train and baselines",
        ("train", "--backbone"): f"{DEFAULT_IMAGE_BACKBONE} for images",
        ("train", "--image-size"): f"the backbone's (small-image backbones: square images from {MIN_NATIVE_SIDE} px "
                                   "up to it keep their own)",
        ("train", "--eval-every"): f"the profile's (recommended: {recommended.eval_every}; paper, benchmark: "
                                   f"{paper.eval_every})",
        ("train", "--validation"): f"the profile's (recommended: {recommended.validation:g} for trained methods; "
                                   f"paper, benchmark: {paper.validation:g})",
    }


# stated defaults with a number that are no constant: what resolve_config writes when the
# fine-tuning recipe does not apply (no probe epochs; the backbone at the head's own rate)
NOT_CONSTANTS = {("train", "--probe-epochs"), ("train", "--backbone-lr-scale")}


def config_field_default(command: str, param) -> str | None:
    """A `lbhash train` option generated from a TrainConfig field that states the field's own
    default (no `shown` text): the value the config takes (test_cli.py checks the generation)."""
    from lbhash.train.config import OWNERS, SETS

    if command != "train" or param.name not in OWNERS:
        return None
    field = SETS[OWNERS[param.name]].model_fields[param.name]
    if "shown" in (field.json_schema_extra or {}):
        return None
    default = field.default
    if default is None:
        return "none"
    return ("on" if default else "off") if isinstance(default, bool) else str(default)


def test_every_stated_default_is_the_constant_the_code_uses():
    expected, seen = expected_defaults(), set()
    for command, flag, param, stated in stated_defaults():
        key = (command, flag)
        if key in expected:
            seen.add(key)
            assert stated == expected[key], f"`lbhash {command} --help` states {flag} [default: {stated}], the code " \
                                            f"uses {expected[key]}"
        elif config_field_default(command, param) is not None:
            assert stated == config_field_default(command, param), key
        elif param.show_default and param.default is not None:
            continue  # click prints the default it passes to the command: the value used
        else:
            assert key in NOT_CONSTANTS or not re.search(r"\d", stated), \
                f"`lbhash {command} --help` states {flag} [default: {stated}]: state it from the constant the " \
                f"code uses (lbhash.cli.common.StatedDefault) and add it to expected_defaults()"
    assert seen == set(expected), set(expected) - seen


@pytest.mark.parametrize("command, flag", [("search", "-k"), ("search", "--rescore-factor"),
                                           ("index build", "--nprobe")])
def test_the_printed_help_shows_the_constant(command, flag):
    """What `--help` prints (wrapped) holds the same default as the record checked above."""
    text = " ".join(CliRunner().invoke(main, [*command.split(), "--help"]).output.split())
    line = text[text.index(f"{flag} INTEGER"):]
    assert line[:line.index("]") + 1].endswith(f"[default: {expected_defaults()[(command, flag)]}]")


def test_a_changed_constant_changes_the_help(monkeypatch):
    import lbhash.index.rescore

    monkeypatch.setattr(lbhash.index.rescore, "RESCORE_FACTOR", 7)
    assert dict(((c, f), s) for c, f, _, s in stated_defaults())[("search", "--rescore-factor")] == "7"


def test_the_search_help_states_the_limits_the_code_applies():
    from lbhash.limits import MAX_BATCH, MAX_CLASS_ID, MAX_K

    text = " ".join(CliRunner().invoke(main, ["search", "--help"]).output.split())
    for phrase in (f"k at most {MAX_K}", f"at most {MAX_K} items per query within --radius",
                   f"class ids 0 to {MAX_CLASS_ID}", f"queries are searched in batches of {MAX_BATCH}"):
        assert phrase in text, phrase
