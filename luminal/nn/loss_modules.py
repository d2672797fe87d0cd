"""PyTorch's loss modules (``nn.MSELoss``, ``nn.CrossEntropyLoss``...): each holds its options (and a class
``weight`` as a buffer) and calls its functional form in :mod:`luminal.nn.losses`."""

from __future__ import annotations

import numpy as np

from ..module import Module, bind
from ..tensor import GraphTensor
from .losses import (_host_array, _legacy_reduction, binary_cross_entropy, binary_cross_entropy_with_logits,
                     cross_entropy, huber_loss, kl_div, l1_loss, mse_loss, nll_loss, smooth_l1_loss)

__all__ = ["MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
           "BCEWithLogitsLoss", "KLDivLoss"]


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}" if self.reduction != "mean" else ""


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self._set_buffer("weight", weight)

    def _set_buffer(self, name: str, value) -> None:
        """A weight given as data is a buffer (in ``state_dict``, like PyTorch's); a GraphTensor is used as is."""
        if value is None or isinstance(value, GraphTensor):
            object.__setattr__(self, name, value)
        else:
            arr = _host_array(value)
            self.register_buffer(name, arr.astype(np.float32) if arr.dtype.kind in "biu" else arr)

    def _bound(self, name: str, like):
        value = getattr(self, name)
        if value is None or isinstance(value, GraphTensor):
            return value
        return bind(value, like)


class MSELoss(_Loss):
    """``torch.nn.MSELoss(size_average=None, reduce=None, reduction='mean')``."""

    def forward(self, input, target):
        return mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """``torch.nn.L1Loss(size_average=None, reduce=None, reduction='mean')``."""

    def forward(self, input, target):
        return l1_loss(input, target, reduction=self.reduction)


class HuberLoss(_Loss):
    """``torch.nn.HuberLoss(reduction='mean', delta=1.0)``."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return huber_loss(input, target, reduction=self.reduction, delta=self.delta)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [super().extra_repr(), f"delta={self.delta}"]))


class SmoothL1Loss(_Loss):
    """``torch.nn.SmoothL1Loss(size_average=None, reduce=None, reduction='mean', beta=1.0)``."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [super().extra_repr(), f"beta={self.beta}"]))


class NLLLoss(_WeightedLoss):
    """``torch.nn.NLLLoss(weight=None, size_average=None, ignore_index=-100, reduce=None, reduction='mean')``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return nll_loss(input, target, self._bound("weight", input), ignore_index=self.ignore_index,
                        reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """``torch.nn.CrossEntropyLoss(weight=None, size_average=None, ignore_index=-100, reduce=None,
    reduction='mean', label_smoothing=0.0)``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return cross_entropy(input, target, self._bound("weight", input), ignore_index=self.ignore_index,
                             reduction=self.reduction, label_smoothing=self.label_smoothing)


class BCELoss(_WeightedLoss):
    """``torch.nn.BCELoss(weight=None, size_average=None, reduce=None, reduction='mean')``."""

    def forward(self, input, target):
        return binary_cross_entropy(input, target, self._bound("weight", input), reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """``torch.nn.BCEWithLogitsLoss(weight=None, size_average=None, reduce=None, reduction='mean',
    pos_weight=None)``."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self._set_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return binary_cross_entropy_with_logits(input, target, self._bound("weight", input),
                                                reduction=self.reduction,
                                                pos_weight=self._bound("pos_weight", input))


class KLDivLoss(_Loss):
    """``torch.nn.KLDivLoss(size_average=None, reduce=None, reduction='mean', log_target=False)``."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
