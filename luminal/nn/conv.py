"""Convolutions (``Conv1d..Conv4d``, ``ConvTranspose1d..3d``) built from views: pad, sliding windows, contract.

One N-d implementation, :func:`conv_nd`, serves every rank:

1. zero-pad each spatial axis (a view);
2. ``pool`` each spatial axis into ``(n_windows, kernel)`` (a zero-copy view, ``i = stride*w + dilation*k``);
3. split the channels into ``(groups, in_channels/groups)`` and contract the windows with the weight: a
   broadcast ``Mul`` and a ``SumReduce`` over ``(in_channels/groups, *kernel)`` -- the matmul pattern.

Strided transposed convolutions are computed as PyTorch does: one matrix product per group (every input
position's contributions) and col2im (:func:`_col2im_transposed`), with a ``conv_transpose`` gradient rule that
takes both gradients from the windows of the upstream gradient (:func:`transposed_conv_grads`). Stride-1 ones
(and strided ones under autocast) are convolutions of the padded (zero-interleaved) input with the spatially
flipped, in/out-swapped kernel. Under :class:`luminal.autocast` every convolution is computed from inputs
rounded to the autocast dtype, in float32, and rounded once (see :func:`conv_nd`). Layouts, parameter names and
default initialization follow PyTorch, so ``load_state_dict(torch_module.state_dict())`` works.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..amp import autocast_off, lower_precision_dtype, round_to
from ..hl_ops.binary import _grad_rule
from ..graph import GraphError
from ..module import Module, Parameter, bind, check_graph_tensor
from . import init


# ---------------------------------------------------------------------------------------------------- helpers
def _ntuple(value, n: int, name: str) -> tuple:
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1 and n != 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{name} needs {n} values (one per spatial dim), got {value}")
    return value


def _dims_str(x) -> list:
    return [str(d) for d in x.dims]


def _const(d) -> int:
    if not d.is_constant():
        raise GraphError(f"a concrete size is needed here, got the symbolic size {d}")
    return d.to_int()


def _resolve_padding(padding, n: int, kernel, stride, dilation) -> list[tuple[int, int]]:
    """``(before, after)`` per spatial dim for int/tuple/``'same'``/``'valid'`` padding (PyTorch's rules)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * n
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            pairs = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                pairs.append((total // 2, total - total // 2))  # PyTorch puts the odd extra element after
            return pairs
        raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    pads = _ntuple(padding, n, "padding")
    if any(p < 0 for p in pads):
        raise ValueError(f"padding must be non-negative, got {padding}")
    return [(p, p) for p in pads]


# ---------------------------------------------------------------------------------------------------- conv
def _prod(values):
    out = 1
    for v in values:
        out = out * v
    return out


def conv_nd(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, *, _conv_grad: bool = True):
    """N-d cross-correlation (``torch.nn.functional.conv{n}d``) with ``n = weight.ndim - 2`` spatial dims.

    ``x``: ``(N, C_in, *spatial)`` or unbatched ``(C_in, *spatial)``; ``weight``: ``(C_out, C_in/groups,
    *kernel)``; ``bias``: ``(C_out,)`` or None. ``padding``: int, tuple, ``'same'`` (stride 1; an odd total
    pads one more after, as PyTorch) or ``'valid'``. Returns ``(N, C_out, *out)`` (or ``(C_out, *out)``).

    Under :class:`luminal.autocast` the input, weight and bias are rounded to the autocast dtype, the sums run
    in float32 (bias included) and the result is rounded once to the autocast dtype (torch's CPU autocast).
    """
    low = lower_precision_dtype(x, weight, bias)
    if low is not None:
        with autocast_off():
            return conv_nd(round_to(x, low), round_to(weight, low), None if bias is None else round_to(bias, low),
                           stride, padding, dilation, groups).cast(low)
    n = weight.ndim - 2
    if n < 1:
        raise GraphError(f"conv: the weight needs (out, in/groups, *kernel) dims, got {_dims_str(weight)}")
    unbatched = x.ndim == n + 1
    if unbatched:
        x = x.unsqueeze(0)
    if x.ndim != n + 2:
        raise GraphError(f"conv{n}d: expected a {n + 1}-D (unbatched) or {n + 2}-D (batched) input, got shape "
                         f"{_dims_str(x)}")
    groups = int(groups)
    c_out, c_in_g = _const(weight.dims[0]), _const(weight.dims[1])
    kernel = tuple(_const(d) for d in weight.dims[2:])
    stride = _ntuple(stride, n, "stride")
    dilation = _ntuple(dilation, n, "dilation")
    if groups < 1 or c_out % groups:
        raise ValueError(f"conv{n}d: out_channels {c_out} must be divisible by groups {groups}")
    c_in = x.dims[1]
    if c_in != c_in_g * groups:
        raise GraphError(f"conv{n}d: input has {c_in} channels but the weight {_dims_str(weight)} with groups="
                         f"{groups} expects {c_in_g * groups}")
    pads = _resolve_padding(padding, n, kernel, stride, dilation)
    x_in = x

    # 1. zero padding, 2. windows: (N, C, O1, K1, ..., On, Kn)
    x = x.pad([(0, 0), (0, 0)] + pads)
    for i in range(n):
        x = x.pool(2 + 2 * i, kernel[i], stride[i], dilation[i])
    # 3. channels -> (G, C/G); order (G, Cg, K..., N, O...), then im2col: (G, Cg*K, N*O) materialized once
    #    (images and output positions innermost: the copy streams rows of the input, and the whole batch is one
    #    GEMM per group with N*O columns; the weight gradient is one GEMM with K = N*O, no per-image partials)
    x = x.split_dims(1, c_in_g)
    o_axes = [3 + 2 * i for i in range(n)]
    k_axes = [4 + 2 * i for i in range(n)]
    out_dims = tuple(x.dims[a] for a in o_axes)
    batch = x.dims[0]
    x = x.permute([1, 2] + k_axes + [0] + o_axes)
    o_total, ck = _prod(out_dims), c_in_g * _prod(kernel)
    cols = x.reshape((groups, ck, batch * o_total))
    # 4. one matrix product per group: (C_out/G, CK) x (CK, N*O) -> (G, C_out/G, N, O...), seen as (N, C_out, O...)
    w = weight.reshape((groups, c_out // groups, ck))
    prod = cols.unsqueeze(1) * w.unsqueeze(-1)   # (G, C_out/G, CK, N*O)
    summed = prod.sum(2)
    from .conv_grad import rule_applies  # (conv_grad builds on this module)
    if _conv_grad and weight.dtype == x_in.dtype and rule_applies(x_in, weight, stride, dilation, pads, c_in_g):
        # PyTorch's backward: the input's gradient a convolution of the upstream gradient (conv_grad.py), which
        # the direct kernel computes in place, rather than a product per window offset summed back by col2im.
        # (On the product itself, (G, C_out/G, N*O): the result below is a view of it, and a rule needs a node.)
        _grad_rule(summed, "conv", (x_in, weight), (tuple(pads), dilation, groups, stride))
    out = summed.reshape((groups, c_out // groups, batch) + out_dims)
    out = out.permute([2, 0, 1] + [3 + i for i in range(n)]).reshape((batch, c_out) + out_dims)
    if bias is not None:
        out = out + bias.reshape((c_out,) + (1,) * n)
    return out.squeeze(0) if unbatched else out


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv1d``."""
    _check_rank(weight, 1, "conv1d")
    return conv_nd(x, weight, bias, stride, padding, dilation, groups)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv2d``."""
    _check_rank(weight, 2, "conv2d")
    return conv_nd(x, weight, bias, stride, padding, dilation, groups)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv3d``."""
    _check_rank(weight, 3, "conv3d")
    return conv_nd(x, weight, bias, stride, padding, dilation, groups)


def conv4d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """4-d convolution over ``(N, C, t, x, y, z)`` (no PyTorch counterpart; same semantics)."""
    _check_rank(weight, 4, "conv4d")
    return conv_nd(x, weight, bias, stride, padding, dilation, groups)


def _check_rank(weight, n, name):
    if weight.ndim != n + 2:
        raise GraphError(f"{name}: the weight must have {n + 2} dims, got {_dims_str(weight)}")


# ---------------------------------------------------------------------------------------------------- transposed
def _zero_interleave(x, axis: int, stride: int):
    """Insert ``stride - 1`` zeros between consecutive elements of ``axis``: length ``(L-1)*stride + 1``."""
    if stride == 1:
        return x
    length = x.dims[axis]
    x = x.unsqueeze(axis + 1).pad_axis(axis + 1, 0, stride - 1)   # (..., L, stride): element then zeros
    x = x.merge_dims(axis, axis + 1)                              # (..., L*stride)
    return x.slice_axis(axis, 0, (length - 1) * stride + 1)


def conv_transpose_nd(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,
                      dilation=1):
    """N-d transposed convolution (``torch.nn.functional.conv_transpose{n}d``; note PyTorch's argument order:
    ``groups`` before ``dilation``).

    ``weight``: ``(C_in, C_out/groups, *kernel)``. Built as a stride-1 convolution of the zero-interleaved
    input, padded by ``dilation*(k-1) - padding`` (+ ``output_padding`` after), with the flipped kernel.
    Output size per dim: ``(L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1``.
    """
    n = weight.ndim - 2
    if n < 1:
        raise GraphError(f"conv_transpose: the weight needs (in, out/groups, *kernel) dims, got {_dims_str(weight)}")
    unbatched = x.ndim == n + 1
    if unbatched:
        x = x.unsqueeze(0)
    if x.ndim != n + 2:
        raise GraphError(f"conv_transpose{n}d: expected a {n + 1}-D (unbatched) or {n + 2}-D (batched) input, "
                         f"got shape {_dims_str(x)}")
    groups = int(groups)
    c_in, c_out_g = _const(weight.dims[0]), _const(weight.dims[1])
    kernel = tuple(_const(d) for d in weight.dims[2:])
    stride = _ntuple(stride, n, "stride")
    dilation = _ntuple(dilation, n, "dilation")
    padding = _ntuple(padding, n, "padding")
    output_padding = _ntuple(output_padding, n, "output_padding")
    if groups < 1 or c_in % groups:
        raise ValueError(f"conv_transpose{n}d: in_channels {c_in} must be divisible by groups {groups}")
    if x.dims[1] != c_in:
        raise GraphError(f"conv_transpose{n}d: input has {x.dims[1]} channels, the weight {_dims_str(weight)} "
                         f"expects {c_in}")
    for op, s, d in zip(output_padding, stride, dilation):
        if op < 0 or (op >= s and op >= d):
            raise ValueError(f"output_padding must be smaller than either stride or dilation, got "
                             f"output_padding={output_padding}, stride={stride}, dilation={dilation}")
    xb = x
    if any(s > 1 for s in stride) and lower_precision_dtype(xb, weight, bias) is None:
        out = _col2im_transposed(xb, weight, stride, padding, output_padding, dilation, groups)
        if bias is not None:
            out = out + bias.reshape((c_out_g * groups,) + (1,) * n)
        # PyTorch's backward (a "conv_transpose" rule of Graph.grad_rules): both gradients from the windows of
        # the upstream gradient (see transposed_conv_grads)
        _grad_rule(out, "conv_transpose", (xb, weight) + (() if bias is None else (bias,)),
                   (stride, padding, dilation, groups))
        return out.squeeze(0) if unbatched else out
    # stride 1 (a plain convolution of the padded input with the flipped kernel), and strided ones under autocast:
    # the convolution of the zero-interleaved input
    for i in range(n):
        x = _zero_interleave(x, 2 + i, stride[i])
    pads = [(0, 0), (0, 0)] + [(d * (k - 1) - p, d * (k - 1) - p + op)
                               for k, d, p, op in zip(kernel, dilation, padding, output_padding)]
    x = x.pad(pads)  # negative amounts crop (padding larger than the kernel reach)
    if any(s > 1 for s in stride):
        # stored once (stride^n times the input): the convolution's windows then read a plain buffer, and the
        # input's gradient undoes them as a sum of shifted views, then the padding and the interleave as slices
        # (autograd.unview), instead of one general transpose of windows over padded, interleaved zeros (a
        # gather of up to (kernel * stride)^n candidates per element)
        x = x.contiguous()
    # (C_in, C_out/G, K...) -> (G, C_in/G, C_out/G, K...) -> (G, C_out/G, C_in/G, K...) -> (C_out, C_in/G, K...)
    c_in_g = c_in // groups
    w = weight.split_dims(0, c_in_g).transpose(1, 2)
    w = w.reshape((groups * c_out_g, c_in_g) + kernel).flip(tuple(range(2, 2 + n)))
    out = conv_nd(x, w, bias, 1, 0, dilation, groups)
    return out.squeeze(0) if unbatched else out


def _by_group(x, c_g: int, groups: int):
    """``(N, C, *spatial)`` as ``(groups, C/groups, N * prod(spatial))``: a GEMM operand per group."""
    n = x.ndim - 2
    return x.split_dims(1, c_g).permute([1, 2, 0] + [3 + i for i in range(n)]).reshape(
        (groups, c_g, x.dims[0] * _prod(tuple(x.dims[2:]))))


def _col2im_transposed(x, weight, stride, padding, output_padding, dilation, groups: int):
    """A strided transposed convolution as PyTorch computes it: one matrix product per group gives every input
    position's ``C_out/groups * K`` contributions (``cols``, no product with the interleaved zeros), then col2im:
    ``cols`` interleaved with ``stride - 1`` zeros once, and each kernel offset's plane placed at its offset
    (a padded view) and summed; the padding is cropped off last."""
    n = weight.ndim - 2
    kernel = tuple(_const(d) for d in weight.dims[2:])
    c_in, c_out_g = _const(weight.dims[0]), _const(weight.dims[1])
    c_in_g = c_in // groups
    batch, spatial = x.dims[0], tuple(x.dims[2:])
    kt, lt = _prod(kernel), _prod(spatial)
    xg = _by_group(x, c_in_g, groups)
    wg = weight.reshape((groups, c_in_g, c_out_g * kt))
    cols = (wg.unsqueeze(-1) * xg.unsqueeze(2)).sum(1)  # (G, C_out/G*K, N*L)
    cols = cols.reshape((groups, c_out_g) + kernel + (batch,) + spatial)
    cols = cols.permute([2 + n, 0, 1] + [2 + i for i in range(n)] + [3 + n + i for i in range(n)])
    cols = cols.reshape((batch, groups * c_out_g) + kernel + spatial)  # (N, C_out, K..., L...)
    for i in range(n):
        cols = _zero_interleave(cols, 2 + n + i, stride[i])
    full = [(spatial[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + max(0, output_padding[i] - padding[i])
            for i in range(n)]
    out = None
    for offs in np.ndindex(*kernel):
        index = (slice(None), slice(None)) + tuple(int(k) for k in offs)
        plane = cols[index]  # (N, C_out, (L-1)*stride+1 ...)
        pads = [(0, 0), (0, 0)]
        for i in range(n):
            before = offs[i] * dilation[i]
            pads.append((before, full[i] - before - ((spatial[i] - 1) * stride[i] + 1)))
        plane = plane.pad(pads)
        out = plane if out is None else out + plane
    for i in range(n):
        size = (spatial[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + output_padding[i] + 1
        out = out.slice_axis(2 + i, padding[i], padding[i] + size)
    return out


def transposed_conv_grads(x, weight, g, stride, padding, dilation, groups: int):
    """``(dx, dweight)`` of ``conv_transpose_nd(x, weight, stride=, padding=, dilation=, groups=)`` (batched ``x``)
    for the upstream gradient ``g``, as PyTorch computes them: the windows of ``g`` at the forward's stride,
    padding and dilation (an im2col of ``g``, stored once: ``cols``, ``(groups, C_out/groups * K, N * L)``), then
    two matrix products per group, ``dx = weight . cols`` and ``dweight = x . cols^T``. (The input gradient is the
    strided convolution of ``g`` with ``weight``; no product touches the interleaved zeros of the forward.)"""
    n = weight.ndim - 2
    kernel = tuple(_const(d) for d in weight.dims[2:])
    c_in, c_out_g = _const(weight.dims[0]), _const(weight.dims[1])
    c_in_g = c_in // groups
    batch, spatial = x.dims[0], tuple(x.dims[2:])
    gw = g.pad([(0, 0), (0, 0)] + [(p, p) for p in padding])
    for i in range(n):  # window l of axis i starts at l*stride: gw[l, k] = g[l*stride - padding + k*dilation]
        gw = gw.pool(2 + 2 * i, kernel[i], stride[i], dilation[i])
        if gw.dims[2 + 2 * i] != spatial[i]:  # (output_padding >= stride adds windows past the input)
            gw = gw.slice_axis(2 + 2 * i, 0, spatial[i])
    gw = gw.split_dims(1, c_out_g)  # (N, G, C_out/G, L1, K1, ..., Ln, Kn)
    o_axes, k_axes = [3 + 2 * i for i in range(n)], [4 + 2 * i for i in range(n)]
    kt, lt = _prod(kernel), _prod(spatial)
    cols = gw.permute([1, 2] + k_axes + [0] + o_axes).reshape((groups, c_out_g * kt, batch * lt))
    xg = _by_group(x, c_in_g, groups)
    wg = weight.reshape((groups, c_in_g, c_out_g * kt))
    dx = (wg.unsqueeze(-1) * cols.unsqueeze(1)).sum(2)  # (G, C_in/G, N*L)
    dx = dx.reshape((groups, c_in_g, batch) + spatial).permute([2, 0, 1] + [3 + i for i in range(n)])
    dw = (xg.unsqueeze(2) * cols.unsqueeze(1)).sum(-1)  # (G, C_in/G, C_out/G*K)
    return dx.reshape((batch, c_in) + spatial), dw.reshape(tuple(weight.dims))


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose1d``."""
    _check_rank(weight, 1, "conv_transpose1d")
    return conv_transpose_nd(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose2d``."""
    _check_rank(weight, 2, "conv_transpose2d")
    return conv_transpose_nd(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose3d``."""
    _check_rank(weight, 3, "conv_transpose3d")
    return conv_transpose_nd(x, weight, bias, stride, padding, output_padding, groups, dilation)


# ---------------------------------------------------------------------------------------------------- modules
class _ConvNd(Module):
    _n = 0
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", output_padding=0,
                 device=None, dtype=None):
        super().__init__()
        n = self._n
        if groups < 1 or in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got "
                             f"{padding_mode!r}")
        if padding_mode != "zeros" and self._transposed:
            raise ValueError(f"only padding_mode='zeros' is supported for transposed convolutions, got "
                             f"{padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.dilation = _ntuple(dilation, n, "dilation")
        self.padding_mode = padding_mode
        if isinstance(padding, str):
            if self._transposed:
                raise ValueError("string padding is not supported for transposed convolutions")
            if padding not in ("same", "valid"):
                raise ValueError(f"padding must be 'same' or 'valid', got {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, n, "padding")
        self.output_padding = _ntuple(output_padding, n, "output_padding")
        for op, st, d in zip(self.output_padding, self.stride, self.dilation):
            if op < 0 or (op >= st and op >= d):
                raise ValueError(f"output_padding must be smaller than either stride or dilation, got "
                                 f"output_padding={self.output_padding}, stride={self.stride}, "
                                 f"dilation={self.dilation}")
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(np.zeros(shape), dtype)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            fan_in, _ = init.calculate_fan_in_and_fan_out(shape)  # PyTorch: from the weight's layout
            self.bias = Parameter(np.zeros(out_channels), dtype)
            init.default_bound_uniform_(self.bias, fan_in)
        else:
            self.bias = None

    def _params(self, x):
        check_graph_tensor(x, type(self).__name__)
        return bind(self.weight, x), (bind(self.bias, x) if self.bias is not None else None)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}")
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self._transposed and self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype)

    def forward(self, x):
        w, b = self._params(x)
        if self.padding_mode != "zeros":  # pad in that mode (F.pad), then a convolution without padding
            from .functional import pad
            pairs = _resolve_padding(self.padding, self._n, self.kernel_size, self.stride, self.dilation)
            flat = [v for before, after in reversed(pairs) for v in (before, after)]
            return conv_nd(pad(x, flat, mode=self.padding_mode), w, b, self.stride, 0, self.dilation, self.groups)
        return conv_nd(x, w, b, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_Conv):
    """``torch.nn.Conv1d``: input ``(N, C_in, L)`` or ``(C_in, L)``."""
    _n = 1


class Conv2d(_Conv):
    """``torch.nn.Conv2d``: input ``(N, C_in, H, W)`` or ``(C_in, H, W)``."""
    _n = 2


class Conv3d(_Conv):
    """``torch.nn.Conv3d``: input ``(N, C_in, D, H, W)`` or ``(C_in, D, H, W)``."""
    _n = 3


class Conv4d(_Conv):
    """4-d convolution: input ``(N, C_in, T, X, Y, Z)`` or ``(C_in, T, X, Y, Z)``; weight
    ``(C_out, C_in/groups, kT, kX, kY, kZ)``; PyTorch's conventions and init otherwise."""
    _n = 4


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype)

    def forward(self, x, output_size: Sequence[int] | None = None):
        """``output_size`` (optional, the trailing spatial sizes) picks ``output_padding`` as PyTorch does."""
        w, b = self._params(x)
        output_padding = self.output_padding
        if output_size is not None:
            n = self._n
            sizes = list(output_size)[-n:]
            spatial = x.dims[-n:]
            output_padding = []
            for i in range(n):
                smallest = ((_const(spatial[i]) - 1) * self.stride[i] - 2 * self.padding[i]
                            + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
                extra = int(sizes[i]) - smallest
                if not 0 <= extra < max(self.stride[i], self.dilation[i]):
                    raise ValueError(f"requested output size {tuple(sizes)} is not reachable from input "
                                     f"{[str(d) for d in x.dims]}")
                output_padding.append(extra)
        return conv_transpose_nd(x, w, b, self.stride, self.padding, output_padding, self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """``torch.nn.ConvTranspose1d``: weight ``(C_in, C_out/groups, k)``."""
    _n = 1


class ConvTranspose2d(_ConvTranspose):
    """``torch.nn.ConvTranspose2d``: weight ``(C_in, C_out/groups, kH, kW)``."""
    _n = 2


class ConvTranspose3d(_ConvTranspose):
    """``torch.nn.ConvTranspose3d``: weight ``(C_in, C_out/groups, kD, kH, kW)``."""
    _n = 3


__all__ = ["conv_nd", "conv1d", "conv2d", "conv3d", "conv4d", "conv_transpose_nd", "conv_transpose1d",
           "conv_transpose2d", "conv_transpose3d", "Conv1d", "Conv2d", "Conv3d", "Conv4d", "ConvTranspose1d",
           "ConvTranspose2d", "ConvTranspose3d"]
