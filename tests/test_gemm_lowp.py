"""GEMMs with bfloat16 / float16 operands read as stored (luminal/codegen/gemm_lowp.py) against a float64 numpy
oracle of the same rounded operands.

Each case compiles a graph on the cpu device and checks (1) that the float32 conversion kernel of the stored
operand is gone and the GEMM reads the stored buffer (``operand_stores``), (2) the values: the product of the
operands' exact values in float64, rounded to the output dtype, against luminal's output, within one rounding
of the output dtype plus the float32 accumulation error (``K * 2^-23 * sum |a||b|``). The shapes reach every
branch of ``lm_gemm_lp_*``: matrix-vector with the stored matrix contiguous along K or along the rows, the
dot-product kernel (M <= 64, both operands contiguous along K) with K tails, and the converting fallback to
OpenBLAS (large M, transposed layouts), batched, symbolic M, and an epilogue.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.codegen.gemm_lowp import lowp_source, narrow_operands, operand_stores
from luminal.codegen.kernel import GemmKernel
from luminal.runtime.cpu import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler")

TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -24}  # unit roundoff


def _rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` by torch (the oracle's own rounding), as float64."""
    if dtype == "float32":
        return x.astype(np.float32).astype(np.float64)
    return torch.from_numpy(x.astype(np.float32)).to(TORCH[dtype]).double().numpy()


def _check(out, a64, b64, out_dtype):
    """``out`` against ``a64 @ b64`` (float64) within one rounding to ``out_dtype`` plus float32 accumulation."""
    ref = a64 @ b64
    k = a64.shape[-1]
    bound = np.abs(a64) @ np.abs(b64)
    tol = UNIT[out_dtype] * np.abs(ref) * 1.01 + (k + 2) * 2.0 ** -23 * bound + 1e-30
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= tol), f"max error {err.max():.3g}, worst ratio {(err / tol).max():.3g}"


def _gemms(cx):
    prog = cx.runtime.program
    return [operand_stores(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)]


def _run(a_shape, a_dtype, b_shape, b_dtype, transpose_b=False, seed=0, dims=None, bind=None):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(a_shape)
    b = rng.standard_normal(b_shape[::-1] if transpose_b else b_shape) * 0.5
    cx = lm.Graph()
    x = cx.tensor(dims or a_shape, a_dtype)
    w = cx.tensor(b_shape[::-1] if transpose_b else b_shape, b_dtype)
    y = (x @ (w.permute(tuple(range(len(b_shape) - 2)) + (len(b_shape) - 1, len(b_shape) - 2))
              if transpose_b else w)).retrieve()
    x.set(a.astype(np.float32))
    w.set(b.astype(np.float32))
    cx.compile(device="cpu")
    cx.execute()
    a64, b64 = _rounded(a, a_dtype), _rounded(b, b_dtype)
    if transpose_b:
        b64 = np.swapaxes(b64, -1, -2)
    out_dtype = y.dtype.value
    _check(np.asarray(y.data(), np.float64), a64, b64, out_dtype)
    return cx


@pytest.mark.parametrize("store", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,k,n", [(1, 300, 70), (1, 7, 1000), (5, 1, 3), (32, 256, 96), (7, 129, 50),
                                   (64, 300, 48), (100, 65, 33), (130, 256, 200)])
@pytest.mark.parametrize("transpose_b", [True, False])
def test_stored_both_operands(store, m, k, n, transpose_b):
    """Both operands stored low: every branch of the dispatch (GEMV, dot with K tails, converting fallback) in
    PyTorch's weight layout (``x @ w.T``) and in the (K, N) layout."""
    cx = _run((m, k), store, (k, n), store, transpose_b=transpose_b, seed=m * 1000 + k + n)
    assert _gemms(cx) == ([(store, store)] if k > 1 else [])  # (K = 1: the e-graph removes the unit sum)


