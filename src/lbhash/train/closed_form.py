"""Training of the closed-form baselines (lsh, pca, itq, linear): one fit instead of epochs.

`fit_closed_form` reads the training items through the run's own first layer (so the fit sees
what the head will), writes the method's linear map into the head and records the fit as epoch 1
(`Trainer.record_epoch`). The loop then has nothing left to run and the run ends as every run does.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from lbhash.codes import to_signs
from lbhash.train.loop import Trainer, train_bound


@torch.inference_mode()
def head_inputs(trainer: Trainer) -> np.ndarray:
    """The training items as the hash head sees them (after the model's standardisation)."""
    exp, model = trainer.exp, trainer.learner.model
    model.eval()
    blocks = [model.backbone(x.to(trainer.fabric.device, torch.float32)).cpu().numpy()
              for x in exp.dataset.encode_batches(exp.split.train, trainer.options, "cpu")]
    return np.concatenate(blocks).astype(np.float32, copy=False)


def fit_closed_form(trainer: Trainer) -> None:
    """Fit the method's map into the model and record it as the run's one epoch (a resumed run
    whose checkpoint holds the fit is left as it is)."""
    if trainer.start_epoch >= 1:
        return
    exp, cfg = trainer.exp, trainer.cfg
    start = time.perf_counter()
    x = head_inputs(trainer)
    labels = exp.dataset.labels[exp.split.train]
    columns = trainer.learner.label_columns  # unseen:K: the training classes only
    if columns is not None:
        labels = labels[:, columns.cpu().numpy()]
    objective = trainer.learner.objective
    fit = objective.fit_projection(x, labels, cfg.recipe.seed)
    layer = trainer.learner.model.head.net[-1]
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(fit.weight))
        layer.bias.copy_(torch.from_numpy(fit.bias))
    u = torch.from_numpy(x) @ layer.weight.detach().cpu().T + layer.bias.detach().cpu()
    with torch.no_grad():
        out = objective(u, torch.from_numpy(labels).float(), None)
    parts = {k: float(v) for k, v in {**out.parts, "total": out.total}.items()}
    record = {"epoch": 1, "seconds": time.perf_counter() - start, "loss": parts}
    if fit.history:
        record["fit"] = fit.history
    record.update(train_bound(to_signs(u).numpy(), labels))
    if trainer.validating:
        record["eval"] = trainer.validate(1)
    trainer.record_epoch(1, record)
    trainer.start_epoch = 1
