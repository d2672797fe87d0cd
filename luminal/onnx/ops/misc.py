"""Less common operators built from gathers and constant matrices: Det (small matrices), Col2Im, MaxUnpool."""

from __future__ import annotations

import itertools

import numpy as np

from ...dtype import DType
from ...nn.pooling import unpool_flat
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register

MAX_DET = 6  # Leibniz expansion: n! products


@register("Det")
def _det(ctx):
    x = ctx.t(0)
    n = dim(x.dims[-1])
    if is_symbolic(n) or n != dim(x.dims[-2]):
        raise OnnxImportError(f"Det needs square matrices of constant size, got {[str(d) for d in x.dims]}")
    if n > MAX_DET:
        raise OnnxImportError(f"Det is implemented by Leibniz expansion up to {MAX_DET}x{MAX_DET}, got {n}x{n}")
    work = x.cast(DType.float64) if x.dtype == DType.float32 else x
    rows = [[work.slice_axis(-2, i, i + 1).slice_axis(-1, j, j + 1).squeeze(-1).squeeze(-1) for j in range(n)]
            for i in range(n)]
    total = None
    for perm in itertools.permutations(range(n)):
        sign = np.linalg.det(np.eye(n)[list(perm)])
        term = None
        for i, j in enumerate(perm):
            term = rows[i][j] if term is None else term * rows[i][j]
        term = term if sign > 0 else -term
        total = term if total is None else total + term
    return [total.cast(x.dtype)]


@register("Col2Im")
def _col2im(ctx):
    x = ctx.t(0)                                                         # (N, C*prod(block), L)
    image = ctx.ints(1, "input 'image_shape'")
    block = ctx.ints(2, "input 'block_shape'")
    nd = len(image)
    dil = ctx.attr_ints("dilations", [1] * nd)
    pads = ctx.attr_ints("pads", [0] * 2 * nd)
    strides = ctx.attr_ints("strides", [1] * nd)
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    outs = [(padded[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    kprod, lprod, pprod = int(np.prod(block)), int(np.prod(outs)), int(np.prod(image))
    # constant scatter matrix: column (k, l) -> image pixel (or nowhere, inside the padding)
    m = np.zeros((kprod * lprod, pprod), dtype=x.dtype.numpy)
    for ki, k in enumerate(itertools.product(*[range(b) for b in block])):
        for li, lpos in enumerate(itertools.product(*[range(o) for o in outs])):
            pos = [lpos[i] * strides[i] + k[i] * dil[i] - pads[i] for i in range(nd)]
            if all(0 <= p < image[i] for i, p in enumerate(pos)):
                m[ki * lprod + li, int(np.ravel_multi_index(pos, image))] = 1
    n = x.dims[0]
    c = dim(x.dims[1]) // kprod
    flat = x.reshape((n, c, kprod * lprod))
    y = flat @ ctx.array(m)
    return [y.reshape([n, c] + list(image))]


@register("MaxUnpool")
def _max_unpool(ctx):
    x, idx = ctx.t(0), ctx.t(1).cast(DType.int64)
    n, c = x.dims[0], x.dims[1]
    spatial = [dim(d) for d in x.dims[2:]]
    nd = len(spatial)
    kernel = ctx.attr_ints("kernel_shape")
    strides = ctx.attr_ints("strides", [1] * nd)
    pads = ctx.attr_ints("pads", [0] * 2 * nd)
    default = [(spatial[i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd] for i in range(nd)]
    out_shape = ctx.ints(2, "input 'output_shape'")[2:] if ctx.has(2) else default
    plane = int(np.prod(out_shape))
    # indices are flat over the whole (N, C, *default shape) tensor: make them plane-relative, then move each
    # position of the default shape to the same coordinates in the (possibly larger) output shape
    base = ctx.graph.arange(n * c, dtype=DType.int64).reshape((n, c) + (1,) * nd) * int(np.prod(default))
    rel = idx - base
    if list(out_shape) != list(default):
        lin = None
        for i in range(nd):
            coord = rel.floor_divide(int(np.prod(default[i + 1:]))).remainder(default[i])
            term = coord * int(np.prod(out_shape[i + 1:]))
            lin = term if lin is None else lin + term
        rel = lin
    rel = rel.reshape((n, c, -1))                                        # (N, C, M)
    vals = x.reshape((n, c, -1))
    out = unpool_flat(vals, rel, plane)                                  # nn.functional.max_unpool's core
    return [out.reshape([n, c] + list(out_shape)).cast(x.dtype)]