@pytest.mark.parametrize("store", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,k,n", [(1, 512, 300), (24, 512, 64), (3, 40, 1), (90, 70, 80)])
def test_stored_weight_float32_activations(store, m, k, n):
    """A float32 activation times a stored weight (type promotion to float32): only the weight is stored low, the
    output is float32."""
    cx = _run((m, k), "float32", (k, n), store, transpose_b=True, seed=k + n)
    assert _gemms(cx) == [("float32", store)]


def test_matrix_times_vector_stored_matrix_first():
    """N == 1 with the stored matrix as the left operand (``W @ v``): the GEMV branch over A's rows."""
    cx = _run((300, 200), "bfloat16", (200, 1), "float32", seed=3)
    assert _gemms(cx) == [("bfloat16", "float32")]


@pytest.mark.parametrize("store", ["bfloat16", "float16"])
def test_batched_and_symbolic(store):
    """Batched operands (a batch offset per GEMM) and a symbolic row count bound at run time."""
    cx = _run((3, 20, 64), store, (3, 64, 50), store, seed=11)
    assert _gemms(cx) == [(store, store)]
    cx = _run((1, 300), store, (300, 128), store, transpose_b=True, dims=("m", 300), seed=12)
    assert _gemms(cx) == [(store, store)]


def test_epilogue_bias_and_rounding():
    """A bfloat16 Linear layer (bias added, output rounded to bfloat16 by the GEMM's epilogue) equals torch's
    bfloat16 linear within one bfloat16 rounding of the float64 result."""
    rng = np.random.default_rng(5)
    a, w, bias = rng.standard_normal((8, 320)), rng.standard_normal((96, 320)) * 0.1, rng.standard_normal(96)
    cx = lm.Graph()
    x, W, B = cx.tensor((8, 320), "bfloat16"), cx.tensor((96, 320), "bfloat16"), cx.tensor((96,), "bfloat16")
    y = (x @ W.permute((1, 0)) + B).retrieve()
    x.set(a.astype(np.float32)); W.set(w.astype(np.float32)); B.set(bias.astype(np.float32))
    cx.compile(device="cpu")
    cx.execute()
    assert _gemms(cx) == [("bfloat16", "bfloat16")]
    ta, tw, tb = (torch.from_numpy(v.astype(np.float32)).bfloat16() for v in (a, w, bias))
    ref = torch.nn.functional.linear(ta, tw, tb).double().numpy()
    got = np.asarray(y.data(), np.float64)
    # two bfloat16 roundings (product, then the sum with the bias) on either side
    np.testing.assert_allclose(got, ref, rtol=2 * 2.0 ** -7, atol=2.0 ** -7)


def test_conversion_kernel_kept_when_read_elsewhere():
    """A converted operand that something other than a GEMM reads (here, an output) keeps its conversion kernel:
    narrowing applies only when every reader is a float32 GEMM."""
    cx = lm.Graph()
    x, w = cx.tensor((4, 64), "bfloat16"), cx.tensor((64, 32), "bfloat16")
    wf = w.cast("float32").retrieve()
    y = (x.cast("float32") @ wf).retrieve()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 64)), rng.standard_normal((64, 32))
    x.set(a.astype(np.float32)); w.set(b.astype(np.float32))
    cx.compile(device="cpu")
    cx.execute()
    assert _gemms(cx) == [("bfloat16", "float32")]
    _check(np.asarray(y.data(), np.float64), _rounded(a, "bfloat16"), _rounded(b, "bfloat16"), "float32")
    np.testing.assert_array_equal(wf.data(), _rounded(b, "bfloat16").astype(np.float32))


def test_narrow_operands_is_identity_without_stored_operands():
    cx = lm.Graph()
    x, w = cx.tensor((4, 8)), cx.tensor((8, 3))
    (x @ w).retrieve()
    from luminal.codegen.kernel import lower
    prog = lower(cx)
    assert narrow_operands(prog) is prog


def test_lowp_source_rejects_bad_types():
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        lowp_source("float32", "float32")
    with pytest.raises(ValueError, match="float32, bfloat16, float16 or bf16r"):
        lowp_source("int8", "bfloat16")


SANITIZER_SCRIPT = r"""
import numpy as np, luminal as lm
rng = np.random.default_rng(0)
cases = [((1, 300), (70, 300), True), ((1, 37), (37, 90), False), ((20, 300), (96, 300), True), ((7, 129), (50, 129), True),
         ((100, 65), (65, 33), False), ((90, 70), (80, 70), True), ((300, 200), (200, 1), False)]
for store in ("bfloat16", "float16"):
    for (a_shape, b_shape, tr) in cases:
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        for dev in ("reference", "cpu"):
            cx = lm.Graph()
            x, w = cx.tensor(a_shape, store), cx.tensor(b_shape, store)
            y = (x @ (w.permute((1, 0)) if tr else w)).cast("float32").retrieve()
            x.set(a.astype(np.float32)); w.set(b.astype(np.float32))
            if dev == "cpu":
                cx.compile(device="cpu")
            cx.execute()
            if dev == "reference":
                ref = y.data()
            else:
                np.testing.assert_allclose(y.data(), ref, rtol=2e-2, atol=1e-2)
for (a_shape, b_shape, tr) in cases:  # autocast: float32 operands read rounded to bfloat16
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    outs = []
    for dev in ("reference", "cpu"):
        cx = lm.Graph()
        x, w = cx.tensor(a_shape).set(a), cx.tensor(b_shape).set(b)
        with lm.autocast(lm.bfloat16):
            y = (x @ (w.permute((1, 0)) if tr else w)).cast("float32").retrieve()
        if dev == "cpu":
            cx.compile(device="cpu")
        cx.execute()
        outs.append(y.data())
    np.testing.assert_allclose(outs[1], outs[0], rtol=2e-2, atol=1e-2)
print("SANITIZED-OK")
"""


