"""Seconds per fine-tuning epoch with `train_stages 4`, with random crops (nothing cached) and
with flips only (the frozen stages computed once), on the same data, side by side.

    python studies/prefix_cache_timing.py "cifar10:../shared/data/cifar10-jpg.tar.gz?per-class=100"
"""
import sys, time
from lbhash.train import TrainConfig
from lbhash.train.builder import build_experiment
from lbhash.train.loop import Trainer
data = sys.argv[1]
for augment in ("crop-flip", "flip"):
    cfg = TrainConfig(data=data, protocol="given", validation=0, method="csq", bits=64, backbone="efficientnet_lite0",
                      pretrained="imagenet", image_size=128, train_stages=4, probe_epochs=0, epochs=3, seed=0,
                      eval_every=0, progress=False, augment=augment)
    tr = Trainer(build_experiment(cfg))
    t0 = time.perf_counter(); tr.training_batches(); built = time.perf_counter() - t0
    times = []
    for e in (1, 2, 3):
        t0 = time.perf_counter(); tr.train_epoch(e); times.append(time.perf_counter() - t0)
    print(f"augment {augment}: cache built in {built:.1f} s; epochs {', '.join(f'{t:.1f}' for t in times)} s "
          f"({len(tr.exp.split.train)} images)", flush=True)
