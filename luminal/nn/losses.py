"""Loss functions with ``torch.nn.functional``'s names, arguments and semantics, and their Module forms.

Functional: ``mse_loss l1_loss huber_loss smooth_l1_loss cross_entropy nll_loss binary_cross_entropy
binary_cross_entropy_with_logits kl_div``. Modules: ``MSELoss L1Loss HuberLoss SmoothL1Loss CrossEntropyLoss
NLLLoss BCELoss BCEWithLogitsLoss KLDivLoss`` (PyTorch's constructor arguments; ``weight`` / ``pos_weight`` are
buffers, so ``state_dict()`` matches PyTorch's).

Every loss is a composition of the high-level ops, written so that its primitive-op derivatives are well behaved
(the autograd pass differentiates them later):

* ``log_softmax`` subtracts the maximum before ``exp``; logits of +-1000 give finite losses.
* Class-index targets never ``Gather`` from the logits: the target is compared with an ``arange(C)`` iota to make a
  one-hot mask, and ``where(mask, log_probs, 0)`` summed over the class axis picks the target's log-probability. An
  out-of-range ``ignore_index`` (the default -100) matches no class, so ignored positions contribute nothing; an
  in-range one is masked explicitly. ``-inf`` logits of non-target classes stay harmless (as in PyTorch).
* ``binary_cross_entropy_with_logits`` is ``max(x, 0) - x*y + log1p(exp(-|x|))`` (with ``pos_weight``:
  ``(1 - y) x + (1 + (pos_weight - 1) y) (log1p(exp(-|x|)) + max(-x, 0))``, PyTorch's form), with ``max(-x, 0)``
  written as ``max(x, 0) - x`` so that the one-sided derivatives chosen at ``x == 0`` agree (exact gradient).
* The L1 losses' ``|d|`` has derivative 0 at ``d == 0`` (PyTorch's ``sign``).
* ``binary_cross_entropy`` clamps both logarithms to ``>= -100`` as PyTorch does; ``log`` never sees a probability
  of 0 (a denormal counts as 0), so saturated sigmoids give a finite gradient rather than ``0 * inf = NaN``.
* ``kl_div``'s ``xlogy(y, y)`` is ``y * log(where(y == 0, 1, y))``: 0 at ``y == 0`` with a finite derivative.

Operands: ``input`` must be a :class:`~luminal.tensor.GraphTensor`; targets and weights may be GraphTensors of the
same graph, numpy arrays / nested lists / torch tensors (they become inputs of the input's graph, set with that
data) or Python numbers (constants; for the elementwise losses a number broadcasts to the input's shape). Tensor
targets of the elementwise losses must have exactly the input's shape (PyTorch only warns before broadcasting;
here it is an error naming both shapes). The deprecated ``size_average`` / ``reduce`` arguments are honoured as in
PyTorch, so positional calls line up with ``torch.nn.functional``. Sizes may be symbolic (a ``"batch"`` dim).

Data checks: class indices out of range (other than ``ignore_index``) and ``binary_cross_entropy`` inputs outside
[0, 1] (or NaN) cannot be seen while the graph is built; each loss adds a small run-time check
(:meth:`~luminal.graph.Graph.add_check`: the target's or the input's extremes, retrieved with the result), so
``execute()`` raises, on every device, ``IndexError`` / ``ValueError`` naming the bad value and the valid range,
as PyTorch does, and a training step with such data updates nothing.

Differences: ``binary_cross_entropy`` treats a denormal probability (below the smallest normal float) as 0
(log -100, where PyTorch's clamped log lies in (-100, -87.3) for float32), and its gradient at a probability of
exactly 0 or 1 is 0 where PyTorch's hand-written backward gives +-1e12.
"""

from __future__ import annotations

import numpy as np

from ..amp import autocast_float32
from ..dtype import DType, promote_types
from ..graph import GraphError
from ..hl_ops import where
from ..hl_ops._util import broadcast_dims, constant, is_scalar
from ..tensor import GraphTensor

