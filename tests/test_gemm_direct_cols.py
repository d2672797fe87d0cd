"""The direct convolution's "cols" form (luminal/codegen/gemm_direct_loops.py: vectors along the output channels,
each output position's window element broadcast): forward convolutions whose rows leave the "rows" form's lanes
idle (rows of 14, 20, a stride of 2, dilation), output channels over several register blocks with a partial last
one, grouped convolutions (one GEMM per group), a sum over K longer than one slice, a bias and ReLU epilogue,
float32 and float64, a symbolic batch, and the input gradient (A through its prologue's pack callback), against
torch CPU in float64 (error <= 1e-4 (float32) / 1e-10 (float64) of the largest reference value). Each case checks
that the cols form is the one in the generated C; ``LUMINAL_DIRECT_COLS=0`` takes it out; the layers it must not
take (few output positions: weight-streaming) keep the packed GEMM. No timings are asserted.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn.functional as F
from luminal.codegen.gemm_direct import direct_plan
from luminal.codegen.kernel import GemmKernel
from luminal.training import grad

TOL = {"float32": 1e-4, "float64": 1e-10}
COLS = "direct convolution (see luminal/codegen/gemm_direct.py), cols form"


@pytest.fixture(autouse=True)
def _no_winograd(monkeypatch):
    """These cases are about the cols form: 3x3 stride-1 layers from 16 channels would take Winograd
    (tests/test_winograd.py)."""
    monkeypatch.setenv("LUMINAL_WINOGRAD", "0")


def _close(got, exp, dtype):
    scale = max(float(np.max(np.abs(exp))), 1e-30)
    assert got.shape == exp.shape
    assert np.max(np.abs(got.astype(np.float64) - exp)) <= TOL[dtype] * scale


def _torch(xa, wa, ba, kw, grads=False, relu=False):
    x = torch.from_numpy(xa.astype(np.float64)).requires_grad_()
    w = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    b = None if ba is None else torch.from_numpy(ba.astype(np.float64))
    y = torch.nn.functional.conv2d(x, w, b, **kw)
    if relu:
        y = y.relu()
    if not grads:
        return [y.detach().numpy()]
    (y * y).sum().mul(0.5).backward()
    return [y.detach().numpy(), x.grad.numpy(), w.grad.numpy()]


def _build(dims, wa, ba, dtype, kw, grads=False, relu=False):
    cx = lm.Graph()
    x, w = cx.tensor(dims, dtype), cx.tensor(wa.shape, dtype).set(wa)
    b = None if ba is None else cx.tensor(ba.shape, dtype).set(ba)
    y = F.conv2d(x, w, b, **kw)
    if relu:
        y = y.relu()
    ts = [y] + (grad((y * y).sum() * 0.5, [x, w]) if grads else [])
    for t in ts:
        t.retrieve()
    return cx, x, ts


CASES = [  # (input shape, weight shape, conv kwargs): each takes the cols form in float32 and float64
    ((1, 16, 14, 14), (32, 16, 3, 3), dict(padding=1)),                # rows of 14 (the rows form: 14 of 16 lanes)
    ((2, 8, 28, 28), (48, 8, 3, 3), dict(stride=2, padding=1)),        # stride 2: no phases, positions of 2 images
    ((1, 8, 20, 20), (16, 8, 3, 3), dict(padding=2, dilation=2)),      # dilation, rows of 20
    ((1, 40, 12, 12), (112, 40, 3, 3), dict(padding=1)),               # 112 channels: a partial row block; K 360
    ((1, 32, 14, 14), (64, 16, 3, 3), dict(padding=1, groups=2)),      # grouped: one GEMM per group, its epilogue
    ((2, 32, 14, 14), (64, 16, 3, 3), dict(padding=1, groups=2)),      # ... over two images
    ((1, 6, 10, 22), (32, 6, 3, 2), dict(padding=(0, 1))),              # no mask on the rows; K 36 (a tail)
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", CASES)
def test_cols_form_forward_matches_torch(monkeypatch, xs, ws, kw, dtype):
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(1)
    xa, wa, ba = (rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))
    for relu in (False, True):  # (a bias, and a bias + ReLU epilogue)
        cx, x, ts = _build(xs, wa, ba, dtype, kw, relu=relu)
        x.set(xa)
        cx.compile(device="cpu")
        assert COLS in cx.runtime.source
        cx.execute()
        _close(ts[0].data(), _torch(xa, wa, ba, kw, relu=relu)[0], dtype)


def test_cols_form_with_a_symbolic_batch_and_gradients(monkeypatch):
    """One program over ("batch", C, H, W), forward and both gradients, at batch sizes 3, 1 and 2: the input
    gradient is a convolution of the output gradient with the flipped, transposed weights (A through its pack
    callback), in the cols form too."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(2)
    xs, kw = (16, 14, 14), dict(padding=1)
    wa = rng.standard_normal((32, 16, 3, 3))
    cx, x, ts = _build(("batch",) + xs, wa, None, "float64", kw, grads=True)
    x.set(rng.standard_normal((2,) + xs))
    cx.compile(device="cpu")
    assert cx.runtime.source.count(COLS) >= 2  # the forward and the input gradient
    for n in (3, 1, 2):
        xa = rng.standard_normal((n,) + xs)
        x.set(xa)
        cx.execute()
        for got, exp in zip([t.data() for t in ts], _torch(xa, wa, None, kw, grads=True)):
            _close(got, exp, "float64")


