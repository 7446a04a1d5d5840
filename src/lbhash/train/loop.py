"""The training loop of Alg. 1 on Lightning Fabric, in memory: records per epoch, model
selection, and a `store` (a run directory, lbhash.runs.run_files.DirectoryStore) when the caller wants each
epoch written.

Per batch: u = F_theta(x); loss = method loss (+ lambda * L_theta) + L_pi, one backward pass and a
step of each optimizer (lines 7-8 of Alg. 1). Each epoch's randomness is seeded from (seed, epoch),
so a resumed run continues exactly; every `eval_every` epochs it logs the validation mAP, or
without a validation split the mAP and lower bound of fresh query and database codes.

Model selection (`Selection`) keeps the epoch with the best validation mAP (`select: best-val`) and stops
after `patience` evaluations without a better one; the best weights are a CPU copy, or go to the
trainer's store (rank 0 only), and the state travels in the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from typing import Callable, Protocol

import numpy as np
import torch
from tqdm import tqdm

from lbhash.codes import to_signs
from lbhash.data.base import EpochShard
from lbhash.data.input_form import form_of
from lbhash.errors import InputError, require_extra
from lbhash.evaluate import lower_bound, mean_average_precision
from lbhash.train.builder import Experiment, Learner, input_options
from lbhash.train.config import RunConfig
from lbhash.train.forward import ForwardPass, all_gather, encode
from lbhash.train.optim import make_optimizer, make_scheduler
from lbhash.train.prefix_cache import cache_prefix, prefix_cacheable
from lbhash.train.processes import make_fabric
from lbhash.train.summary import heartbeat

logger = logging.getLogger("lbhash")


class Selection:
    """Model selection on the validation split: the best epoch's weights kept, and early stopping
    after `patience` evaluations without a better one (the module says where the weights go)."""

    def __init__(self, select: str, patience: int, store=None):
        self.store, self.select, self.patience = store, select, patience  # store: save_best, load_best
        self.best_map, self.best_epoch, self.since_best, self.stopped = -1.0, 0, 0, False
        self._best: dict | None = None  # in memory (no path): the best epoch's weights

    def update(self, epoch: int, val_map: float, model: torch.nn.Module, is_writer: bool) -> bool:
        """Record a validation mAP; True when it is the best so far (then its weights are kept)."""
        improved = val_map > self.best_map
        if improved:
            self.best_map, self.best_epoch, self.since_best = float(val_map), epoch, 0
            if self.select == "best-val" and is_writer:
                self._keep({"model": model.state_dict(), "epoch": epoch, "val_map": float(val_map)})
        else:
            self.since_best += 1
            self.stopped = bool(self.patience) and self.since_best >= self.patience
        return improved

    def _keep(self, best: dict) -> None:
        if self.store is not None:
            return self.store.save_best(best)
        best["model"] = {k: v.detach().to("cpu", copy=True) for k, v in best["model"].items()}
        self._best = best

    def state_dict(self) -> dict:
        return {"best_map": self.best_map, "best_epoch": self.best_epoch, "since_best": self.since_best,
                "stopped": self.stopped}

    def load_state_dict(self, state: dict) -> None:
        self.best_map, self.best_epoch = float(state["best_map"]), int(state["best_epoch"])
        self.since_best, self.stopped = int(state["since_best"]), bool(state["stopped"])

    def best(self) -> dict | None:
        """The best epoch's {"model", "epoch", "val_map"}, or None when nothing was kept."""
        return self._best if self.store is None else self.store.load_best()