__all__ = ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "cross_entropy", "nll_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
           "MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
           "BCEWithLogitsLoss", "KLDivLoss"]

_REDUCTIONS = ("none", "mean", "sum")


# ---------------------------------------------------------------------------------------------------- helpers
def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's ``_Reduction.legacy_get_string``: the deprecated flags win when either is given."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        return "mean"
    return "sum" if reduce else "none"


def _check_reduction(fn: str, reduction, allowed=_REDUCTIONS) -> str:
    if not isinstance(reduction, str) or reduction not in allowed:
        raise ValueError(f"{fn}: {reduction!r} is not a valid value for reduction; expected one of "
                         + ", ".join(repr(a) for a in allowed))
    return reduction


def _reduce(loss, reduction: str):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.mean()


def _shape_str(dims) -> str:
    return str(tuple(d.to_int() if d.is_constant() else str(d) for d in dims)).replace("'", "")


def _check_input(fn: str, x) -> GraphTensor:
    if not isinstance(x, GraphTensor):
        raise TypeError(f"{fn}: input must be a GraphTensor, got {type(x).__name__}")
    if x.dtype == DType.bool:
        raise GraphError(f"{fn}: input must be a floating-point tensor, got {x.dtype}")
    return x._floating()


def _host_array(value) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"expected numeric data, got an array of {arr.dtype}")
    return arr


def _host_dtype(arr: np.ndarray, float_dtype: DType) -> DType:
    if arr.dtype.kind == "f":
        return float_dtype
    if arr.dtype.kind == "b":
        return DType.bool
    return DType.int32 if arr.dtype == np.int32 else DType.int64


def _operand(fn: str, like: GraphTensor, value, name: str) -> GraphTensor:
    """``value`` as a tensor of ``like``'s graph: GraphTensors as they are, numbers as constants, arrays (numpy,
    lists, torch tensors) as inputs set with the data. Float data takes ``like``'s dtype."""
    if isinstance(value, GraphTensor):
        if value.graph is not like.graph:
            raise GraphError(f"{fn}: {name} belongs to a different graph than the input")
        return value
    if is_scalar(value):
        return constant(like.graph, value, _host_dtype(np.asarray(value), like.dtype), ())
    try:
        arr = _host_array(value)
    except TypeError as err:
        raise TypeError(f"{fn}: {name} must be a GraphTensor, an array or a number ({err})") from None
    dtype = _host_dtype(arr, like.dtype)
    return like.graph.tensor(arr.shape, dtype, f"{fn}.{name}").set(arr.astype(dtype.numpy))


def _float_operand(fn: str, like: GraphTensor, value, name: str) -> GraphTensor:
    return _operand(fn, like, value, name).cast(like.dtype)


def _same_shape(fn: str, x: GraphTensor, t: GraphTensor, name: str = "target") -> None:
    if tuple(t.dims) != tuple(x.dims):
        raise GraphError(f"{fn}: {name} shape {_shape_str(t.dims)} must be the same as the input shape "
                         f"{_shape_str(x.dims)}")


def _broadcastable_to(fn: str, x: GraphTensor, w: GraphTensor, name: str) -> GraphTensor:
    try:
        dims = broadcast_dims(x.dims, w.dims)
    except GraphError:
        dims = None
    if dims is None or tuple(dims) != tuple(x.dims):
        raise GraphError(f"{fn}: {name} of shape {_shape_str(w.dims)} does not broadcast to the input shape "
                         f"{_shape_str(x.dims)}")
    return w


def _elementwise_pair(fn: str, input, target):
    """Input and target in a common floating dtype; a number target broadcasts, a tensor must match exactly."""
    x = _check_input(fn, input)
    t = _operand(fn, x, target, "target")
    if not is_scalar(target):
        _same_shape(fn, x, t)
    dtype = promote_types(x.dtype, t.dtype)
    if not dtype.is_float:
        dtype = DType.float32
    return x.cast(dtype), t.cast(dtype)


