"""Attention: ``scaled_dot_product_attention``, ``MultiheadAttention`` (PyTorch layout and names), a tiled
flash-style attention with an online softmax, grouped-query attention and rotary position embeddings."""

from __future__ import annotations

import math

import numpy as np

from ..amp import autocast_lower_precision
from ..dtype import DType
from ..graph import GraphError
from ..hl_ops import concat, where
from ..module import Module, Parameter, bind
from . import init
from .linear import Linear


def _tril_bool(graph, L, S):
    rows = graph.arange(L).unsqueeze(-1).expand((L, S))
    cols = graph.arange(S).unsqueeze(0).expand((L, S))
    return cols.le(rows)


def repeat_kv(x, n_rep: int):
    """(..., H_kv, S, D) -> (..., H_kv * n_rep, S, D), each head repeated ``n_rep`` times (GQA)."""
    if n_rep == 1:
        return x
    axis = x.ndim - 3
    expanded = x.expand_dim(axis + 1, n_rep)
    return expanded.merge_dims(axis, axis + 1)


@autocast_lower_precision  # luminal.autocast: q, k, v rounded, float32 inside, one rounding (torch's kernel)
def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal: bool = False, scale=None,
                                 enable_gqa: bool = False):
    """``softmax(q k^T * scale + mask) v`` (``torch.nn.functional.scaled_dot_product_attention``).

    ``attn_mask``: bool (True = may attend) or float (added to the scores), broadcast to (..., L, S).
    ``enable_gqa``: ``k``/``v`` may have fewer heads (dim -3) than ``q``; they are repeated.
    ``is_causal`` with an ``attn_mask`` applies both (as PyTorch 2.13's CPU kernels do; its documentation
    announces an error there).
    """
    E = q.dims[-1]
    if k.dims[-1] != E:
        raise GraphError(f"attention: query dim {E} differs from key dim {k.dims[-1]}")
    if enable_gqa and q.ndim >= 3 and k.dims[-3] != q.dims[-3]:
        hq, hk = q.dims[-3].to_int(), k.dims[-3].to_int()
        if hq is None or hk is None or hq % hk:
            raise GraphError(f"GQA needs the query heads ({q.dims[-3]}) to be a multiple of the key heads "
                             f"({k.dims[-3]})")
        k, v = repeat_kv(k, hq // hk), repeat_kv(v, hq // hk)
    scale = 1.0 / math.sqrt(E.to_int()) if scale is None and E.is_constant() else scale
    scores = (q @ k.mT) * scale
    L, S = scores.dims[-2], scores.dims[-1]
    # bool masks become an additive bias of 0 / -inf, as PyTorch's math path builds it (a NaN or inf score at a
    # masked position stays NaN there too): the scores are then read once, outside any select, which lets the GPU
    # backend compute the chain as one fused attention kernel
    if is_causal:
        scores = scores + where(_tril_bool(q.graph, L, S), 0.0, -math.inf).cast(scores.dtype)
    if attn_mask is not None:
        if attn_mask.dtype == DType.bool:
            scores = scores + where(attn_mask, 0.0, -math.inf).cast(scores.dtype)
        else:
            scores = scores + attn_mask
    return scores.softmax(-1) @ v


def flash_attention(q, k, v, is_causal: bool = False, scale=None, block_size: int = 64):
    """Memory-efficient attention: keys/values in blocks of ``block_size`` with a running max and sum (online
    softmax), so no (L, S) score matrix is ever materialized whole. Same result as
    :func:`scaled_dot_product_attention` up to float rounding. Needs a concrete key length.
    """
    S = k.dims[-2].to_int()
    if S is None:
        raise GraphError("flash_attention needs a concrete key length")
    E = q.dims[-1].to_int()
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    L = q.dims[-2]
    running_max = running_sum = acc = None
    for start in range(0, S, block_size):
        stop = min(start + block_size, S)
        kb, vb = k.slice_axis(-2, start, stop), v.slice_axis(-2, start, stop)
        scores = (q @ kb.mT) * scale
        if is_causal:
            rows = q.graph.arange(L).unsqueeze(-1).expand((L, stop - start))
            cols = (q.graph.arange(stop - start) + start).unsqueeze(0).expand((L, stop - start))
            scores = where(cols.le(rows), scores, -math.inf)
        block_max = scores.max(-1, keepdim=True)
        new_max = block_max if running_max is None else running_max.maximum(block_max)
        safe_max = where(new_max.isinf(), 0.0, new_max)  # rows with nothing visible yet stay at zero weight
        p = (scores - safe_max).exp()
        block_sum = p.sum(-1, keepdim=True)
        block_acc = p @ vb
        if running_max is None:
            running_sum, acc = block_sum, block_acc
        else:
            correction = (running_max - safe_max).exp()
            running_sum = running_sum * correction + block_sum
            acc = acc * correction + block_acc
        running_max = new_max
    return acc / running_sum


def rotary_embedding(x, base: float = 10000.0, offset: int = 0):
    """Rotary position embedding over the last dim (pairs ``(i, i + d/2)``, the GPT-NeoX/LLaMA "rotate half"
    convention) for ``x`` of shape (..., seq, d) with ``d`` even; position ``p = offset + index``."""
    d = x.dims[-1].to_int()
    if d is None or d % 2:
        raise GraphError(f"rotary_embedding needs an even, concrete last dim, got {x.dims[-1]}")
    seq = x.dims[-2]
    half = d // 2
    inv_freq = (base ** (-np.arange(half, dtype=np.float64) * 2 / d)).astype(np.float32)
    freqs = x.graph.tensor(half, name="rotary_inv_freq").set(inv_freq)
    positions = (x.graph.arange(seq) + offset).cast(DType.float32)
    angles = positions.unsqueeze(-1) * freqs.unsqueeze(0)  # (seq, half)
    cos, sin = angles.cos().cast(x.dtype), angles.sin().cast(x.dtype)
    x1, x2 = x.slice_axis(-1, 0, half), x.slice_axis(-1, half, d)
    return concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class MultiheadAttention(Module):
    """``torch.nn.MultiheadAttention`` with the same parameter names and layout.

    ``in_proj_weight`` (3E, E) / ``in_proj_bias`` when key and value dims equal ``embed_dim``, else
    ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``; ``out_proj`` is a ``Linear``. ``batch_first``
    defaults to False (inputs (L, N, E)) as in PyTorch. Left out: ``add_bias_kv``, ``add_zero_attn`` and
    attention-weight dropout (``dropout`` must be 0).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        if add_bias_kv or add_zero_attn or dropout:
            raise NotImplementedError("add_bias_kv, add_zero_attn and attention dropout are not supported")
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        if self.same_dims:
            self.in_proj_weight = Parameter(np.zeros((3 * embed_dim, embed_dim)))
            init.xavier_uniform_(self.in_proj_weight)
        else:
            self.q_proj_weight = Parameter(np.zeros((embed_dim, embed_dim)))
            self.k_proj_weight = Parameter(np.zeros((embed_dim, self.kdim)))
            self.v_proj_weight = Parameter(np.zeros((embed_dim, self.vdim)))
            for p in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(p)
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if bias:
            init.zeros_(self.out_proj.bias)

    def _projections(self, like):
        E = self.embed_dim
        if self.same_dims:
            w = bind(self.in_proj_weight, like)
            ws = (w.slice_axis(0, 0, E), w.slice_axis(0, E, 2 * E), w.slice_axis(0, 2 * E, 3 * E))
        else:
            ws = tuple(bind(p, like) for p in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight))
        if self.in_proj_bias is None:
            return ws, (None, None, None)
        b = bind(self.in_proj_bias, like)
        return ws, (b.slice_axis(0, 0, E), b.slice_axis(0, E, 2 * E), b.slice_axis(0, 2 * E, 3 * E))

    def forward(self, query, key=None, value=None, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        from .functional import linear
        key = query if key is None else key
        value = key if value is None else value
        # self-attention with the packed weight: one (3E, E) product, sliced (PyTorch's packed in-projection; at
        # 32 rows three 384-wide products took 3 x 80 us, memory-bound on their weights, one 1152-wide ~180 us)
        packed = key is query and value is query and self.same_dims
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        # now (N, L, E): heads are split out of E, so every reshape below is a view of a contiguous buffer
        N, L, E = query.dims
        S = key.dims[1]
        H, hd = self.num_heads, self.embed_dim // self.num_heads
        if packed:
            qkv = linear(query, bind(self.in_proj_weight, query),
                         None if self.in_proj_bias is None else bind(self.in_proj_bias, query))
            q, k, v = (qkv.slice_axis(2, i * E, (i + 1) * E) for i in range(3))
        else:
            (wq, wk, wv), (bq, bk, bv) = self._projections(query)
            q, k, v = linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)
        q = q.reshape((N, L, H, hd)).permute(0, 2, 1, 3)   # (N, H, L, hd)
        k = k.reshape((N, S, H, hd)).permute(0, 2, 1, 3)
        v = v.reshape((N, S, H, hd)).permute(0, 2, 1, 3)
        scores = (q @ k.mT) * (1.0 / math.sqrt(hd))                            # (N, H, L, S)
        # bool masks are added as 0 / -inf biases, as PyTorch's MHA does (its _canonical_mask): the scores are read
        # once, outside any select (the GPU backend's fused attention kernel needs that)
        if is_causal and attn_mask is None:
            scores = scores + where(_tril_bool(query.graph, L, S), 0.0, -math.inf).cast(scores.dtype)
        if attn_mask is not None:  # bool: True = NOT allowed (PyTorch's MHA convention); float: added
            mask = attn_mask
            if mask.ndim == 3:  # (N*H, L, S)
                mask = mask.reshape((N, H, L, S))
            if attn_mask.dtype == DType.bool:
                mask = where(mask, -math.inf, 0.0).cast(scores.dtype)
            scores = scores + mask
        if key_padding_mask is not None:  # (N, S), True = padding (ignored)
            pad = key_padding_mask.unsqueeze(1).unsqueeze(2)                   # (N, 1, 1, S)
            if key_padding_mask.dtype == DType.bool:
                pad = where(pad, -math.inf, 0.0).cast(scores.dtype)
            scores = scores + pad
        weights = scores.softmax(-1)
        out = (weights @ v).permute(0, 2, 1, 3).reshape((N, L, E))               # (N, L, E)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        w = weights
        w = w.mean(1) if average_attn_weights else w
        return out, (w.squeeze(0) if unbatched else w)
