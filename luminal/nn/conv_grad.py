"""A convolution's gradients as PyTorch computes them: nn.conv's ``"conv"`` gradient rule.

Through its primitives a convolution's input gradient is a product per window offset summed back onto the input
(col2im; for a strided convolution over the zero-interleaved upstream gradient). Where the direct kernel
(:mod:`luminal.codegen.gemm_direct`) takes the result, :func:`luminal.nn.conv.conv_nd` registers this rule on
its product instead:

* the **input gradient** is a convolution of the upstream gradient, padded by ``dilation * (k - 1)`` less the
  forward's padding on each side (negative amounts crop), with the spatially flipped kernel, its in and out
  channels swapped within each group. A stride-``s`` convolution's is split into its ``s`` *phases* per
  spatial axis (input positions ``s*i + r``, polyphase): phase ``r`` receives only the kernel taps ``k`` with
  ``d*k = r + pad (mod s)``, a stride-1 convolution of the upstream gradient with that sub-kernel (every
  ``s/gcd(d, s)``-th tap, dilation ``d/gcd(d, s)``), and the phases interleave into the gradient. No product
  touches an interleaved zero (the primitives' form computes ``s**n`` times the products for a 2-D ``n``).
  Under :class:`luminal.autocast` (stride 1) the upstream gradient is rounded before it is padded, so the
  GEMM reads a padded view of the rounded gradient, not a padded rounded copy;
* the **weight gradient** is, per group, the windows of the padded input (its im2col) contracted with the
  upstream gradient over the batch and the output positions: the direct kernel's "dot" form reads them in
  place.
"""

from __future__ import annotations

import itertools
import math

from ..amp import autocast_off, lower_precision_dtype, round_to
from ..codegen.gemm_direct import rows_apply
from ..hl_ops.movement import stack
from .conv import _const, _prod


def phase(x: int, k: int, s: int, d: int, pads: tuple[int, int], r: int):
    """Phase ``r`` of one spatial axis of a stride-``s`` convolution's input gradient (input extent ``x``, kernel
    ``k``, dilation ``d``, padding ``pads``): ``(first tap, tap step, taps, dilation, (pad before, pad after),
    positions)`` of the stride-1 convolution of the upstream gradient that computes the input positions
    ``s*i + r`` (``positions`` of them), or None when no tap reaches them (``k < s``)."""
    lo, hi = pads
    out = (x + lo + hi - d * (k - 1) - 1) // s + 1
    step = s // math.gcd(d, s)
    k0 = next((j for j in range(min(k, step)) if (d * j - r - lo) % s == 0), None)
    if k0 is None:
        return None
    taps, dil = len(range(k0, k, step)), d * step // s
    t0 = (r + lo - d * k0) // s  # the upstream position feeding input s*i + r through tap k0 is i + t0
    n = (x - r + s - 1) // s
    before = dil * (taps - 1) - t0
    return k0, step, taps, dil, (before, n - out - before + dil * (taps - 1)), n


def rule_applies(x, weight, stride, dilation, pads, c_in_g: int) -> bool:
    """Whether the rule serves ``conv_nd(x, weight)`` (batched ``x``) with these parameters: the direct kernel
    takes every phase's input-gradient convolution (:func:`luminal.codegen.gemm_direct.rows_apply`: its rows,
    its ``c_in_g`` rows of A), and with a stride every phase is non-empty (spatial extents at least the stride,
    all concrete)."""
    n = weight.ndim - 2
    kernel = tuple(_const(d) for d in weight.dims[2:])
    if all(s == 1 for s in stride):
        rows, planes = x.dims[-1].to_int(), x.dims[-2].to_int() if n > 1 else 1
        return rows is not None and rows_apply(rows, c_in_g, x.dtype, dilation[-1] * (kernel[-1] - 1), planes or 1)
    sizes = [d.to_int() for d in x.dims[2:]]
    if None in sizes or any(xs < s for xs, s in zip(sizes, stride)):
        return False
    axes = [[phase(xs, k, s, d, p, r) for r in range(s)]
            for xs, k, s, d, p in zip(sizes, kernel, stride, dilation, pads)]
    for last in axes[-1]:
        if last is None:
            continue
        for plane in (axes[-2] if n > 1 else [None]):
            if not rows_apply(last[5], c_in_g, x.dtype, last[3] * (last[2] - 1), plane[5] if plane else 1):
                return False
    return True