def test_lowp_gemms_under_address_and_undefined_sanitizers(tmp_path):
    """Every branch of the dispatch in a build with AddressSanitizer and UBSan (exact-size scratch buffers), its
    results against the reference interpreter."""
    from hl_helpers import run_sanitized
    run_sanitized(SANITIZER_SCRIPT, tmp_path, "SANITIZED-OK", extra_cflags="-DLM_OWN_GEMM_EXACT_BUFFERS")


def test_lowp_gemms_built_for_avx2(tmp_path):
    """The AVX2 / F16C conversion branches (32-byte vectors), built without -march=native, against the reference
    interpreter (this machine may have AVX-512, so the program is rendered for 32-byte vectors explicitly)."""
    import os
    import subprocess
    import sys

    script = r'''
import numpy as np, luminal as lm
import luminal.codegen.gemm_config as gc, luminal.codegen.gemm_lowp as gl, luminal.codegen.gemm_small as gs
import luminal.codegen.gemm as gm
for mod in (gc, gl, gs, gm):
    if hasattr(mod, "vector_bytes"):
        mod.vector_bytes = lambda: 32
rng = np.random.default_rng(0)
for store in ("bfloat16", "float16"):
    for a_shape, b_shape, tr in [((1, 300), (70, 300), True), ((1, 37), (37, 90), False),
                                 ((20, 300), (96, 300), True), ((100, 65), (65, 33), False)]:
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        outs = []
        for dev in ("reference", "cpu"):
            cx = lm.Graph(); x, w = cx.tensor(a_shape, store), cx.tensor(b_shape, store)
            y = (x @ (w.permute((1, 0)) if tr else w)).cast("float32").retrieve()
            x.set(a.astype(np.float32)); w.set(b.astype(np.float32))
            if dev == "cpu":
                cx.compile(device="cpu")
            cx.execute(); outs.append(y.data())
        np.testing.assert_allclose(outs[1], outs[0], rtol=2e-2, atol=1e-2)
print("AVX2-OK")
'''
    probe = subprocess.run([find_compiler(), "-mavx2", "-mfma", "-mf16c", "-x", "c", "-", "-fsyntax-only"],
                           input="int main(void){return 0;}", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the C compiler cannot target AVX2")
    env = dict(os.environ, LUMINAL_CACHE_DIR=str(tmp_path), LUMINAL_CFLAGS="-O2 -mavx2 -mfma -mf16c")
    env.pop("LUMINAL_DEVICE", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and "AVX2-OK" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("m,k,n", [(64, 512, 128), (200, 1000, 70)])
def test_float32_activations_keep_float32_accuracy(m, k, n):
    """A float32 activation times a bfloat16 weight at the accuracy of a float32 GEMM (on AMX machines the
    activation is split into three bfloat16 parts that sum to it exactly): the error against the float64 product
    is at most that of numpy's float32 matmul of the same operands (times 2, plus a few ulp of the magnitudes), and
    special values (inf, NaN, values beyond bfloat16's range) behave as in float64."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    a[0, :] *= 1e-30  # tiny values stay accurate
    a[1, 3] = 3.4e38 / k  # near bfloat16's largest value: rounding up would overflow
    a[2, 5], a[3, 7], a[4, 1] = np.inf, -np.inf, np.nan
    w = rng.standard_normal((n, k)) * 0.1
    cx = lm.Graph()
    x, W = cx.tensor((m, k)), cx.tensor((n, k), "bfloat16")
    y = (x @ W.permute((1, 0))).retrieve()
    x.set(a); W.set(w.astype(np.float32))
    cx.compile(device="cpu")
    cx.execute()
    assert _gemms(cx) == [("float32", "bfloat16")]
    check_float32_accuracy(np.asarray(y.data(), np.float64), a, _rounded(w, "bfloat16"))


def check_float32_accuracy(got, a, w64):
    """``got`` (float64 copy of ``a @ w64.T``, ``a`` float32 with special values, ``w64`` bfloat16 values) at
    float32 accuracy: within twice numpy's float32 matmul error plus a few ulp of the magnitudes, row 0 (tiny
    values) within 8 ulp, and inf / NaN where float64 has them."""
    with np.errstate(invalid="ignore", over="ignore"):
        ref = a.astype(np.float64) @ w64.T
        np32 = (a @ w64.astype(np.float32).T).astype(np.float64)
    special = ~np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[special & ~np.isnan(ref)], ref[special & ~np.isnan(ref)])
    fin = ~special
    scale = np.abs(a.astype(np.float64)) @ np.abs(w64).T
    with np.errstate(invalid="ignore"):
        err, err32 = np.abs(got - ref)[fin], np.abs(np32 - ref)[fin]
    assert np.all(err <= 2 * err32.max() + 4 * 2.0 ** -24 * scale[fin]), (err.max(), err32.max())
    row0 = np.abs(got[0] - ref[0]) <= 8 * 2.0 ** -24 * scale[0] + 1e-45
    assert row0.all()


def test_autocast_operands_are_read_as_bfloat16():
    """Under ``lm.autocast(bfloat16)`` a GEMM operand that is only rounded for the GEMM is not copied: an input
    is read rounded (``bf16r``), and a computed operand (a layer norm, rounded last) is stored as bfloat16. The
    values equal torch's CPU autocast within one bfloat16 rounding of the output."""
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((48, 64)).astype(np.float32), (rng.standard_normal((40, 64)) * 0.2).astype(np.float32)
    cx = lm.Graph()
    x, W = cx.tensor(a.shape).set(a), cx.tensor(w.shape).set(w)
    with lm.autocast(lm.bfloat16):
        y1 = (x @ W.permute((1, 0))).retrieve()
        y2 = (x.layer_norm(-1) @ W.permute((1, 0))).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    stores = sorted(_gemms(cx))
    assert stores == [("bf16r", "bf16r"), ("bfloat16", "bf16r")], stores
    ta, tw = torch.from_numpy(a), torch.from_numpy(w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r1 = torch.nn.functional.linear(ta, tw).float().numpy()
        r2 = torch.nn.functional.linear(torch.nn.functional.layer_norm(ta, (64,)), tw).float().numpy()
    for got, ref in ((y1, r1), (y2, r2)):
        np.testing.assert_allclose(np.asarray(got.data(), np.float32), ref, rtol=2 ** -7, atol=2 ** -7 * np.abs(ref).max())


def test_no_prologue_fusion_into_a_gemm_with_a_stored_operand(monkeypatch):
    """A float32 operand that prologue fusion could compute while packing stays materialized when the GEMM's
    other operand is stored as bfloat16 (that GEMM runs lm_gemm_lp_*, which has no packing hook), even with
    ``LUMINAL_PROLOGUE=fused``; the product equals the float64 oracle."""
    from luminal.codegen.gemm_prologue import prologue_candidates

    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((64, 96)), rng.standard_normal((96, 80))
    cx = lm.Graph()
    x, w = cx.tensor((64, 96)), cx.tensor((96, 80), "bfloat16")
    y = ((x * 2.0 + 1.0) @ w).retrieve()  # the left operand is an elementwise kernel read only by the GEMM
    x.set(a.astype(np.float32)); w.set(b.astype(np.float32))
    cx.compile(device="cpu")
    cx.execute()
    prog = cx.runtime.program
    assert _gemms(cx) == [("float32", "bfloat16")] and not prologue_candidates(prog)
    a64 = 2.0 * a.astype(np.float32).astype(np.float64) + 1.0
    _check(np.asarray(y.data(), np.float64), a64, _rounded(b, "bfloat16"), "float32")


def autocast_step(arrays, g, forward, wrt):
    """``y = forward(*tensors)`` built under bfloat16 autocast over float32 inputs holding ``arrays``, with the
    loss ``sum(float32(y) * g)`` and its gradients with respect to the inputs at the indices ``wrt`` (the products
    of a training step), compiled for the cpu and run once. Returns ``(graph, y, gradients)``."""
    from luminal.training import grad

    cx = lm.Graph()
    ts = [cx.tensor(v.shape).set(v) for v in arrays]
    G = cx.tensor(g.shape).set(g)
    with lm.autocast(lm.bfloat16):
        y = forward(*ts)
        grads = grad((y.cast("float32") * G).sum(), [ts[i] for i in wrt])
    for t in (y, *grads):
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    return cx, y, grads


def test_autocast_conv_stores_its_im2col_as_bfloat16(monkeypatch):
    """Under autocast a convolution's im2col matrix copies the rounded activation: every value is a bfloat16
    value, so the copy is stored as bfloat16 (half the bytes) and the forward and weight-gradient GEMMs read it
    as bfloat16 (the AMX kernels where the CPU has them); the transposed output gradient likewise. Results
    against torch's CPU autocast (forward within two bfloat16 roundings, gradients within 2 ulp of bfloat16
    plus 1 % of the largest). (Where the direct convolution reads the window in place, the operands stay as they
    are: tests/test_gemm_direct.py::test_autocast_convolution_takes_the_direct_kernel; switched off here.)"""
    import torch.nn.functional as TF
    monkeypatch.setenv("LUMINAL_DIRECT_CONV", "0")
    import luminal.nn.functional as F
    from luminal.codegen.kernel import Compute, Load

    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8, 14, 14)).astype(np.float32)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    g = rng.standard_normal((4, 16, 12, 12)).astype(np.float32)
    cx, y, (dw, dx) = autocast_step([x, w], g, lambda X, W: F.conv2d(X.relu(), W), wrt=(1, 0))
    prog = cx.runtime.program
    stores = _gemms(cx)
    assert stores and all(s is not None and "float32" not in s for s in stores), stores
    narrowed = [k for k in prog.kernels if not isinstance(k, GemmKernel) and prog.buffers[k.out][1] == lm.bfloat16
                and isinstance(getattr(k, "value", None), Compute) and isinstance(k.value.args[0], Load)]
    assert len(narrowed) >= 2  # the im2col matrix and the output gradient read by the data/weight GEMMs
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty = TF.conv2d(tx.relu(), tw)
    (ty.float() * torch.from_numpy(g)).sum().backward()
    ref = ty.detach().float().numpy()
    np.testing.assert_allclose(np.asarray(y.data()).astype(np.float32), ref, rtol=2 * 2.0 ** -7,
                               atol=2 * 2.0 ** -7 * np.abs(ref).max())
    for got, want in ((dw, tw.grad.numpy()), (dx, tx.grad.numpy())):
        np.testing.assert_allclose(np.asarray(got.data()), want, rtol=2 * 2.0 ** -7,
                                   atol=1e-2 * np.abs(want).max())


