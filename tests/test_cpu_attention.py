"""The CPU backend's fused attention (luminal.codegen.c_attention): scores GEMM, softmax and probabilities GEMM
by blocks of query rows, keys no row of a block can see skipped.

Oracles: PyTorch's ``scaled_dot_product_attention`` / ``MultiheadAttention`` in float64 on the same float32
inputs (tolerance rtol 1e-4, atol 1e-5), and the same graph compiled with ``LUMINAL_FUSED_ATTENTION=0`` (the
unfused kernels) where the question is which positions are NaN.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.codegen.kernel import GemmKernel
from luminal.codegen.c_attention import MASKED_ROWS
from luminal.nn.attention import MultiheadAttention, scaled_dot_product_attention
from luminal.training import grad

TOL = dict(rtol=1e-4, atol=1e-5)


def fused_chains(cx) -> int:
    """How many rendered groups of the compiled graph are a fused attention chain (GEMM ... GEMM)."""
    rt = cx.runtime
    kernels = rt.program.kernels
    return sum(1 for g in rt.cprogram.groups if len(g) > 2 and isinstance(kernels[g[0]], GemmKernel)
               and isinstance(kernels[g[-1]], GemmKernel))


def _torch(q, k, v, mask=None, causal=False, gqa=False):
    t = [torch.from_numpy(a).double() for a in (q, k, v)]
    m = None if mask is None else torch.from_numpy(mask) if mask.dtype == bool else torch.from_numpy(mask).double()
    return F.scaled_dot_product_attention(*t, attn_mask=m, is_causal=causal, enable_gqa=gqa).numpy()


def _compile(shapes, mask_shape=None, mask_dtype=lm.DType.bool, causal=False, gqa=False, fused=True,
             monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
    cx = lm.Graph()
    q, k, v = (cx.tensor(s) for s in shapes)
    m = None if mask_shape is None else cx.tensor(mask_shape, mask_dtype)
    out = scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=gqa).retrieve()
    cx.compile(device="cpu")
    return cx, (q, k, v, m), out


def _run(cx, inputs, arrays, out, shape):
    for t, a in zip(inputs, arrays):
        if t is not None:
            t.set(a)
    cx.execute()
    return out.data().reshape(shape)


def _arrays(rng, q_shape, k_shape, dv):
    q = rng.standard_normal(q_shape).astype(np.float32)
    k = rng.standard_normal(k_shape).astype(np.float32)
    v = rng.standard_normal(k_shape[:-1] + (dv,)).astype(np.float32)
    return q, k, v


CASES = {  # name: (q shape, k shape, value dim, causal)
    "plain": ((2, 3, 70, 16), (2, 3, 90, 16), 24, False),
    "causal_blocks": ((1, 2, 200, 32), (1, 2, 200, 32), 32, True),
    "causal_wide": ((1, 2, 100, 8), (1, 2, 150, 8), 8, True),
    "causal_tall": ((2, 1, 150, 8), (2, 1, 100, 8), 12, True),
    "unbatched": ((130, 16), (140, 16), 16, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_attention_matches_torch(case):
    qs, ks, dv, causal = CASES[case]
    q, k, v = _arrays(np.random.default_rng(1), qs, ks, dv)
    cx, ins, out = _compile((qs, ks, ks[:-1] + (dv,)), causal=causal)
    assert fused_chains(cx) == 1
    got = _run(cx, ins, (q, k, v), out, qs[:-1] + (dv,))
    np.testing.assert_allclose(got, _torch(q, k, v, causal=causal), **TOL)


def test_small_multi_head_chain_runs_on_all_threads():
    """BERT at 1 x 32 tokens: 12 heads of 32 x 32 x 32 (786K multiply-adds) share their blocks out over the threads
    (the chain's OpenMP loop is not made serial by a threshold meant for element-wise loops); torch's result."""
    import re

    shapes = ((1, 12, 32, 32),) * 3
    q, k, v = _arrays(np.random.default_rng(2), shapes[0], shapes[1], 32)
    cx, ins, out = _compile(shapes)
    assert fused_chains(cx) == 1
    conds = re.findall(r"#pragma omp parallel for collapse\(\d\) schedule\(dynamic, 1\) if\(\((\d+)\) >= (\d+)\)",
                       cx.runtime.source)
    assert conds and all(int(work) >= int(floor) for work, floor in conds), conds
    got = _run(cx, ins, (q, k, v), out, shapes[0])
    np.testing.assert_allclose(got, _torch(q, k, v), **TOL)


def test_key_padding_mask_skips_the_padded_keys():
    """BERT's padding mask: each sequence's keys past its length are masked (bool, broadcast over heads and
    queries); lengths down to one key; plus a float mask added on top of a causal one."""
    rng = np.random.default_rng(2)
    b, h, l, s, d = 4, 2, 40, 130, 16
    q, k, v = _arrays(rng, (b, h, l, d), (b, h, s, d), d)
    lengths = np.array([130, 70, 1, 65])
    mask = (np.arange(s)[None, :] < lengths[:, None]).reshape(b, 1, 1, s)
    cx, ins, out = _compile(((b, h, l, d), (b, h, s, d), (b, h, s, d)), mask_shape=(b, 1, 1, s))
    assert fused_chains(cx) == 1
    got = _run(cx, ins, (q, k, v, mask), out, (b, h, l, d))
    np.testing.assert_allclose(got, _torch(q, k, v, mask), **TOL)

    fmask = rng.standard_normal((l, s)).astype(np.float32)
    cx, ins, out = _compile(((b, h, l, d), (b, h, s, d), (b, h, s, d)), mask_shape=(l, s),
                            mask_dtype=lm.DType.float32, causal=True)
    assert fused_chains(cx) == 1
    got = _run(cx, ins, (q, k, v, fmask), out, (b, h, l, d))
    causal = np.tril(np.ones((l, s), bool))
    np.testing.assert_allclose(got, _torch(q, k, v, np.where(causal, fmask, -np.inf).astype(np.float32)), **TOL)


def test_finfo_min_padding_mask_skips_the_padded_keys(monkeypatch):
    """Hugging Face's padding mask is additive ``finfo.min``, not -inf: a row that sees some key skips the padded
    ones after it as with -inf (shown by a NaN key among them, which the unfused softmax spreads over every row of
    its sequence: fused, those rows equal torch's without the NaN key); a sequence with no key left keeps all of
    them, the reference's and torch's average over the finfo.min scores; -1e4 (older BERT masks) skips nothing."""
    rng = np.random.default_rng(6)
    b, h, l, s, d = 4, 2, 40, 130, 16
    q, k, v = _arrays(rng, (b, h, l, d), (b, h, s, d), d)
    lengths = np.array([130, 70, 0, 65])
    seen = np.arange(s)[None, :] < lengths[:, None]
    k[1, 0, 100] = np.nan  # a padded key of sequence 1
    shapes = ((b, h, l, d), (b, h, s, d), (b, h, s, d))
    k_clean = np.where(np.isnan(k), 0, k)
    for low in (np.finfo(np.float32).min, -1e4):
        mask = np.where(seen, 0, low).astype(np.float32).reshape(b, 1, 1, s)
        got = {}
        for fused in (True, False):
            cx, ins, out = _compile(shapes, mask_shape=(b, 1, 1, s), mask_dtype=lm.DType.float32, fused=fused,
                                    monkeypatch=monkeypatch)
            assert fused_chains(cx) == int(fused)
            got[fused] = _run(cx, ins, (q, k, v, mask), out, (b, h, l, d))
        assert np.isnan(got[False][1, 0]).all()  # unfused: the NaN score reaches every row of its head
        skipped = low < -1e30
        assert np.isnan(got[True][1, 0]).all() != skipped
        want = _torch(q, k_clean, v, mask)
        for i in (0, 3) + ((1, 2) if skipped else ()):
            np.testing.assert_allclose(got[True][i], want[i], **TOL)
        # sequence 2 sees no key: all of them (finfo.min: an average; -1e4 + a score rounds in float32, so the
        # unfused program is the oracle there)
        np.testing.assert_allclose(got[True][2], got[False][2], **TOL)


def _nan_to_fill_attention(shapes, fill, fused, monkeypatch, symbolic=False):
    """``where(isnan(p), fill, p) @ v`` after ``p = softmax(q k^T / sqrt(d) + mask)`` (mask 0 / -inf): the
    softmax ending of ONNX exports of PyTorch's attention, written with luminal's ops."""
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
    cx = lm.Graph()
    qs, ks, ms = shapes
    if symbolic:
        qs, ks, ms = ("batch", qs[1], "seq", qs[3]), ("batch", ks[1], "seq", ks[3]), ("batch", 1, 1, "seq")
    q, k, v = cx.tensor(qs), cx.tensor(ks), cx.tensor(ks)
    m = cx.tensor(ms)
    p = (q.matmul(k.transpose(2, 3)) * (1 / np.sqrt(shapes[0][-1])) + m).softmax(-1)
    out = lm.where(p.isnan(), fill, p).matmul(v).retrieve()
    cx.compile(device="cpu")
    return cx, (q, k, v, m), out


@pytest.mark.parametrize("symbolic", [False, True])
def test_where_isnan_after_the_softmax_joins_the_fused_chain(symbolic, monkeypatch):
    """ONNX exports of PyTorch's attention (``torch.onnx.export`` of ``scaled_dot_product_attention``) end the
    softmax with ``where(isnan(p), 0, p)``: a select whose reads of the row group's outputs are remapped, over
    an axis of extent 1 more. It joins the row group and the chain is fused, its padded keys skipped (shown by
    a NaN key among them: unfused, the NaN spreads to its head's rows and the select makes them 0; fused, they
    equal torch's without that key); a sequence with no key left gives 0 (NaN probabilities selected away), as
    unfused."""
    rng = np.random.default_rng(11)
    b, h, l, d = 4, 2, 90, 16
    shapes = ((b, h, l, d), (b, h, l, d), (b, 1, 1, l))
    q, k, v = _arrays(rng, (b, h, l, d), (b, h, l, d), d)
    lengths = np.array([90, 50, 0, 33])
    mask = np.where(np.arange(l)[None, :] < lengths[:, None], 0, -np.inf).astype(np.float32).reshape(b, 1, 1, l)
    k[1, 0, 70] = np.nan  # a padded key of sequence 1
    got = {}
    for fused in (True, False):
        cx, ins, out = _nan_to_fill_attention(shapes, 0.0, fused, monkeypatch, symbolic)
        assert fused_chains(cx) == int(fused)
        got[fused] = _run(cx, ins, (q, k, v, mask), out, (b, h, l, d))
    assert (got[False][1, 0] == 0).all()  # unfused: the NaN score reaches every row of its head, selected to 0
    want = _torch(q, np.where(np.isnan(k), 0, k), v, mask)
    for i in (0, 1, 3):
        np.testing.assert_allclose(got[True][i], want[i], **TOL)
    for i in (0, 3):  # (unfused, the select is a member of the softmax's row group)
        np.testing.assert_allclose(got[False][i], want[i], **TOL)
    assert (got[True][2] == 0).all() and (got[False][2] == 0).all()


def test_a_select_that_does_not_keep_zeros_skips_no_key(monkeypatch):
    """``where(isnan(p), 1, p)`` maps a skipped key's 0 to itself but a NaN to 1: it joins the fused chain, which
    then skips no key (the NaN among the padded keys is selected to 1 in every row of its head, as unfused)."""
    rng = np.random.default_rng(12)
    b, h, l, d = 3, 2, 80, 16
    shapes = ((b, h, l, d), (b, h, l, d), (b, 1, 1, l))
    q, k, v = _arrays(rng, (b, h, l, d), (b, h, l, d), d)
    lengths = np.array([80, 40, 0])
    mask = np.where(np.arange(l)[None, :] < lengths[:, None], 0, -np.inf).astype(np.float32).reshape(b, 1, 1, l)
    k[1, 0, 60] = np.nan
    got = {}
    for fused in (True, False):
        cx, ins, out = _nan_to_fill_attention(shapes, 1.0, fused, monkeypatch)
        assert fused_chains(cx) == int(fused)
        got[fused] = _run(cx, ins, (q, k, v, mask), out, (b, h, l, d))
    ones = np.broadcast_to(v.sum(axis=2, keepdims=True), (b, h, l, d))  # every probability selected to 1
    np.testing.assert_allclose(got[True][1, 0], ones[1, 0], **TOL)
    np.testing.assert_allclose(got[True][2], ones[2], **TOL)
    np.testing.assert_allclose(got[True], got[False], **TOL)


def test_onnx_export_of_torch_attention_is_fused(monkeypatch):
    """``torch.onnx.export`` (TorchScript exporter) of ``scaled_dot_product_attention`` with a boolean padding
    mask over symbolic batch and sequence: one fused chain, equal to onnxruntime (a sequence with no key: 0)."""
    ort = pytest.importorskip("onnxruntime")
    import io
    import warnings
    import luminal.onnx

    class Attend(torch.nn.Module):
        def forward(self, q, k, v, m):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    x = torch.randn(2, 3, 5, 8)
    buf = io.BytesIO()
    dyn = {n: {0: "b", 2: "s"} for n in "qkv"} | {"m": {0: "b", 3: "s"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attend(), (x, x, x, torch.ones(2, 1, 1, 5, dtype=torch.bool)), buf, opset_version=17,
                          dynamo=False, input_names=list("qkvm"), output_names=["y"], dynamic_axes=dyn)
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    model = luminal.onnx.load(buf.getvalue(), device="cpu")
    model.compile()
    assert fused_chains(model.graph) == 1
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(13)
    for b, s, lengths in [(3, 70, [70, 21, 0]), (1, 9, [4])]:
        q, k, v = _arrays(rng, (b, 3, s, 8), (b, 3, s, 8), 8)
        m = (np.arange(s)[None, :] < np.array(lengths)[:, None]).reshape(b, 1, 1, s)
        feeds = dict(q=q, k=k, v=v, m=m)
        np.testing.assert_allclose(model.run(feeds)["y"], sess.run(None, feeds)[0], **TOL)


def test_rows_that_see_nothing_and_nan_inputs(monkeypatch):
    """A query row whose keys are all masked is NaN, as unfused (and torch's math path); a NaN in a key makes the
    rows that see it NaN; a block of rows none of which sees that key skips it (the module docstring: unfused,
    a masked NaN score makes its row NaN too)."""
    rng = np.random.default_rng(4)
    b, h, l, s, d = 1, 2, 2 * MASKED_ROWS + 10, 2 * MASKED_ROWS + 10, 8
    q, k, v = _arrays(rng, (b, h, l, d), (b, h, s, d), d)
    mask = np.tril(np.ones((l, s), bool))
    mask[5] = False  # row 5 sees nothing
    late = MASKED_ROWS + 20
    k[0, 1, late] = np.nan  # seen by rows >= late of head 1; no row of the first block sees it
    shapes = ((b, h, l, d), (b, h, s, d), (b, h, s, d))
    got = {}
    for fused in (True, False):
        cx, ins, out = _compile(shapes, mask_shape=(l, s), fused=fused, monkeypatch=monkeypatch)
        assert fused_chains(cx) == int(fused)
        got[fused] = _run(cx, ins, (q, k, v, mask), out, (b, h, l, d))
    for g in got.values():
        assert np.isnan(g[0, :, 5]).all() and np.isnan(g[0, 1, late:]).all()
        assert not np.isnan(np.delete(g[0, 0], 5, axis=0)).any()
    assert np.isnan(got[False][0, 1]).all()  # (unfused: the masked NaN score reaches every row)
    first = np.delete(got[True][0, 1, :MASKED_ROWS], 5, axis=0)
    k_clean = k.copy()
    k_clean[0, 1, late] = 0
    want = _torch(q, k_clean, v, mask)
    np.testing.assert_allclose(first, np.delete(want[0, 1, :MASKED_ROWS], 5, axis=0), **TOL)
    np.testing.assert_allclose(np.delete(got[True][0, 0], 5, axis=0), np.delete(want[0, 0], 5, axis=0), **TOL)


def test_symbolic_batch_and_sequence():
    """One program over (batch, heads, seq, dim) with batch and seq symbolic, causal, run at several bindings
    (seq shorter than a block, several blocks, one token)."""
    cx = lm.Graph()
    shape = ("batch", 3, "seq", 16)
    q, k, v = (cx.tensor(shape) for _ in range(3))
    out = scaled_dot_product_attention(q, k, v, is_causal=True).retrieve()
    cx.compile(device="cpu")
    assert fused_chains(cx) == 1
    rng = np.random.default_rng(6)
    for b, s in [(2, 70), (1, 5), (3, 150), (1, 1)]:
        arrays = _arrays(rng, (b, 3, s, 16), (b, 3, s, 16), 16)
        got = _run(cx, (q, k, v), arrays, out, (b, 3, s, 16))
        np.testing.assert_allclose(got, _torch(*arrays, causal=True), **TOL)


def test_grouped_query_attention_is_fused():
    rng = np.random.default_rng(7)
    q, k, v = _arrays(rng, (2, 8, 80, 16), (2, 2, 80, 16), 16)
    cx, ins, out = _compile(((2, 8, 80, 16), (2, 2, 80, 16), (2, 2, 80, 16)), causal=True, gqa=True)
    assert fused_chains(cx) == 1
    got = _run(cx, ins, (q, k, v), out, (2, 8, 80, 16))
    np.testing.assert_allclose(got, _torch(q, k, v, causal=True, gqa=True), **TOL)


def test_multihead_attention_with_padding_and_its_gradients():
    """PyTorch's MultiheadAttention (batch_first, key padding mask): the inference graph fuses its chain; so
    does the training graph, whose backward reads the probabilities (stored by the fused kernel, zeros at the
    keys it skipped); both against torch."""
    torch.manual_seed(0)
    e, heads, b, s = 32, 4, 3, 90
    ref = torch.nn.MultiheadAttention(e, heads, batch_first=True).double()
    x_np = np.random.default_rng(8).standard_normal((b, s, e)).astype(np.float32)
    pad = np.zeros((b, s), bool)
    pad[1, 60:] = True
    pad[2, 3:] = True
    mha = MultiheadAttention(e, heads, batch_first=True)
    mha.load_state_dict({n: p.detach().float() for n, p in ref.state_dict().items()})
    x_t = torch.from_numpy(x_np).double().requires_grad_(True)
    want, _ = ref(x_t, x_t, x_t, key_padding_mask=torch.from_numpy(pad), need_weights=False)
    (want * want).sum().backward()

    cx = lm.Graph()
    x, m = cx.tensor((b, s, e)), cx.tensor((b, s), lm.DType.bool)
    y = mha(x, x, x, key_padding_mask=m, need_weights=False)[0].retrieve()
    cx.compile(device="cpu")
    assert fused_chains(cx) == 1
    x.set(x_np)
    m.set(pad)
    cx.execute()
    np.testing.assert_allclose(y.data().reshape(b, s, e), want.detach().numpy(), **TOL)

    cx = lm.Graph()
    x, m = cx.tensor((b, s, e)), cx.tensor((b, s), lm.DType.bool)
    y = mha(x, x, x, key_padding_mask=m, need_weights=False)[0]
    (gx,) = grad((y * y).sum(), [x])
    gx.retrieve()
    cx.compile(device="cpu")
    assert fused_chains(cx) == 2  # (the forward, and the backward's dP GEMM, dS rows and dQ GEMM)
    x.set(x_np)
    m.set(pad)
    cx.execute()
    np.testing.assert_allclose(gx.data().reshape(b, s, e), x_t.grad.numpy(), rtol=1e-4, atol=1e-4)


SANITIZER_SCRIPT = r"""
import numpy as np
import luminal as lm
from luminal.nn.attention import scaled_dot_product_attention

def reference(q, k, v, mask):
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v

rng = np.random.default_rng(0)
cx = lm.Graph()
q, k, v = (cx.tensor(("b", 2, "s", 8)) for _ in range(3))
out = scaled_dot_product_attention(q, k, v, is_causal=True).retrieve()
cx.compile(device="cpu")
for b, s in [(2, 150), (1, 3), (1, 70)]:
    arrays = [rng.standard_normal((b, 2, s, 8)).astype(np.float32) for _ in range(3)]
    for t, a in zip((q, k, v), arrays):
        t.set(a)
    cx.execute()
    want = reference(*arrays, np.tril(np.ones((s, s), bool)))
    assert np.allclose(out.data().reshape(want.shape), want, rtol=1e-4, atol=1e-5), (b, s)

# a training step: the forward's probabilities stored, the backward's chain fused (both skip keys)
from luminal.training import grad
cx = lm.Graph()
q, k, v = (cx.tensor((2, 2, 150, 8)) for _ in range(3))
y = scaled_dot_product_attention(q, k, v, is_causal=True)
gq, gk, gv = (g.retrieve() for g in grad((y * y).sum(), [q, k, v]))  # (dK and dV: the trimmed GEMMs)
cx.compile(device="cpu")
assert cx.runtime.source.count("lm_k1 - lm_k0, ") == 2
arrays = [rng.standard_normal((2, 2, 150, 8)).astype(np.float32) for _ in range(3)]
for t, a in zip((q, k, v), arrays):
    t.set(a)
cx.execute()
h = 1e-3
base = arrays[0].copy()
for idx in [(0, 0, 0, 0), (1, 1, 149, 7), (0, 1, 70, 3)]:
    for sign, store in ((1, "p"), (-1, "m")):
        a = base.copy(); a[idx] += sign * h
        globals()[store] = (reference(a, arrays[1], arrays[2], np.tril(np.ones((150, 150), bool))) ** 2).sum()
    fd = (p - m) / (2 * h)
    assert abs(gq.data().reshape(base.shape)[idx] - fd) <= 1e-2 * max(1.0, abs(fd)), (idx, fd)
    base_k = arrays[1].copy()
    for sign, store in ((1, "p"), (-1, "m")):
        a = base_k.copy(); a[idx] += sign * h
        globals()[store] = (reference(arrays[0], a, arrays[2], np.tril(np.ones((150, 150), bool))) ** 2).sum()
    fd = (p - m) / (2 * h)
    assert abs(gk.data().reshape(base.shape)[idx] - fd) <= 1e-2 * max(1.0, abs(fd)), (idx, fd)
print("SANITIZED-OK")
"""


def test_fused_attention_under_address_and_undefined_sanitizers(tmp_path):
    from hl_helpers import run_sanitized
    run_sanitized(SANITIZER_SCRIPT, tmp_path, "SANITIZED-OK", timeout=300)


def test_scores_and_probabilities_take_no_arena_bytes(monkeypatch):
    """The fused chain's scores, probabilities and exponentials live in per-thread scratch only: the arena is
    smaller than the unfused program's by at least the scores and probabilities (4 heads x 512 x 512 floats
    each)."""
    shape = (1, 4, 512, 16)
    arrays = _arrays(np.random.default_rng(9), shape, shape, 16)
    size, got = {}, {}
    for fused in (True, False):
        cx, ins, out = _compile((shape,) * 3, causal=True, fused=fused, monkeypatch=monkeypatch)
        got[fused] = _run(cx, ins, arrays, out, shape)
        size[fused] = cx.runtime._arena.size
    assert size[True] + 2 * 4 * 512 * 512 * 4 <= size[False], size
    np.testing.assert_allclose(got[True], _torch(*arrays, causal=True), **TOL)


def test_causal_training_step_and_attention_weights(monkeypatch):
    """A causal attention's gradients (the probabilities stored whole, zeros past each block's last visible key:
    the backward reads them all) and MultiheadAttention's averaged attention weights (an output): both fused,
    both against torch float64; the scores take no arena bytes."""
    rng = np.random.default_rng(10)
    shape = (2, 3, 150, 16)
    arrays = _arrays(rng, shape, shape, 16)
    up = rng.standard_normal(shape).astype(np.float32)
    ts = [torch.from_numpy(a).double().requires_grad_(True) for a in arrays]
    ((F.scaled_dot_product_attention(*ts, is_causal=True) - torch.from_numpy(up).double()) ** 2).sum().backward()
    got, arena = {}, {}
    for fused in (True, False):
        monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
        cx = lm.Graph()
        q, k, v = (cx.tensor(shape) for _ in range(3))
        u = cx.tensor(shape)
        y = scaled_dot_product_attention(q, k, v, is_causal=True)
        grads = grad(((y - u) * (y - u)).sum(), [q, k, v])  # (the loss reads y: the P.V product is live)
        for g in grads:
            g.retrieve()
        cx.compile(device="cpu")
        assert fused_chains(cx) == 2 * int(fused)  # (forward and backward)
        for t, a in zip((q, k, v, u), (*arrays, up)):
            t.set(a)
        cx.execute()
        got[fused] = [g.data().reshape(shape) for g in grads]
        arena[fused] = cx.runtime._arena.size
    for g, t in zip(got[True], ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert arena[True] < arena[False], arena  # (the scores' slot: less than its size, as the plan reuses slots)

    torch.manual_seed(1)
    ref = torch.nn.MultiheadAttention(32, 4, batch_first=True).double()
    mha = MultiheadAttention(32, 4, batch_first=True)
    mha.load_state_dict({n: p.detach().float() for n, p in ref.state_dict().items()})
    x_np = rng.standard_normal((2, 90, 32)).astype(np.float32)
    with torch.no_grad():
        want, want_w = ref(*(torch.from_numpy(x_np).double(),) * 3, need_weights=True)
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    cx = lm.Graph()
    x = cx.tensor((2, 90, 32))
    out, weights = mha(x, x, x, need_weights=True)
    out, weights = out.retrieve(), weights.retrieve()
    cx.compile(device="cpu")
    assert fused_chains(cx) == 1
    x.set(x_np)
    cx.execute()
    np.testing.assert_allclose(out.data().reshape(2, 90, 32), want.numpy(), **TOL)
    np.testing.assert_allclose(weights.data().reshape(2, 90, 90), want_w.numpy(), **TOL)


def _autocast_causal(shape, low, fused, monkeypatch):
    """A graph of causal attention over q, k, v of ``shape`` built under ``lm.autocast(low)``, its output cast
    back to float32; the fused chain on or off: ``(graph, (q, k, v), output)``."""
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
    cx = lm.Graph()
    q, k, v = (cx.tensor(shape) for _ in range(3))
    with lm.autocast(dtype=low):
        y = scaled_dot_product_attention(q, k, v, is_causal=True).cast(lm.DType.float32)
    return cx, (q, k, v), y


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_attention_is_fused(dtype, monkeypatch):
    """Under ``lm.autocast``: q, k, v rounded, the probabilities rounded before their product (torch's CPU
    autocast); the fused kernel multiplies with the low-precision GEMMs. Against torch's CPU autocast (one
    rounding of the output: bfloat16 tolerance) and the unfused program (the same roundings: float32
    tolerance)."""
    low = getattr(lm.DType, dtype)
    rng = np.random.default_rng(12)
    shape = (2, 3, 150, 32)
    arrays = _arrays(rng, shape, shape, 32)
    got = {}
    for fused in (True, False):
        cx, (q, k, v), y = _autocast_causal(shape, low, fused, monkeypatch)
        y.retrieve()
        cx.compile(device="cpu")
        assert fused_chains(cx) == int(fused)
        got[fused] = _run(cx, (q, k, v), arrays, y, shape)
    np.testing.assert_allclose(got[True], got[False], rtol=1e-5, atol=1e-5)
    with torch.no_grad(), torch.autocast("cpu", dtype=getattr(torch, dtype)):
        want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in arrays), is_causal=True)
    np.testing.assert_allclose(got[True], want.float().numpy(), rtol=2e-2, atol=2e-2)


def test_bfloat16_inputs_keep_bfloat16_probabilities(monkeypatch):
    """q, k, v stored as bfloat16 (a bf16 checkpoint): the softmax rounds its probabilities to bfloat16, which the
    fused kernel keeps in bfloat16 scratch for the bfloat16 product; against the unfused program (the same
    roundings) and torch's bfloat16 attention."""
    import ml_dtypes

    rng = np.random.default_rng(13)
    shape = (1, 2, 140, 16)
    arrays = [a.astype(ml_dtypes.bfloat16) for a in _arrays(rng, shape, shape, 16)]
    got = {}
    for fused in (True, False):
        monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
        cx = lm.Graph()
        q, k, v = (cx.tensor(shape, lm.DType.bfloat16) for _ in range(3))
        out = scaled_dot_product_attention(q, k, v, is_causal=True).cast(lm.DType.float32).retrieve()
        cx.compile(device="cpu")
        assert fused_chains(cx) == int(fused)
        if fused:
            assert f"{lm.DType.bfloat16.c_type} *const lm_p =" in cx.runtime.source
        got[fused] = _run(cx, (q, k, v), arrays, out, shape)
    np.testing.assert_allclose(got[True], got[False], rtol=1e-2, atol=1e-2)
    with torch.no_grad():
        want = F.scaled_dot_product_attention(*(torch.from_numpy(a.astype(np.float32)).bfloat16() for a in arrays),
                                              is_causal=True)
    np.testing.assert_allclose(got[True], want.float().numpy(), rtol=2e-2, atol=2e-2)


def test_threads_running_fused_attention_at_once():
    """Three threads, each with its own graph over the same program (one library: the per-thread scratch is
    thread-local), run causal attentions of different lengths at the same time; each against torch."""
    from hl_helpers import run_in_threads

    def work(i):
        cx = lm.Graph()
        q, k, v = (cx.tensor(("b", 2, "s", 16)) for _ in range(3))
        out = scaled_dot_product_attention(q, k, v, is_causal=True).retrieve()
        cx.compile(device="cpu")
        assert fused_chains(cx) == 1
        rng = np.random.default_rng(20 + i)
        for _ in range(5):
            s = int(rng.integers(60, 300))
            arrays = _arrays(rng, (2, 2, s, 16), (2, 2, s, 16), 16)
            got = _run(cx, (q, k, v), arrays, out, (2, 2, s, 16))
            np.testing.assert_allclose(got, _torch(*arrays, causal=True), **TOL)

    run_in_threads(work, 3)


def test_no_keys_and_no_queries(monkeypatch):
    """Symbolic lengths bound to 0: no keys gives zeros (torch's result), no queries an empty output; with a
    mask (the key scan) and without; fused and unfused alike."""
    for masked in (True, False):
        for fused in (True, False):
            monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
            cx = lm.Graph()
            q, k, v = cx.tensor((1, 2, "l", 8)), cx.tensor((1, 2, "s", 8)), cx.tensor((1, 2, "s", 8))
            m = cx.tensor(("l", "s"), lm.DType.bool) if masked else None
            out = scaled_dot_product_attention(q, k, v, attn_mask=m).retrieve()
            cx.compile(device="cpu")
            assert fused_chains(cx) == int(fused)
            rng = np.random.default_rng(14)
            for l, s in [(70, 0), (0, 70), (70, 70)]:
                arrays = _arrays(rng, (1, 2, l, 8), (1, 2, s, 8), 8)
                mask = np.ones((l, s), bool)
                got = _run(cx, (q, k, v, m), (*arrays, mask), out, (1, 2, l, 8))
                want = _torch(*arrays, mask if masked else None) if l and s else np.zeros((1, 2, l, 8))
                np.testing.assert_allclose(got, want, **TOL)


def trimmed_gemms(cx) -> int:
    """How many GEMMs of the compiled graph's C run trimmed to an operand's nonzero rows (the dK / dV products of
    a masked attention's backward, ``CRenderer._trimmed_gemm``)."""
    return cx.runtime.source.count("lm_k1 - lm_k0, ")


TRIM_CASES = {  # name: (q shape, k shape, causal, key lengths per batch element or None)
    "causal": ((2, 2, 300, 16), (2, 2, 300, 16), True, None),
    "causal_wide": ((1, 3, 120, 8), (1, 3, 260, 8), True, None),
    "causal_tall": ((1, 3, 260, 8), (1, 3, 120, 8), True, None),
    "padding": ((3, 2, 200, 16), (3, 2, 280, 16), False, (280, 35, 1)),
    "window": ((1, 4, 300, 16), (1, 4, 300, 16), False, 40),  # (query i sees keys i - 40 ... i)
}


@pytest.mark.parametrize("case", sorted(TRIM_CASES))
def test_masked_backward_gemms_skip_the_zero_rows(case, monkeypatch):
    """A masked attention's ``dK = dS^T Q`` and ``dV = P^T dO`` multiply only the query rows where the block of
    keys has a nonzero ``dS`` / ``P`` (rows before a causal block, and key blocks past a sequence's padding
    whole, and the rows after a sliding window's last one). The gradients of q, k and v against torch float64
    (rtol 1e-4, atol 1e-4), with key lengths that leave whole blocks of zeros (35, 1) and causal masks with more
    or fewer keys than queries; the unfused program trims nothing, and a step without a mask trims nothing
    either."""
    q_shape, k_shape, causal, lengths = TRIM_CASES[case]
    rng = np.random.default_rng(15)
    arrays = _arrays(rng, q_shape, k_shape, k_shape[-1])
    up = rng.standard_normal(q_shape).astype(np.float32)
    mask = None
    if isinstance(lengths, int):  # a sliding window: both the first and the last rows of a key block trimmed
        i, j = np.arange(q_shape[2])[:, None], np.arange(k_shape[2])[None, :]
        mask = (j <= i) & (j >= i - lengths)
    elif lengths is not None:
        mask = (np.arange(k_shape[2])[None, :] < np.array(lengths)[:, None]).reshape(k_shape[0], 1, 1, k_shape[2])
    ts = [torch.from_numpy(a).double().requires_grad_(True) for a in arrays]
    tm = None if mask is None else torch.from_numpy(mask)
    y = F.scaled_dot_product_attention(*ts, attn_mask=tm, is_causal=causal)
    ((y - torch.from_numpy(up).double()) ** 2).sum().backward()
    for fused, masked in ((True, True), (False, True), (True, False)):
        monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
        cx = lm.Graph()
        q, k, v = cx.tensor(q_shape), cx.tensor(k_shape), cx.tensor(k_shape)
        u = cx.tensor(q_shape)
        m = cx.tensor(mask.shape, lm.DType.bool) if mask is not None and masked else None
        y = scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal and masked)
        grads = [g.retrieve() for g in grad(((y - u) * (y - u)).sum(), [q, k, v])]
        cx.compile(device="cpu")
        assert trimmed_gemms(cx) == (2 if fused and masked else 0), (fused, masked)
        if not masked:
            continue
        for t, a in zip((q, k, v, u, m), (*arrays, up, mask)):
            if t is not None:
                t.set(a)
        cx.execute()
        for g, t, a in zip(grads, ts, (q_shape, k_shape, k_shape)):
            np.testing.assert_allclose(g.data().reshape(a), t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_autocast_masked_backward_trims_bfloat16_operands(monkeypatch):
    """Under autocast (bfloat16) the stored probabilities and ``dS`` are bfloat16 bits: the trimmed GEMMs test
    them for nonzero as bits (``-0`` is zero). The gradients equal the unfused autocast program's (the same
    roundings; float32 tolerance) and torch's float64 ones within bfloat16 tolerance."""
    rng = np.random.default_rng(16)
    shape = (2, 2, 200, 32)
    arrays = _arrays(rng, shape, shape, 32)
    got = {}
    for fused in (True, False):
        cx, (q, k, v), y = _autocast_causal(shape, lm.DType.bfloat16, fused, monkeypatch)
        grads = [g.retrieve() for g in grad((y * y).sum(), [q, k, v])]
        cx.compile(device="cpu")
        assert (trimmed_gemms(cx) > 0) == fused
        for t, a in zip((q, k, v), arrays):
            t.set(a)
        cx.execute()
        got[fused] = [g.data().reshape(shape) for g in grads]
    ts = [torch.from_numpy(a).double().requires_grad_(True) for a in arrays]
    (F.scaled_dot_product_attention(*ts, is_causal=True) ** 2).sum().backward()
    for a, b, t in zip(got[True], got[False], ts):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(a, t.grad.numpy(), rtol=5e-2, atol=5e-2 * np.abs(t.grad.numpy()).max())