def _upstream(x, weight, g, pads, dilation, stride):
    """The upstream gradient ``g`` of a convolution's product (``(G, C_out/G, N * O)``, see :func:`conv_nd`) as
    ``(N, C_out, *O)``."""
    n = weight.ndim - 2
    kernel = tuple(_const(d) for d in weight.dims[2:])
    out = tuple((x.dims[2 + i] + b + a - d * (k - 1) - 1) // s + 1 if s != 1 else x.dims[2 + i] + b + a - d * (k - 1)
                for i, (k, d, (b, a), s) in enumerate(zip(kernel, dilation, pads, stride)))
    return g.reshape((weight.dims[0], x.dims[0]) + out).permute([1, 0] + list(range(2, 2 + n)))


def conv_input_grad(x, weight, g, pads, dilation, groups: int = 1, stride=None):
    """The gradient with respect to ``x`` (batched) of ``conv_nd(x, weight, stride, pads, dilation, groups)``,
    for the upstream gradient ``g`` of its product: a convolution (per phase, with a stride) of ``g`` with the
    flipped, in/out-swapped kernel (see the module docstring)."""
    from .conv import conv_nd

    n = weight.ndim - 2
    stride = tuple(stride or (1,) * n)
    kernel = tuple(_const(d) for d in weight.dims[2:])
    gu = _upstream(x, weight, g, pads, dilation, stride)
    c_out, c_in_g = _const(weight.dims[0]), _const(weight.dims[1])
    w = weight.reshape((groups, c_out // groups, c_in_g) + kernel).transpose(1, 2)
    w = w.reshape((groups * c_in_g, c_out // groups) + kernel)
    flip = tuple(range(2, 2 + n))
    if all(s == 1 for s in stride):
        spread = [(0, 0), (0, 0)] + [(d * (k - 1) - b, d * (k - 1) - a) for k, d, (b, a) in zip(kernel, dilation, pads)]
        low = lower_precision_dtype(gu, w)
        if low is not None:  # (autocast: conv_nd's own path, the gradient rounded before it is padded, not after:
            # the same values, as zeros round to zeros, but the GEMM then reads a view of the rounded gradient
            # instead of a padded copy of it: W4 under autocast, 12.8 MB and a pass less)
            with autocast_off():
                return conv_nd(round_to(gu, low).pad(spread), round_to(w.flip(flip), low), None, 1, 0, dilation,
                               groups).cast(low)
        return conv_nd(gu.pad(spread), w.flip(flip), None, 1, 0, dilation, groups)
    sizes = [_const(d) for d in x.dims[2:]]
    longest = [-(-xs // s) for xs, s in zip(sizes, stride)]
    parts = []
    for rs in itertools.product(*(range(s) for s in stride)):
        ph = [phase(xs, k, s, d, p, r) for xs, k, s, d, p, r in zip(sizes, kernel, stride, dilation, pads, rs)]
        if any(p is None for p in ph):  # no tap reaches these positions: their gradient is 0
            part = x.graph.zeros((x.dims[0], x.dims[1]) + tuple(-(-(xs - r) // s) for xs, s, r in
                                                                 zip(sizes, stride, rs)), x.dtype)
        else:
            sub = w[(slice(None), slice(None)) + tuple(slice(p[0], k, p[1]) for p, k in zip(ph, kernel))]
            gp = gu.pad([(0, 0), (0, 0)] + [p[4] for p in ph])
            part = conv_nd(gp, sub.flip(flip), None, 1, 0, tuple(p[3] for p in ph), groups)
        # each phase padded to the longest (ceil(x / s) positions), then all interleaved: (N, C, L1, s1, ...)
        parts.append(part.pad([(0, 0), (0, 0)] + [(0, m - part.dims[2 + i].to_int()) for i, m in enumerate(longest)]))
    out = stack(parts, 0).reshape(tuple(stride) + (x.dims[0], x.dims[1]) + tuple(longest))
    out = out.permute([n, n + 1] + [a for i in range(n) for a in (n + 2 + i, i)])
    out = out.reshape((x.dims[0], x.dims[1]) + tuple(m * s for m, s in zip(longest, stride)))
    return out.pad([(0, 0), (0, 0)] + [(0, xs - m * s) for xs, m, s in zip(sizes, longest, stride)])


def conv_input_grad_col2im(x, weight, g, pads, dilation, groups: int = 1, stride=None):
    """The same gradient as :func:`conv_input_grad` in the primitives' own form (what autograd computes through
    the convolution's product without the rule): per group the transposed weight times ``g`` (the im2col
    matrix's gradient, ``(G, C_in/G * K, N * O)``), sent back onto ``x`` through the windows (col2im,
    :func:`luminal.training.unview`: a sum of shifted views per kernel offset)."""
    from ..shape import ShapeTracker
    from ..training.unview import unview

    n = weight.ndim - 2
    stride = tuple(stride or (1,) * n)
    kernel = tuple(_const(d) for d in weight.dims[2:])
    c_out, c_in_g = _const(weight.dims[0]), _const(weight.dims[1])
    view = ShapeTracker.contiguous_of(tuple(x.dims))  # the windows of x's padding: (N, C, O1, K1, ..., On, Kn)
    for a, (lo, hi) in enumerate(pads):
        view = view.pad(2 + a, lo, hi)
    for i in range(n):
        view = view.pool(2 + 2 * i, kernel[i], stride[i], dilation[i])
    out = tuple(view.dims[2 + 2 * i] for i in range(n))
    batch = x.dims[0]
    w = weight.reshape((groups, c_out // groups, c_in_g * _prod(kernel)))
    cols = (g.reshape((groups, c_out // groups, 1, g.dims[-1])) * w.unsqueeze(-1)).sum(1)  # (G, CK, N*O)
    cols = cols.reshape((groups, c_in_g) + kernel + (batch,) + out)
    cols = cols.permute([2 + n, 0, 1] + [a for i in range(n) for a in (3 + n + i, 2 + i)])
    return unview(cols.reshape(tuple(view.dims)), view, tuple(x.dims))


def offer_col2im(dx, x, weight, g, pads, dilation, groups: int = 1, stride=None) -> None:
    """Offer the col2im form (:func:`conv_input_grad_col2im`) as the e-graph's alternative
    (:mod:`luminal.compiler.egraph.alternatives`, kind ``"conv-input-grad"``) of ``dx``, the convolution form
    :func:`conv_input_grad` built: a measuring compile (``search="quick"``) then times both. Only where ``dx`` is
    a view of its convolution's product ``(G, C_in/G, N * prod(spatial))`` (stride 1, not under autocast, whose
    rounded result is a node of its own): the alternative is the col2im result laid out as that product."""
    from ..compiler.egraph.alternatives import offer
    from ..shape import ShapeTracker
    from ..tensor import GraphTensor

    n = weight.ndim - 2
    node = dx.graph.nodes[dx.id]
    want = (groups, _const(weight.dims[1]), x.dims[0] * _prod(tuple(x.dims[2:])))
    if any(s != 1 for s in (stride or (1,) * n)) or len(node.dims) != 3 or node.dtype != dx.dtype or any(
            (a - b).to_int() != 0 for a, b in zip(node.dims, want)):
        return
    kept = GraphTensor(dx.graph, dx.id, ShapeTracker.contiguous_of(tuple(node.dims)), node.dtype)
    offer(kept, "conv-input-grad", col2im_as_product, x, weight, g, tuple(pads), tuple(dilation), groups)


def col2im_as_product(x, weight, g, pads, dilation, groups: int = 1):
    """:func:`conv_input_grad_col2im` (stride 1) laid out as the convolution form's product ``(G, C_in/G, N * S)``
    (the buffer :func:`offer_col2im` unions it with)."""
    n = weight.ndim - 2
    c_in_g = _const(weight.dims[1])
    spatial = tuple(x.dims[2:])
    d = conv_input_grad_col2im(x, weight, g, pads, dilation, groups)
    d = d.reshape((x.dims[0], groups, c_in_g) + spatial).permute([1, 2, 0] + [3 + i for i in range(n)])
    return d.reshape((groups, c_in_g, x.dims[0] * _prod(spatial)))


def conv_weight_grad(x, weight, g, pads, dilation, groups: int = 1, stride=None):
    """The gradient with respect to ``weight`` of the same convolution (see :func:`conv_input_grad`): per group,
    the windows of the padded input (its im2col, ``(C_in/G * K, N * O)``) contracted with ``g`` over the batch and
    the output positions."""
    n = weight.ndim - 2
    stride = tuple(stride or (1,) * n)
    kernel = tuple(_const(d) for d in weight.dims[2:])
    xw = x.pad([(0, 0), (0, 0)] + list(pads))
    for i in range(n):
        xw = xw.pool(2 + 2 * i, kernel[i], stride[i], dilation[i])
    # (channels split into (G, C_in/G) first: the im2col's groups and rows are then axes of their own, which a
    # GEMM reading it through its prologue needs, as in conv_nd)
    c_in, c_out = _const(x.dims[1]), _const(weight.dims[0])
    xw = xw.split_dims(1, c_in // groups)
    o_axes, k_axes = [3 + 2 * i for i in range(n)], [4 + 2 * i for i in range(n)]
    cols = xw.permute([1, 2] + k_axes + [0] + o_axes)
    cols = cols.reshape((groups, c_in // groups * _prod(kernel), _prod(tuple(cols.dims[2 + n:]))))
    gg = g.reshape((groups, c_out // groups, cols.dims[2]))
    if groups == 1:  # (one GEMM: no batch axis)
        cols, gg = cols.squeeze(0), gg.squeeze(0)
    return (gg.unsqueeze(-2) * cols.unsqueeze(-3)).sum(-1).reshape(tuple(weight.dims))
