"""Signal processing: DFT and STFT as products with constant (import-time) Fourier matrices, and the window
and mel-filter generators (HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix), whose outputs depend
on scalar inputs only and are computed at import time."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from ...hl_ops import concat
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register, typed


def _fourier(n_in: int, n: int, inverse: bool, onesided: bool):
    """Matrices (A, B, C, D) of shape (n_in, K): out_r = xr A + xi B, out_i = xr C + xi D, for an input of
    ``n_in`` samples (truncated or zero-padded to the transform length ``n``)."""
    m = min(n_in, n)
    if inverse and onesided:  # irfft: n_in one-sided bins -> n real samples
        bins = n // 2 + 1
        k = np.arange(min(n_in, bins))[:, None]
        t = np.arange(n)[None, :]
        theta = 2 * np.pi * k * t / n
        w = np.full((k.shape[0], 1), 2.0)
        w[0] = 1.0
        if n % 2 == 0 and k.shape[0] > n // 2:
            w[n // 2] = 1.0
        a = w * np.cos(theta) / n
        b = -w * np.sin(theta) / n
        pad = np.zeros((n_in - k.shape[0], n))
        return np.vstack([a, pad]), np.vstack([b, pad]), None, None
    k_out = n // 2 + 1 if onesided else n
    s = np.arange(m)[:, None]
    k = np.arange(k_out)[None, :]
    theta = 2 * np.pi * s * k / n
    cos, sin = np.cos(theta), np.sin(theta)
    if inverse:
        a, b, c, d = cos / n, -sin / n, sin / n, cos / n
    else:
        a, b, c, d = cos, sin, -sin, cos
    pad = np.zeros((n_in - m, k_out))
    return tuple(np.vstack([x, pad]) for x in (a, b, c, d))


def dft_last(ctx, x, n: int, inverse: bool, onesided: bool):
    """DFT over axis -2 of ``x`` (..., L, 1|2) -> (..., K, 2) (or (..., n, 1) for an inverse one-sided one)."""
    n_in = dim(x.dims[-2])
    if is_symbolic(n_in):
        raise OnnxImportError("DFT over a symbolic length is not supported")
    a, b, c, d = _fourier(n_in, n, inverse, onesided)
    xr = x.slice_axis(-1, 0, 1).squeeze(-1)                               # (..., L)
    xi = x.slice_axis(-1, 1, 2).squeeze(-1) if dim(x.dims[-1]) == 2 else None
    np_dtype = x.dtype.numpy

    def mm(v, mat):
        return v @ ctx.array(mat.astype(np_dtype))

    out_r = mm(xr, a) if xi is None else mm(xr, a) + mm(xi, b)
    if c is None:
        return out_r.unsqueeze(-1)
    out_i = mm(xr, c) if xi is None else mm(xr, c) + mm(xi, d)
    return concat([out_r.unsqueeze(-1), out_i.unsqueeze(-1)], -1)


@register("DFT")
def _dft(ctx):
    x = ctx.t(0)
    if ctx.version >= 20:
        a = int(ctx.scalar(2, "input 'axis'")) if ctx.has(2) else -2
    else:
        a = ctx.attr("axis", 1)
    a = a % x.ndim
    if a == x.ndim - 1:
        raise OnnxImportError("DFT: the axis cannot be the last (real/imaginary) axis")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    length = dim(x.dims[a])
    if ctx.has(1):
        n = int(ctx.scalar(1, "input 'dft_length'"))
    else:
        n = 2 * (length - 1) if inverse and onesided else length
    order = [j for j in range(x.ndim - 1) if j != a] + [a, x.ndim - 1]
    inverse_order = list(np.argsort(order))
    y = dft_last(ctx, x.permute(order), n, inverse, onesided)
    return [y.permute(inverse_order)]


@register("STFT")
def _stft(ctx):
    x = ctx.t(0)                                                         # (B, L, 1|2)
    step = int(ctx.scalar(1, "input 'frame_step'"))
    window = ctx.t(2) if ctx.has(2) else None
    if ctx.has(3):
        frame = int(ctx.scalar(3, "input 'frame_length'"))
    elif window is not None:
        frame = dim(window.dims[0])
    else:
        frame = dim(x.dims[-2])
    frames = x.pool(1, frame, step)                                      # (B, F, frame, c)
    if window is not None:
        frames = frames * window.reshape((frame, 1))
    return [dft_last(ctx, frames, frame, False, bool(ctx.attr("onesided", 1)))]


def _window(kind):
    def handler(ctx):
        size = int(ctx.scalar(0, "input 'size'"))
        periodic = ctx.attr("periodic", 1)
        n1 = size if periodic else size - 1
        i = np.arange(size, dtype=np.float64)
        if kind == "hann":
            w = np.sin(i * np.pi / n1) ** 2
        elif kind == "hamming":
            alpha = 25.0 / 46.0
            w = alpha - np.cos(i * np.pi * 2 / n1) * (1 - alpha)
        else:
            w = 0.42 - 0.5 * np.cos(i * 2 * np.pi / n1) + 0.08 * np.cos(i * 4 * np.pi / n1)
        t = ctx.attr("output_datatype", TP.FLOAT)
        return [typed(w.astype(dtypes.numpy(t)), t)]
    return handler


for _name, _kind in (("HannWindow", "hann"), ("HammingWindow", "hamming"), ("BlackmanWindow", "blackman")):
    register(_name, fold=_window(_kind))(_window(_kind))


def _mel(ctx):
    mel_bins, dft_length, rate = (int(ctx.scalar(i)) for i in range(3))
    lower, upper = float(ctx.scalar(3)), float(ctx.scalar(4))
    spectrogram_bins = dft_length // 2 + 1
    points = np.arange(0, mel_bins + 2)
    low = 2595 * np.log1p(lower / 700) / np.log(10)
    high = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high - low) / points.shape[0]
    freqs = 700 * np.expm1((points * step + low) / 2595 * np.log(10))
    freqs = (((dft_length + 1) * freqs) // rate).astype(int)
    out = np.zeros((spectrogram_bins, mel_bins))
    for i in range(mel_bins):
        lo, c, hi = freqs[i], freqs[i + 1], freqs[i + 2]
        if c == lo:
            out[c, i] = 1
        else:
            for j in range(lo, c + 1):
                out[j, i] = (j - lo) / (c - lo)
        for j in range(c, hi):
            out[j, i] = (hi - j) / (hi - c)
    t = ctx.attr("output_datatype", TP.FLOAT)
    return [typed(out.astype(dtypes.numpy(t)), t)]


register("MelWeightMatrix", fold=_mel)(_mel)