def test_non_finite_inputs_in_the_cols_form(monkeypatch):
    """inf and NaN in the input reach the outputs whose windows hold them, as in torch (the copy's halo is zeros,
    not the input)."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(3)
    xs, ws, kw = (1, 8, 14, 14), (16, 8, 3, 3), dict(padding=1)
    xa, wa = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    xa[0, 2, 0, 5], xa[0, 7, 13, 13] = np.inf, np.nan
    cx, x, ts = _build(xs, wa, None, "float32", kw)
    x.set(xa)
    cx.compile(device="cpu")
    assert COLS in cx.runtime.source
    cx.execute()
    got, exp = ts[0].data(), _torch(xa, wa, None, kw)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(exp))
    fin = np.isfinite(exp)
    assert np.max(np.abs(got[fin] - exp[fin])) <= 1e-4 * np.max(np.abs(exp[fin]))


def _modes(cx):
    prog = cx.runtime.program
    return [p.mode for p in (direct_plan(prog, k) for k in prog.kernels
                             if isinstance(k, GemmKernel) and k.b_pro is not None) if p is not None]


def test_where_the_cols_form_is_not_taken(monkeypatch):
    """Few output positions against many channels (7 x 7 and 4 x 4 images of 256 channels: weight-streaming
    layers) keep the packed GEMM; rows of 32 keep the rows form (every lane in use); output channels that leave
    lanes idle (40 of 48) keep the rows form; a stem's K under 32 (1 input channel x 3x3, rows of 26) keeps the
    rows form; ``LUMINAL_DIRECT_COLS=0`` takes the cols form out. Each still matches torch."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(4)
    cases = [((1, 32, 7, 7), (256, 32, 3, 3), dict(padding=1), None, {}),
             ((1, 16, 4, 4), (256, 16, 3, 3), dict(padding=1), None, {}),
             ((1, 8, 6, 32), (32, 8, 3, 3), dict(padding=1), "rows", {}),
             ((1, 8, 14, 14), (40, 8, 3, 3), dict(padding=1), "rows", {}),
             ((2, 1, 28, 28), (32, 1, 3, 3), {}, "rows", {}),
             ((1, 16, 14, 14), (32, 16, 3, 3), dict(padding=1), "rows", {"LUMINAL_DIRECT_COLS": "0"})]
    for xs, ws, kw, mode, env in cases:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        xa, wa = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        cx, x, ts = _build(xs, wa, None, "float32", kw)
        x.set(xa)
        cx.compile(device="cpu")
        assert COLS not in cx.runtime.source and _modes(cx) == ([mode] if mode else []), (xs, ws, _modes(cx))
        cx.execute()
        _close(ts[0].data(), _torch(xa, wa, None, kw)[0], "float32")
        for k in env:
            monkeypatch.delenv(k)
