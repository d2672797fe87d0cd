"""Elementwise outputs stored in their GEMM product's order, and GEMM epilogues written over the product
(luminal.codegen.layout_order, luminal.codegen.groups.in_place_epilogues).

Oracles: for the view rewrite, every element a view reads from a buffer equals what the rewritten view reads
from the permuted buffer (ShapeTracker.gather_numpy, masked positions included, symbols bound); for programs,
PyTorch float64 / numpy float64 on the same inputs, and the same graph compiled with the pass turned off.
"""

import io
import itertools
import warnings

import numpy as np
import pytest

import luminal as lm
from luminal.codegen.kernel import ElementwiseKernel, GemmKernel, Load
from luminal.codegen.layout_order import axis_map, permuted_view
from luminal.shape import ShapeTracker, to_expr


def _windows(base: ShapeTracker) -> ShapeTracker:
    """A 3x3 convolution's windows (padding 1) over a (N, C, H, W) view: (C, kh, kw, N, H, W)."""
    st = base.pad(2, 1, 1).pad(3, 1, 1).pool(2, 3).pool(4, 3)  # (N, C, oh, kh, ow, kw)
    return st.permute((1, 3, 5, 0, 2, 4))


def _views(dims):
    """Views of a row-major buffer of ``dims`` (N, C, H, W): permutes, slices with steps, flips, broadcasts,
    padded windows (masks), strided windows."""
    base = ShapeTracker.contiguous_of(dims)
    out = [base, base.permute((1, 0, 2, 3)), base.permute((1, 2, 3, 0)), base.slice(2, 1, None, 2),
           base.flip(3), base.flip(1).permute((0, 2, 3, 1)), base.unsqueeze(2).expand(2, 3), _windows(base),
           base.slice(1, 1, None), base.pad(3, 2, 1)]
    strided = base.pad(2, 1, 1).pad(3, 1, 1).pool(2, 3, 2).pool(4, 3, 2)  # a stride-2 convolution's windows
    out.append(strided.permute((1, 3, 5, 0, 2, 4)))
    return [v for v in out if v is not None]


@pytest.mark.parametrize("dims", [(2, 3, 5, 4), (3, 2, 4, 6), (1, 4, 3, 3)])
def test_permuted_views_read_the_same_elements_of_the_permuted_buffer(dims):
    n = int(np.prod(dims))
    buf = np.arange(n, dtype=np.float64) + 1.0  # nonzero everywhere: a masked 0 is visible
    checked = 0
    for perm in itertools.permutations(range(4)):
        stored = buf.reshape(dims).transpose(perm).copy().reshape(-1)
        for view in _views(dims):
            new = permuted_view(view, dims, perm)
            assert new is not None, (view, perm)  # (each view walks whole axes of the buffer)
            np.testing.assert_array_equal(new.gather_numpy(stored), view.gather_numpy(buf), err_msg=repr((view, perm)))
            checked += 1
    assert checked == 24 * len(_views(dims))


def test_symbolic_views_are_rewritten_for_every_batch():
    dims = ("batch", 3, 4, 5)
    base = ShapeTracker.contiguous_of(dims)
    perm = (1, 0, 2, 3)  # channel-major: (C, batch, H, W)
    for view in (base, _windows(base), base.permute((1, 0, 2, 3)), base.slice(3, 1, 4)):
        new = permuted_view(view, dims, perm)
        assert new is not None, view
        for b in (1, 2, 5):
            buf = np.arange(b * 60, dtype=np.float64) + 1.0
            stored = buf.reshape(b, 3, 4, 5).transpose(perm).copy().reshape(-1)
            np.testing.assert_array_equal(new.gather_numpy(stored, {"batch": b}), view.gather_numpy(buf, {"batch": b}))


