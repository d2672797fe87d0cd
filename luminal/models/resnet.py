"""ResNet-family CNNs in torchvision's layout: ``resnet18/34/50/101/152``, ``resnext50_32x4d``,
``wide_resnet50_2`` and any ``ResNet(block, layers, ...)``, whose ``state_dict`` keys are torchvision's
(``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0``, ``fc``...), so torchvision checkpoints load
as they are.

    model = ResNet.from_pretrained("resnet18-f37072fd.pth")     # torchvision .pth (needs torch) or .safetensors
    logits = model.predict(images)                               # numpy (N, 3, H, W) float32 -> numpy (N, classes)

``from_pretrained`` infers the architecture from the weights (block type from ``layer1.0.conv3``, the block
count per stage, widths and groups from the shapes, the class count from ``fc``). ``predict`` runs the model in
evaluation mode (BatchNorm with its running statistics) through one compiled program with a symbolic batch
size: a new batch size does not recompile.

The blocks are torchvision's: ``BasicBlock`` (two 3x3 convolutions) and ``Bottleneck`` (1x1, 3x3 with the
stride -- "ResNet v1.5" -- and 1x1 with 4x expansion), identity shortcuts, and a 1x1 convolution + BatchNorm
``downsample`` where the shape changes.
"""

from __future__ import annotations

import os
import re

import numpy as np

from .. import nn
from ..module import Module
from ._hf import MissingWeightError, ModelConfigError

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
           "resnext50_32x4d", "wide_resnet50_2"]


class BasicBlock(Module):
    """Two 3x3 convolutions with BatchNorm and a residual connection (torchvision's ``BasicBlock``)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Module | None = None,
                 groups: int = 1, base_width: int = 64):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64 (as torchvision)")
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(Module):
    """1x1 reduce, 3x3 (carrying the stride and the groups), 1x1 expand by 4, with BatchNorm and a residual
    connection (torchvision's ``Bottleneck``, "ResNet v1.5")."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Module | None = None,
                 groups: int = 1, base_width: int = 64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


_BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(Module):
    """torchvision's ResNet: a 7x7/2 stem, 3x3/2 max pooling, four stages of ``block`` (``layers[i]`` blocks
    each, widths 64-128-256-512 times the expansion, stride 2 from the second stage on), global average
    pooling and a linear classifier."""

    def __init__(self, block: type | str, layers, num_classes: int = 1000, groups: int = 1,
                 width_per_group: int = 64, in_channels: int = 3):
        super().__init__()
        if isinstance(block, str):
            if block not in _BLOCKS:
                raise ValueError(f"ResNet: block must be one of {sorted(_BLOCKS)} (or a block class), got {block!r}")
            block = _BLOCKS[block]
        layers = [int(n) for n in layers]
        if len(layers) != 4 or any(n < 1 for n in layers):
            raise ValueError(f"ResNet: layers must be four positive block counts, got {layers}")
        if num_classes < 1:
            raise ValueError(f"ResNet: num_classes must be positive, got {num_classes}")
        self.block, self.layers_spec = block, layers
        self.groups, self.base_width = groups, width_per_group
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        self._programs: dict = {}

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride=stride,
                                                 bias=False), nn.BatchNorm2d(planes * block.expansion))
        out = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            out.append(block(self.inplanes, planes, 1, None, self.groups, self.base_width))
        return nn.Sequential(*out)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))

    # ------------------------------------------------------------------ running on numpy
    def predict(self, images, device: str = "cpu") -> np.ndarray:
        """Logits of ``images`` (numpy ``(N, C, H, W)``, float32) in evaluation mode, as numpy ``(N, classes)``.
        One compiled program per image size and device; the batch size is symbolic."""
        arr = np.asarray(images)
        if arr.ndim != 4 or arr.shape[1] != self.conv1.in_channels:
            raise ValueError(f"ResNet.predict expects images of shape (N, {self.conv1.in_channels}, H, W), got "
                             f"{arr.shape}")
        if arr.dtype.kind not in "fiu":
            raise TypeError(f"ResNet.predict expects numeric images, got {arr.dtype}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        key = (arr.shape[2], arr.shape[3], device)
        prog = self._programs.get(key)
        if prog is None:
            from ..graph import Graph
            self.eval()
            cx = Graph()
            x = cx.tensor(("batch", arr.shape[1], arr.shape[2], arr.shape[3]), name="images")
            out = self(x).retrieve()
            cx.compile(device=device)
            prog = self._programs[key] = (cx, x, out)
        cx, x, out = prog
        x.set(arr)
        cx.execute()
        return out.data()

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, path, strict: bool = True) -> "ResNet":
        """A ResNet with the weights of ``path``: a torchvision state dict saved with ``torch.save`` (``.pth`` /
        ``.pt``, read with ``weights_only=True``; needs torch) or a ``.safetensors`` file with torchvision's key
        names. The architecture is inferred from the weights."""
        state = _read_state(path)
        block, layers, groups, width, classes, in_ch = infer_architecture(state, where=os.fspath(path))
        model = cls(block, layers, num_classes=classes, groups=groups, width_per_group=width, in_channels=in_ch)
        _check_shapes(model, state, os.fspath(path))
        model.load_state_dict(state, strict=strict)
        return model.eval()


