"""The GPU suite: one command that checks and measures lbhash's image path on a CUDA device.

    bash benchmarks/gpu_suite.sh [--smoke] [--out DIR] [--data TARBALL] [--epochs N] ...

Parts, each recorded as ok, failed (with its error's first line; the suite goes on) or skipped
(with the reason): (1) backbones: every registered image backbone trains one step on a random
batch of 64 at its own image size, channels_last, under bf16 autocast, with finite loss,
gradients and weights (torchvision's are skipped when torchvision does not import); (2) e2e:
CIFAR-10 pixels end to end at 32x32 (`RunDirectory.train`, protocol cifar10, 32 bits, 5 epochs,
bf16-mixed): CSQ and CSQ_D with resnet20, CSQ with smallcnn, giving training and encoding
images/s and test mAP; (3) target: resnet20 on protocol cifar10-2, the issue's "one epoch of the
50,000 training images in under 10 s" (reported, never asserted); (4) timing: the paper's Table
1, `lbhash reproduce timing` with resnet50 (needs torchvision).

Writes gpu_suite.json and gpu_suite.md into --out (default docs/results/gpu/<date>-<device>/),
atomically, after every part. --smoke runs the same code at tiny sizes, on the CPU when there is
no CUDA device; without --smoke and without CUDA it exits 2. Exit status 1 when a part failed.
docs/results/benchmarks.md ("GPU suite") describes every setting and the data look-up.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if (REPO / "src" / "lbhash").is_dir():  # measure this checkout, installed or not
    sys.path.insert(0, str(REPO / "src"))

DATA_CANDIDATES = ("data/cifar10-jpg.tar.gz", "../shared/data/cifar10-jpg.tar.gz")
TARGET_SECONDS = 10.0            # issue 18: one epoch of the 50,000 CIFAR-10 training images
SMOKE_PER_CLASS = (8, 3)         # train, test images per class in the smoke tarball
E2E_RUNS = (("resnet20-csq", "resnet20", False), ("resnet20-csq_D", "resnet20", True),
            ("smallcnn-csq", "smallcnn", False))
PARTS = ("backbones", "e2e", "target", "timing")
NEEDED = ("numpy", "scipy", "sklearn", "numba", "click", "yaml", "lightning_fabric", "tqdm", "pydantic", "PIL")


class UsageError(Exception):
    """A one-line error that ends the suite with exit status 2."""


def first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gpu_suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes; runs on the CPU without a CUDA device")
    p.add_argument("--out", type=Path, help="folder for gpu_suite.json and gpu_suite.md")
    p.add_argument("--data", type=Path, help="CIFAR-10 JPEG tarball [default: %s, else %s]" % DATA_CANDIDATES)
    p.add_argument("--epochs", type=int, help="e2e epochs [default: 5; 1 with --smoke]")
    p.add_argument("--protocol", help="e2e and timing protocol [default: cifar10; per-class:4,2 with --smoke]")
    p.add_argument("--batch-size", type=int, help="e2e and target batch size [default: the method's]")
    p.add_argument("--target-epochs", type=int, help="cifar10-2 epochs [default: 2; 1 with --smoke]")
    p.add_argument("--timing-backbone", default="resnet50", help="backbone of the Table 1 timing [resnet50]")
    p.add_argument("--timing-epochs", type=int, help="epochs the timing measures [default: 3; 2 with --smoke]")
    p.add_argument("--budget", type=float, default=540.0, help="seconds after which no part starts [540; 0: none]")
    p.add_argument("--only", help=f"comma-separated parts to run [default: {','.join(PARTS)}]")
    p.add_argument("--keep-work", action="store_true", help="keep the temporary folder of run directories")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for name in ("epochs", "target_epochs", "timing_epochs", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    args.epochs = args.epochs or (1 if args.smoke else 5)
    args.protocol = args.protocol or ("per-class:4,2" if args.smoke else "cifar10")
    args.target_epochs = args.target_epochs or (1 if args.smoke else 2)
    args.timing_epochs = args.timing_epochs or (2 if args.smoke else 3)
    args.parts = tuple(s.strip() for s in args.only.split(",") if s.strip()) if args.only else PARTS
    bad = [s for s in args.parts if s not in PARTS]
    if bad:
        raise UsageError(f"unknown part {bad[0]!r} in --only; parts: {', '.join(PARTS)}")
    return args


def check_packages() -> None:
    import importlib
    import importlib.util

    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"missing Python packages: {', '.join(missing)} (or pass --wheels DIR to gpu_suite.sh)")
    for module in ("lbhash.models", "lbhash.data", "lbhash.train"):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise UsageError(f"cannot import {module}: {first_line(err)}") from None


def find_data(given: Path | None) -> Path:
    tried = [given.absolute()] if given is not None else [REPO / c for c in DATA_CANDIDATES]
    for path in tried:
        if path.is_file():
            return path.resolve()
    raise UsageError(f"no CIFAR-10 tarball: tried {', '.join(str(p) for p in tried)} (pass --data TARBALL)")


def tiny_tarball(source: Path, dest: Path) -> Path:
    """A plain tar of real images from `source`: the first SMOKE_PER_CLASS (train, test) per class."""
    from lbhash.data import load_data

    ds = load_data(f"cifar10:{source}")
    ids, taken = ds.labels.argmax(1), {}
    with tarfile.open(dest, "w") as tf:
        for i in range(len(ds)):
            part = "test" if ds.is_test is not None and ds.is_test[i] else "train"
            k = taken.get((part, ids[i]), 0)
            if k < SMOKE_PER_CLASS[part == "test"]:
                taken[(part, ids[i])] = k + 1
                data = ds.source.read(i)
                info = tarfile.TarInfo(f"{part}/{ds.class_names[ids[i]]}/{k:04d}{Path(ds.where(i)).suffix}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return dest


def torchvision_reason() -> str | None:
    """None when torchvision imports, else why not, in one line."""
    try:
        import torchvision  # noqa: F401
    except Exception as err:  # not installed, or built for another torch (RuntimeError)
        return f"torchvision does not import ({first_line(err)})"
    return None


def usable(spec: str | Exception) -> str:
    """The data spec of the runs, or the error that kept it from being made."""
    if isinstance(spec, Exception):
        raise spec
    return spec


def check_backbone(name: str, device, batch: int, bf16: bool, tv_reason: str | None) -> dict:
    """Two channels_last training steps of backbone `name` (64 bits), under bf16 autocast when
    `bf16`; every value checked finite after each, the second one timed."""
    import torch
    import torch.nn.functional as F
    from lbhash.models import backbone_defaults, create_image_model

    size = backbone_defaults(name).image_size
    row = {"image_size": size, "batch": batch}
    torch.manual_seed(0)
    try:
        model = create_image_model(name, bits=64)
    except Exception as err:
        if tv_reason and "torchvision" in str(err):
            return {**row, "status": "skipped", "reason": tv_reason}
        raise
    model = model.to(device, memory_format=torch.channels_last).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 2, (batch, 64), device=device).float()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    times = []
    for _ in range(2):
        sync()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            u = model(x)
        loss = F.binary_cross_entropy_with_logits(2 * u.float(), target)   # CSQ's center loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        times.append(time.perf_counter() - start)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()}")
        bad = [n for n, p in params if p.grad is None or not (torch.isfinite(p.grad).all() and torch.isfinite(p).all())]
        if bad:
            raise FloatingPointError(f"gradient or weight of {bad[0]} is missing or not finite")
    row.update(status="ok", loss=loss.item(), output_dtype=str(u.dtype).replace("torch.", ""),
               first_step_seconds=times[0], step_seconds=times[1], images_per_second=batch / times[1])
    return row


def train_run(spec: str | Exception, run_dir: Path, settings: dict, **values) -> dict:
    """One `RunDirectory.train` run; its speed and quality from metrics.json and log.jsonl."""
    import yaml
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig

    batch = {"batch_size": settings["batch_size"]} if settings["batch_size"] else {}
    cfg = TrainConfig(data=usable(spec), bits=32, image_size=32, lr_step=0, validation=0.0, progress=False, seed=0, centers="hadamard",
                      accelerator=settings["accelerator"], precision=settings["precision"], **batch, **values)
    start = time.perf_counter()
    RunDirectory(run_dir).train(cfg)
    wall = time.perf_counter() - start
    metrics = json.loads((run_dir / "metrics.json").read_text())
    run = metrics["run"]
    epochs = [json.loads(line)["seconds"] for line in (run_dir / "log.jsonl").read_text().splitlines() if line]
    steady = statistics.median(epochs[1:] if len(epochs) > 1 else epochs)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    row = {"status": "ok", "backbone": config["backbone"], "variant": run["variant"], "protocol": run["protocol"],
           "bits": config["bits"], "batch_size": config["batch_size"], "epochs": len(epochs),
           "epoch_seconds": epochs, "median_epoch_seconds": steady, "n_train": run["n_train"],
           "train_images_per_second": run["n_train"] / steady, "wall_seconds": wall}
    if run.get("encode_seconds"):
        encoded = int(metrics["n_query"]) + int(metrics["n_db"])
        row.update(map=metrics["map"], encoded_items=encoded, encode_seconds=run["encode_seconds"],
                   encode_images_per_second=encoded / run["encode_seconds"])
    return row


def run_timing(spec: str | Exception, work: Path, args, settings: dict, tv_reason: str | None,
               timeout: float | None) -> dict:
    """`lbhash reproduce timing` in a subprocess (stopped after `timeout` seconds), and its timing.csv."""
    from lbhash.models import create_backbone

    backbone = args.timing_backbone
    try:
        create_backbone(backbone)
    except Exception as err:
        if tv_reason and "torchvision" in str(err):
            return {"status": "skipped", "backbone": backbone, "reason": tv_reason}
        raise
    out = work / "timing"
    cmd = ["reproduce", "timing", "--data", usable(spec), "--protocol", args.protocol, "--out", str(out),
           "--epochs", str(args.timing_epochs), "--bits", "16" if args.smoke else "16,32,64",
           "--set", f"backbone={backbone}", "--set", f"accelerator={settings['accelerator']}",
           "--set", f"precision={settings['precision']}", "--set", "progress=false", "--set", "centers=hadamard"]
    cmd += ["--set", "image_size=32"] if args.smoke else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "lbhash.cli", *cmd], cwd=REPO, capture_output=True, text=True,
                              env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"lbhash reproduce timing was stopped after {timeout:.0f} s (--budget)") from None
    if done.returncode != 0:
        lines = [s.strip() for s in (done.stdout + done.stderr).splitlines() if s.strip()]
        errors = [s for s in lines if "error" in s.lower()] or lines or [""]
        raise RuntimeError(f"lbhash reproduce timing exited {done.returncode}: {errors[-1]}")
    with open(out / "timing.csv", newline="") as fh:
        rows = [{k: int(v) if k in ("bits", "steps_per_epoch") else v if k == "variant" else float(v)
                 for k, v in r.items()} for r in csv.DictReader(fh)]
    return {"status": "ok", "backbone": backbone, "protocol": args.protocol, "epochs": args.timing_epochs,
            "command": " ".join(["lbhash", *cmd]), "rows": rows, "wall_seconds": time.perf_counter() - start}


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def finite(value):
    """`value` with every NaN or infinite float written as a string (strict JSON)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return str(value) if isinstance(value, float) and not math.isfinite(value) else value