def test_views_straddling_axes_are_not_rewritten():
    # a (4, 6) buffer read as (6, 4) (a reshape without a copy): a reader axis of stride 4 walks across rows of 6,
    # so it is no axis of the buffer's and a permuted layout cannot be addressed by strides
    assert axis_map(ShapeTracker((6, 4), (4, 1)), (4, 6)) is None
    # elements 2..6 of a (2, 4) buffer read as one axis: from row 0 into row 1
    assert axis_map(ShapeTracker((5,), (1,), 2), (2, 4)) is None
    # H and W merged into one axis: it walks two axes of the buffer
    assert axis_map(ShapeTracker.contiguous_of((2, 3, 5, 4)).merge_dims(2), (2, 3, 5, 4)) is None
    # ... but inside one row it is exact
    per, origin = axis_map(ShapeTracker((3,), (1,), 5), (2, 4))
    assert per == [(1, 1)] and origin == [1, 1]


def _mobilenet_block(seed: int = 0):
    """A MobileNetV2 inverted residual as ONNX (batch norms folded into the convolutions by the exporter): 1x1
    expansion + ReLU6, 3x3 depthwise (stride 1) + ReLU6, 1x1 projection, the residual add; a dynamic batch."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    T = torch.nn

    class Block(T.Module):
        def __init__(self):
            super().__init__()
            self.body = T.Sequential(T.Conv2d(16, 48, 1, bias=False), T.BatchNorm2d(48), T.ReLU6(),
                                     T.Conv2d(48, 48, 3, 1, 1, groups=48, bias=False), T.BatchNorm2d(48), T.ReLU6(),
                                     T.Conv2d(48, 16, 1, bias=False), T.BatchNorm2d(16))

        def forward(self, x):
            return x + self.body(x)

    torch.manual_seed(seed)
    net = T.Sequential(Block(), Block()).eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, T.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.randn(2, 16, 12, 12), buf, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17, dynamo=False)
    return net, buf.getvalue()


def _channel_major(rt) -> int:
    """Elementwise kernels of the program that iterate over (C, batch, H, W) (stored in their product's order)."""
    return sum(1 for k in rt.program.kernels if isinstance(k, ElementwiseKernel) and len(k.dims) >= 2
               and str(k.dims[1]) == "batch" and str(k.dims[0]) != "1")


def _direct(rt) -> int:
    from luminal.codegen.gemm_direct import direct_plan
    return sum(1 for k in rt.program.kernels if isinstance(k, GemmKernel) and direct_plan(rt.program, k) is not None)


def test_activations_after_a_convolution_become_its_epilogue(monkeypatch):
    torch = pytest.importorskip("torch")
    import luminal.onnx as lo
    net, proto = _mobilenet_block()
    model = lo.load(proto, device="cpu", compile=True)
    monkeypatch.setenv("LUMINAL_LAYOUT", "0")
    plain = lo.load(proto, device="cpu", compile=True)
    monkeypatch.delenv("LUMINAL_LAYOUT")
    rt, rt0 = model.runtime, plain.runtime
    # the expansions' ReLU6 are stored channel-major and run as their GEMM's epilogue, in the product's bytes;
    # without the pass neither is (the residual adds read the block's input, stored (N, C, H, W) by the caller:
    # they stay passes of their own). The depthwise convolutions' ReLU6 (stored channel-major by the lowering:
    # the projection's copy) are their direct kernel's epilogue either way
    assert _channel_major(rt) == 2 and _channel_major(rt0) == 0
    assert len(rt.cprogram.groups) == len(rt0.cprogram.groups) - 2
    products = {k.out: k for k in rt.program.kernels if isinstance(k, GemmKernel)}
    assert len(rt.cprogram.shared) == 4 and len(rt0.cprogram.shared) == 2
    assert sum(1 for p in rt.cprogram.shared.values() if products[p].dims[0] == 48) == 2  # (the 48 groups)
    # the depthwise convolutions still read their (now channel-major) input in place
    assert _direct(rt) == _direct(rt0) == 2
    net = net.double()
    for b in (3, 1, 2):  # one program for every batch
        x = np.random.default_rng(b).standard_normal((b, 16, 12, 12)).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x).double()).numpy()
        got = np.asarray(model.run({"x": x})["y"])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got, np.asarray(plain.run({"x": x})["y"]))  # the same sums, stored elsewhere


