"""Products stored transposed where their readers walk them column-wise (luminal.codegen.layout).

Oracles: numpy for values; for the view rewrite itself, every element a view reads from a buffer equals what the
rewritten view reads from the transposed buffer (ShapeTracker.gather_numpy, masked positions included).
"""

import itertools

import numpy as np
import pytest

import luminal as lm
from luminal.codegen.kernel import GemmKernel
from luminal.codegen.layout import _remap
from luminal.shape import ShapeTracker


def _views(B, M, N):
    """Views of a row-major (B, M, N) buffer: permutes, slices, flips, broadcasts, pads (masks), merges."""
    base = ShapeTracker.contiguous_of((B, M, N))
    out = [base, base.permute((0, 2, 1)), base.permute((2, 0, 1)), base.slice(1, 1, M - 1).slice(2, 2, N),
           base.flip(2), base.flip(1).permute((0, 2, 1)), base.slice(1, 0, M, 2), base.unsqueeze(1).expand(1, 3),
           base.pad(0, 1, 1), base.pad(1, 2, 0).permute((0, 2, 1))]
    if B >= 2:
        out += [base.slice(0, 1, 2), base.permute((1, 0, 2)).slice(1, 1, 2)]
    merged = base.merge_dims(0)  # (B * M, N): a batch-and-row merge stays exact
    if merged is not None:
        out.append(merged)
    return out


@pytest.mark.parametrize("B,M,N", [(2, 3, 4), (3, 5, 2), (1, 4, 4)])
def test_remapped_views_read_the_same_elements_of_the_transposed_buffer(B, M, N):
    buf = np.arange(B * M * N, dtype=np.float64) + 1.0           # nonzero everywhere: a masked 0 is visible
    transposed = buf.reshape(B, M, N).transpose(0, 2, 1).copy().reshape(-1)
    checked = 0
    for view in _views(B, M, N):
        new = _remap(view, M, N)
        if new is None:
            continue
        np.testing.assert_array_equal(new.gather_numpy(transposed), view.gather_numpy(buf), err_msg=repr(view))
        checked += 1
    assert checked >= 8


def test_views_leaving_the_matrix_are_not_rewritten():
    # a view that walks from one row of the matrix into the next (a merge of m and n read as one axis at an
    # offset): not one axis of the transposed layout, so no rewrite
    st = ShapeTracker((5,), (1,), 2, ())  # elements 2..6 of a (1, 2, 4) buffer: crosses from row 0 into row 1
    assert _remap(st, 2, 4) is None


def _gemms(cx):
    return [k for k in cx.runtime.program.kernels if isinstance(k, GemmKernel)]


def test_a_product_read_transposed_is_computed_transposed():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 64, 32)).astype(np.float32)
    b = rng.standard_normal((4, 48, 32)).astype(np.float32)
    cx = lm.Graph()
    A, B = cx.tensor(a.shape).set(a), cx.tensor(b.shape).set(b)
    c = (A @ B.transpose(1, 2)) * 2.0                            # a product, then an elementwise kernel
    y = (c.transpose(1, 2) + 1.0).retrieve()                     # read column-wise by two kernels
    z = c.transpose(1, 2).sum(2).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    e = np.swapaxes(2 * (a @ np.swapaxes(b, 1, 2)), 1, 2)
    np.testing.assert_allclose(y.data(), e + 1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z.data(), e.sum(2), rtol=1e-5, atol=1e-4)
    (g,) = _gemms(cx)
    assert tuple(int(d) for d in g.dims) == (4, 48, 64)           # C^T = B A^T