def epoch_seed(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


class NonFiniteError(InputError):
    """A loss or a parameter became NaN or infinite: the run stops and is marked failed."""


def check_logger(logger: str, store: "EpochStore | None") -> None:
    """The logger's optional package, checked before a run loads its data (`fit.prepare`):
    Lightning's TensorBoard logger writes with tensorboard when it is installed, else with
    tensorboardX (our extra), into a run directory (the store's `loggers`)."""
    if logger == "tensorboard":
        if store is None:
            raise InputError("logger tensorboard writes its event files into a run directory: train into one "
                             "(lbhash train --out, or HashEncoder.fit(..., run_dir=...))")
        require_extra("--logger tensorboard", "tensorboard", ("tensorboardX", "tensorboard"))


class EpochStore(Protocol):
    """Where a trainer's epochs are written (the run directory): its loggers, the best
    epoch's weights, and each finished epoch's record and checkpoint."""

    def loggers(self, cfg) -> list: ...

    def save_best(self, best: dict) -> None: ...

    def load_best(self) -> dict | None: ...

    def record(self, trainer: "Trainer", epoch: int, record: dict) -> None: ...


class Trainer:
    """Runs the epochs of one experiment, in memory, or into a `store` (a run directory).

    `on_epoch_end(epoch, record)` is called after each trained epoch (and its checkpoint, with
    a store), with the epoch's record in JSON's types, as log.jsonl holds it. `history` holds
    the records (on rank 0).
    """

    def __init__(self, exp: Experiment, store: EpochStore | None = None,
                 on_epoch_end: Callable[[int, dict], None] | None = None, run_config: RunConfig | None = None,
                 data_summary: dict | None = None):
        self.exp, self.cfg, self.store = exp, exp.cfg, store
        # what the run's files hold (config.yaml, input.json, data.json): `run_config` is exp.cfg but for
        # the progress this process shows; a store that resumes a run puts back the run's own
        self.run_config = exp.cfg if run_config is None else run_config
        self.input_form = form_of(exp.dataset, exp.cfg.dataset.normalize, exp.cfg.dataset.image_size)
        self.data_summary = data_summary
        self.recipe, self.progress = exp.cfg.recipe, exp.cfg.runtime.progress
        self.on_epoch_end = on_epoch_end
        self.on_step: Callable[[int, int, int, float], None] | None = None  # lines inside an epoch (a log)
        self.history: list[dict] = []
        recipe, runtime, surrogate = self.recipe, exp.cfg.runtime, exp.cfg.surrogate
        torch.set_flush_denormal(True)  # denormals slow CPU matmuls by orders of magnitude
        self.fabric = make_fabric(runtime.accelerator, runtime.devices, runtime.precision,
                                  [] if store is None else store.loggers(exp.cfg))
        learner: Learner = exp.learner
        opt_theta = make_optimizer(recipe.optimizer, learner.theta_parameters(recipe.backbone_lr_scale), recipe.lr,
                                   recipe.weight_decay)
        optimizers = [opt_theta]
        if learner.lower_bound is not None:
            optimizers.append(make_optimizer("adamw" if recipe.optimizer == "adamw" else "adam",
                                             learner.pi_parameters(), surrogate.surrogate_lr,
                                             surrogate.surrogate_weight_decay))
        self.learner, *self.optimizers = self.fabric.setup(learner, *optimizers)
        self.schedulers = [make_scheduler(o, recipe) for o in self.optimizers]
        self.selection = Selection(recipe.select, recipe.patience, store)
        self.train_labels = exp.dataset.labels[exp.split.train]
        self.options = input_options(exp.cfg)
        self.shard = EpochShard(recipe.batch_size, self.fabric.global_rank, self.fabric.world_size)
        self.batches = exp.dataset.train_batches(exp.split.train, self.shard, self.fabric.device, self.options)
        # fine-tuning's probe epochs: the head alone, on the pretrained backbone's cached features
        self.probe_batches = None if exp.probe_dataset is None else exp.probe_dataset.train_batches(
            exp.split.train, self.shard, self.fabric.device, self.options)
        self._tune_batches = None  # the training batches once the backbone trains (set at its first epoch)
        self.start_epoch = 0

    def state(self, epoch: int) -> dict:
        """What a checkpoint holds after `epoch`: everything a resumed run continues from."""
        return {"learner": self.learner, "optimizers": [o.state_dict() for o in self.optimizers],
                "schedulers": [s.state_dict() for s in self.schedulers], "epoch": epoch,
                "selection": self.selection.state_dict()}

    # --- training -----------------------------------------------------------------------

    def fit(self) -> list[dict]:
        for epoch in range(self.start_epoch + 1, self.recipe.epochs + 1):
            if self.selection.stopped:  # early stop (also when resuming after it)
                break
            record = self.train_epoch(epoch)
            if self.evaluates(epoch):
                # in a log (on_step set) a line every STEP_EVERY_S while the items are encoded
                beat = contextlib.nullcontext() if self.on_step is None else \
                    heartbeat(f"{self.cfg.variant} epoch {epoch}/{self.recipe.epochs}: evaluating")
                with beat:
                    record["eval"] = self.validate(epoch) if self.validating else self.evaluate()
            self.check_finite_parameters(epoch)
            if self.fabric.is_global_zero:
                self.fabric.log_dict(flat_record(record), step=epoch)
            self.record_epoch(epoch, record)
        return self.history

    def record_epoch(self, epoch: int, record: dict) -> None:
        """Append a finished epoch's record to `history` (rank 0) in JSON's types, hand it to
        the store (log line and checkpoint) and call `on_epoch_end`. The one way an epoch is
        recorded, by the loop and by a closed-form fit."""
        if self.fabric.is_global_zero:
            record = json.loads(json.dumps(record, allow_nan=False))
            self.history.append(record)
        if self.store is not None:
            self.store.record(self, epoch, record)
        if self.on_epoch_end is not None:
            self.on_epoch_end(epoch, record)

    def check_finite_parameters(self, epoch: int) -> None:
        for name, param in self.learner.named_parameters():
            if not bool(torch.isfinite(param).all()):
                raise NonFiniteError(f"epoch {epoch}: parameter {name} holds NaN or inf")

    @property
    def validating(self) -> bool:
        return len(self.exp.split.validation) > 0

    def evaluates(self, epoch: int) -> bool:
        """Validation: every eval_every epochs and at the last. Test: every eval_every epochs
        but the last, which the final metrics cover."""
        recipe = self.recipe
        every = recipe.eval_every
        if self.validating:
            return (bool(every) and epoch % every == 0) or epoch == recipe.epochs
        return bool(every) and epoch % every == 0 and epoch < recipe.epochs and len(self.exp.split.query) > 0 \
            and recipe.test

    def validate(self, epoch: int) -> dict:
        """mAP@all of the validation items against the training items; updates the selection."""
        result = {}
        if self.fabric.is_global_zero:
            split, labels = self.exp.split, self.exp.dataset.labels
            val_map = mean_average_precision(self.encode(split.validation), self.encode(split.train),
                                             labels[split.validation], labels[split.train])
            improved = self.selection.update(epoch, val_map, self.learner.model, True)
            result = {"val_map": val_map, "best_val_map": self.selection.best_map, "improved": improved}
        self.fabric.barrier()
        state = self.fabric.broadcast(self.selection.state_dict(), src=0)  # every rank stops together
        self.selection.load_state_dict(state)
        return result

    def train_epoch(self, epoch: int) -> dict:
        recipe, learner = self.recipe, self.learner
        torch.manual_seed(epoch_seed(recipe.seed, epoch))
        probing = epoch <= recipe.probe_epochs  # one of fine-tuning's probe epochs: the backbone frozen
        if recipe.probe_epochs:
            learner.model.set_frozen(probing)
        learner.train()
        learner.objective.on_epoch_start(epoch - 1)
        sums: dict[str, float] = {}
        seen = 0
        # codes stay on the device until the epoch ends: no host copy per step
        codes = torch.zeros((len(self.train_labels), self.cfg.hashing.bits), dtype=torch.int8,
                            device=self.fabric.device)
        written = torch.zeros(len(self.train_labels), dtype=torch.bool, device=self.fabric.device)
        start = time.perf_counter()
        source = self.probe_batches if probing and self.probe_batches is not None else self.training_batches()
        batches = source.epoch(epoch_seed(recipe.seed, epoch))
        bar = tqdm(batches, total=len(source), desc=f"{self.cfg.variant} epoch {epoch}/{recipe.epochs}",
                   leave=False, disable=not self.progress or not self.fabric.is_global_zero)
        for step, (x, labels, index) in enumerate(bar, 1):
            u, out, pi = learner(x, labels, index)
            loss = out.total if pi is None else out.total + pi[0]
            for opt in self.optimizers:
                opt.zero_grad(set_to_none=True)
            self.fabric.backward(loss)
            for opt in self.optimizers:
                opt.step()
            n = len(labels)
            seen += n
            parts = {**out.parts, "total": out.total}
            if pi is not None:
                parts["surrogate_pi"], parts["pattern_accuracy"] = pi[0], pi[1]
            values = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=u.device).detach()
                                  for v in parts.values()]).tolist()  # one device sync per step
            for k, value in zip(parts, values):
                if not math.isfinite(value):
                    raise NonFiniteError(f"epoch {epoch}, step {step}: loss part {k} is {value} (try a smaller "
                                         "learning rate or loss weight)")
                sums[k] = sums.get(k, 0.0) + value * n
            codes[index] = to_signs(u.detach())
            written[index] = True
            if self.on_step is not None:
                self.on_step(epoch, step, len(source), sums["total"] / seen)
        codes, written = codes.cpu().numpy(), written.cpu().numpy()
        learner.objective.on_epoch_end(epoch - 1)
        lr = self.optimizers[0].param_groups[0]["lr"]
        for sched in self.schedulers:
            sched.step()
        seconds = time.perf_counter() - start
        if self.fabric.world_size > 1:  # the log covers every rank's samples
            keys = sorted(sums)
            totals = self.fabric.all_reduce(torch.tensor([sums[k] for k in keys] + [seen], dtype=torch.float64),
                                            reduce_op="sum")
            sums, seen = dict(zip(keys, totals[:-1].tolist())), float(totals[-1])
            codes = self._gather_codes(codes, written)
        record = {"epoch": epoch, "lr": lr, "seconds": seconds, **({"phase": "probe" if probing else "tune"}
                                                                   if recipe.probe_epochs else {}),
                  "loss": {k: v / seen for k, v in sums.items()}}
        return {**record, **train_bound(codes, self.train_labels)}

    def training_batches(self):
        """The batches of the epochs that train the model: the frozen prefix's cached activations
        when only the last stages train and no random crop changes their input
        (lbhash.train.prefix_cache), else the data set's own."""
        if self._tune_batches is None:
            data, model = self.cfg.dataset, self.learner.model
            self._tune_batches = self.batches
            if self.cfg.input_kind == "images" and not model.built_frozen and \
                    prefix_cacheable(data.transform, data.augment, model.fixed_stages):
                beat = contextlib.nullcontext() if self.on_step is None else heartbeat("caching the frozen stages")
                with beat:  # in a log, where no bar shows, a line every HEARTBEAT_S
                    built = cache_prefix(model, self.exp.dataset, self.exp.split.train, self.options, self.shard,
                                         self.fabric.device, self.progress and self.fabric.is_global_zero)
                if isinstance(built, str):
                    logger.warning(built)
                else:
                    self._tune_batches = built
        return self._tune_batches

    def _gather_codes(self, codes: np.ndarray, written: np.ndarray) -> np.ndarray:
        """Each rank saw a shard of the training set: take every row from a rank that wrote it."""
        device = self.fabric.device
        all_codes = all_gather(self.fabric, torch.from_numpy(codes).to(device)).cpu().numpy()   # (world, n, bits)
        all_written = all_gather(self.fabric, torch.from_numpy(written).to(device)).cpu().numpy()
        first = all_written.argmax(0)
        return all_codes[first, np.arange(len(codes))]

    def encode(self, index: np.ndarray, progress: bool = False) -> np.ndarray:
        """Codes of data-set items with the plain (unwrapped) model: no collective calls, so
        rank 0 may encode alone. While the backbone is frozen for the probe, from its cached
        features where they cover `index` (the training and validation items)."""
        probe = self.exp.probe_dataset
        frozen = probe is not None and self.learner.model.freeze_backbone and (probe.rows[index] >= 0).all()
        return encode(self.learner.model, probe if frozen else self.exp.dataset, index, self.options,
                      ForwardPass(self.fabric.device, self.fabric.autocast, progress and self.progress))

    def evaluate(self) -> dict:
        """mAP at R of fresh query and database codes, and the database codes' lower bound."""
        result = {}
        if self.fabric.is_global_zero:
            split, labels = self.exp.split, self.exp.dataset.labels
            q, db = self.encode(split.query), self.encode(split.database)
            bound = lower_bound(db, labels[split.database])
            result = {"map": mean_average_precision(q, db, labels[split.query], labels[split.database],
                                                    topk=self.exp.topk),
                      "lower_bound_ratio": finite_or_str(bound.ratio), "min_inter": bound.min_inter,
                      "max_intra": bound.max_intra}
        self.fabric.barrier()
        return result


def flat_record(record: dict, prefix: str = "") -> dict[str, float]:
    """The numbers of a log record as flat names ("loss/total"), for loggers."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_record(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "epoch":
            out[name] = float(value)
    return out


def train_bound(codes: np.ndarray, labels: np.ndarray) -> dict:
    """The training codes' lower bound as an epoch's record keeps it; {} with fewer than two classes."""
    if labels.any(0).sum() < 2:
        return {}
    bound = lower_bound(codes, labels)
    return {"train_lower_bound": {"min_inter": bound.min_inter, "max_intra": bound.max_intra,
                                  "ratio": finite_or_str(bound.ratio)}}


def finite_or_str(x: float):
    """JSON has no infinity: an infinite ratio is stored as "inf"."""
    return x if math.isfinite(x) else "inf"
