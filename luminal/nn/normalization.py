"""Normalization layers: ``LayerNorm RMSNorm GroupNorm BatchNorm1d/2d/3d InstanceNorm1d/2d/3d``.

PyTorch's constructor arguments, parameter and buffer names (``weight bias running_mean running_var
num_batches_tracked``) and default initializations (ones / zeros), so ``load_state_dict(torch_module.state_dict())``
works.

Running statistics (BatchNorm, InstanceNorm with ``track_running_stats=True``) in training mode: the graph computes
the updated ``running_mean`` / ``running_var`` / ``num_batches_tracked`` as extra outputs, and a
``post_execute_hook`` of that graph copies them into the module's buffers (``Parameter.copy_``), which also updates
the buffers' bound graph inputs, so the next ``execute()`` starts from the new statistics — exactly like PyTorch's
in-place update after each forward call. The pending update tensors are kept on the module
(``_stat_updates``), so ``graph.compile(compiler, remap=model)`` keeps them valid.

Functional forms (``layer_norm rms_norm group_norm batch_norm instance_norm``) take GraphTensors for the
parameters; ``batch_norm``/``instance_norm`` return only the normalized output (use the modules for running-stat
updates).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..graph import GraphError
from ..module import Module, Parameter, bind, check_graph_tensor
from . import init

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d",
           "InstanceNorm2d", "InstanceNorm3d", "layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm"]


# ---------------------------------------------------------------------------------------------- helpers
def _dims_str(x) -> list[str]:
    return [str(d) for d in x.dims]


def _const(d):
    """A dim's int value when it is constant, else None."""
    return d.to_int() if d.is_constant() else None


def _channel_view(t, ndim: int, channel_axis: int = 1):
    """A (C,) tensor viewed so it broadcasts over an ``ndim``-d input with channels on ``channel_axis``."""
    if t is None:
        return None
    shape = [1] * ndim
    shape[channel_axis] = t.dims[0]
    return t.reshape(shape)


def _affine(y, weight, bias):
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _normalized_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


def _check_trailing(x, normalized_shape, where: str) -> tuple[int, ...]:
    k = len(normalized_shape)
    if k == 0 or x.ndim < k:
        raise GraphError(f"{where}: normalized_shape {list(normalized_shape)} needs at least {k} trailing dims, "
                         f"got input shape {_dims_str(x)}")
    for d, want in zip(x.dims[x.ndim - k:], normalized_shape):
        have = _const(d)
        if have is not None and have != want:
            raise GraphError(f"{where}: expected input with trailing shape {list(normalized_shape)}, got "
                             f"{_dims_str(x)}")
    return tuple(range(x.ndim - k, x.ndim))


def _check_enough_values(x, axes, where: str) -> None:
    """PyTorch refuses training-mode batch statistics over a single value per channel."""
    count = 1
    for a in axes:
        c = _const(x.dims[a])
        if c is None:
            return
        count *= c
    if count <= 1:
        raise ValueError(f"{where}: expected more than 1 value per channel when training, got input size "
                         f"{_dims_str(x)}")


