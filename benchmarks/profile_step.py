"""Where a training step's time goes: torch.profiler over one epoch of `lbhash train`'s loop.

    python benchmarks/profile_step.py --data image-array:FILE.npz --backbone smallcnn [--lbhash]

Builds the experiment exactly as `lbhash train` does (protocol per-class:T,Q, CSQ, 32 bits),
trains one warm-up epoch, times a second, profiles a third, and prints the operators by self
CPU time, so that time outside the model's own arithmetic (data, copies, optimizer, Python)
shows up by name.

    python benchmarks/profile_step.py --d-diff 64 [--data features:PATH.npz]

profiles instead one epoch each of bench_train's hand loops of CSQ and CSQ_D on features (the
1024 -> 1024 -> bits head) and prints the operators by how much more self CPU time CSQ_D spent:
where the _D step's extra time goes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from _smoke import parse_args  # beside this script


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None, help="a data spec (with --d-diff: features, default the CIFAR-10 ones)")
    p.add_argument("--backbone", default="smallcnn")
    p.add_argument("--method", default="csq")
    p.add_argument("--lbhash", action="store_true")
    p.add_argument("--protocol", default="per-class:300,10")
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--d-diff", type=int, default=None, metavar="BITS",
                   help="profile the CSQ and CSQ_D hand loops at BITS bits and print the difference")
    args = parse_args(p, protocol="per-class:8,2", rows=5)
    if args.smoke:  # both profiles, on tiny synthetic data
        from bench_train import digit_images

        with tempfile.TemporaryDirectory() as tmp:
            step_profile(args, args.data or digit_images(Path(tmp), 200))
        d_step_difference(16, None, args.rows, stand_in=300)
        return
    if args.d_diff:
        d_step_difference(args.d_diff, args.data, args.rows)
        return
    if args.data is None:
        p.error("--data is required (except with --d-diff)")
    step_profile(args, args.data)


def step_profile(args, data: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    from lbhash.train import TrainConfig
    from lbhash.train.builder import build_experiment
    from lbhash.train.loop import Trainer

    cfg = TrainConfig(data=data, protocol=args.protocol, method=args.method, lbhash=args.lbhash, bits=32, validation=0.0,
                      epochs=3, eval_every=0, test=False, progress=False, backbone=args.backbone)
    exp = build_experiment(cfg)
    trainer = Trainer(exp)  # in memory
    trainer.train_epoch(1)
    start = time.perf_counter()
    trainer.train_epoch(2)
    seconds = time.perf_counter() - start
    print(f"{exp.cfg.variant} {args.backbone} at {exp.cfg.dataset.image_size}px: {len(exp.split.train) / seconds:.0f} "
          f"training images/s ({seconds:.2f} s for {len(exp.split.train)} images)")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.train_epoch(3)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


def d_step_difference(bits: int, data: str | None, rows: int, stand_in: int | None = None) -> None:
    """`stand_in`: that many rows of random features instead of the shared CIFAR-10 ones."""
    from torch.profiler import ProfilerActivity, profile

    from bench_train import HandLoop, default_features
    from lbhash.train import TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        spec, protocol = (data, "given") if data else default_features(Path(tmp), stand_in or 6000,
                                                                       shared_data=stand_in is None)
        self_us = {}
        for lbhash in (False, True):
            loop = HandLoop(TrainConfig(data=spec, protocol=protocol, method="csq", bits=bits, lbhash=lbhash, validation=0.0))
            loop.epoch(0)  # warm-up
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                loop.epoch(1)
            self_us[lbhash] = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    base, with_d = self_us[False], self_us[True]
    print(f"{bits} bits, one epoch, self CPU: CSQ {sum(base.values()) / 1e3:.0f} ms, "
          f"CSQ_D {sum(with_d.values()) / 1e3:.0f} ms; operators by the time CSQ_D adds:")
    extra = {key: with_d.get(key, 0) - base.get(key, 0) for key in base.keys() | with_d.keys()}
    for key, us in sorted(extra.items(), key=lambda item: -item[1])[:rows]:
        print(f"{us / 1e3:9.1f} ms  {key}")


if __name__ == "__main__":
    main()
