"""Backbone registry, CIFAR ResNets, optional torchvision backbones, weights files, image models."""

from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import one_line_message
from model_fakes import fake_alexnet, fake_resnet
from lbhash.data.transforms import TRANSFORM_PRESETS
from lbhash.errors import InputError
from lbhash.models import (
    Backbone,
    backbone_defaults,
    HashModel,
    ModelOptions,
    available_backbones,
    create_backbone,
    create_image_model,
    register_backbone,
)
import lbhash.models as models_package


def cifar_resnet_params(n: int, c1: int, c2: int, c3: int) -> int:
    """Hand count: 3x3 convs without bias, BatchNorm weight + bias, 1x1 projection shortcuts
    where a block changes the shape (the first blocks of stages 2 and 3)."""
    def block(cin, cout):
        return 9 * cin * cout + 9 * cout * cout + 2 * 2 * cout + ((cin * cout + 2 * cout) if cin != cout else 0)

    stem = 9 * 3 * c1 + 2 * c1
    stages = [block(c1, c1) * n,
              block(c1, c2) + block(c2, c2) * (n - 1),
              block(c2, c3) + block(c3, c3) * (n - 1)]
    return stem + sum(stages)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- registry


def test_registry_lists_and_rejects_names():
    names = available_backbones()
    assert {"resnet8", "resnet20", "resnet32", "cifar_resnet", "resnet50", "alexnet"} <= set(names)
    with pytest.raises(ValueError) as info:
        create_backbone("resnet18")
    one_line_message(info, "'resnet18'", "resnet20", "alexnet")
    with pytest.raises(ValueError) as info:
        create_backbone("resnet20", widht=2)
    one_line_message(info, "resnet20", "'widht'", "width")
    with pytest.raises(ValueError) as info:
        register_backbone("resnet20")(lambda: None)
    one_line_message(info, "resnet20")
    with pytest.raises(ValueError) as info:
        create_backbone("cifar_resnet", depth=21)
    one_line_message(info, "21")


def test_every_backbone_names_a_transform_preset_of_the_data_layer():
    for name in available_backbones():
        assert backbone_defaults(name).transform in TRANSFORM_PRESETS, name
    assert backbone_defaults("resnet20") == (32, "cifar-augment")
    assert backbone_defaults("resnet50") == (224, "imagenet")


def test_backbone_attributes():
    model = create_backbone("resnet20")
    assert isinstance(model, Backbone) and model.name == "resnet20"
    assert model.default_image_size == 32 and model.transform_preset in TRANSFORM_PRESETS
    assert model.weights_source is None


# ---------------------------------------------------------------- CIFAR ResNet


@pytest.mark.parametrize("size", [32, 64])
def test_cifar_resnet_shapes(size):
    model = create_backbone("resnet20").eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, size, size))
    assert out.shape == (2, model.out_features) == (2, 96)


def test_cifar_resnet_parameter_counts():
    default = create_backbone("resnet20")  # width 1.5: 24/48/96 channels
    count = n_params(default)
    assert 300_000 <= count <= 1_000_000
    assert count == cifar_resnet_params(3, 24, 48, 96) == 610_104
    # width 1 is He et al.'s ResNet-20 (0.27 M with option-A shortcuts; the 1x1 projections add 2,752)
    original = create_backbone("resnet20", width=1)
    assert n_params(original) == cifar_resnet_params(3, 16, 32, 64) == 271_824
    assert n_params(create_backbone("resnet8", width=1)) == cifar_resnet_params(1, 16, 32, 64)
    assert n_params(create_backbone("cifar_resnet", depth=32, width=2)) == cifar_resnet_params(5, 32, 64, 128)