def _count(graph, n, dtype: DType):
    """A (possibly symbolic) size as a Python float or a constant node of ``dtype``."""
    return float(n.to_int()) if n.is_constant() else constant(graph, n, dtype, ())


# ---------------------------------------------------------------------------------------------------- regression
def _weighted_reduce(fn, x, loss, weight, reduction, divide_by_weight: bool):
    """PyTorch's elementwise ``weight`` (same shape as the input): ``mean`` is ``sum(w l) / sum(w)`` for MSE/L1
    and ``mean(w l)`` for Huber."""
    if weight is None:
        return _reduce(loss, reduction)
    w = _float_operand(fn, x, weight, "weight")
    if tuple(w.dims) != tuple(x.dims):
        raise ValueError(f"{fn}: weight of shape {_shape_str(w.dims)} and input of shape {_shape_str(x.dims)} "
                         "must have the same size")
    loss = loss * w
    if reduction == "mean" and divide_by_weight:
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def _abs0(d):
    """``|d|`` whose derivative at 0 is 0 (``sign(0)``, PyTorch's L1 gradient) rather than ``abs``'s +1."""
    return where(d.eq(0.0), 0.0, d.abs())


@autocast_float32  # luminal.autocast: computed in float32, as torch
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error ``(input - target)**2``; with an elementwise ``weight``, ``mean`` divides by its sum."""
    reduction = _check_reduction("mse_loss", _legacy_reduction(size_average, reduce, reduction))
    x, t = _elementwise_pair("mse_loss", input, target)
    return _weighted_reduce("mse_loss", x, (x - t).square(), weight, reduction, divide_by_weight=True)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean absolute error ``|input - target|``; with an elementwise ``weight``, ``mean`` divides by its sum."""
    reduction = _check_reduction("l1_loss", _legacy_reduction(size_average, reduce, reduction))
    x, t = _elementwise_pair("l1_loss", input, target)
    return _weighted_reduce("l1_loss", x, _abs0(x - t), weight, reduction, divide_by_weight=True)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """``0.5 d**2`` where ``|d| < delta``, else ``delta (|d| - delta/2)`` (``d = input - target``).

    With an elementwise ``weight``, ``mean`` is the mean of the weighted losses (PyTorch's rule)."""
    reduction = _check_reduction("huber_loss", reduction)
    delta = float(delta)
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    x, t = _elementwise_pair("huber_loss", input, target)
    d = x - t
    ad = d.abs()
    loss = where(ad < delta, d.square() * 0.5, (ad - 0.5 * delta) * delta)
    return _weighted_reduce("huber_loss", x, loss, weight, reduction, divide_by_weight=False)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - beta/2``; ``beta == 0`` is the L1 loss."""
    reduction = _check_reduction("smooth_l1_loss", _legacy_reduction(size_average, reduce, reduction))
    beta = float(beta)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    x, t = _elementwise_pair("smooth_l1_loss", input, target)
    d = x - t
    ad = d.abs()
    loss = _abs0(d) if beta == 0 else where(ad < beta, d.square() * (0.5 / beta), ad - 0.5 * beta)
    return _reduce(loss, reduction)


# ---------------------------------------------------------------------------------------------------- classification
def _class_dim(fn: str, x: GraphTensor) -> int:
    if x.ndim == 0:
        raise GraphError(f"{fn}: input must have a class dimension: (C,), (N, C) or (N, C, d1, ...); got a 0-d "
                         "tensor")
    return 0 if x.ndim == 1 else 1


def _class_weight(fn: str, x: GraphTensor, weight, cd: int):
    """The per-class ``weight`` (C,) viewed to broadcast along the class axis of ``x``, or None."""
    if weight is None:
        return None
    w = _float_operand(fn, x, weight, "weight")
    n_classes = x.dims[cd]
    if w.ndim != 1 or w.dims[0] != n_classes:
        raise GraphError(f"{fn}: weight should hold one value per class ({n_classes}), got shape "
                         f"{_shape_str(w.dims)} for input shape {_shape_str(x.dims)}")
    shape = [1] * x.ndim
    shape[cd] = n_classes
    return w.reshape(shape)


def _index_target(fn: str, x: GraphTensor, target, cd: int) -> GraphTensor:
    t = _operand(fn, x, target, "target")
    expected = tuple(x.dims[:cd]) + tuple(x.dims[cd + 1:])
    if not t.dtype.is_int:
        raise GraphError(f"{fn}: target must hold class indices (int32/int64) of shape {_shape_str(expected)}, got "
                         f"{t.dtype} of shape {_shape_str(t.dims)}"
                         + ("; float targets are class probabilities, which only cross_entropy takes"
                            if t.dtype.is_float else ""))
    if tuple(t.dims) != expected:
        raise GraphError(f"{fn}: class-index target of shape {_shape_str(t.dims)} does not match the input shape "
                         f"{_shape_str(x.dims)} (expected target shape {_shape_str(expected)}: the input's shape "
                         f"without the class dimension {cd})")
    return t


def _check_class_indices(fn: str, t, valid, n_classes, ignore_index: int) -> None:
    """At run time, raise ``IndexError`` when a target (other than ``ignore_index``) is not in ``[0, C)``."""
    kept = where(valid, t, 0)
    extremes = [kept.max(), kept.min()]
    if not n_classes.is_constant():  # the class count of this run comes with the extremes
        extremes.append(constant(t.graph, n_classes, DType.int64, ()))

    def check(hi, lo, c=n_classes.to_int()):
        c = int(c)
        bad = int(hi) if int(hi) >= c else int(lo) if int(lo) < 0 else None
        if bad is not None:
            return (f"{fn}: target {bad} is out of bounds: class indices must be in [0, {c}) for an input with {c} "
                    f"classes (or equal ignore_index={ignore_index})")
        return None

    t.graph.add_check(extremes, check, IndexError)


def _nll_core(logp, t, w, cd: int, ignore_index, reduction, label_smoothing=0.0, fn: str = "nll_loss"):
    """NLL (optionally label-smoothed) of log-probabilities ``logp`` at the validated integer target ``t`` with the
    class weight view ``w`` (or None): PyTorch's ``nll_loss`` / ``cross_entropy_loss_label_smoothing``."""
    graph, dtype = logp.graph, logp.dtype
    n_classes = logp.dims[cd]
    ignore_index = int(ignore_index)

    valid = t.ne(ignore_index)  # (N, d...)
    _check_class_indices(fn, t, valid, n_classes, ignore_index)
    # log p[target] by a gather: O(N) reads, not a masked sum over all N x C log-probabilities (its gradient, one
    # pick per row, is the fused one-hot). Ignored and out-of-range targets read class 0 (the run-time check
    # above reports the latter) and are zeroed.
    safe = where(valid.logical_and(t >= 0).logical_and(t < n_classes), t, 0).unsqueeze(cd)
    picked = where(valid, logp.gather(cd, safe).squeeze(cd), 0.0)
    if w is None:
        w_t = valid.cast(dtype)
        loss = -picked
    else:
        w_t = where(valid, w.expand(logp.dims).gather(cd, safe).squeeze(cd), 0.0)  # weight[target], 0 if ignored
        loss = -(picked * w_t)
    if label_smoothing > 0.0:
        smooth = -((logp if w is None else logp * w).sum(cd))
        smooth = where(valid, smooth, 0.0)
        loss = loss * (1.0 - label_smoothing) + smooth * label_smoothing / _count(graph, n_classes, dtype)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w_t.sum()  # PyTorch: divide by the summed weights of the non-ignored targets