def _read_state(path) -> dict:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path!r} is not a file; expected a torchvision state dict (.pth) or .safetensors")
    if path.endswith(".safetensors"):
        from ..io import load_safetensors
        return load_safetensors(path, dtype="float32")
    try:
        import torch
    except ImportError:
        raise ImportError(f"reading {path!r} (a torch checkpoint) needs torch; install it or convert the weights "
                          "to .safetensors") from None
    raw = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(raw, dict) and "state_dict" in raw and isinstance(raw["state_dict"], dict):
        raw = raw["state_dict"]
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{path}: expected a state dict (a mapping of tensor names to tensors), got "
                               f"{type(raw).__name__}")
    state = {}
    for k, v in raw.items():
        k = k[len("module."):] if k.startswith("module.") else k  # DataParallel checkpoints
        v = v.detach()
        state[k] = (v.float() if v.is_floating_point() else v).numpy()
    return state


def infer_architecture(state: dict, where: str = "weights"):
    """``(block class, blocks per stage, groups, width_per_group, classes, input channels)`` of a torchvision
    ResNet state dict."""
    def need(name):
        if name not in state:
            raise MissingWeightError(f"{where}: no tensor {name!r}; expected a torchvision ResNet state dict "
                                     f"(keys such as conv1.weight, layer1.0.conv1.weight, fc.weight)")
        return np.asarray(state[name])

    stem = need("conv1.weight")
    fc = need("fc.weight")
    layers = []
    for stage in range(1, 5):
        idx = {int(m.group(1)) for k in state for m in [re.match(rf"layer{stage}\.(\d+)\.conv1\.weight$", k)] if m}
        if not idx:
            raise MissingWeightError(f"{where}: no blocks in stage layer{stage} (no 'layer{stage}.0.conv1.weight')")
        layers.append(max(idx) + 1)
    bottleneck = "layer1.0.conv3.weight" in state
    groups, width = 1, 64
    if bottleneck:
        mid = need("layer1.0.conv2.weight")  # (w, w / groups, 3, 3) with w = base_width * groups in stage 1
        w = mid.shape[0]
        groups = w // mid.shape[1]
        width = w // groups
    return (Bottleneck if bottleneck else BasicBlock), layers, groups, width, fc.shape[0], stem.shape[1]


def _check_shapes(model: Module, state: dict, where: str) -> None:
    own = model.state_dict()
    for k, v in state.items():
        if k in own and tuple(np.shape(v)) != tuple(np.shape(own[k])):
            raise MissingWeightError(f"{where}: tensor {k!r} has shape {tuple(np.shape(v))}, the inferred "
                                     f"architecture needs {tuple(np.shape(own[k]))}")


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def resnet34(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


def resnet101(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 23, 3], num_classes)


def resnet152(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 8, 36, 3], num_classes)


def resnext50_32x4d(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, groups=32, width_per_group=4)


def wide_resnet50_2(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, width_per_group=128)
