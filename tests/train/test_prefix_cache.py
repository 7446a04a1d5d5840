"""The cached frozen prefix of a run that trains only the backbone's last stages: the stages
split exactly, flips-only augmentation, and training from the cache against training from the
images (the independent reference), on small data."""

import numpy as np
import pytest
import torch
from helpers import colour_class_images

from lbhash.data.augment import BatchTransform
from lbhash.data.transforms import build_transforms
from lbhash.models import ModelOptions, StageInputs, create_image_model
from lbhash.train import TrainConfig
from lbhash.train.builder import build_experiment
from lbhash.train.loop import Trainer
from lbhash.train.prefix_cache import PrefixBatches


@pytest.mark.parametrize("backbone, stages", [("efficientnet_lite0", 9), ("resnet8", 4)])
def test_a_backbone_split_after_any_stage_gives_its_whole_forward_pass(backbone, stages):
    torch.manual_seed(0)
    model = create_image_model(backbone, 16).eval()
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        whole = model.backbone(x)
        for k in range(stages + 1):
            part = model.backbone.forward_from(model.backbone.prefix(x, k), k)
            assert torch.equal(part, whole), k


def test_fixed_prefix_then_stage_inputs_equal_the_model_on_images():
    torch.manual_seed(0)
    model = create_image_model(ModelOptions(backbone="resnet8", train_stages=2), 16).eval()
    assert model.fixed_stages == 2
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(StageInputs(model.fixed_prefix(x), 2)), model(x))


@pytest.mark.parametrize("preset, size", [("imagenet", 24), ("cifar-augment", 32)])
def test_augment_flip_gives_each_image_as_evaluated_or_mirrored(preset, size):
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8))
    plain = BatchTransform(preset, size, train=False)(images)
    gen = torch.Generator().manual_seed(3)
    flipped = BatchTransform(preset, size, train=True, augment="flip")(images, gen)
    mirrored = [torch.equal(f, p.flip(2)) and not torch.equal(f, p) for f, p in zip(flipped, plain)]
    assert all(torch.equal(f, p) or m for f, p, m in zip(flipped, plain, mirrored))
    assert 0 < sum(mirrored) < len(images)  # both happen
    assert torch.equal(BatchTransform(preset, size, train=True, augment="none")(images, gen), plain)
    one = build_transforms(preset, size, train=True, augment="flip")(images[0].permute(2, 0, 1))
    assert torch.equal(one, plain[0]) or torch.equal(one, plain[0].flip(2))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = colour_class_images(tmp_path_factory.mktemp("img") / "c.npz", n_per_class=10, test_per_class=2)
    return f"image-array:{path}"


def config(data, **values):
    return TrainConfig(data=data, protocol="given", validation=0, method="csq", bits=16, backbone="resnet8",
                       train_stages=2, epochs=2, batch_size=8, seed=0, eval_every=0, progress=False, **values)


def trained(data, **values):
    trainer = Trainer(build_experiment(config(data, **values)))
    trainer.fit()
    return trainer


def test_training_from_the_cache_matches_training_from_the_images(data, monkeypatch):
    cached = trained(data, augment="flip")
    assert isinstance(cached.training_batches(), PrefixBatches)
    assert len(cached.training_batches().activations) == 2  # as is, and mirrored
    monkeypatch.setattr("lbhash.train.loop.prefix_cacheable", lambda *args: False)
    direct = trained(data, augment="flip")
    assert not isinstance(direct.training_batches(), PrefixBatches)
    for (name, a), (_, b) in zip(cached.learner.model.state_dict().items(), direct.learner.model.state_dict().items()):
        assert torch.allclose(a.float(), b.float(), atol=1e-4, rtol=1e-4), name
    for ra, rb in zip(cached.history, direct.history):
        assert ra["loss"]["total"] == pytest.approx(rb["loss"]["total"], rel=1e-4)
    # the stages that never train kept their initial weights (build_experiment seeds them); the last two moved
    start = build_experiment(config(data, augment="flip")).learner.model.backbone.stages()
    for i, (now, before) in enumerate(zip(cached.learner.model.backbone.stages(), start)):
        same = all(torch.equal(a, b) for a, b in zip(now.state_dict().values(), before.state_dict().values()))
        assert same is (i < 2), i


def test_random_crops_or_a_cache_too_large_train_from_the_images(data, monkeypatch, caplog):
    assert not isinstance(trained(data, augment="crop-flip").training_batches(), PrefixBatches)
    monkeypatch.setattr("lbhash.train.prefix_cache.MAX_PREFIX_CACHE_BYTES", 1)
    with caplog.at_level("WARNING", logger="lbhash"):
        trainer = trained(data, augment="none")
    assert not isinstance(trainer.training_batches(), PrefixBatches)
    assert "computed every step" in caplog.text
