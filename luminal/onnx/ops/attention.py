"""Attention-related operators (opsets 23+): Attention, RotaryEmbedding, SwiGLU, LinearAttention,
CausalConvWithState, TensorScatter."""

from __future__ import annotations

import math


from ...dtype import DType
from ...hl_ops import concat, where
from ...nn.conv import conv_nd
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import dim, register


def _heads_4d(x, heads):
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hd = x.dims
    return x.reshape((b, s, heads, dim(hd) // heads)).permute(0, 2, 1, 3)


def _repeat_heads(x, reps):
    """``np.repeat(x, reps, axis=1)`` on (B, H, S, D)."""
    if reps == 1:
        return x
    b, h, s, d = x.dims
    return x.unsqueeze(2).expand((b, h, reps, s, d)).reshape((b, h * reps, s, d))


def _masked_softmax(x):
    """Softmax along the last axis where an all ``-inf`` row gives zeros (not NaN)."""
    m = x.max(-1, keepdim=True)
    all_masked = m.eq(-math.inf)
    e = (x - where(all_masked, 0.0, m)).exp()
    s = e.sum(-1, keepdim=True)
    return e / where(s.eq(0.0), 1.0, s)


@register("Attention")
def _attention(ctx):
    q, k, v = ctx.t(0), ctx.t(1), ctx.t(2)
    dtype = q.dtype
    if dtype.is_half:  # float16 products are computed in float32 and rounded once (as numpy does)
        q, k, v = q.cast(DType.float32), k.cast(DType.float32), v.cast(DType.float32)
    three_d = q.ndim == 3
    qh, kvh = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if three_d:
        if qh is None or kvh is None:
            raise OnnxImportError("Attention with 3-D inputs needs q_num_heads and kv_num_heads")
        q, k, v = _heads_4d(q, qh), _heads_4d(k, kvh), _heads_4d(v, kvh)
    scale = ctx.attr("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(dim(q.dims[3]))
    root = float(dtype.numpy.type(math.sqrt(scale)))
    if ctx.has(4):
        k = concat([ctx.t(4).cast(k.dtype), k], 2)
    if ctx.has(5):
        v = concat([ctx.t(5).cast(v.dtype), v], 2)
    present_k, present_v = k.cast(dtype), v.cast(dtype)
    q_len, kv_len = q.dims[2], k.dims[2]
    nonpad = ctx.t(6).cast(DType.int64) if ctx.has(6) else None
    mask = ctx.t(3) if ctx.has(3) else None
    if mask is not None and dim(mask.dims[-1]) != dim(kv_len):
        pad = dim(kv_len) - dim(mask.dims[-1])
        pads = [(0, 0)] * (mask.ndim - 1) + [(0, pad)]
        mask = mask.pad(pads) if mask.dtype == DType.bool else mask.pad(pads, -math.inf)
    if mask is not None and mask.dtype == DType.bool:
        mask = where(mask, 0.0, -math.inf).cast(dtype)
    i_idx = ctx.graph.arange(q_len, dtype=DType.int64).unsqueeze(-1)       # (q, 1)
    j_idx = ctx.graph.arange(kv_len, dtype=DType.int64).unsqueeze(0)       # (1, kv)
    if nonpad is not None and not ctx.has(4):
        offset = (nonpad - q_len).reshape((-1, 1, 1, 1))                    # per batch
    else:
        offset = ctx.t(4).dims[2] if ctx.has(4) else 0
    bias = ctx.const(0.0, dtype, (q_len, kv_len))
    if mask is not None:
        bias = bias + mask
    if ctx.attr("is_causal", 0):
        bias = bias + where(j_idx <= i_idx + offset, 0.0, -math.inf).cast(dtype)
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left >= 0 or right >= 0:
        diff = (i_idx + offset) - j_idx
        allowed = ctx.const(True, DType.bool, ())
        if left >= 0:
            allowed = allowed.logical_and(diff <= left)
        if right >= 0:
            allowed = allowed.logical_and(-diff <= right)
        bias = bias + where(allowed, 0.0, -math.inf).cast(dtype)
    if nonpad is not None:
        valid = ctx.graph.arange(kv_len, dtype=DType.int64) < nonpad.reshape((-1, 1))
        bias = bias + where(valid, 0.0, -math.inf).cast(dtype).reshape((-1, 1, 1, kv_len))
    hq, hk = dim(q.dims[1]), dim(k.dims[1])
    if hq != hk:
        if hq % hk:
            raise OnnxImportError(f"Attention: {hq} query heads are not a multiple of {hk} key/value heads")
        k, v = _repeat_heads(k, hq // hk), _repeat_heads(v, hq // hk)
    qk = ((q * root).cast(dtype).cast(q.dtype) @ (k.permute(0, 1, 3, 2) * root).cast(dtype).cast(q.dtype))
    qk = qk.cast(dtype).cast(q.dtype)
    softcap = ctx.attr("softcap", 0.0)
    if softcap and softcap > 0:
        qk = (qk / softcap).tanh() * softcap
    qk = qk.cast(dtype)
    with_bias = qk + bias
    mode = ctx.attr("qk_matmul_output_mode", 0)
    qk_out = with_bias if mode == 2 else qk
    logits = with_bias
    precision = ctx.attr("softmax_precision")
    if precision is not None and precision in dtypes.SUPPORTED:
        logits = logits.cast(dtypes.luminal(precision))
    probs = _masked_softmax(logits)
    all_masked = bias.max(-1, keepdim=True).eq(-math.inf)
    probs = where(all_masked, 0.0, probs).cast(dtype)
    if mode == 3:
        qk_out = probs
    y = (probs.cast(q.dtype) @ v).cast(dtype)
    if three_d:
        b, h, s, d = y.dims
        y = y.permute(0, 2, 1, 3).reshape((b, s, h * d))
    return [y, present_k, present_v, qk_out.cast(dtype)]


@register("RotaryEmbedding")
def _rotary(ctx):
    x = ctx.t(0)
    cos, sin = ctx.t(1), ctx.t(2)
    four_d = x.ndim == 4
    original = x.dims
    if four_d:
        x = x.permute(0, 2, 1, 3)                                        # (B, S, H, D)
    else:
        heads = ctx.attr("num_heads")
        if not heads:
            raise OnnxImportError("RotaryEmbedding with a 3-D input needs num_heads")
        b, s, hd = x.dims
        x = x.reshape((b, s, heads, dim(hd) // heads))
    head = dim(x.dims[3])
    rot = ctx.attr("rotary_embedding_dim", 0) or head
    if ctx.has(3):
        pos = ctx.t(3).cast(DType.int64)
        cos, sin = cos.index_select(0, pos), sin.index_select(0, pos)
    cos, sin = cos.unsqueeze(2).cast(x.dtype), sin.unsqueeze(2).cast(x.dtype)
    x_rot = x.slice_axis(-1, 0, rot)
    rest = x.slice_axis(-1, rot, head)
    if ctx.attr("interleaved", 0):
        x1, x2 = x_rot.slice_axis(-1, 0, None, 2), x_rot.slice_axis(-1, 1, None, 2)
    else:
        x1, x2 = x_rot.slice_axis(-1, 0, rot // 2), x_rot.slice_axis(-1, rot // 2, rot)
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if ctx.attr("interleaved", 0):
        y = concat([real.unsqueeze(-1), imag.unsqueeze(-1)], -1).reshape(x_rot.dims)
    else:
        y = concat([real, imag], -1)
    if rot < head:
        y = concat([y, rest], -1)
    if four_d:
        return [y.permute(0, 2, 1, 3)]
    return [y.reshape(original)]


@register("SwiGLU")
def _swiglu(ctx):
    a, b = ctx.t(0), ctx.t(1)
    alpha = ctx.attr("alpha", 1.0)
    return [a * (a * alpha).sigmoid() * b]


@register("LinearAttention")
def _linear_attention(ctx):
    query, key, value = ctx.t(0), ctx.t(1), ctx.t(2)
    rule = ctx.attr("update_rule", "gated_delta")
    qh, kvh = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if qh is None or kvh is None:
        raise OnnxImportError("LinearAttention needs q_num_heads and kv_num_heads")
    out_dtype = query.dtype
    f32 = DType.float32
    b, t, _ = (dim(d) for d in query.dims)
    d_k = dim(query.dims[2]) // qh
    d_v = dim(value.dims[2]) // kvh
    group = qh // kvh
    q4, k4, v4 = (_heads_4d(x, h).cast(f32) for x, h in ((query, qh), (key, kvh), (value, kvh)))
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating:
        decay = ctx.t(4)
        if dim(decay.dims[-1]) == kvh:
            decay4 = decay.reshape((b, t, kvh, 1)).permute(0, 2, 1, 3).cast(f32)
        else:
            decay4 = _heads_4d(decay, kvh).cast(f32)
    if delta:
        beta = ctx.t(5)
        nb = dim(beta.dims[-1])
        beta4 = beta.reshape((b, t, nb, 1)).permute(0, 2, 1, 3).cast(f32)
    if ctx.has(3):
        state = ctx.t(3).cast(f32)
        state_type = ctx.type(3)
    else:
        state = ctx.const(0.0, f32, (b, kvh, d_k, d_v))
        state_type = ctx.type(0)
    scale = ctx.attr("scale", 0.0) or 1.0 / math.sqrt(d_k)
    outs = []
    for i in range(t):
        q_t = q4.slice_axis(2, i, i + 1).squeeze(2)                      # (B, Hq, dk)
        k_t = k4.slice_axis(2, i, i + 1).squeeze(2)
        v_t = v4.slice_axis(2, i, i + 1).squeeze(2)
        if gating:
            g = decay4.slice_axis(2, i, i + 1).squeeze(2)                # (B, Hkv, 1|dk)
            state = state * g.exp().unsqueeze(-1)
        if delta:
            retrieved = (state * k_t.unsqueeze(-1)).sum(2)                # (B, Hkv, dv)
            v_t = beta4.slice_axis(2, i, i + 1).squeeze(2) * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = _repeat_heads(state, group)
        outs.append(((q_t.unsqueeze(-1) * read).sum(2) * scale).unsqueeze(2))   # (B, Hq, 1, dv)
    out = concat(outs, 2).permute(0, 2, 1, 3).reshape((b, t, qh * d_v)).cast(out_dtype)
    return [out, state.cast(dtypes.luminal(state_type))]


@register("CausalConvWithState")
def _causal_conv(ctx):
    x, w = ctx.t(0), ctx.t(1)
    b, c, _ = x.dims
    k = dim(w.dims[2])
    past = ctx.t(3) if ctx.has(3) else ctx.const(0.0, x.dtype, (b, c, k - 1))
    padded = concat([past, x], 2)
    bias = ctx.t(2) if ctx.has(2) else None
    y = conv_nd(padded.cast(DType.float32), w.cast(DType.float32), None if bias is None else bias.cast(DType.float32),
                1, 0, 1, dim(c)).cast(x.dtype)
    if ctx.attr("activation", "none") in ("silu", "swish"):
        y32 = y.cast(DType.float32)
        y = (y32 * y32.sigmoid()).cast(x.dtype)
    n = padded.dims[2]
    return [y, padded.slice_axis(2, n - (k - 1), n)]


@register("TensorScatter")
def _tensor_scatter(ctx):
    cache, update = ctx.t(0), ctx.t(1)
    a = ctx.attr("axis", -2) % cache.ndim
    m, s = cache.dims[a], update.dims[a]
    if ctx.has(2):
        w = ctx.t(2).cast(DType.int64)
    else:
        w = ctx.const(0, DType.int64, (cache.dims[0],))
    shape = [1] * cache.ndim
    shape[0] = cache.dims[0]
    w = w.reshape(shape)
    jshape = [1] * cache.ndim
    jshape[a] = m
    j = ctx.graph.arange(m, dtype=DType.int64).reshape(jshape)
    rel = j - w
    if ctx.attr("mode", "linear") == "circular":
        rel = rel.remainder(m)
    hit = (rel >= 0).logical_and(rel < s).expand(cache.dims)
    src = where(hit, rel, 0).expand(cache.dims)
    picked = update.gather(a, src)
    return [where(hit, picked, cache)]

