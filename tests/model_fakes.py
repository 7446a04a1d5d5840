"""Small stand-ins for torchvision's models (their attribute structure, random weights): the
torchvision wrappers are tested without torchvision, which does not import with the CPU torch."""

import sys
import types

from torch import nn


def fake_resnet(weights=None):
    """The attribute structure of torchvision's ResNet, small."""
    assert weights is None
    net = nn.Module()
    net.conv1, net.bn1, net.relu = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
    net.maxpool = nn.MaxPool2d(2)
    net.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
    net.layer2, net.layer3 = nn.Conv2d(8, 16, 1), nn.Conv2d(16, 16, 1)
    net.layer4 = nn.Sequential(nn.Conv2d(16, 32, 1), nn.BatchNorm2d(32))
    net.avgpool, net.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(32, 10)
    return net


def fake_alexnet(weights=None):
    assert weights is None
    net = nn.Module()
    net.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.MaxPool2d(2))
    net.avgpool = nn.AdaptiveAvgPool2d(2)
    net.classifier = nn.Sequential(nn.Dropout(), nn.Linear(32, 24), nn.ReLU(), nn.Dropout(),
                                   nn.Linear(24, 20), nn.ReLU(), nn.Linear(20, 10))
    return net


def install_fake_torchvision(monkeypatch) -> None:
    """`import torchvision` gives the fakes for the rest of the test."""
    models = types.SimpleNamespace(resnet50=fake_resnet, alexnet=fake_alexnet)
    package = types.ModuleType("torchvision")
    package.models = models
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
