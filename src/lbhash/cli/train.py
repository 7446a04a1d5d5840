"""`lbhash train`: flags override the --config file, which overrides the defaults."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.cli.common import parse_int_list, parse_topk


def _method_options(values: tuple[str, ...]) -> dict:
    import yaml

    out = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--method-option must look like NAME=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(raw)  # numbers and booleans keep their type
    return out


@click.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path),
              help="YAML file of options (keys as below, '-' or '_'); flags override it.")
@click.option("--data", help="Data spec, e.g. 'digits' or 'features:PATH.npz' (see docs/data.md). [default: digits]")
@click.option("--protocol", help="Split protocol: cifar10, cifar10-1, cifar10-2, given, digits, "
                                 "per-class:T,Q[,+train], random:T,Q. [default: the data set's own]")
@click.option("--method", help="Hashing method (see `lbhash methods`). [default: csq]")
@click.option("--defaults", type=click.Choice(["paper", "benchmark"]),
              help="Method defaults profile: the paper's (Adam 1e-3) or the DeepHash benchmark's. [default: paper]")
@click.option("--lbhash/--no-lbhash", default=None, help="Train the method's _D variant (the paper's objective).")
@click.option("--bits", type=int, help="Code length. [default: 64]")
@click.option("--epochs", type=int, help="[default: the method's]")
@click.option("--batch-size", type=int, help="[default: the method's]")
@click.option("--optimizer", type=click.Choice(["adam", "sgd", "rmsprop"]), help="[default: the method's]")
@click.option("--lr", type=float, help="Learning rate of the hash model (eta_2). [default: the method's]")
@click.option("--weight-decay", type=float)
@click.option("--lr-step", type=int, help="Decay the learning rates every N epochs (0: never).")
@click.option("--lr-gamma", type=float, help="Learning-rate decay factor.")
@click.option("--method-option", "method_option", multiple=True, metavar="NAME=VALUE",
              help="A method constant, e.g. quantization=1e-4 (repeatable).")
@click.option("--centers", help="Center generator: auto, hadamard, bch, reed_solomon, random.")
@click.option("--lbhash-weight", type=float, help="lambda: weight of L_theta. [default: 1]")
@click.option("--lbhash-mode", type=click.Choice(["add", "replace"]),
              help="Add L_theta to the method's loss, or replace its center loss. [default: the method's]")
@click.option("--surrogate-lr", type=float, help="Learning rate of the surrogate (eta_1). [default: 1e-3]")
@click.option("--block-size", type=int, help="Bits per surrogate block. [default: 8]")
@click.option("--theta-dropout/--no-theta-dropout", default=None,
              help="Dropout active in the L_theta pass. [default: on]")
@click.option("--hidden", help="Hash head hidden widths, comma-separated. [default: 1024]")
@click.option("--normalize", type=click.Choice(["zscore", "none"]))
@click.option("--eval-every", type=int, help="Evaluate every N epochs (0: only at the end). [default: 10]")
@click.option("--topk", help="R of mAP@R: integer or 'all'. [default: the protocol's]")
@click.option("--seed", type=int, help="[default: 0]")
@click.option("--accelerator", help="cpu or gpu. [default: cpu]")
@click.option("--devices", type=int, help="[default: 1]")
@click.option("--precision", help="Lightning precision, e.g. 32-true, bf16-mixed. [default: 32-true]")
@click.option("--out", type=click.Path(path_type=Path),
              help="Run directory. [default: runs/<method>[_D]-<bits>bits-seed<seed>]")
@click.option("--backbone", help="Image data: a backbone (see docs/models.md). [default: resnet20]")
@click.option("--pretrained", help="Backbone weights: a local file, or 'torchvision' (torch hub cache; never downloads).")
@click.option("--freeze-backbone/--no-freeze-backbone", default=None, help="Train only the hash layers.")
@click.option("--image-size", type=int, help="Image side after transforms. [default: the backbone's]")
@click.option("--transform", type=click.Choice(["imagenet", "cifar", "cifar-augment"]),
              help="Image transform preset. [default: the backbone's]")
@click.option("--num-workers", type=int, help="DataLoader workers for image data. [default: 0]")
@click.option("--skip-bad-images/--no-skip-bad-images", default=None,
              help="Drop unreadable images (counted) instead of stopping before training.")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint.")
@click.option("--progress/--no-progress", default=None, help="Show a progress bar. [default: on]")
def train(config_file, out, resume, method_option, hidden, topk, progress, **flags) -> None:
    """Train a hash model (Alg. 1 with --lbhash) and write a run directory.

    The run directory holds config.yaml, split.npz, log.jsonl, checkpoint.pt, codes.npz and
    metrics.json.
    """
    from lbhash.evaluate import format_metrics
    from lbhash.evaluate.runs import train_and_evaluate
    from lbhash.train import build_config, load_config_file

    if resume:
        if out is None:
            raise ValueError("--resume needs --out, the run directory to continue")
        given = [k for k, v in flags.items() if v is not None] + (["--config"] if config_file else [])
        if given or method_option or hidden or topk:
            raise ValueError("--resume continues a run with its saved config; drop the other options")
        metrics = train_and_evaluate(None, out, resume=True, progress=progress)
    else:
        flags["method_options"] = _method_options(method_option) or None
        flags["hidden"] = parse_int_list(hidden, "--hidden") if hidden else None
        flags["topk"] = ("all" if parse_topk(topk) is None else parse_topk(topk)) if topk else None
        cfg = build_config(load_config_file(config_file) if config_file else {}, flags)
        if out is None:
            out = Path("runs") / f"{cfg.variant}-{cfg.bits}bits-seed{cfg.seed}"
        metrics = train_and_evaluate(cfg, out, progress=progress)
    if metrics:  # empty in the other processes of a multi-process run
        click.echo(format_metrics(metrics))
        click.echo(f"run directory: {out}")
