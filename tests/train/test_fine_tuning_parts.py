"""The fine-tuning recipe's parts on small data, without training: what a pretrained backbone
that trains resolves to, the learning-rate groups, frozen BatchNorm statistics, the stages that
train, the bf16 backbone and its detection, and the one-line refusals."""

import re

import numpy as np
import pytest
import torch
from helpers import colour_class_images

from lbhash.errors import InputError
from lbhash.models import ModelOptions, create_image_model
from lbhash.train import TrainConfig, resolve_config
from lbhash.train.optim import make_optimizer


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from lbhash.data import load_data

    path = colour_class_images(tmp_path_factory.mktemp("img") / "small.npz", n_per_class=6, test_per_class=1)
    return f"image-array:{path}", load_data(f"image-array:{path}")


def resolved(images, **values):
    data, dataset = images
    return resolve_config(TrainConfig(data=data, protocol="given", method="csq", bits=16, **values), dataset)


def test_a_pretrained_backbone_that_trains_gets_the_recipe(images, monkeypatch):
    monkeypatch.setattr("lbhash.cpus.bf16_native", lambda device="cpu": True)
    cfg = resolved(images, backbone="efficientnet_lite0", pretrained="imagenet")
    assert (cfg.recipe.probe_epochs, cfg.recipe.epochs, cfg.recipe.eval_every, cfg.recipe.validation) == (10, 18, 1, 0.1)
    assert resolved(images, backbone="efficientnet_lite0", pretrained="imagenet", validation=0).recipe.eval_every == 5
    assert (cfg.recipe.backbone_lr_scale, cfg.model.freeze_bn, cfg.model.train_stages, cfg.model.backbone_precision) == (0.1, True, 0, "bf16")
    # each part has its own option, and a given value is kept
    cfg = resolved(images, backbone="efficientnet_lite0", pretrained="imagenet", probe_epochs=0, epochs=3,
                   backbone_lr_scale=0.5, freeze_bn=False, train_stages=2, backbone_precision="fp32")
    assert (cfg.recipe.probe_epochs, cfg.recipe.epochs, cfg.recipe.backbone_lr_scale, cfg.model.freeze_bn, cfg.model.train_stages,
            cfg.model.backbone_precision) == (0, 3, 0.5, False, 2, "fp32")


@pytest.mark.parametrize("method, probe, epochs", [("dbdh", 40, 70), ("dsdh", 40, 60), ("hashnet", 10, 18)])
def test_a_method_s_own_fine_tuning_epochs(images, method, probe, epochs):
    """DBDH probes 40 epochs and tunes 30, DSDH 40 and 20 (their slow rates; docs/models.md), the others 10 and 8;
    given values win, and a frozen backbone has no probe."""
    data, dataset = images

    def resolved_for(**values):
        return resolve_config(TrainConfig(data=data, protocol="given", method=method, bits=16, backbone="efficientnet_lite0",
                                          pretrained="imagenet", **values), dataset).recipe

    assert (resolved_for().probe_epochs, resolved_for().epochs) == (probe, epochs)
    assert (resolved_for(probe_epochs=2).probe_epochs, resolved_for(probe_epochs=2).epochs) == (2, 2 + epochs - probe)
    assert (resolved_for(epochs=50).probe_epochs, resolved_for(epochs=50).epochs) == (probe, 50)
    assert resolved_for(freeze_backbone=True).probe_epochs == 0


def test_other_runs_keep_the_plain_recipe(images, monkeypatch):
    monkeypatch.setattr("lbhash.cpus.bf16_native", lambda device="cpu": True)
    for values in ({"backbone": "efficientnet_lite0"},  # random initialisation: nothing to keep
                   {"backbone": "efficientnet_lite0", "pretrained": "imagenet", "freeze_backbone": True}):
        cfg = resolved(images, **values)
        assert (cfg.recipe.probe_epochs, cfg.recipe.backbone_lr_scale, cfg.model.freeze_bn, cfg.recipe.epochs) == (0, 1.0, False, 100)
    assert resolved(images, backbone="efficientnet_lite0").model.backbone_precision == "fp32"
    assert resolved(images, backbone="efficientnet_lite0", pretrained="imagenet",
                    freeze_backbone=True).model.backbone_precision == "bf16"  # the cached features' extraction
    monkeypatch.setattr("lbhash.cpus.bf16_native", lambda device="cpu": False)
    assert resolved(images, backbone="efficientnet_lite0", pretrained="imagenet").model.backbone_precision == "fp32"