def fmt(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def status_text(row: dict) -> str:
    note = row.get("error") or row.get("reason")
    return row["status"] + (f": {note}" if note else "")


def markdown(result: dict) -> str:
    s = result["settings"]
    skipped = result.get("skipped") or []
    state = ("running" if result["failed"] is None else "FAILED: " + ", ".join(result["failed"]) if result["failed"]
             else f"ok, {len(skipped)} skipped: " + ", ".join(skipped) if skipped else "all parts ok")
    lines = [f"# lbhash GPU suite{' (smoke)' if result['smoke'] else ''}", "",
             f"{result['device']}, torch {result['torch']}, {result['date']}, `{result['command']}`: {state} "
             f"({result['total_seconds']:.0f} s). Runs: {s['accelerator']}, precision {s['precision']}.", "",
             f"## One training step per backbone (autocast {s['check_autocast']}, channels_last)", "",
             "| backbone | image size | batch | status | first step ms | step ms | images/s |",
             "|---|---|---|---|---|---|---|"]
    for r in result["backbones"]:
        ms = [fmt(r[k] * 1e3) if k in r else "" for k in ("first_step_seconds", "step_seconds")]
        lines.append(f"| {r['name']} | {r.get('image_size', '')} | {r.get('batch', '')} | {status_text(r)} | "
                     f"{ms[0]} | {ms[1]} | {fmt(r.get('images_per_second'), 0)} |")
    lines += ["", f"## CIFAR-10 end to end (32 bits, 32x32, protocol {s['protocol']})", "",
              "| run | status | epochs | batch | s/epoch (median after the first) | train images/s | "
              "encode images/s | encoded | mAP |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["e2e"]:
        lines.append(f"| {r['name']} | {status_text(r)} | {r.get('epochs', '')} | {r.get('batch_size', '')} | "
                     f"{fmt(r.get('median_epoch_seconds'), 2)} | {fmt(r.get('train_images_per_second'), 0)} | "
                     f"{fmt(r.get('encode_images_per_second'), 0)} | {r.get('encoded_items', '')} | "
                     f"{fmt(r.get('map'), 4)} |")
    t, tm = result["target"], result["timing"]
    lines += ["", f"## Protocol cifar10-2 with resnet20 (target: one epoch under {TARGET_SECONDS:.0f} s)", ""]
    lines.append(f"{t['n_train']:,} training images, batch {t['batch_size']}: epochs of "
                 f"{', '.join(f'{x:.2f}' for x in t['epoch_seconds'])} s (the first includes warm-up); "
                 f"target {'met' if t['target_met'] else 'not met'} ({t['median_epoch_seconds']:.2f} s)."
                 if t["status"] == "ok" else status_text(t))
    lines += ["", f"## Table 1 timing (`lbhash reproduce timing`, backbone {s['timing_backbone']})", ""]
    if tm["status"] == "ok":
        lines += [f"`{tm['command']}`", "", "| variant | bits | s/epoch | steps/epoch | ratio to BCE |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['variant']} | {r['bits']} | {r['seconds_per_epoch']:.3f} | {r['steps_per_epoch']} | "
                  f"{r['ratio']:.3f} |" for r in tm["rows"]]
    else:
        lines.append(status_text(tm))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        import torch

        if not args.smoke and not torch.cuda.is_available():
            raise UsageError("no CUDA device (use --smoke to run the suite on the CPU at tiny sizes)")
        check_packages()
        data = find_data(args.data)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return run_suite(args, data)


def run_suite(args, data: Path) -> int:
    import torch
    import lbhash
    from lbhash.models import available_backbones

    began = time.perf_counter()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "device"
    now = dt.datetime.now(dt.timezone.utc)
    out = args.out or (REPO / ("runs/gpu-suite" if args.smoke else "docs/results/gpu")
                       / f"{now:%Y-%m-%d}-{slug}{'-smoke' if args.smoke else ''}")
    work = Path(tempfile.mkdtemp(prefix="lbhash-gpu-suite-"))
    if args.smoke and not os.environ.get("LBHASH_CACHE_DIR"):  # the tiny set's pixels leave with the work folder
        os.environ["LBHASH_CACHE_DIR"] = str(work / "cache")
    settings = {"accelerator": "gpu" if cuda else "cpu", "precision": "bf16-mixed" if cuda else "32-true",
                "check_batch": 4 if args.smoke else 64, "check_autocast": "bf16" if cuda else "off",
                "protocol": args.protocol, "epochs": args.epochs, "batch_size": args.batch_size,
                "target_epochs": args.target_epochs, "timing_backbone": args.timing_backbone,
                "timing_epochs": args.timing_epochs, "budget_seconds": args.budget, "parts": list(args.parts)}
    tv_reason = torchvision_reason()
    pending = {"status": "skipped", "reason": "not run yet"}
    result = {"suite": "lbhash gpu suite", "device": device_name, "device_type": device.type,
              "torch": torch.__version__, "cuda": torch.version.cuda, "lbhash": lbhash.__version__,
              "torchvision": None if tv_reason else sys.modules["torchvision"].__version__,
              "date": now.isoformat(timespec="seconds"), "smoke": args.smoke, "data": str(data),
              "command": " ".join(["bash benchmarks/gpu_suite.sh", *args.argv]), "settings": settings,
              "ok": None, "failed": None, "total_seconds": 0.0,
              "backbones": [], "e2e": [], "target": dict(pending), "timing": dict(pending)}

    def save() -> None:
        result["total_seconds"] = time.perf_counter() - began
        write_atomic(out / "gpu_suite.json", json.dumps(finite(result), indent=2, allow_nan=False) + "\n")
        write_atomic(out / "gpu_suite.md", markdown(result))

    def attempt(label: str, fn, *a, **kw) -> dict:
        if args.budget and time.perf_counter() - began > args.budget:
            row = {"status": "skipped", "reason": f"the suite's {args.budget:.0f} s budget was spent"}
        elif label.split()[0] not in args.parts:
            row = {"status": "skipped", "reason": "not selected (--only)"}
        else:
            try:
                row = fn(*a, **kw)
            except Exception as err:  # recorded; the suite goes on
                row = {"status": "failed", "error": first_line(err)}
        print(f"{label}: {status_text(row)}", flush=True)
        return row

    print(f"gpu suite: {device_name}, torch {torch.__version__}, smoke={args.smoke}, out {out}", flush=True)
    try:
        save()
        if "backbones" in args.parts:
            for name in available_backbones():
                result["backbones"].append({"name": name, **attempt(
                    f"backbones {name}", check_backbone, name, device, settings["check_batch"], cuda, tv_reason)})
                save()
        try:
            tiny = args.smoke and {"e2e", "target", "timing"} & set(args.parts)
            spec = f"cifar10:{tiny_tarball(data, work / 'tiny-cifar10.tar') if tiny else data}?cache=disk"
        except Exception as err:  # every run fails with this reason
            spec = RuntimeError(f"cannot make the smoke data set: {first_line(err)}")
        for name, backbone, lb in E2E_RUNS if "e2e" in args.parts else ():
            result["e2e"].append({"name": name, **attempt(
                f"e2e {name}", train_run, spec, work / name, settings, method="csq", lbhash=lb,
                backbone=backbone, protocol=args.protocol, epochs=args.epochs)})
            save()
        row = attempt("target resnet20 cifar10-2", train_run, spec, work / "target", settings, method="csq",
                      backbone="resnet20", protocol="cifar10-2", epochs=args.target_epochs, test=False)
        if row["status"] == "ok":
            row.update(target_seconds=TARGET_SECONDS, target_met=row["median_epoch_seconds"] < TARGET_SECONDS)
        result["target"] = row
        save()
        left = max(60.0, args.budget + 30 - (time.perf_counter() - began)) if args.budget else None
        result["timing"] = attempt(f"timing {args.timing_backbone}", run_timing, spec, work, args, settings,
                                   tv_reason, left)
    finally:
        if args.keep_work:
            print(f"run directories kept in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    rows = [(f"{part} {r['name']}", r) for part in ("backbones", "e2e") for r in result[part]]
    rows += [("target", result["target"]), ("timing", result["timing"])]
    result["failed"] = [label for label, r in rows if r["status"] == "failed"]
    result["skipped"] = [label for label, r in rows if r["status"] == "skipped"]
    result["ok"] = not result["failed"]
    save()
    print("\n" + markdown(result) + f"\nwrote {out / 'gpu_suite.json'} and {out / 'gpu_suite.md'}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
