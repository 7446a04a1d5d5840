"""Where a training step's time goes: torch.profiler over one epoch of `lbhash train`'s loop.

    python benchmarks/profile_step.py --data image-array:FILE.npz --backbone smallcnn [--lbhash]

Builds the experiment exactly as `lbhash train` does (protocol per-class:T,Q, CSQ, 32 bits),
trains one warm-up epoch, times a second, profiles a third, and prints the operators by self
CPU time, so that time outside the model's own arithmetic (data, copies, optimizer, Python)
shows up by name.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--backbone", default="smallcnn")
    p.add_argument("--method", default="csq")
    p.add_argument("--lbhash", action="store_true")
    p.add_argument("--protocol", default="per-class:300,10")
    p.add_argument("--rows", type=int, default=20)
    args = p.parse_args()

    from torch.profiler import ProfilerActivity, profile

    from lbhash.train import TrainConfig
    from lbhash.train.builder import build_experiment
    from lbhash.train.loop import Trainer

    cfg = TrainConfig(data=args.data, protocol=args.protocol, method=args.method, lbhash=args.lbhash, bits=32,
                      epochs=3, eval_every=0, test=False, progress=False, backbone=args.backbone)
    exp = build_experiment(cfg)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(exp, Path(out))
        trainer.train_epoch(1)
        start = time.perf_counter()
        trainer.train_epoch(2)
        seconds = time.perf_counter() - start
        print(f"{exp.cfg.variant} {args.backbone} at {exp.cfg.image_size}px: {len(exp.split.train) / seconds:.0f} "
              f"training images/s ({seconds:.2f} s for {len(exp.split.train)} images)")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train_epoch(3)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