@autocast_float32  # luminal.autocast: computed in float32, as torch
def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean"):
    """Negative log-likelihood of log-probabilities ``input`` (C,), (N, C) or (N, C, d1, ...) at integer class
    indices ``target`` () / (N,) / (N, d1, ...).

    ``weight`` (C,) scales each class; targets equal to ``ignore_index`` contribute nothing, and ``mean`` divides
    by the summed weights of the non-ignored targets (NaN when all are ignored, as in PyTorch). ``execute()``
    raises ``IndexError`` naming the value when a target is outside ``[0, C)`` and not ``ignore_index``.
    """
    reduction = _check_reduction("nll_loss", _legacy_reduction(size_average, reduce, reduction))
    x = _check_input("nll_loss", input)
    cd = _class_dim("nll_loss", x)
    t = _index_target("nll_loss", x, target, cd)
    return _nll_core(x, t, _class_weight("nll_loss", x, weight, cd), cd, ignore_index, reduction)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy of logits ``input`` (C,), (N, C) or (N, C, d1, ...) (``log_softmax`` over the class axis).

    ``target``: integer class indices of the input's shape without the class axis (``weight``, ``ignore_index``
    and ``label_smoothing`` as in :func:`nll_loss` / PyTorch), or floating class probabilities of the input's
    shape (``mean`` divides by the number of positions, N * d1 * ...; ``ignore_index`` is not supported there).
    Class indices outside ``[0, C)`` (other than ``ignore_index``) make ``execute()`` raise ``IndexError``.
    """
    reduction = _check_reduction("cross_entropy", _legacy_reduction(size_average, reduce, reduction))
    label_smoothing = float(label_smoothing)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    x = _check_input("cross_entropy", input)
    cd = _class_dim("cross_entropy", x)
    t = _operand("cross_entropy", x, target, "target")
    if t.dtype.is_int:
        t = _index_target("cross_entropy", x, t, cd)
        w = _class_weight("cross_entropy", x, weight, cd)
        return _nll_core(x.log_softmax(cd), t, w, cd, ignore_index, reduction, label_smoothing, "cross_entropy")
    if not t.dtype.is_float:
        raise GraphError(f"cross_entropy: target must be class indices (int) or class probabilities (float), got "
                         f"{t.dtype}")
    if tuple(t.dims) != tuple(x.dims):
        expected = tuple(x.dims[:cd]) + tuple(x.dims[cd + 1:])
        raise GraphError(f"cross_entropy: float (class-probability) target of shape {_shape_str(t.dims)} must have "
                         f"the input's shape {_shape_str(x.dims)}; class indices of shape {_shape_str(expected)} "
                         "must be int32/int64")
    if int(ignore_index) != -100:
        raise ValueError("cross_entropy: ignore_index is not supported for floating point (class-probability) "
                         "targets")
    t = t.cast(x.dtype)
    if label_smoothing > 0.0:
        t = t * (1.0 - label_smoothing) + label_smoothing / _count(x.graph, x.dims[cd], x.dtype)
    w = _class_weight("cross_entropy", x, weight, cd)
    logp = x.log_softmax(cd)
    prod = logp * t if w is None else logp * t * w
    return _reduce(-(prod.sum(cd)), reduction)  # mean: over N * d1 * ... (= numel / C), as in PyTorch


def _clamped_log(p):
    """``max(log p, -100)`` (PyTorch's BCE clamp) whose derivative stays finite where ``p`` is 0.

    ``log`` only ever sees normal numbers: at or below the smallest normal float (0, denormals) the result is
    -100 and the gradient 0, instead of ``0 * (1/0) = NaN`` from differentiating ``max(log 0, -100)``.
    """
    ok = p > float(np.finfo(p.dtype.numpy).tiny)
    return where(ok, where(ok, p, 1.0).log().clip(min=-100.0), -100.0)


def _check_probabilities(fn: str, x) -> None:
    """At run time, raise ``ValueError`` when an element of ``x`` is outside [0, 1] or NaN (PyTorch's BCE check)."""
    nan = x.isnan()
    finite = where(nan, 0.5, x)

    def check(hi, lo, has_nan):
        bad = "nan" if has_nan else float(hi) if hi > 1 else float(lo) if lo < 0 else None
        if bad is not None:
            return (f"{fn}: input value {bad} is outside [0, 1]; all elements of input should be probabilities "
                    "between 0 and 1 (apply sigmoid first, or use binary_cross_entropy_with_logits on logits)")
        return None

    x.graph.add_check([finite.max(), finite.min(), nan.any()], check, ValueError)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """``-weight (y log x + (1 - y) log(1 - x))`` of probabilities ``x``, each log clamped to ``>= -100``.

    ``weight`` broadcasts to the input's shape. ``execute()`` raises ``ValueError`` when ``x`` holds a value
    outside [0, 1] or NaN."""
    fn = "binary_cross_entropy"
    reduction = _check_reduction(fn, _legacy_reduction(size_average, reduce, reduction))
    x, y = _elementwise_pair(fn, input, target)
    _check_probabilities(fn, x)
    loss = -(y * _clamped_log(x) + (1.0 - y) * _clamped_log(1.0 - x))
    if weight is not None:
        loss = loss * _broadcastable_to(fn, x, _float_operand(fn, x, weight, "weight"), "weight")
    return _reduce(loss, reduction)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """BCE of ``sigmoid(input)`` in the stable form ``max(x, 0) - x y + log1p(exp(-|x|))``.

    ``pos_weight`` (broadcast along the last, class, axis) scales the positive term:
    ``(1 - y) x + (1 + (pos_weight - 1) y) (log1p(exp(-|x|)) + max(-x, 0))``; ``weight`` scales each element.
    """
    fn = "binary_cross_entropy_with_logits"
    reduction = _check_reduction(fn, _legacy_reduction(size_average, reduce, reduction))
    x, y = _elementwise_pair(fn, input, target)
    # relu(x) has slope 0 at x == 0 and -|x| is written with slope +1 there, so the derivative at 0 is
    # sigmoid(0) - y = 1/2 - y, exactly
    log1p_term = where(x > 0, -x, x).exp().log1p()
    if pos_weight is None:
        loss = x.relu() - x * y + log1p_term
    else:
        pw = _broadcastable_to(fn, x, _float_operand(fn, x, pos_weight, "pos_weight"), "pos_weight")
        log_weight = (pw - 1.0) * y + 1.0
        softplus_neg = log1p_term + x.relu() - x  # log(1 + exp(-x)) = log1p(exp(-|x|)) + max(-x, 0)
        loss = (1.0 - y) * x + log_weight * softplus_neg
    if weight is not None:
        loss = loss * _broadcastable_to(fn, x, _float_operand(fn, x, weight, "weight"), "weight")
    return _reduce(loss, reduction)


@autocast_float32  # luminal.autocast: computed in float32, as torch
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """Pointwise KL divergence of log-probabilities ``input`` from ``target``: ``xlogy(y, y) - y x``, or
    ``exp(y) (y - x)`` when ``log_target``. ``reduction='batchmean'`` divides the sum by the batch size
    (dim 0); ``'mean'`` by the number of elements (PyTorch's definitions)."""
    fn = "kl_div"
    reduction = _check_reduction(fn, _legacy_reduction(size_average, reduce, reduction), _REDUCTIONS + ("batchmean",))
    x, y = _elementwise_pair(fn, input, target)
    if log_target:
        loss = y.exp() * (y - x)
    else:
        loss = y * where(y.eq(0.0), 1.0, y).log() - y * x  # xlogy(y, y): 0 where y == 0
    if reduction == "batchmean":
        total = loss.sum()
        return total if x.ndim == 0 else total / _count(x.graph, x.dims[0], x.dtype)
    return _reduce(loss, reduction)


# the loss modules (nn.MSELoss ...) are in loss_modules.py, re-exported here
from .loss_modules import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss,  # noqa: E402,F401
                           L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
