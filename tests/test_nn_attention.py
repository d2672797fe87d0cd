"""Attention against PyTorch: scaled_dot_product_attention (masks, causal, scale, GQA), the tiled flash
attention (same numbers), MultiheadAttention (names/layout via load_state_dict, masks, batch_first,
separate kv dims) and rotary embeddings (numpy oracle). Tolerance: float32 rtol=1e-4, atol=1e-5."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.nn.attention import MultiheadAttention, flash_attention, rotary_embedding, scaled_dot_product_attention

RNG = np.random.default_rng(11)
TOL = dict(rtol=1e-4, atol=1e-5)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _run(build, *arrays):
    cx = lm.Graph()
    ts = [cx.tensor(a.shape, lm.DType(a.dtype.name)).set(a) for a in arrays]
    out = build(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        if o is not None:
            o.retrieve()
    cx.execute()
    res = tuple(o.data() if o is not None else None for o in outs)
    return res if isinstance(out, tuple) else res[0]


T = torch.from_numpy


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shapes", [((2, 3, 5, 8), (2, 3, 7, 8)), ((4, 6), (4, 6))])
def test_sdpa_matches_torch(shapes, causal):
    (qs, ks) = shapes
    q, k, v = _arr(*qs), _arr(*ks), _arr(*ks[:-1], 5)
    got = _run(lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=causal), q, k, v)
    want = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=causal).numpy()
    np.testing.assert_allclose(got, want, **TOL)


def test_sdpa_masks_and_scale():
    q, k, v = _arr(2, 4, 8), _arr(2, 6, 8), _arr(2, 6, 8)
    bmask = RNG.random((4, 6)) < 0.7
    bmask[:, 0] = True  # every row attends somewhere
    fmask = _arr(4, 6)
    got_b = _run(lambda a, b, c, m: scaled_dot_product_attention(a, b, c, attn_mask=m, scale=0.3), q, k, v, bmask)
    got_f = _run(lambda a, b, c, m: scaled_dot_product_attention(a, b, c, attn_mask=m), q, k, v, fmask)
    np.testing.assert_allclose(got_b, F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(bmask),
                                                                     scale=0.3).numpy(), **TOL)
    np.testing.assert_allclose(got_f, F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(fmask)).numpy(),
                               **TOL)


def test_grouped_query_attention():
    q, k, v = _arr(1, 4, 5, 8), _arr(1, 2, 5, 8), _arr(1, 2, 5, 8)
    got = _run(lambda a, b, c: scaled_dot_product_attention(a, b, c, enable_gqa=True), q, k, v)
    want = F.scaled_dot_product_attention(T(q), T(k), T(v), enable_gqa=True).numpy()
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_equals_standard(causal):
    q, k, v = _arr(2, 9, 8), _arr(2, 9, 8), _arr(2, 9, 8)
    got = _run(lambda a, b, c: flash_attention(a, b, c, is_causal=causal, block_size=4), q, k, v)
    want = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=causal).numpy()
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_matches_torch(batch_first):
    torch.manual_seed(0)
    t = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    m = MultiheadAttention(8, 2, batch_first=batch_first)
    m.load_state_dict(t.state_dict())
    q = _arr(2, 5, 8) if batch_first else _arr(5, 2, 8)
    kv = _arr(2, 7, 8) if batch_first else _arr(7, 2, 8)
    pad = np.zeros((2, 7), bool)
    pad[1, 5:] = True
    amask = RNG.random((5, 7)) < 0.2
    amask[:, 0] = False
    out, w = _run(lambda a, b, p, am: m(a, b, b, key_padding_mask=p, attn_mask=am), q, kv, pad, amask)
    with torch.no_grad():
        tout, tw = t(T(q), T(kv), T(kv), key_padding_mask=T(pad), attn_mask=T(amask))
    np.testing.assert_allclose(out, tout.numpy(), **TOL)
    np.testing.assert_allclose(w, tw.numpy(), **TOL)


def test_multihead_attention_separate_kv_dims_causal_unbatched():
    torch.manual_seed(1)
    t = torch.nn.MultiheadAttention(8, 4, kdim=6, vdim=5)
    m = MultiheadAttention(8, 4, kdim=6, vdim=5)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    m.load_state_dict(t.state_dict())
    q, k, v = _arr(5, 8), _arr(5, 6), _arr(5, 5)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    out, _ = _run(lambda a, b, c: m(a, b, c, need_weights=False, is_causal=True), q, k, v)
    with torch.no_grad():
        tout, _ = t(T(q), T(k), T(v), attn_mask=causal, is_causal=True, need_weights=False)
    np.testing.assert_allclose(out, tout.numpy(), **TOL)


def test_rotary_embedding_matches_numpy():
    x = _arr(2, 6, 8)
    got = _run(lambda a: rotary_embedding(a, offset=3), x)
    half = 4
    inv = 10000.0 ** (-np.arange(half) * 2 / 8)
    ang = (np.arange(6) + 3)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # f32 cos(angle) via sin(angle + pi/2)


@pytest.mark.parametrize("batch_first", [False, True])
def test_self_attention_projects_with_one_packed_product(batch_first):
    """Self-attention (key and value the query itself) projects q, k and v with one (3E, E) product, sliced, as
    PyTorch does: on the CPU backend one product 3E wide and one E wide (the output projection); the result
    matches PyTorch's."""
    from luminal.codegen.kernel import GemmKernel

    torch.manual_seed(2)
    t = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    m = MultiheadAttention(8, 2, batch_first=batch_first)
    m.load_state_dict(t.state_dict())
    x = _arr(3, 5, 8)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    out, _ = m(xt, need_weights=False)
    out.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    kernels = cx.runtime.program.kernels
    widths = sorted(str(k.dims[-1]) for k in kernels if isinstance(k, GemmKernel))
    with torch.no_grad():
        tout, _ = t(T(x), T(x), T(x), need_weights=False)
    np.testing.assert_allclose(out.data(), tout.numpy(), **TOL)
    assert widths.count("24") == 1 and widths.count("8") == 1, widths