def test_cifar_resnet_channels_last_matches_contiguous():
    torch.manual_seed(0)
    model = create_backbone("resnet8").eval()
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
        model = model.to(memory_format=torch.channels_last)
        out = model(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_cifar_resnet_kaiming_init():
    model = create_backbone("resnet20")
    conv = model.stage3[1].conv1  # fan_out = 9 * 96, relu gain sqrt(2)
    expected = (2 / (9 * conv.out_channels)) ** 0.5
    assert abs(conv.weight.std().item() / expected - 1) < 0.05
    assert torch.all(model.stage1[0].bn1.weight == 1) and torch.all(model.stage1[0].bn1.bias == 0)


def test_cifar_resnet_trains():
    torch.manual_seed(0)
    backbone = create_backbone("resnet20")
    model = nn.Sequential(backbone, nn.Linear(backbone.out_features, 4))
    x, y = torch.randn(8, 3, 32, 32), torch.arange(8) % 4
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# ---------------------------------------------------------------- torchvision backbones


def torchvision_imports() -> bool:
    try:
        import torchvision.models  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.parametrize("name,dim", [("resnet50", 2048), ("alexnet", 4096)])
def test_torchvision_backbone_or_one_line_error(name, dim):
    if torchvision_imports():
        model = create_backbone(name, pretrained=None).eval()
        with torch.no_grad():
            assert model(torch.randn(1, 3, 224, 224)).shape == (1, dim) and model.out_features == dim
        assert model.transform_preset == "imagenet" and model.default_image_size == 224
    else:
        with pytest.raises(ValueError) as info:
            create_backbone(name)
        one_line_message(info, name, "torchvision")


def test_torchvision_weights_absent_from_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # an empty hub cache, and no network (faked)
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(ValueError) as info:
        create_backbone("resnet50", pretrained="torchvision")
    if torchvision_imports():
        one_line_message(info, "resnet50-0676ba61.pth", str(tmp_path / "hub" / "checkpoints"))
    else:
        one_line_message(info, "torchvision")


def test_torchvision_wrappers_drop_classifier_and_load_hub_file(fake_torchvision, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32)
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    cases = [("resnet50", "resnet50-0676ba61.pth", 32), ("alexnet", "alexnet-owt-7be5be79.pth", 20)]
    for name, file_name, dim in cases:
        source = (fake_resnet if name == "resnet50" else fake_alexnet)().eval()
        torch.save(source.state_dict(), cache / file_name)  # the full network's file, classifier included
        model = create_backbone(name, pretrained="torchvision").eval()
        assert model.out_features == dim and model.weights_source.endswith(file_name)
        with torch.no_grad():
            if name == "resnet50":
                body = nn.Sequential(*(getattr(source, k) for k in ("conv1", "bn1", "relu", "maxpool", "layer1",
                                                                     "layer2", "layer3", "layer4", "avgpool")))
                expected = body(x).flatten(1)
            else:
                expected = source.classifier[:6](source.avgpool(source.features(x)).flatten(1))
            torch.testing.assert_close(model(x), expected)
    with pytest.raises(ValueError) as info:
        create_backbone("alexnet", pretrained="torchvision:V9")
    one_line_message(info, "'V9'", "IMAGENET1K_V1")


def test_no_torchvision_weights_for_cifar_resnet():
    with pytest.raises(ValueError) as info:
        create_backbone("resnet20", pretrained="torchvision")
    one_line_message(info, "resnet20", "no torchvision weights")


# ---------------------------------------------------------------- weights files


@pytest.mark.parametrize("suffix", [".pth", ".pt", ".safetensors"])
def test_weights_file_round_trip(tmp_path, suffix):
    torch.manual_seed(1)
    source = create_backbone("resnet8").train()
    source(torch.randn(8, 3, 32, 32))  # move the BatchNorm statistics off their initial values
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        safetensors_torch = pytest.importorskip("safetensors.torch")
        safetensors_torch.save_file(source.state_dict(), str(path))
    else:
        torch.save(source.state_dict(), path)
    torch.manual_seed(2)
    loaded = create_backbone("resnet8", pretrained=path)
    assert loaded.weights_source == str(path)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(x), source.eval()(x), rtol=0, atol=0)


def test_weights_from_a_hash_model_file(tmp_path):
    trained = create_image_model("resnet8", bits=16)
    path = tmp_path / "model.pt"
    torch.save({"model": trained.state_dict(), "epoch": torch.tensor(3)}, path)
    backbone = create_backbone("resnet8", pretrained=path)
    for key, value in trained.backbone.state_dict().items():
        assert torch.equal(backbone.state_dict()[key], value)
    # a training checkpoint: {"learner": {"model.backbone.*", "model.head.*", "objective.*"}, ...}
    learner = {f"model.{k}": v for k, v in trained.state_dict().items()} | {"objective.scale": torch.ones(1)}
    torch.save({"learner": learner, "optimizers": [{"lr": 0.1}], "epoch": 4}, path)
    backbone = create_backbone("resnet8", pretrained=path)
    assert torch.equal(backbone.stem[0].weight, trained.backbone.stem[0].weight)


