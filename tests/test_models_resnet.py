"""luminal.models.ResNet against a PyTorch twin with torchvision's module names (torchvision itself cannot be
installed beside this torch build), in evaluation mode: random weights and BatchNorm running statistics
(torch.manual_seed), saved as a torchvision-style ``.pth`` state dict and as ``.safetensors``, loaded with
``ResNet.from_pretrained`` (architecture inferred from the weights). Logits within 1e-4 (float32 through about
20 convolutions and BatchNorms, observed ~1e-6). Small images keep it fast.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as T

import luminal as lm
from luminal.models import MissingWeightError, ResNet, resnet18


class _TBasic(T.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64):
        super().__init__()
        self.conv1 = T.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = T.BatchNorm2d(planes)
        self.relu = T.ReLU()
        self.conv2 = T.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = T.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + idt)


class _TBottleneck(T.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = T.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = T.BatchNorm2d(width)
        self.conv2 = T.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = T.BatchNorm2d(width)
        self.conv3 = T.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = T.BatchNorm2d(planes * 4)
        self.relu = T.ReLU()
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class _TResNet(T.Module):
    def __init__(self, block, layers, num_classes=1000, groups=1, width_per_group=64):
        super().__init__()
        self.inplanes, self.groups, self.base_width = 64, groups, width_per_group
        self.conv1 = T.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = T.BatchNorm2d(64)
        self.relu = T.ReLU()
        self.maxpool = T.MaxPool2d(3, 2, 1)
        self.layer1 = self._make(block, 64, layers[0])
        self.layer2 = self._make(block, 128, layers[1], 2)
        self.layer3 = self._make(block, 256, layers[2], 2)
        self.layer4 = self._make(block, 512, layers[3], 2)
        self.avgpool = T.AdaptiveAvgPool2d((1, 1))
        self.fc = T.Linear(512 * block.expansion, num_classes)

    def _make(self, block, planes, blocks, stride=1):
        down = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            down = T.Sequential(T.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                T.BatchNorm2d(planes * block.expansion))
        out = [block(self.inplanes, planes, stride, down, self.groups, self.base_width)]
        self.inplanes = planes * block.expansion
        out += [block(self.inplanes, planes, 1, None, self.groups, self.base_width) for _ in range(1, blocks)]
        return T.Sequential(*out)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _twin(block, layers, classes, seed=0, **kw):
    torch.manual_seed(seed)
    m = _TResNet(block, layers, classes, **kw)
    with torch.no_grad():  # non-trivial BatchNorm statistics and affine parameters
        for mod in m.modules():
            if isinstance(mod, T.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    return m.eval()


def _images(n, size=40, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


@pytest.mark.parametrize("arch", ["resnet18", "bottleneck-1111", "resnext-1111", "wide-1111"])
def test_from_pretrained_pth_matches_torch(tmp_path, arch):
    block, layers, kw = {"resnet18": (_TBasic, [2, 2, 2, 2], {}),
                         "bottleneck-1111": (_TBottleneck, [1, 1, 1, 1], {}),
                         "resnext-1111": (_TBottleneck, [1, 1, 1, 1], dict(groups=4, width_per_group=8)),
                         "wide-1111": (_TBottleneck, [1, 1, 1, 1], dict(width_per_group=96))}[arch]
    tm = _twin(block, layers, 17, **kw)
    path = tmp_path / "weights.pth"
    torch.save(tm.state_dict(), path)
    model = ResNet.from_pretrained(path)
    assert model.layers_spec == layers and model.groups == kw.get("groups", 1)
    x = _images(2)
    with torch.no_grad():
        want = tm(torch.from_numpy(x)).numpy()
    got = model.predict(x)
    assert got.shape == (2, 17)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_safetensors_symbolic_batch_and_reference_device(tmp_path):
    """A .safetensors file with torchvision's names; one program serves batch 1 and 3 (same runtime object);
    the reference interpreter agrees."""
    from luminal.io import save_safetensors

    tm = _twin(_TBasic, [1, 1, 1, 1], 5, seed=3)
    path = tmp_path / "r.safetensors"
    save_safetensors({k: v.numpy() for k, v in tm.state_dict().items() if v.dtype != torch.int64}, path)
    model = ResNet.from_pretrained(path, strict=False)
    x = _images(3, 32, seed=4)
    with torch.no_grad():
        want = tm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model.predict(x[:1]), want[:1], rtol=1e-4, atol=1e-4)
    runtime = model._programs[(32, 32, "cpu")][0].runtime
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-4, atol=1e-4)
    assert model._programs[(32, 32, "cpu")][0].runtime is runtime
    np.testing.assert_allclose(model.predict(x, device="reference"), want, rtol=1e-4, atol=1e-4)


def test_state_dict_keys_are_torchvisions():
    assert list(resnet18(10).state_dict()) == list(_TResNet(_TBasic, [2, 2, 2, 2], 10).state_dict())


def test_training_step_gradients_match_torch():
    """The zoo model is an ordinary luminal Module: a cross-entropy gradient in train mode equals torch's."""
    import luminal.nn.functional as F
    from luminal.training import grad

    tm = _twin(_TBasic, [1, 1, 1, 1], 4, seed=5).train()
    model = ResNet("basic", [1, 1, 1, 1], num_classes=4)
    model.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    # 4 images of 64x64: layer4's train-mode BatchNorm then normalizes 16 values per channel (with 2 images of
    # 32x32 it would see 2, and its gradient would amplify float32 noise without bound)
    x, y = _images(4, 64, seed=6), np.array([1, 3, 0, 2])
    loss_t = T.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
    loss_t.backward()
    cx = lm.Graph()
    loss = F.cross_entropy(model(cx.tensor(x.shape).set(x)), cx.tensor((4,), "int64").set(y))
    g = grad(loss, [model.fc.weight, model.conv1.weight])
    for t in (loss, *g):
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(loss.data(), loss_t.item(), rtol=1e-5)
    # float32 sums over every position in another order, through five train-mode BatchNorms
    np.testing.assert_allclose(g[0].data(), tm.fc.weight.grad.numpy(), rtol=1e-3, atol=2e-4)
    np.testing.assert_allclose(g[1].data(), tm.conv1.weight.grad.numpy(), rtol=1e-3, atol=2e-4)


def test_bad_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a file"):
        ResNet.from_pretrained(tmp_path / "missing.pth")
    torch.save({"conv1.weight": torch.zeros(64, 3, 7, 7)}, tmp_path / "partial.pth")
    with pytest.raises(MissingWeightError, match="fc.weight"):
        ResNet.from_pretrained(tmp_path / "partial.pth")
    with pytest.raises(ValueError, match="four positive"):
        ResNet("basic", [2, 2, 2])
    with pytest.raises(ValueError, match="block must be one of"):
        ResNet("dense", [1, 1, 1, 1])
    model = ResNet("basic", [1, 1, 1, 1], num_classes=3)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        model.predict(np.zeros((2, 1, 8, 8), np.float32))
