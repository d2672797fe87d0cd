"""ATen operator handlers: reductions, softmax and normalization, convolution and pooling, attention, and the ops
built on newer tensor methods. Each builds a node's value from the tensor API (registered with ``_reg``)."""

from __future__ import annotations

import math
import operator

import numpy as np
import torch

from ....dtype import DType
from ....hl_ops.binary import where
from ....shape import to_expr
from .elementwise import _binop_operands, _float_in, _out_dtype
from .._core import TorchImportError, _ax, _axes, _int, _is_t, _NeedsDecomposition, _reg


# --- reductions
@_reg("aten.sum.dim_IntList", "aten.sum.default")
def _sum(cv, node, x, dim=None, keepdim=False, dtype=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    return x.sum(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.mean.dim", "aten.mean.default")
def _mean(cv, node, x, dim=None, keepdim=False, dtype=None):
    return x.mean(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.prod.dim_int", "aten.prod.default")
def _prod(cv, node, x, dim=None, keepdim=False, dtype=None):
    if dim is None:
        return x.prod()
    return x.prod(_ax(dim, x.ndim), keepdim=keepdim)


@_reg("aten.amax.default", "aten.max.default")
def _amax(cv, node, x, dim=None, keepdim=False):
    return x.max(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.amin.default", "aten.min.default")
def _amin(cv, node, x, dim=None, keepdim=False):
    return x.min(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.max.dim", "aten.min.dim")
def _max_dim(cv, node, x, dim, keepdim=False):
    dim = _ax(dim, x.ndim)
    if node.target is torch.ops.aten.max.dim:
        return (x.max(dim, keepdim=keepdim), x.argmax(dim, keepdim=keepdim))
    return (x.min(dim, keepdim=keepdim), x.argmin(dim, keepdim=keepdim))


@_reg("aten.argmax.default", "aten.argmin.default")
def _argmax(cv, node, x, dim=None, keepdim=False):
    fn = x.argmax if node.target is torch.ops.aten.argmax.default else x.argmin
    if dim is None:
        return fn(None) if not keepdim else fn(None).reshape((1,) * x.ndim)
    return fn(_ax(dim, x.ndim), keepdim=keepdim)


@_reg("aten.any.dim", "aten.any.dims", "aten.any.default", "aten.all.dim", "aten.all.dims", "aten.all.default")
def _any_all(cv, node, x, dim=None, keepdim=False):
    fn = "any" if "any" in str(node.target) else "all"
    if x.ndim == 0:
        return x.ne(0) if x.dtype != DType.bool else x
    return getattr(x, fn)(_axes(dim, x.ndim), keepdim=keepdim)


@_reg("aten.var.correction", "aten.var.dim", "aten.std.correction", "aten.std.dim")
def _var(cv, node, x, dim=None, *a, correction=None, keepdim=False, unbiased=None):
    if a:  # var.dim(x, dim, unbiased, keepdim)
        unbiased = a[0]
        keepdim = a[1] if len(a) > 1 else keepdim
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    fn = "var" if "var" in str(node.target) else "std"
    return getattr(x, fn)(_axes(dim, x.ndim), correction=correction, keepdim=keepdim)


@_reg("aten.var_mean.correction")
def _var_mean(cv, node, x, dim=None, correction=None, keepdim=False):
    correction = 1 if correction is None else correction
    axes = _axes(dim, x.ndim)
    return (x.var(axes, correction=correction, keepdim=keepdim), x.mean(axes, keepdim=keepdim))


@_reg("aten.logsumexp.default")
def _logsumexp(cv, node, x, dim, keepdim=False):
    return x.logsumexp(_axes(dim, x.ndim), keepdim=keepdim)


@_reg("aten.cumsum.default", "aten.cumprod.default")
def _cumsum(cv, node, x, dim, dtype=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    fn = x.cumsum if "cumsum" in str(node.target) else x.cumprod
    return fn(_ax(dim, x.ndim))


@_reg("aten.norm.ScalarOpt_dim", "aten.linalg_vector_norm.default")
def _norm(cv, node, x, p=2, dim=None, keepdim=False, dtype=None):
    axes = _axes(dim, x.ndim)
    if p in (2, 2.0, None):
        return (x * x).sum(axes, keepdim=keepdim).sqrt()
    if p in (1, 1.0):
        return x.abs().sum(axes, keepdim=keepdim)
    if p == math.inf:
        return x.abs().max(axes, keepdim=keepdim)
    return x.abs().pow(p).sum(axes, keepdim=keepdim).pow(1.0 / p)


# --- softmax and normalization
@_reg("aten._softmax.default", "aten.softmax.int", "aten._safe_softmax.default")
def _softmax(cv, node, x, dim, half_to_float=None, dtype=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    y = x.softmax(_ax(dim, x.ndim))
    if node.target is torch.ops.aten._safe_softmax.default:
        # rows that are entirely -inf give 0 instead of NaN
        y = where(x.eq(-math.inf).all(_ax(dim, x.ndim), keepdim=True), 0.0, y)
    return y


@_reg("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(cv, node, x, dim, half_to_float=None, dtype=None):
    return x.log_softmax(_ax(dim, x.ndim))


def _layer_norm_stats(x, n_axes, eps):
    axes = tuple(range(x.ndim - n_axes, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(axes, keepdim=True)
    rstd = (var + eps).rsqrt()
    return xc * rstd, mean, rstd


@_reg("aten.native_layer_norm.default")
def _native_layer_norm(cv, node, x, normalized_shape, weight, bias, eps):
    y, mean, rstd = _layer_norm_stats(x, len(normalized_shape), eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return (y, mean, rstd)


@_reg("aten.layer_norm.default")
def _layer_norm(cv, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return _native_layer_norm(cv, node, x, normalized_shape, weight, bias, eps)[0]


@_reg("aten.rms_norm.default")
def _rms_norm(cv, node, x, normalized_shape, weight=None, eps=None):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    if eps is None:
        eps = float(np.finfo(x.dtype.numpy).eps)
    y = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return y * weight if weight is not None else y


def _channel(t, ndim):
    return t.reshape((t.dims[0],) + (1,) * (ndim - 2))


def _bn_eval(x, weight, bias, mean, var, eps):
    inv = (var + eps).rsqrt()
    scale = inv * weight if weight is not None else inv
    y = (x - _channel(mean, x.ndim)) * _channel(scale, x.ndim)
    return y + _channel(bias, x.ndim) if bias is not None else y


def _bn_train(x, weight, bias, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axes)
    xc = x - _channel(mean, x.ndim)
    var = (xc * xc).mean(axes)
    inv = (var + eps).rsqrt()
    y = xc * _channel(inv if weight is None else inv * weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    return y, mean, var, inv


@_reg("aten._native_batch_norm_legit_no_training.default")
def _bn_no_training(cv, node, x, weight, bias, running_mean, running_var, momentum, eps):
    empty = cv.graph.full((0,), 0.0, x.dtype)
    return (_bn_eval(x, weight, bias, running_mean, running_var, eps), empty, empty)


@_reg("aten._native_batch_norm_legit_functional.default")
def _bn_functional(cv, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        empty = cv.graph.full((0,), 0.0, x.dtype)
        return (_bn_eval(x, weight, bias, running_mean, running_var, eps), empty, empty, running_mean,
                running_var)
    y, mean, var, inv = _bn_train(x, weight, bias, eps)
    n = 1
    for d in (x.dims[0],) + tuple(x.dims[2:]):
        n = n * d
    n = to_expr(n)
    if n.is_constant():
        unbiased = var * (n.to_int() / max(n.to_int() - 1, 1))
    else:  # a symbolic batch: the Bessel factor n / (n - 1) is computed at run time
        unbiased = var * (cv.graph.constant(n, x.dtype) / cv.graph.constant(n - 1, x.dtype))
    new_mean = running_mean * (1 - momentum) + mean * momentum
    new_var = running_var * (1 - momentum) + unbiased * momentum
    return (y, mean, inv, new_mean, new_var)


@_reg("aten.batch_norm.default", "aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")
def _batch_norm(cv, node, x, weight, bias, running_mean, running_var, training, momentum, eps, *a):
    native = node.target is not torch.ops.aten.batch_norm.default
    if not training and running_mean is not None:
        y = _bn_eval(x, weight, bias, running_mean, running_var, eps)
        if native:
            empty = cv.graph.full((0,), 0.0, x.dtype)
            return (y, empty, empty)
        return y
    if running_mean is not None and node.target is torch.ops.aten.batch_norm.default:
        raise _NeedsDecomposition(str(node.target), "batch_norm in training mode updates its running statistics"
                                  " in place; decompose it (decompose='auto' or True) for functional updates")
    y, mean, var, inv = _bn_train(x, weight, bias, eps)
    return (y, mean, inv) if native else y


@_reg("aten.native_group_norm.default")
def _native_group_norm(cv, node, x, weight, bias, N, C, HxW, group, eps):
    c = _int(C, "group_norm channels")
    shape = x.dims
    g = x.reshape((x.dims[0], group, -1))
    mean = g.mean(2, keepdim=True)
    gc = g - mean
    var = (gc * gc).mean(2, keepdim=True)
    rstd = (var + eps).rsqrt()
    y = (gc * rstd).reshape(shape)
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    del c
    return (y, mean.squeeze(2), rstd.squeeze(2))


@_reg("aten.group_norm.default")
def _group_norm(cv, node, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn=True):
    return _native_group_norm(cv, node, x, weight, bias, x.dims[0], x.dims[1], None, num_groups, eps)[0]


@_reg("aten.instance_norm.default")
def _instance_norm(cv, node, x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn):
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    y = xc * ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    return y


# --- convolution and pooling
@_reg("aten.convolution.default", "aten._convolution.default")
def _convolution(cv, node, x, w, b, stride, padding, dilation, transposed, output_padding, groups, *a):
    from ....nn.conv import conv_nd, conv_transpose_nd

    if transposed:
        return conv_transpose_nd(x, w, b, tuple(stride), tuple(padding), tuple(output_padding), groups,
                                 tuple(dilation))
    return conv_nd(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)


@_reg("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv1d.padding",
      "aten.conv2d.padding", "aten.conv3d.padding")
def _conv(cv, node, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    from ....nn.conv import conv_nd

    n = w.ndim - 2
    tup = (lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v,) * n)
    pad = padding if isinstance(padding, str) else tup(padding)
    return conv_nd(x, w, b, tup(stride), pad, tup(dilation), groups)


@_reg("aten.conv_transpose1d.default", "aten.conv_transpose2d.input", "aten.conv_transpose3d.input")
def _conv_t(cv, node, x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    from ....nn.conv import conv_transpose_nd

    n = w.ndim - 2
    tup = (lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v,) * n)
    return conv_transpose_nd(x, w, b, tup(stride), tup(padding), tup(output_padding), groups, tup(dilation))


def _pool_args(x, n, kernel, stride, padding, dilation=1):
    tup = (lambda v: tuple(v) if isinstance(v, (list, tuple)) and len(v) == n else
           tuple(v) * n if isinstance(v, (list, tuple)) else (v,) * n)
    kernel = tup(kernel)
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else tup(stride)
    return kernel, stride, tup(padding), tup(dilation)


def _max_pool_handler(n):
    def h(cv, node, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        from ....nn import pooling

        k, s, p, d = _pool_args(x, n, kernel_size, stride, padding, dilation)
        fn = getattr(pooling, f"max_pool{n}d")
        with_indices = "with_indices" in str(node.target)
        out = fn(x, k, s, p, d, ceil_mode, return_indices=with_indices)
        return tuple(out) if with_indices else out
    return h


for _n in (1, 2, 3):
    _reg(f"aten.max_pool{_n}d.default", f"aten.max_pool{_n}d_with_indices.default")(_max_pool_handler(_n))


def _avg_pool_handler(n):
    def h(cv, node, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
          divisor_override=None):
        from ....nn import pooling

        k, s, p, _ = _pool_args(x, n, kernel_size, stride, padding)
        if n == 1:
            return pooling.avg_pool1d(x, k, s, p, ceil_mode, count_include_pad)
        return getattr(pooling, f"avg_pool{n}d")(x, k, s, p, ceil_mode, count_include_pad, divisor_override)
    return h


for _n in (1, 2, 3):
    _reg(f"aten.avg_pool{_n}d.default")(_avg_pool_handler(_n))


def _adaptive_handler(n, kind):
    def h(cv, node, x, output_size):
        from ....nn import pooling

        out = tuple(output_size) if isinstance(output_size, (list, tuple)) else (output_size,) * n
        if kind == "avg":
            if all(o == 1 for o in out):
                return x.mean(tuple(range(x.ndim - n, x.ndim)), keepdim=True)
            return getattr(pooling, f"adaptive_avg_pool{n}d")(x, out)
        if _output_used(node, 1):
            raise TorchImportError("adaptive max pooling indices are not supported")
        return (getattr(pooling, f"adaptive_max_pool{n}d")(x, out), None)
    return h


for _n in (1, 2, 3):
    _reg(f"aten.adaptive_avg_pool{_n}d.default", f"aten._adaptive_avg_pool{_n}d.default")(
        _adaptive_handler(_n, "avg"))
    _reg(f"aten.adaptive_max_pool{_n}d.default")(_adaptive_handler(_n, "max"))


def _output_used(node, index: int) -> bool:
    """Whether output ``index`` of a multi-output node is read (``getitem(node, index)``)."""
    return any(u.target is operator.getitem and u.args[1] == index and len(u.users) > 0 for u in node.users)


def _resize_axis(x, axis: int, out: int, mode: str, align_corners, scale):
    """Resize one axis with PyTorch's ``interpolate`` coordinate rules; indices/weights computed here."""
    n = _int(x.dims[axis], "interpolate: the resized dims")
    dst = np.arange(out, dtype=np.float64)
    if mode == "nearest":
        sc = (1.0 / scale) if scale else n / out
        idx = np.minimum(np.floor(dst * np.float32(sc)).astype(np.int64), n - 1)
        return x.index_select(axis, x.graph.tensor((out,), DType.int64, "resize_index").set(idx).keep())
    if align_corners:
        src = dst * ((n - 1) / (out - 1) if out > 1 else 0.0)
    else:
        sc = (1.0 / scale) if scale else n / out
        src = np.maximum((dst + 0.5) * sc - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    w1 = (src - i0).astype(np.float32)
    w0 = (1.0 - w1).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = out

    def const(arr, dt, nm):
        return x.graph.tensor(arr.shape, dt, nm).set(arr).keep()

    a = x.index_select(axis, const(i0, DType.int64, "resize_i0"))
    b = x.index_select(axis, const(i1, DType.int64, "resize_i1"))
    return a * const(w0.reshape(shape), x.dtype, "resize_w0") + b * const(w1.reshape(shape), x.dtype, "resize_w1")


def _upsample(mode):
    def h(cv, node, x, output_size, *a):
        if mode == "nearest":
            scales = a[0] if a else None
            align = None
        else:
            align = a[0] if a else False
            scales = a[1] if len(a) > 1 else None
        n = x.ndim - 2
        if output_size is None:
            output_size = [int(math.floor(_int(d) * s)) for d, s in zip(x.dims[2:], scales)]
        y = x
        for i in range(n):
            sc = scales[i] if scales else None
            y = _resize_axis(y, 2 + i, _int(output_size[i]), mode, align, sc)
        return y
    return h


_reg("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec", "aten.upsample_nearest3d.vec")(
    _upsample("nearest"))
_reg("aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec", "aten.upsample_trilinear3d.vec")(
    _upsample("linear"))


# --- attention
def _sdpa(cv, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from ....nn.attention import scaled_dot_product_attention

    if dropout_p:
        raise TorchImportError("scaled_dot_product_attention with dropout_p > 0 (training) is not imported; "
                               "export in eval mode")
    if attn_mask is not None and attn_mask.dtype != DType.bool and attn_mask.dtype != q.dtype:
        attn_mask = attn_mask.cast(q.dtype)
    if k.ndim >= 3 and q.ndim >= 3 and to_expr(k.dims[-3]) != to_expr(q.dims[-3]):
        enable_gqa = True
    return scaled_dot_product_attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)


_reg("aten.scaled_dot_product_attention.default")(_sdpa)


@_reg("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(cv, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    out = _sdpa(cv, node, q, k, v, attn_mask, dropout_p, is_causal, scale)
    return (out, cv.graph.full(q.dims[:-1], 0.0, q.dtype))


# --- ops built on newer tensor methods (sorting, scatter, inverse trigonometry): used when this luminal has them
def _method(x, name: str, op: str):
    fn = getattr(x, name, None)
    if fn is None:
        raise TorchImportError(f"{op} needs GraphTensor.{name}, which this luminal build does not have")
    return fn


@_reg("aten.topk.default")
def _topk(cv, node, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    v, i = _method(x, "topk", "topk")(_int(k, "topk: k"), dim, largest, sorted)
    return (v, i)


@_reg("aten.sort.default", "aten.sort.stable")
def _sort(cv, node, x, *a, stable=None, dim=-1, descending=False):
    if a:  # sort.default(self, dim=-1, descending=False)
        dim = a[0]
        descending = a[1] if len(a) > 1 else descending
    v, i = _method(x, "sort", "sort")(dim, descending)
    return (v, i)


@_reg("aten.argsort.default", "aten.argsort.stable")
def _argsort(cv, node, x, *a, stable=None, dim=-1, descending=False):
    if a:
        dim = a[0]
        descending = a[1] if len(a) > 1 else descending
    return _method(x, "argsort", "argsort")(dim, descending)


@_reg("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce", "aten.scatter.value_reduce")
def _scatter(cv, node, x, dim, index, src, reduce=None):
    fn = _method(x, "scatter", "scatter")
    if _is_t(src):
        return fn(dim, index, src=src.cast(x.dtype) if src.dtype != x.dtype else src, reduce=reduce)
    return fn(dim, index, value=src, reduce=reduce)


@_reg("aten.scatter_add.default")
def _scatter_add(cv, node, x, dim, index, src):
    return _method(x, "scatter_add", "scatter_add")(dim, index, src)


@_reg("aten.index_add.default")
def _index_add(cv, node, x, dim, index, source, alpha=1):
    return _method(x, "index_add", "index_add")(dim, index, source, alpha=alpha)


@_reg("aten.scatter_reduce.two")
def _scatter_reduce(cv, node, x, dim, index, src, reduce, include_self=True):
    return _method(x, "scatter_reduce", "scatter_reduce")(dim, index, src, reduce, include_self)


for _n in ("asin", "acos", "atan", "asinh", "acosh", "atanh"):
    _reg(f"aten.{_n}.default")(
        (lambda name: lambda cv, node, x: _method(_float_in(x), name, f"aten.{name}")())(_n))


@_reg("aten.atan2.default")
def _atan2(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return _method(a, "atan2", "atan2")(b)