class _NotAllowed:
    pass


def test_bad_weights_files(tmp_path):
    cases = {}
    cases["missing.pth"] = None
    (tmp_path / "text.pth").write_text("not a checkpoint\n")
    cases["text.pth"] = "cannot load safely"
    torch.save({"obj": _NotAllowed()}, tmp_path / "pickle.pth")  # needs arbitrary unpickling
    cases["pickle.pth"] = "cannot load safely"
    torch.save([torch.zeros(1)], tmp_path / "list.pth")
    cases["list.pth"] = "not a state dict"
    torch.save(create_backbone("resnet14").state_dict(), tmp_path / "other_depth.pth")
    cases["other_depth.pth"] = "unexpected keys [stage1.1."
    torch.save(create_backbone("resnet8", width=2).state_dict(), tmp_path / "other_width.pth")
    cases["other_width.pth"] = "stem.0.weight has shape (32, 3, 3, 3)"
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    cases["bad.safetensors"] = "safetensors"
    for file_name, needle in cases.items():
        with pytest.raises(ValueError) as info:
            create_backbone("resnet8", pretrained=tmp_path / file_name)
        one_line_message(info, str(tmp_path / file_name), *([needle] if needle else ["no such weights file"]))
    with pytest.raises(ValueError) as info:
        create_backbone("resnet20", pretrained=tmp_path / "other_depth.pth")
    one_line_message(info, "missing keys [stage1.2.conv1.weight")


# ---------------------------------------------------------------- image hash models


def test_create_image_model_default_head():
    model = create_image_model("resnet20", bits=32)
    assert isinstance(model, HashModel) and model.bits == 32
    linears = [m for m in model.head.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 1 and linears[0].in_features == 96  # one layer, DeepHash style
    model = create_image_model(ModelOptions(backbone="resnet8", hidden=[64]), bits=16, width=1)
    assert [m.out_features for m in model.head.modules() if isinstance(m, nn.Linear)] == [64, 16]
    with torch.no_grad():
        assert model.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 16)



def test_create_image_model_takes_the_run_s_model_options():
    """ModelOptions' head dropout, BatchNorm, stages and precision reach the model; "auto" precision
    (resolved by a run's config) builds a float32 backbone; options naming no backbone are refused."""
    model = create_image_model(ModelOptions(backbone="resnet8", hidden=[32], head_dropout=0.25, freeze_bn=True,
                                            train_stages=1, backbone_precision="bf16"), bits=16)
    assert [m.p for m in model.head.modules() if isinstance(m, nn.Dropout)] == [0.25]
    assert (model.freeze_bn, model.bf16_backbone, model.fixed_stages) == (True, True, 3)  # resnet8: stem + 3 stages
    assert create_image_model(ModelOptions(backbone="resnet8"), bits=16).bf16_backbone is False
    with pytest.raises(InputError, match="names no backbone"):
        create_image_model(ModelOptions(), bits=16)

def test_frozen_backbone_gets_no_gradients_and_keeps_batchnorm_statistics():
    torch.manual_seed(0)
    x = torch.randn(8, 3, 32, 32) * 3 + 1
    for frozen in (True, False):
        model = create_image_model(ModelOptions(backbone="resnet8", freeze_backbone=frozen), bits=16).train()
        bn = model.backbone.stem[1]
        before = bn.running_mean.clone()
        assert model.training and model.head.training
        assert model.backbone.training is not frozen
        assert all(not m.training for m in model.backbone.modules()) is frozen
        model(x).square().mean().backward()
        assert torch.equal(bn.running_mean, before) is frozen
        backbone_grads = [p.grad for p in model.backbone.parameters()]
        if frozen:
            assert all(g is None for g in backbone_grads)
        else:
            assert all(g is not None for g in backbone_grads)
        assert all(p.grad is not None for p in model.head.parameters())


def test_model_modules_never_import_torchvision_eagerly():
    for path in Path(models_package.__file__).parent.glob("*.py"):
        source = path.read_text()
        assert "\nimport torchvision" not in source and "\nfrom torchvision" not in source, path.name