def _mlp(read_product: bool):
    """``gelu(x @ w + b) @ w2``; with ``read_product`` also the row sums of ``x @ w``, read by a reduction after
    the epilogue (so the product must keep its own bytes)."""
    rng = np.random.default_rng(0)
    x, w, b, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 128), (128,), (128, 32)))
    cx = lm.Graph()
    tx, tw, tb, tw2 = (cx.tensor(a.shape).set(a) for a in (x, w, b, w2))
    p = tx.matmul(tw)
    h = (p + tb).gelu("tanh")
    outs = [h.matmul(tw2).retrieve()]
    if read_product:
        outs.append((h.matmul(tw2).sum(1) + p.max(1)).retrieve())
    cx.compile(device="cpu")
    cx.execute()
    x64, w64, b64, w264 = (a.astype(np.float64) for a in (x, w, b, w2))
    p64 = x64 @ w64
    z = p64 + b64
    h64 = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    want = [h64 @ w264] + ([(h64 @ w264).sum(1) + p64.max(1)] if read_product else [])
    for o, e in zip(outs, want):
        np.testing.assert_allclose(o.data(), e, rtol=1e-4, atol=1e-3)
    return cx.runtime


def test_an_epilogue_is_written_over_its_product(monkeypatch):
    rt = _mlp(False)
    gemm = next(k for k in rt.program.kernels if isinstance(k, GemmKernel))
    assert gemm.out in rt.cprogram.shared.values()
    shared_arena = rt._arena.size
    monkeypatch.setenv("LUMINAL_IN_PLACE", "0")
    rt0 = _mlp(False)
    assert not rt0.cprogram.shared
    assert shared_arena < rt0._arena.size  # (the product's 64 x 128 floats are the epilogue's too)


def test_a_product_read_after_its_epilogue_keeps_its_bytes():
    rt = _mlp(True)  # (values checked against numpy inside: the max reads the product, not the GELU over it)
    gemm = next(k for k in rt.program.kernels if isinstance(k, GemmKernel))
    assert gemm.out not in rt.cprogram.shared.values()


def test_an_epilogue_read_much_later_keeps_the_products_bytes():
    # the epilogue's output lives on in the product's slot: the buffers computed meanwhile (as large) must be
    # placed elsewhere in the arena
    rng = np.random.default_rng(1)
    x, w, b, z, w2 = (rng.standard_normal(s).astype(np.float32)
                      for s in ((64, 96), (96, 128), (128,), (64, 128), (128, 128)))
    cx = lm.Graph()
    tx, tw, tb, tz, tw2 = (cx.tensor(a.shape).set(a) for a in (x, w, b, z, w2))
    h = (tx.matmul(tw) + tb).relu()
    u = (tz * 0.5).exp().sin() * tz
    v = (u.matmul(tw2) * 0.1).cos()
    out = (h.matmul(tw2) * v).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert cx.runtime.cprogram.shared
    x64, z64, w264 = x.astype(np.float64), z.astype(np.float64), w2.astype(np.float64)
    u64 = np.sin(np.exp(z64 * 0.5)) * z64
    want = (np.maximum(x64 @ w.astype(np.float64) + b, 0) @ w264) * np.cos((u64 @ w264) * 0.1)
    np.testing.assert_allclose(out.data(), want, rtol=1e-4, atol=1e-3)


def test_merging_axes_keeps_shared_subtrees_shared():
    # a where() reads its operand twice (the comparison and the select): merging the loops of a chain of k of them
    # copied node by node would render 2^k copies (an atan2 of a transposed operand rendered 53 MB of C)
    x = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float32)
    cx = lm.Graph()
    t = cx.tensor(x.shape).set(x)
    y, want = t, x.astype(np.float64)
    for _ in range(5):  # (copied node by node: 5 levels rendered 360 KB of C, 6 levels 1.5 MB)
        y = y.clip(-1.0, 1.0) * 1.5 + 0.25
        want = np.clip(want, -1.0, 1.0) * 1.5 + 0.25
    out = y.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(out.data(), want, rtol=1e-5, atol=1e-5)
    assert len(cx.runtime.source) < 60_000  # (shared: 11 KB)