def test_retrieved_products_keep_their_layout_and_masks_stay_exact():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 20)).astype(np.float32)
    cx = lm.Graph()
    A, B = cx.tensor(a.shape).set(a), cx.tensor(b.shape).set(b)
    c = (A @ B).retrieve()                                        # the user reads c: row-major, untouched
    p = ((A @ B) * 1.5).T.pad(((1, 2), (0, 3))).retrieve()        # transposed and padded reader
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(c.data(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(p.data(), np.pad((1.5 * (a @ b)).T, ((1, 2), (0, 3))), rtol=1e-5, atol=1e-5)
    dims = [tuple(int(d) for d in g.dims) for g in _gemms(cx)]
    assert (24, 20) in dims                                       # the retrieved product


def test_attention_gradients_match_the_reference_with_the_transposed_product():
    """The case the rewrite was made for (W5: dK comes out (b, h, dh, s) and is read (b, s, h * dh) by the
    concatenation of the q, k, v gradients): gradients equal the reference interpreter's."""
    from luminal.training import grad
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    w = (rng.standard_normal((48, 16)) * 0.2).astype(np.float32)
    results = []
    for device in ("reference", "cpu"):
        cx = lm.Graph()
        X, W = cx.tensor(x.shape).set(x), cx.tensor(w.shape).set(w)
        qkv = X @ W.T                                              # (2, 8, 48)
        q, k, v = [qkv[:, :, i * 16:(i + 1) * 16].reshape((2, 8, 2, 8)).permute((0, 2, 1, 3)) for i in range(3)]
        att = ((q @ k.transpose(2, 3)) * 0.35).softmax(-1) @ v     # (2, 2, 8, 8)
        loss = (att * att).sum()
        gw, gx = grad(loss, [W, X])
        gw.retrieve(), gx.retrieve()
        if device == "cpu":
            cx.compile(device="cpu")
        cx.execute()
        results.append((gw.data(), gx.data()))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_symbolic_products_are_left_alone():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((7, 5)).astype(np.float32)
    cx = lm.Graph()
    A, B = cx.tensor(("n", 5)).set(a), cx.tensor(b.shape).set(b)
    y = ((A @ B.T) + 1.0).T.contiguous().retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(y.data(), (a @ b.T + 1).T, rtol=1e-5, atol=1e-5)


def test_every_small_case_equals_numpy():
    """Products of every layout combination read in every orientation (float32 and float64)."""
    rng = np.random.default_rng(4)
    for dtype, ta, tb, read_t in itertools.product(["float32", "float64"], [False, True], [False, True], [False, True]):
        a = rng.standard_normal((5, 7)).astype(dtype)
        b = rng.standard_normal((7, 6)).astype(dtype)
        cx = lm.Graph()
        A = cx.tensor((7, 5) if ta else (5, 7), dtype=dtype).set(a.T.copy() if ta else a)
        B = cx.tensor((6, 7) if tb else (7, 6), dtype=dtype).set(b.T.copy() if tb else b)
        c = (A.T if ta else A) @ (B.T if tb else B)
        y = ((c.T if read_t else c) - 0.5).retrieve()
        cx.compile(device="cpu")
        cx.execute()
        want = (a @ b).T - 0.5 if read_t else a @ b - 0.5
        np.testing.assert_allclose(y.data(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape_a,shape_b", [((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5)), ((2, 3, 0), (2, 0, 5))])
def test_empty_products_read_transposed(shape_a, shape_b):
    a = np.ones(shape_a, np.float32)
    b = np.ones(shape_b, np.float32)
    cx = lm.Graph()
    A, B = cx.tensor(a.shape).set(a), cx.tensor(b.shape).set(b)
    y = ((A @ B) * 2.0).transpose(1, 2).contiguous().retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_array_equal(y.data(), np.swapaxes(2 * (a @ b), 1, 2))


def _elementwise_dims(cx):
    from luminal.codegen.kernel import ElementwiseKernel
    return sorted(k.dims for k in cx.runtime.program.kernels if isinstance(k, ElementwiseKernel))


def test_broadcast_reads_do_not_make_a_kernel_worth_transposing(monkeypatch):
    """A batch-normalized activation reads its per-channel statistics and affine parameters broadcast along the
    sequence axis: loaded once per row, as good as contiguous. Counting them as strided made the pass store the
    whole Conv1d -> BatchNorm1d -> GELU -> MaxPool1d chain of a training step channels-last, every read of the
    convolution's output strided (2x the step's time). No elementwise kernel is transposed here, and the step's
    gradients equal PyTorch's."""
    torch = pytest.importorskip("torch")
    from luminal.training import grad

    rng = np.random.default_rng(5)
    xv = rng.standard_normal((4, 8, 64)).astype(np.float32)

    def build():
        cx = lm.Graph()
        model = lm.nn.Sequential(lm.nn.Conv1d(8, 16, 5, padding=2), lm.nn.BatchNorm1d(16), lm.nn.GELU(),
                                 lm.nn.MaxPool1d(2), lm.nn.Conv1d(16, 16, 5, padding=2))
        x = cx.tensor(xv.shape).set(xv)
        gs = [g.retrieve() for g in grad((model(x) ** 2).mean(), list(model.parameters()) + [x])]
        cx.compile(device="cpu")
        return cx, model, gs

    cx, model, gs = build()
    monkeypatch.setenv("LUMINAL_LAYOUT", "0")
    plain, _, _ = build()
    assert _elementwise_dims(cx) == _elementwise_dims(plain)
    cx.execute()
    tmodel = torch.nn.Sequential(torch.nn.Conv1d(8, 16, 5, padding=2), torch.nn.BatchNorm1d(16), torch.nn.GELU(),
                                 torch.nn.MaxPool1d(2), torch.nn.Conv1d(16, 16, 5, padding=2))
    tmodel.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in model.state_dict().items()})
    tx = torch.from_numpy(xv).requires_grad_(True)
    want = torch.autograd.grad((tmodel(tx) ** 2).mean(), list(tmodel.parameters()) + [tx])
    for g, w in zip(gs, want):
        np.testing.assert_allclose(g.data(), w.numpy(), rtol=2e-4, atol=2e-5)