# ---------------------------------------------------------------------------------------------- functional
def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """``torch.nn.functional.layer_norm``: normalize over the trailing ``normalized_shape`` dims (biased var)."""
    x = check_graph_tensor(x, "layer_norm")
    axes = _check_trailing(x, _normalized_shape(normalized_shape), "layer_norm")
    return _affine(x.layer_norm(axes, eps), weight, bias)


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None):
    """``torch.nn.functional.rms_norm``: ``x * rsqrt(mean(x^2) + eps) * weight``; ``eps=None`` is the dtype's
    machine epsilon (``torch.finfo(x.dtype).eps``)."""
    x = check_graph_tensor(x, "rms_norm")
    axes = _check_trailing(x, _normalized_shape(normalized_shape), "rms_norm")
    x = x._floating()
    if eps is None:
        eps = float(np.finfo(x.dtype.numpy).eps)
    return _affine(x.std_norm(axes, eps), weight, None)


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """``torch.nn.functional.group_norm``: statistics per (sample, group of channels); affine per channel."""
    x = check_graph_tensor(x, "group_norm")
    if x.ndim < 2:
        raise GraphError(f"group_norm: expected at least 2 dims (N, C, *), got {_dims_str(x)}")
    channels = _const(x.dims[1])
    if channels is None:
        raise GraphError("group_norm: the channel dim must be a constant")
    if channels % num_groups:
        raise GraphError(f"group_norm: {channels} channels are not divisible by {num_groups} groups")
    x = x._floating()
    grouped = x.unflatten(1, (num_groups, channels // num_groups))
    axes = tuple(range(2, grouped.ndim))
    y = grouped.layer_norm(axes, eps).reshape(x.dims)
    return _affine(y, _channel_view(weight, x.ndim), _channel_view(bias, x.ndim))


def _stats_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """``torch.nn.functional.batch_norm`` (output only: the running statistics are read, never updated here).

    ``training=True`` (or no running stats) normalizes with the batch's statistics (biased variance)."""
    x = check_graph_tensor(x, "batch_norm")
    if x.ndim < 2:
        raise GraphError(f"batch_norm: expected at least 2 dims (N, C, *), got {_dims_str(x)}")
    x = x._floating()
    if training or running_mean is None or running_var is None:
        axes = _stats_axes(x)
        if training:
            _check_enough_values(x, axes, "batch_norm")
        mean = x.mean(axes, keepdim=True)
        var = x.var(axes, correction=0, keepdim=True)
    else:
        mean = _channel_view(running_mean, x.ndim)
        var = _channel_view(running_var, x.ndim)
    y = (x - mean) * (var + eps).rsqrt()
    return _affine(y, _channel_view(weight, x.ndim), _channel_view(bias, x.ndim))


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5):
    """``torch.nn.functional.instance_norm`` on a batched (N, C, *) input (output only)."""
    x = check_graph_tensor(x, "instance_norm")
    if x.ndim < 3:
        raise GraphError(f"instance_norm: expected (N, C, *spatial), got {_dims_str(x)}")
    x = x._floating()
    if use_input_stats or running_mean is None or running_var is None:
        axes = tuple(range(2, x.ndim))
        if use_input_stats:
            _check_enough_values(x, axes, "instance_norm")
        y = x.layer_norm(axes, eps)
    else:
        y = (x - _channel_view(running_mean, x.ndim)) * (_channel_view(running_var, x.ndim) + eps).rsqrt()
    return _affine(y, _channel_view(weight, x.ndim), _channel_view(bias, x.ndim))


# ---------------------------------------------------------------------------------------------- modules
class LayerNorm(Module):
    """``torch.nn.LayerNorm``: ``weight`` (ones) and ``bias`` (zeros) of ``normalized_shape``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = Parameter(np.ones(self.normalized_shape), dtype) if elementwise_affine else None
        self.bias = Parameter(np.zeros(self.normalized_shape), dtype) if elementwise_affine and bias else None

    def forward(self, x):
        x = check_graph_tensor(x, "LayerNorm")
        return layer_norm(x, self.normalized_shape, bind(self.weight, x) if self.weight is not None else None,
                          bind(self.bias, x) if self.bias is not None else None, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(Module):
    """``torch.nn.RMSNorm``: ``weight`` (ones); ``eps=None`` means ``finfo(dtype).eps`` of the input."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = Parameter(np.ones(self.normalized_shape), dtype) if elementwise_affine else None

    def forward(self, x):
        x = check_graph_tensor(x, "RMSNorm")
        return rms_norm(x, self.normalized_shape, bind(self.weight, x) if self.weight is not None else None,
                        self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """``torch.nn.GroupNorm``: per-channel ``weight`` (ones) and ``bias`` (zeros)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(np.ones(num_channels), dtype) if affine else None
        self.bias = Parameter(np.zeros(num_channels), dtype) if affine else None

    def forward(self, x):
        x = check_graph_tensor(x, "GroupNorm")
        if x.ndim >= 2 and _const(x.dims[1]) not in (None, self.num_channels):
            raise GraphError(f"GroupNorm: expected {self.num_channels} channels in dim 1, got {_dims_str(x)}")
        return group_norm(x, self.num_groups, bind(self.weight, x) if self.affine else None,
                          bind(self.bias, x) if self.affine else None, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _NormBase(Module):
    """Shared state of BatchNorm / InstanceNorm (PyTorch's ``_NormBase``)."""

    _ndims: tuple[int, ...] = ()  # accepted input ranks (batched)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(np.ones(num_features), dtype) if affine else None
        self.bias = Parameter(np.zeros(num_features), dtype) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", Parameter(np.zeros(num_features), dtype, requires_grad=False))
            self.register_buffer("running_var", Parameter(np.ones(num_features), dtype, requires_grad=False))
            self.register_buffer("num_batches_tracked",
                                 Parameter(np.array(0, dtype=np.int64), "int64", requires_grad=False))
        else:
            object.__setattr__(self, "running_mean", None)
            object.__setattr__(self, "running_var", None)
            object.__setattr__(self, "num_batches_tracked", None)
        # graph id -> list of {buffer name: updated GraphTensor} awaiting the graph's next execute
        object.__setattr__(self, "_stat_updates", {})

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            self.num_batches_tracked.copy_(np.array(0, dtype=np.int64))

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _params(self, x):
        return (bind(self.weight, x) if self.affine else None, bind(self.bias, x) if self.affine else None)

    def _register_update(self, x, updates: dict) -> None:
        """Retrieve the updated statistics and copy them into the buffers after each execute of x's graph."""
        graph = x.graph
        for t in updates.values():
            t.retrieve()
        entries = self._stat_updates.setdefault(id(graph), [])
        first = not entries
        entries.append(updates)
        if not first:
            return  # one hook per graph applies every forward call's updates, in call order

        def hook(g, module=self, key=id(graph)):
            for upd in module._stat_updates.get(key, []):
                for name, tensor in upd.items():
                    getattr(module, name).copy_(tensor.data())

        graph.post_execute_hooks.append(hook)

    def _current(self, x, name: str):
        """Buffer ``name`` as the earlier training-mode calls of this module in ``x``'s graph left it (a module
        called twice in one forward updates its statistics twice, in call order, as in PyTorch), else the buffer."""
        entries = self._stat_updates.get(id(x.graph))
        if entries and name in entries[-1] and entries[-1][name].graph is x.graph:
            return entries[-1][name]
        return bind(getattr(self, name), x)

    def _momentum_factor(self, x):
        """``momentum``, or the cumulative-average factor ``1 / (num_batches_tracked + 1)`` for ``momentum=None``."""
        if self.momentum is not None:
            return self.momentum
        return (self._current(x, "num_batches_tracked") + 1).float().reciprocal()

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, x):
        x = check_graph_tensor(x, type(self).__name__)
        if x.ndim not in self._ndims:
            raise GraphError(f"{type(self).__name__}: expected a {' or '.join(f'{n}D' for n in self._ndims)} "
                             f"input, got shape {_dims_str(x)}")
        if _const(x.dims[1]) not in (None, self.num_features):
            raise GraphError(f"{type(self).__name__}: expected {self.num_features} channels in dim 1, got "
                             f"{_dims_str(x)}")
        weight, bias = self._params(x)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats:
            return batch_norm(x, bind(self.running_mean, x), bind(self.running_var, x), weight, bias, False,
                              0.0, self.eps)
        out = batch_norm(x, None, None, weight, bias, True, 0.0, self.eps)
        if self.training and self.track_running_stats:
            xf = x._floating()
            axes = _stats_axes(xf)
            m = self._momentum_factor(x)
            rm, rv = self._current(x, "running_mean"), self._current(x, "running_var")
            nbt = self._current(x, "num_batches_tracked")
            self._register_update(x, {
                "running_mean": rm * (1 - m) + xf.mean(axes) * m,
                "running_var": rv * (1 - m) + xf.var(axes, correction=1) * m,
                "num_batches_tracked": nbt + 1,
            })
        return out


class BatchNorm1d(_BatchNorm):
    """``torch.nn.BatchNorm1d`` on (N, C) or (N, C, L)."""
    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """``torch.nn.BatchNorm2d`` on (N, C, H, W)."""
    _ndims = (4,)


class BatchNorm3d(_BatchNorm):
    """``torch.nn.BatchNorm3d`` on (N, C, D, H, W)."""
    _ndims = (5,)


class _InstanceNorm(_NormBase):
    _spatial = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype)

    def forward(self, x):
        x = check_graph_tensor(x, type(self).__name__)
        batched = self._spatial + 2
        if x.ndim not in (batched - 1, batched):
            raise GraphError(f"{type(self).__name__}: expected a {batched - 1}D (unbatched) or {batched}D input, "
                             f"got shape {_dims_str(x)}")
        unbatched = x.ndim == batched - 1
        if unbatched:
            x = x.unsqueeze(0)
        if self.affine and _const(x.dims[1]) not in (None, self.num_features):
            raise GraphError(f"{type(self).__name__}: expected {self.num_features} channels, got {_dims_str(x)}")
        weight, bias = self._params(x)
        use_input_stats = self.training or not self.track_running_stats
        if use_input_stats:
            out = instance_norm(x, None, None, weight, bias, True, 0.0, self.eps)
            if self.training and self.track_running_stats:
                # PyTorch: each instance updates a copy of the running stats; the copies are averaged over N.
                # (InstanceNorm leaves num_batches_tracked alone; momentum=None means factor 0.)
                xf = x._floating()
                axes = tuple(range(2, xf.ndim))
                m = self.momentum if self.momentum is not None else 0.0
                rm, rv = self._current(x, "running_mean"), self._current(x, "running_var")
                self._register_update(x, {
                    "running_mean": rm * (1 - m) + xf.mean(axes).mean(0) * m,
                    "running_var": rv * (1 - m) + xf.var(axes, correction=1).mean(0) * m,
                })
        else:
            out = instance_norm(x, bind(self.running_mean, x), bind(self.running_var, x), weight, bias, False,
                                0.0, self.eps)
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """``torch.nn.InstanceNorm1d`` on (N, C, L) or (C, L)."""
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """``torch.nn.InstanceNorm2d`` on (N, C, H, W) or (C, H, W)."""
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """``torch.nn.InstanceNorm3d`` on (N, C, D, H, W) or (C, D, H, W)."""
    _spatial = 3