def test_bf16_is_detected_from_the_cpus_own_checks(monkeypatch):
    from lbhash.cpus import bf16_native

    for avx512_bf16, amx, want in ((True, False, True), (False, True, True), (False, False, False)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        assert bf16_native("cpu") is want
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert bf16_native("cpu") is False  # a torch without the checks: float32


@pytest.mark.parametrize("values, words", [
    ({"backbone": "efficientnet_lite0", "pretrained": "imagenet", "probe_epochs": 4, "epochs": 4},
     "probe_epochs 4 must be fewer than epochs (4)"),
    ({"backbone": "efficientnet_lite0", "pretrained": "imagenet", "freeze_backbone": True, "probe_epochs": 2},
     "probe_epochs 2: the probe epochs come before a backbone trains"),
    ({"backbone": "efficientnet_lite0", "pretrained": "imagenet", "freeze_backbone": True, "train_stages": 2},
     "train_stages 2: this run has no image backbone that trains"),
    ({"backbone": "efficientnet_lite0", "pretrained": "imagenet", "devices": 2},
     "probe_epochs 10: the probe epochs train on one process"),
])
def test_options_that_mean_nothing_for_the_run_are_refused_in_one_line(images, values, words):
    with pytest.raises(InputError, match=re.escape(words)) as err:
        resolved(images, **values)
    assert "\n" not in str(err.value)


def test_probe_epochs_on_feature_data_are_refused():
    from lbhash.data import load_data

    cfg = TrainConfig(data="digits", method="csq", bits=16, probe_epochs=2)
    with pytest.raises(InputError, match="no image backbone that trains"):
        resolve_config(cfg, load_data("digits"))


def test_only_the_last_stages_train_and_the_earlier_stay_in_eval_mode():
    model = create_image_model(ModelOptions(backbone="efficientnet_lite0", train_stages=2), 16)
    stages = model.backbone.stages()
    assert len(stages) == 9  # stem, seven block stages, head convolution
    model.train()
    for i, stage in enumerate(stages):
        trains = i >= len(stages) - 2
        assert all(p.requires_grad is trains for p in stage.parameters())
        assert all(m.training is trains for part in stage.children() for m in part.modules())
    tuned = {id(p) for p in model.trainable_backbone_parameters()}
    assert tuned == {id(p) for s in stages[-2:] for p in s.parameters()}
    with pytest.raises(InputError, match="train_stages 10: backbone efficientnet_lite0 has 9 stage"):
        create_image_model(ModelOptions(backbone="efficientnet_lite0", train_stages=10), 16)


def test_frozen_statistics_stay_while_the_scales_learn():
    torch.manual_seed(0)
    model = create_image_model(ModelOptions(backbone="resnet8", freeze_bn=True), 16).train()
    bns = [m for m in model.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    before = [(m.running_mean.clone(), m.running_var.clone()) for m in bns]
    model(torch.randn(4, 3, 32, 32) * 3 + 1).sum().backward()
    assert all(torch.equal(m.running_mean, a) and torch.equal(m.running_var, b) for m, (a, b) in zip(bns, before))
    assert all(m.weight.grad is not None for m in bns)  # the affine parameters still train
    plain = create_image_model("resnet8", 16).train()
    plain(torch.randn(4, 3, 32, 32) * 3 + 1)
    bn = next(m for m in plain.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))  # the control: they move


def test_the_probe_freezes_the_whole_backbone_and_tuning_releases_it():
    model = create_image_model(ModelOptions(backbone="resnet8", freeze_bn=False), 16)
    model.set_frozen(True)
    model.train()
    assert not any(p.requires_grad for p in model.backbone.parameters()) and not model.backbone.training
    assert model.takes_features(torch.zeros(2, model.head.in_features))
    model.set_frozen(False)
    assert all(p.requires_grad for p in model.backbone.parameters()) and model.backbone.training
    assert not model.takes_features(torch.zeros(2, model.head.in_features))


def test_the_backbone_learns_at_its_scale_of_the_rate():
    from lbhash.methods import create_method
    from lbhash.train.builder import Learner

    model = create_image_model("resnet8", 16)
    learner = Learner(model, create_method("csq", 16, 4, centers=torch.ones(4, 16)))
    groups = learner.theta_parameters(0.1)
    optimizer = make_optimizer("adam", groups, 1e-3, 0.0)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([1e-3, 1e-4])
    backbone = {id(p) for p in model.backbone.parameters()}
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == backbone
    assert not backbone & {id(p) for p in optimizer.param_groups[0]["params"]}
    single = make_optimizer("adam", learner.theta_parameters(1.0), 1e-3, 0.0)  # as before the scale existed
    assert len(single.param_groups) == 1 and len(single.param_groups[0]["params"]) == len(list(model.parameters()))


def test_a_bf16_backbone_gives_the_head_float32_features_close_to_float32():
    torch.manual_seed(0)
    model = create_image_model("resnet8", 16).eval()
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        exact = model.backbone_features(x)
        model.bf16_backbone = True
        half = model.backbone_features(x)
    assert half.dtype == torch.float32
    assert not torch.equal(half, exact)  # computed in bf16 ...
    torch.testing.assert_close(half, exact, rtol=0.05, atol=0.05)  # ... to about bf16's precision


def test_bf16_features_have_their_own_cache_entries(images):
    from lbhash.data import InputOptions
    from lbhash.data.feature_cache import space_key

    backbone = create_image_model("resnet8", 16).backbone
    options = InputOptions(32, "cifar", 0, True)
    assert space_key(backbone, options, False)["precision"] == "fp32"
    assert space_key(backbone, options, True)["precision"] == "bf16"
    assert np.all(np.isfinite(backbone(torch.zeros(1, 3, 32, 32)).detach().numpy()))


def test_the_run_says_how_it_uses_its_backbone(images, monkeypatch):
    from lbhash.train.config import backbone_line

    monkeypatch.setattr("lbhash.cpus.bf16_native", lambda device="cpu": True)
    assert backbone_line(resolved(images, backbone="efficientnet_lite0", pretrained="imagenet")) == (
        "backbone efficientnet_lite0 (imagenet weights), bf16: fine-tuned, 10 probe epochs on cached features, "
        "then every stage at 0.1x the head's rate, BatchNorm statistics kept")
    assert backbone_line(resolved(images, backbone="efficientnet_lite0", pretrained="imagenet",
                                  freeze_backbone=True)) == (
        "backbone efficientnet_lite0 (imagenet weights), bf16: frozen, its features computed once")
    assert backbone_line(resolved(images, backbone="resnet8", train_stages=2)) == (
        "backbone resnet8 (random initialisation), fp32: trained, its last 2 stage(s)")
    from lbhash.data import load_data

    assert backbone_line(resolve_config(TrainConfig(data="digits", method="csq", bits=16), load_data("digits"))) is None
