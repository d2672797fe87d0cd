"""Normalizations along axes: ``softmax log_softmax mean_norm std_norm layer_norm normalize``."""

from __future__ import annotations

from ..dtype import DType
from ._util import normalize_axes
from .binary import _grad_rule, where


class NormOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with softmax and the normalizations."""

    def softmax(self, axis=-1):
        """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (an int or tuple)."""
        x = self._floating()
        axes = normalize_axes(axis, x.ndim)
        if x.dtype == DType.bfloat16:  # computed in float32, rounded once (PyTorch's CPU kernel; its backward too)
            return _grad_rule(x.cast(DType.float32).softmax(axis).cast(DType.bfloat16), "softmax", (x,), axes)
        e = (x - x.max(axes, keepdim=True)).exp()
        # differentiated as torch does, from the result alone (autograd's "softmax" rule): the backward then
        # reads neither x, its maximum nor the exponentials (which attention's fused kernel keeps in scratch)
        return _grad_rule(e / e.sum(axes, keepdim=True), "softmax", (x,), axes)

    def log_softmax(self, axis=-1):
        """``x - max - log(sum(exp(x - max)))`` (stable)."""
        x = self._floating()
        axes = normalize_axes(axis, x.ndim)
        if x.dtype == DType.bfloat16:  # computed in float32, rounded once (PyTorch's CPU kernel; its backward too)
            return _grad_rule(x.cast(DType.float32).log_softmax(axis).cast(DType.bfloat16), "log_softmax", (x,), axes)
        shifted = x - x.max(axes, keepdim=True)
        return _grad_rule(shifted - shifted.exp().sum(axes, keepdim=True).log(), "log_softmax", (x,), axes)

    def mean_norm(self, axis=-1):
        """Subtract the mean along ``axis``."""
        return self - self.mean(normalize_axes(axis, self.ndim), keepdim=True)

    def std_norm(self, axis=-1, epsilon: float = 1e-5):
        """Divide by ``sqrt(mean(x^2) + epsilon)`` along ``axis`` (RMS normalization)."""
        axes = normalize_axes(axis, self.ndim)
        return self * (self.square().mean(axes, keepdim=True) + epsilon).rsqrt()

    def layer_norm(self, axis=-1, epsilon: float = 1e-5):
        """``(x - mean) / sqrt(var + epsilon)`` with the biased variance (no affine parameters); bfloat16 is
        computed in float32 and rounded once."""
        if self.dtype == DType.bfloat16:
            return self.cast(DType.float32).layer_norm(axis, epsilon).cast(DType.bfloat16)
        return self._floating().mean_norm(axis).std_norm(axis, epsilon)

    def normalize(self, p: float = 2.0, axis=-1, epsilon: float = 1e-12):
        """``x / max(||x||_p, epsilon)`` along ``axis`` (``torch.nn.functional.normalize``); ``p = 0`` counts
        the nonzero entries and ``p = -inf`` takes the smallest ``|x|``, as ``torch.linalg.vector_norm``."""
        axes = normalize_axes(axis, self.ndim)
        x = self._floating()
        if p == 0:
            norm = x.ne(0).cast(x.dtype).sum(axes, keepdim=True)
        elif p == -float("inf"):
            norm = x.abs().min(axes, keepdim=True)
        elif p == 2:
            squares = x.square().sum(axes, keepdim=True)
            # sqrt on a safe value: an all-zero slice gets norm 0 (then epsilon) and a zero gradient
            # for the norm, not 0 * inf (PyTorch: x / epsilon)
            positive = squares > 0
            norm = where(positive, where(positive, squares, 1.0).sqrt(), 0.0)
        elif p == 1:
            norm = x.abs().sum(axes, keepdim=True)
        elif p == float("inf"):
            norm = x.abs().max(axes, keepdim=True)
        else:
            norm = x.abs().pow(p).sum(axes, keepdim=True).pow(1.0 / p)
        return x / norm.clip(min=epsilon)  # (clamp_min: at a tie the gradient goes to the norm, as in PyTorch)
