"""Spatial transformers: ``affine_grid`` and ``grid_sample`` (PyTorch's semantics; ONNX's ``AffineGrid`` and
``GridSample`` call these).

The sampling positions come from a run-time grid, so each interpolation tap is a ``Gather`` over the flattened
image with indices computed in the graph; the taps' weights are differentiable, so gradients reach both the
input (a scatter-add of the gathers) and the grid (through the weights), as in PyTorch.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..dtype import DType
from ..graph import GraphError
from ..hl_ops import where


def _base_axis(n: int, align: bool) -> np.ndarray:
    if align:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.array([-1.0])
    step = 2.0 / n
    return -1 + step / 2 + step * np.arange(n)


def _sizes(dims, what: str) -> list[int]:
    out = []
    for d in dims:
        if hasattr(d, "is_constant"):  # an Expression
            if not d.is_constant():
                raise GraphError(f"{what} needs concrete spatial sizes, got the symbolic size {d}")
            d = d.to_int()
        out.append(int(d))
    return out


def affine_grid(theta, size, align_corners: bool | None = None):
    """``torch.nn.functional.affine_grid``: the sampling grid ``(N, *spatial, nd)`` of the affine maps ``theta``
    (``(N, 2, 3)`` for 2-D, ``(N, 3, 4)`` for 3-D) for an output of ``size`` ``(N, C, *spatial)``; coordinates in
    [-1, 1], x first. ``align_corners`` None means False (PyTorch's default)."""
    align = bool(align_corners)
    spatial = _sizes(list(size)[2:], "affine_grid")
    nd = len(spatial)
    if nd not in (1, 2, 3) or theta.ndim != 3 or theta.dims[1] != nd or theta.dims[2] != nd + 1:
        raise GraphError(f"affine_grid: theta must be (N, {nd}, {nd + 1}) for a size of {nd} spatial dims, got "
                         f"{[str(d) for d in theta.dims]}")
    axes = [_base_axis(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in mesh][::-1]                       # x first
    base = np.stack(coords + [np.ones_like(coords[0])], axis=1)       # (P, nd + 1)
    arr = np.ascontiguousarray(base.T.astype(theta.dtype.numpy))
    base_t = theta.graph.tensor(arr.shape, theta.dtype, "const:affine_grid").set(arr).keep()
    grid = theta @ base_t                                               # (N, nd, P)
    return grid.permute(0, 2, 1).reshape([theta.dims[0]] + spatial + [nd])


def _reflect(v, lo: float, hi: float):
    rng = hi - lo
    below = v < lo
    above = v > hi
    dx = where(below, lo - v, v - hi)
    n = (dx / rng).trunc()
    r = dx - n * rng
    even = n.remainder(2.0).eq(0.0)
    low_side = where(even, lo + r, hi - r)
    high_side = where(even, hi - r, lo + r)
    return where(below, low_side, where(above, high_side, v))


def _cubic_weights(t):
    a = -0.75
    x0, x1, x2, x3 = t + 1.0, t, 1.0 - t, 2.0 - t
    w0 = ((x0 * a - 5 * a) * x0 + 8 * a) * x0 - 4 * a
    w1 = (x1 * (a + 2) - (a + 3)) * x1 * x1 + 1
    w2 = (x2 * (a + 2) - (a + 3)) * x2 * x2 + 1
    w3 = ((x3 * a - 5 * a) * x3 + 8 * a) * x3 - 4 * a
    return [w0, w1, w2, w3]


MODES = ("bilinear", "nearest", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")


def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None):
    """``torch.nn.functional.grid_sample``: ``input`` ``(N, C, *spatial)`` sampled at ``grid`` ``(N, *out, nd)``
    (x first, in [-1, 1]); ``mode`` ``"bilinear"`` (linear in every dim), ``"nearest"`` (half to even) or
    ``"bicubic"`` (2-D, PyTorch's a = -0.75); ``padding_mode`` ``"zeros"``, ``"border"`` or ``"reflection"``;
    ``align_corners`` None means False. Returns ``(N, C, *out)``."""
    if mode not in MODES:
        raise ValueError(f"grid_sample: mode must be one of {MODES}, got {mode!r}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"grid_sample: padding_mode must be one of {PADDING_MODES}, got {padding_mode!r}")
    x = input
    align = bool(align_corners)
    dims = _sizes(x.dims[2:], "grid_sample")
    nd = len(dims)
    if grid.ndim != nd + 2 or grid.dims[-1] != nd or grid.dims[0] != x.dims[0]:
        raise GraphError(f"grid_sample: for an input of {nd} spatial dims the grid must be (N, *out, {nd}) with the "
                         f"input's N, got {[str(d) for d in grid.dims]} for input {[str(d) for d in x.dims]}")
    n, c = x.dims[0], x.dims[1]
    out_spatial = list(grid.dims[1:-1])
    g = grid.cast(x.dtype if x.dtype.is_float else DType.float32)
    coords = []
    for i, length in enumerate(dims):
        v = g.slice_axis(-1, nd - 1 - i, nd - i).squeeze(-1)             # (N, out...)
        v = (v + 1.0) / 2.0 * (length - 1) if align else ((v + 1.0) * length - 1.0) / 2.0
        if mode == "nearest":
            v = v.round()
        lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
        if padding_mode == "border" and mode != "bicubic":  # (bicubic clamps each tap instead, as PyTorch)
            v = where((v < lo).logical_or(v > hi), v.clip(0.0, length - 1.0), v)
        elif padding_mode == "reflection":
            v = _reflect(v, lo, hi)
        coords.append((v, lo, hi))
    plane = int(np.prod(dims))
    flat = x.reshape((n, c, plane))

    def fetch(idx_list):
        """Pixels at integer positions (one tensor per dim), with the padding mode; (N, C, out...)."""
        valid = None
        lin = None
        for i, (idx, (_, lo, hi)) in enumerate(zip(idx_list, coords)):
            length = dims[i]
            if padding_mode == "border":
                idx = idx.clip(0, length - 1)
            elif padding_mode == "reflection":
                idx = _reflect(idx.cast(g.dtype), lo, hi).trunc().cast(DType.int64)
            ok = (idx >= 0).logical_and(idx < length)
            valid = ok if valid is None else valid.logical_and(ok)
            stride = int(np.prod(dims[i + 1:]))
            term = where(ok, idx, 0) * stride
            lin = term if lin is None else lin + term
        q = lin.reshape((n, 1, -1)).expand((n, c, lin.numel() // n))
        vals = flat.gather(2, q).reshape([n, c] + out_spatial)
        return where(valid.unsqueeze(1), vals, 0.0) if padding_mode == "zeros" else vals

    if mode == "nearest":
        return fetch([v.trunc().cast(DType.int64) for v, _, _ in coords]).cast(x.dtype)
    taps = []
    for v, _, _ in coords:
        base = v.floor()
        t = v - base
        b = base.cast(DType.int64)
        if mode == "bilinear":
            taps.append([(b, 1.0 - t), (b + 1, t)])
        else:
            ws = _cubic_weights(t)
            taps.append([(b + (k - 1), ws[k]) for k in range(4)])
    out = None
    for combo in itertools.product(*taps):
        weight = None
        for _, w in combo:
            weight = w if weight is None else weight * w
        term = fetch([idx for idx, _ in combo]) * weight.unsqueeze(1)
        out = term if out is None else out + term
    return out.cast(x.dtype)