def test_merged_axes_are_rewritten_where_they_stay_adjacent():
    # a bias gradient sums (N, C, H, W) over H * W read as one axis: exact over any layout that keeps H and W
    # next to each other, in order (the merged axis then has one stride there); not where they part
    dims = (2, 3, 5, 4)
    n = int(np.prod(dims))
    buf = np.arange(n, dtype=np.float64) + 1.0
    base = ShapeTracker.contiguous_of(dims)
    merged = [base.merge_dims(2), base.merge_dims(2).permute((1, 0, 2)), base.merge_dims(2).slice(2, 3, 17)]
    kept = [p for p in itertools.permutations(range(4)) if p.index(3) == p.index(2) + 1]
    assert len(kept) == 6
    for perm in itertools.permutations(range(4)):
        stored = buf.reshape(dims).transpose(perm).copy().reshape(-1)
        for view in merged:
            new = permuted_view(view, dims, perm)
            if perm not in kept:
                assert new is None, (view, perm)
                continue
            assert new is not None, (view, perm)
            np.testing.assert_array_equal(new.gather_numpy(stored), view.gather_numpy(buf), err_msg=repr((view, perm)))
    # N and C merged too (a view of (N*C, H*W)): both runs kept by (0, 1, 2, 3) only, and by (2, 3, 0, 1)
    flat = base.merge_dims(0).merge_dims(1)
    for perm in ((0, 1, 2, 3), (2, 3, 0, 1)):
        stored = buf.reshape(dims).transpose(perm).copy().reshape(-1)
        np.testing.assert_array_equal(permuted_view(flat, dims, perm).gather_numpy(stored), flat.gather_numpy(buf))
    assert permuted_view(flat, dims, (1, 0, 2, 3)) is None


def _two_convs(cx, xa, w1, w2):
    import luminal.nn.functional as F
    x = cx.tensor(xa.shape).set(xa)
    p1, p2 = cx.tensor(w1.shape).set(w1), cx.tensor(w2.shape).set(w2)
    b1 = cx.tensor((w1.shape[0],)).set(np.linspace(-0.3, 0.3, w1.shape[0]).astype(np.float32))
    y = F.conv2d(F.conv2d(x, p1, b1).relu(), p2).relu()
    return (y * y).mean(), [p1, b1, p2]


def _two_conv_arrays():
    rng = np.random.default_rng(3)
    return (rng.standard_normal((4, 1, 12, 12)).astype(np.float32),
            (rng.standard_normal((8, 1, 3, 3)) / 3).astype(np.float32),
            (rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32))


def _two_conv_torch(torch, xa, w1, w2):
    """PyTorch float64's conv -> ReLU -> conv -> ReLU loss of :func:`_two_convs`, backward done: (w1, b1, w2)."""
    tx = torch.from_numpy(xa.astype(np.float64))
    tw1, tw2 = (torch.from_numpy(w.astype(np.float64)).requires_grad_() for w in (w1, w2))
    tb1 = torch.from_numpy(np.linspace(-0.3, 0.3, 8)).requires_grad_()
    ty = torch.nn.functional.conv2d(torch.nn.functional.conv2d(tx, tw1, tb1).relu(), tw2).relu()
    (ty * ty).mean().backward()
    return tw1, tb1, tw2