@pytest.mark.parametrize("loss_kind", ["cross_entropy", "mean"])
def test_autocast_training_step_reads_every_gemm_operand_as_bfloat16(loss_kind):
    """Under autocast, the gradient of a product's output is a bfloat16 value, also where the bias gradient sums it
    too (its readers widen it) or where it is a constant (a mean's 1 / N, a power of two): every GEMM of the step
    reads bfloat16 operands (a float32 one is split into three bfloat16 parts: three times the work). The
    gradients equal torch's CPU autocast within a few bfloat16 roundings."""
    import luminal.nn as nn
    import luminal.nn.functional as F
    from luminal.training import grad

    torch.manual_seed(3)
    tm = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                             torch.nn.Linear(32, 8))
    m = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    m.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(7)
    xv, yv = rng.standard_normal((16, 20)).astype(np.float32), rng.integers(0, 8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t_out = tm(torch.from_numpy(xv))
        t_loss = torch.nn.functional.cross_entropy(t_out, torch.from_numpy(yv)) if loss_kind == "cross_entropy" \
            else t_out.float().mean()
    t_loss.backward()

    cx = lm.Graph()
    x, y = cx.tensor(xv.shape).set(xv), cx.tensor(yv.shape, "int64").set(yv)
    with lm.autocast(lm.bfloat16):
        out = m(x)
        loss = F.cross_entropy(out, y) if loss_kind == "cross_entropy" else out.cast("float32").mean()
    params = list(m.parameters())
    grads = [g.retrieve() for g in grad(loss, params)]
    cx.compile(device="cpu")
    cx.execute()
    stores = _gemms(cx)
    assert len(stores) >= 7 and all(s is not None and "float32" not in s for s in stores), stores
    for g, tp in zip(grads, tm.parameters()):
        want = tp.grad.numpy()
        np.testing.assert_allclose(np.asarray(g.data()), want, rtol=4 * 2.0 ** -7, atol=1e-2 * np.abs(want).max())