def test_relu_gradient_between_convolutions_is_the_input_gradients_epilogue(monkeypatch):
    # conv -> ReLU -> conv, trained: the ReLU's gradient (the second convolution's input gradient times the mask)
    # is stored channel-major, the product's order, so it runs as that GEMM's epilogue; the permuting copy the
    # first convolution's weight gradient read it through is then an identity copy, dropped (its GEMM reads the
    # gradient in place) and the bias gradient sums it over H * W as one axis. Against PyTorch float64, and the
    # same graph without the layout passes.
    torch = pytest.importorskip("torch")
    from luminal.codegen.layout_order import _identity_source
    from luminal.training import grad
    xa, w1, w2 = _two_conv_arrays()
    runs = {}
    for layout in ("1", "0"):
        monkeypatch.setenv("LUMINAL_LAYOUT", layout)
        cx = lm.Graph()
        loss, params = _two_convs(cx, xa, w1, w2)
        gs = [g.retrieve() for g in grad(loss, params)]
        cx.compile(device="cpu")
        cx.execute()
        runs[layout] = (cx.runtime, [g.data().copy() for g in gs])
    rt, rt0 = runs["1"][0], runs["0"][0]
    over = lambda r: [k for k in r.program.kernels if isinstance(k, ElementwiseKernel)  # noqa: E731
                      and [str(d) for d in k.dims][:2] in (["4", "8"], ["8", "4"]) and len(k.dims) >= 4]
    masks = lambda r: [k for k in over(r) if not isinstance(k.value, Load)]  # noqa: E731
    # without the pass the first convolution's weight gradient reads the gradient through a permuting copy
    assert [[str(d) for d in k.dims] for k in over(rt0) if isinstance(k.value, Load)] == [["8", "4", "10", "10"]]
    assert not [k for k in over(rt) if isinstance(k.value, Load)]
    # the kernels over the first convolution's output (the forward ReLU, the mask times the input gradient):
    # channel-major with the pass, each its GEMM's epilogue; (N, C, H, W) and passes of their own without
    assert [str(k.dims[0]) for k in masks(rt)] == ["8", "8"] and [str(k.dims[0]) for k in masks(rt0)] == ["4", "4"]
    for r, fused in ((rt, 2), (rt0, 0)):
        ids = {id(k) for k in masks(r)}
        assert sum(1 for g in r.cprogram.groups if len(g) == 2 and isinstance(r.program.kernels[g[0]], GemmKernel)
                   and id(r.program.kernels[g[1]]) in ids) == fused
    assert not any(_identity_source(k, rt.program.buffers) is not None for k in rt.program.kernels)
    tw1, tb1, tw2 = _two_conv_torch(torch, xa, w1, w2)
    for got, got0, want in zip(runs["1"][1], runs["0"][1], (tw1.grad, tb1.grad, tw2.grad)):
        want = want.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        np.testing.assert_allclose(got, got0, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def _two_convs_autocast(xa, w1, w2):
    """:func:`_two_convs` built under ``lm.autocast(bfloat16)``, its gradients compiled for the cpu and run once:
    ``(runtime, [w1, b1, w2 gradients as float64])``."""
    from luminal.training import grad
    cx = lm.Graph()
    with lm.autocast(lm.bfloat16):
        loss, params = _two_convs(cx, xa, w1, w2)
        gs = [g.retrieve() for g in grad(loss, params)]
    cx.compile(device="cpu")
    cx.execute()
    return cx.runtime, [g.data().astype(np.float64) for g in gs]


def test_relu_gradient_under_autocast_is_the_input_gradients_epilogue(monkeypatch):
    # as above under lm.autocast(bfloat16): the input gradient is rounded to bfloat16 before the mask, an inlined
    # cast over the product's space read as (N, C, H, W). Sunk into loads of the product through that view
    # (kernel.sink_view), the mask permutes into the product's order and runs as the GEMM's epilogue, and the
    # first convolution's weight gradient reads it in place (no copy of its own). Against the same graph with
    # the remapping kept (1e-6 of the largest value) and PyTorch float64 (bfloat16 products: 2e-2).
    torch = pytest.importorskip("torch")
    import luminal.codegen.kernel as kernel_mod
    xa, w1, w2 = _two_conv_arrays()
    rt, got = _two_convs_autocast(xa, w1, w2)
    monkeypatch.setattr(kernel_mod, "sink_view", lambda *a: None)
    rt0, got0 = _two_convs_autocast(xa, w1, w2)

    def epilogues(r):  # the mask (8 channels x 4 images, channel-major) as a GEMM's epilogue
        return [g for g in r.cprogram.groups if len(g) == 2 and isinstance(r.program.kernels[g[0]], GemmKernel)
                and [str(d) for d in r.program.kernels[g[1]].dims] == ["8", "4", "10", "10"]]
    assert epilogues(rt) and not epilogues(rt0)
    def passes(r):  # kernels over the first convolution's output that run as passes of their own
        return [[str(d) for d in r.program.kernels[g[0]].dims] for g in r.cprogram.groups if len(g) == 1 and
                isinstance(r.program.kernels[g[0]], ElementwiseKernel) and
                sorted(str(d) for d in r.program.kernels[g[0]].dims) == ["10", "10", "4", "8"]]
    # without: the mask (N, C, H, W) and its copy channel-major for the weight gradient; with: the forward ReLU's
    # pass only (under autocast the bias's rounding sits between the product and it)
    assert len(passes(rt0)) == len(passes(rt)) + 2, (passes(rt), passes(rt0))
    tw1, tb1, tw2 = _two_conv_torch(torch, xa, w1, w2)
    for g, g0, t in zip(got, got0, (tw1, tb1, tw2)):
        want = t.grad.numpy()
        np.testing.assert_allclose(g, g0, rtol=0, atol=1e-6 * np.abs(g0).max())
        np.testing.assert_allclose(g, want, rtol=0, atol=2e-2 * np.abs(want).max())


def test_sink_view_keeps_what_it_cannot_remap():
    from luminal.codegen.kernel import ConstValue, IotaValue, sink_view
    from luminal.dtype import DType
    dims = (2, 3, 4)
    own = ShapeTracker.contiguous_of(dims)
    view = own.permute((1, 0, 2))
    load = Load(7, own, DType.float32)
    sunk = sink_view(load, dims, view, {})
    assert sunk == Load(7, view, DType.float32)
    buf = np.arange(24.0)  # (the sunk load reads, at each reader index, what the remapped producer gives)
    np.testing.assert_array_equal(sunk.view.gather_numpy(buf), view.gather_numpy(own.gather_numpy(buf)))
    assert sink_view(load, dims, own.pad(2, 1, 1), {}) is None  # (a masked slot reads 0, not f(0))
    assert sink_view(Load(7, view, DType.float32), dims, view, {}) is None  # (not the producer's own index)
    assert sink_view(IotaValue(to_expr(0), DType.int32, own), dims, view, {}) is None
    const = ConstValue(2.0, DType.float32, ShapeTracker.fake(dims))
    assert sink_view(const, dims, view, {}) == ConstValue(2.0, DType.float32, ShapeTracker.fake(view.dims))


def test_input_gradient_under_autocast_reads_the_rounded_gradient_in_place(monkeypatch):
    # conv -> ReLU -> conv under autocast: the second convolution's input gradient is a convolution of its upstream
    # gradient, padded by 2, rounded to bfloat16. Rounded before it is padded (the same values: zeros round to
    # zeros), the GEMM reads a padded view of the rounded gradient: no kernel writes a padded (4, 16, 12, 12) copy.
    # Against the same graph rounding after the padding (1e-6 of the largest value) and PyTorch float64 (2e-2).
    torch = pytest.importorskip("torch")
    import luminal.nn.conv_grad as conv_grad
    xa, w1, w2 = _two_conv_arrays()

    def padded(rt):
        return [k for k in rt.program.kernels if isinstance(k, ElementwiseKernel)
                and sorted(str(d) for d in k.dims) == ["12", "12", "16", "4"]]

    rt, got = _two_convs_autocast(xa, w1, w2)
    monkeypatch.setattr(conv_grad, "lower_precision_dtype", lambda *a: None)  # (conv_nd rounds the padded input)
    rt0, got0 = _two_convs_autocast(xa, w1, w2)
    padded, padded0 = padded(rt), padded(rt0)
    assert not padded and len(padded0) == 1, (padded, padded0)
    for g, g0, t in zip(got, got0, _two_conv_torch(torch, xa, w1, w2)):
        want = t.grad.numpy()
        np.testing.assert_allclose(g, g0, rtol=0, atol=1e-6 * np.abs(g0).max())
        np.testing.assert_allclose(g, want, rtol=0, atol=2e-2 * np.abs(want).max())
