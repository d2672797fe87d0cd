"""The AMX row kernel (``NAME_rows`` in luminal/codegen/gemm_amx.py): many rows of A, a B to convert or pack,
operands not contiguous along K (training's gradient products), against a float64 numpy oracle of the rounded
operands (``test_gemm_lowp._check``: one rounding of the output dtype plus float32 accumulation error) and
against torch's CPU autocast.

Every layout the kernel reads differently gets a case: A read where it is (bfloat16, contiguous along K, rows
and K multiples of 32), A copied row by row, A transposed (32 x 32 register transposes, with and without
edges), A with no unit stride; B rows (16 x 16 pair transposes), B columns (interleaved rows of K), B with no
unit stride; M, N and K edges; float32 A split in three parts; the epilogue on 32-row blocks. On a CPU without
AMX the same products run on luminal's other kernels and must meet the same oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.runtime.cpu import find_compiler
from test_gemm_lowp import _check, _gemms, _rounded, autocast_step, check_float32_accuracy

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler")


def _operand(cx, arr, dtype, layout):
    """A graph tensor holding ``arr`` (2-D, the operand as the product reads it) in ``layout``: ``"rows"``
    (row-major), ``"cols"`` (stored transposed, read through a permute) or ``"strided"`` (every other column
    of a wider matrix: no unit stride in either axis after the permute)."""
    r, c = arr.shape
    if layout == "rows":
        t = cx.tensor((r, c), dtype)
        t.set(arr.astype(np.float32))
        return t
    if layout == "cols":
        t = cx.tensor((c, r), dtype)
        t.set(np.ascontiguousarray(arr.T).astype(np.float32))
        return t.permute((1, 0))
    wide = np.zeros((c, 2 * r), np.float32)
    wide[:, ::2] = arr.T
    t = cx.tensor((c, 2 * r), dtype)
    t.set(wide)
    return t[:, ::2].permute((1, 0))


CASES = [  # (M, K, N, A layout, B layout (of the K x N operand))
    (256, 128, 96, "rows", "cols"),     # A read where it is; B (N x K) rows: pair transposes
    (256, 128, 96, "rows", "rows"),     # B (K x N) row-major: columns of the N x K operand
    (200, 70, 50, "rows", "cols"),      # edges in M, K, N; A copied
    (256, 64, 64, "cols", "rows"),      # A transposed, multiples of 32 (the weight-gradient layout)
    (200, 100, 33, "cols", "rows"),     # A transposed with edges
    (70, 96, 130, "cols", "cols"),      # few rows but a transposed A: still the row kernel
    (192, 64, 40, "strided", "strided"),  # no unit stride anywhere
    (40, 300, 48, "rows", "rows"),      # few rows, B to pack
    # A's bfloat16 copy over LM_AMX_COLS_BYTES (256 KB): B packed whole, the threads split A's rows (the
    # cases above split B's columns, each thread packing its own)
    (544, 288, 70, "rows", "cols"),
    (520, 260, 100, "cols", "rows"),
    # a small C over a long K (weight gradients): K split into chunks of 1024, partials summed in chunk order
    (40, 2100, 40, "rows", "cols"),
    (64, 2048, 48, "cols", "rows"),
]


@pytest.mark.parametrize("m,k,n,a_layout,b_layout", CASES)
def test_bfloat16_operands(m, k, n, a_layout, b_layout):
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n)) * 0.5
    cx = lm.Graph()
    x, w = _operand(cx, a, "bfloat16", a_layout), _operand(cx, b, "bfloat16", b_layout)
    y = (x @ w).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert _gemms(cx) == [("bfloat16", "bfloat16")]
    _check(np.asarray(y.data(), np.float64), _rounded(a, "bfloat16"), _rounded(b, "bfloat16"), "bfloat16")


@pytest.mark.parametrize("m,k,n,a_layout", [(256, 512, 96, "rows"), (224, 200, 70, "cols")])
def test_float32_activations_many_rows(m, k, n, a_layout):
    """float32 A (split in three bfloat16 parts) times a bfloat16 weight through the row kernel: float32
    accuracy, at most twice numpy's float32 matmul error plus a few ulp of the magnitudes, and special values
    as in float64."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    a[0, :] *= 1e-30
    a[1, 3], a[2, 5], a[3, 7], a[4, 1] = 3.4e38 / k, np.inf, -np.inf, np.nan
    w = rng.standard_normal((n, k)) * 0.1
    check_float32_accuracy(_weight_only(a, w, a_layout), a, _rounded(w, "bfloat16"))


def _weight_only(a, w, a_layout="rows"):
    """float32 ``a`` (in ``a_layout``) times a bfloat16 weight ``w`` (N x K, read transposed) on the cpu device,
    as float64."""
    cx = lm.Graph()
    x = _operand(cx, a, "float32", a_layout)
    W = cx.tensor(w.shape, "bfloat16")
    W.set(w.astype(np.float32))
    y = (x @ W.permute((1, 0))).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert _gemms(cx) == [("float32", "bfloat16")]
    return np.asarray(y.data(), np.float64)


@pytest.mark.parametrize("m,k,n", [(256, 96, 130), (130, 64, 48), (2100, 64, 48)])
def test_autocast_linear_and_its_gradients_match_torch(m, k, n):
    """An autocast Linear (bias in the epilogue) and the gradients of its weight and input, the products of a
    training step (transposed operands, float32 buffers read rounded), against torch's CPU autocast within one
    bfloat16 rounding of the outputs."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) * k ** -0.5).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal((m, n)).astype(np.float32)
    _, y, (dx, dw) = autocast_step([a, w, bias], g, lambda x, W, B: x @ W.permute((1, 0)) + B, wrt=(0, 1))
    ta, tw, tb = (torch.from_numpy(v).requires_grad_() for v in (a, w, bias))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty = torch.nn.functional.linear(ta, tw, tb)
    (ty.float() * torch.from_numpy(g)).sum().backward()
    for got, ref in ((y, ty.detach()), (dx, ta.grad), (dw, tw.grad)):
        ref = ref.float().numpy().astype(np.float64)
        got = np.asarray(got.data(), np.float64)
        np.testing.assert_allclose(got, ref, rtol=2 * 2.0 ** -7, atol=2 * 2.0 ** -7 * np.abs(ref).max())


def _bf16_bits(v):
    """torch's rounding of float32 ``v`` to bfloat16 (ties to even), widened back to float32."""
    return torch.from_numpy(np.asarray(v, np.float32)).bfloat16().float().numpy()


@pytest.mark.parametrize("k,n,b_layout", [(64, 96, "rows"), (64, 96, "cols"), (70, 50, "rows"),
                                          (544, 40, "cols"), (544, 40, "rows")])
def test_packs_round_float32_like_torch_bit_for_bit(k, n, b_layout):
    """An autocast product reads a float32 B rounded to bfloat16 while it packs it (vectorized: rows of B
    through pair transposes, columns of B by interleaving two rows of K; the edges one by one). With A the
    identity (exact in bfloat16) every output element is one rounded element of B: ties to even both ways,
    subnormals, values already bfloat16, values near bfloat16's largest, and 0x...8000 patterns must equal
    torch's rounding exactly (a value rounding to inf would make 0 * inf = NaN in its column). K = 544 makes A's copy too big for the column split (the packed-whole path)."""
    rng = np.random.default_rng(k + n)
    b = rng.standard_normal((k, n)).astype(np.float32)
    flat = b.reshape(-1)
    specials = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -(1 + 2.0 ** -8), 1.5, 1e-40, -3e-39, 2.0 ** -130,
                         3.3e38, 3.388e38, -3.388e38, 65504.0, 0.0, 2.0 ** -126 * (1 + 2.0 ** -8)],
                        np.float32)
    flat[rng.choice(flat.size, 6 * specials.size, replace=False)] = np.tile(specials, 6)
    bits = flat.view(np.uint32)
    bits[rng.choice(flat.size, 50, replace=False)] = (bits[:50] & 0xFFFF0000) | 0x8000  # exact ties
    cx = lm.Graph()
    x = cx.tensor((k, k))
    x.set(np.eye(k, dtype=np.float32))
    w = _operand(cx, b.astype(np.float64), "float32", b_layout)
    with lm.autocast(lm.bfloat16):
        y = (x @ w).cast("float32").retrieve()
    cx.compile(device="cpu")
    cx.execute()
    got, want = np.asarray(y.data()), _bf16_bits(b)
    tiny = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny)
    # AMX's tile product treats subnormal bfloat16s as zero (so does torch's autocast matmul through oneDNN on
    # this CPU); other kernels keep them: either is accepted there, nothing else
    assert tiny.sum() >= 12
    np.testing.assert_array_equal(got[~tiny], want[~tiny])
    assert np.all((got[tiny] == 0) | (got[tiny] == want[tiny]))


def _same_bits_with_one_and_two_threads(script, tmp_path, **env_extra):
    """Run ``script`` (which saves its result to ``OUT``) in a fresh process with OMP_NUM_THREADS 1 and 2 (each
    with its own cache folder, plus ``env_extra``); assert the two results are the same bits; return one."""
    import os
    import subprocess
    import sys

    outs = []
    for threads in ("1", "2"):
        path = str(tmp_path / f"out{threads}.npy")
        env = dict(os.environ, OMP_NUM_THREADS=threads, LUMINAL_CACHE_DIR=str(tmp_path / threads), **env_extra)
        proc = subprocess.run([sys.executable, "-c", f"OUT = {path!r}\n" + script], capture_output=True, text=True,
                              env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs.append(np.load(path))
    np.testing.assert_array_equal(outs[0], outs[1])
    return outs[0]


def test_row_kernel_threads_agree(tmp_path):
    """The row kernel splits A's rows, B's columns or K's chunks over the threads; one thread and two give the
    same bits (each output element is summed in the same order whatever the split)."""
    script = r'''
import numpy as np, luminal as lm
rng = np.random.default_rng(0)
ys = []
cx = lm.Graph()
for m, k, n in ((300, 160, 90), (48, 3000, 40)):  # (the second: K split, partials summed in chunk order)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    x, w = cx.tensor((m, k), "bfloat16"), cx.tensor((n, k), "bfloat16")
    ys.append((x @ w.permute((1, 0))).cast("float32").retrieve())
    x.set(a.astype(np.float32)); w.set(np.ascontiguousarray(b.T).astype(np.float32))
cx.compile(device="cpu"); cx.execute()
np.save(OUT, np.concatenate([y.data().reshape(-1) for y in ys]))
'''
    _same_bits_with_one_and_two_threads(script, tmp_path)


@pytest.mark.parametrize("inexact_at", [None, (255, 511), (0, 0)])
def test_float32_activations_that_are_bfloat16_values(inexact_at):
    """A float32 A whose values are all bfloat16 values runs one tile product instead of three (its lower parts
    are zero); a single value that is not (first or last element) brings the three parts back: that element's
    row keeps float32 accuracy."""
    rng = np.random.default_rng(9)
    m, k, n = 256, 512, 64
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).bfloat16().float().numpy()
    if inexact_at is not None:  # that row: one value that is not a bfloat16 value (parts 2 and 3 nonzero)
        a[inexact_at[0]] = 0.0
        a[inexact_at] = np.float32(1.0 + 2.0 ** -9 + 2.0 ** -17)
    w = rng.standard_normal((n, k)) * 0.1
    got = _weight_only(a, w)
    w64 = _rounded(w, "bfloat16")
    ref = a.astype(np.float64) @ w64.T
    scale = np.abs(a.astype(np.float64)) @ np.abs(w64).T
    np.testing.assert_array_less(np.abs(got - ref), (k + 2) * 2.0 ** -24 * scale + 1e-30)
    if inexact_at is not None:  # one part alone would lose (2^-9 + 2^-17) w, far above this tolerance
        r = inexact_at[0]
        exact_row = (a[r].astype(np.float64) @ w64.T)
        np.testing.assert_allclose(got[r], exact_row, rtol=0,
                                   atol=8 * 2.0 ** -24 * scale[r].max())


def test_k_split_chunks_grow_when_the_partials_would_be_too_big(tmp_path):
    """A very long K would need more partial Cs than LM_AMX_KSUM_BYTES allows: the chunks get longer instead (a
    build with the limit at 40 KB makes 8192 K take 5 chunks of 52 blocks, not 8 of 32). Against float64 numpy
    of the rounded operands, and the same bits with one thread and two."""
    from luminal.runtime.build import BASE_FLAGS

    script = r'''
import numpy as np, luminal as lm
rng = np.random.default_rng(5)
a, b = rng.standard_normal((48, 8192)), rng.standard_normal((8192, 40))
cx = lm.Graph()
x, w = cx.tensor((48, 8192), "bfloat16"), cx.tensor((40, 8192), "bfloat16")
y = (x @ w.permute((1, 0))).cast("float32").retrieve()
x.set(a.astype(np.float32)); w.set(np.ascontiguousarray(b.T).astype(np.float32))
cx.compile(device="cpu"); cx.execute()
np.save(OUT, y.data())
'''
    out = _same_bits_with_one_and_two_threads(
        script, tmp_path, LUMINAL_CFLAGS=" ".join(BASE_FLAGS + ["-DLM_AMX_KSUM_BYTES=40000"]))
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((48, 8192)), rng.standard_normal((8192, 40))
    _check(out.astype(np.float64), _rounded(a, "bfloat16"), _rounded(b, "bfloat16"), "bfloat16")


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


@pytest.mark.skipif("avx512_bf16" not in _cpu_flags() or "amx_bf16" in _cpu_flags(),
                    reason="needs a CPU with AVX512-BF16 and without AMX (where the row kernel uses vdpbf16ps)")
def test_row_kernel_runs_on_avx512_bf16_without_amx(tmp_path):
    """Without AMX but with AVX512-BF16 (Zen 4 / Zen 5) the row kernel computes its tile products with vdpbf16ps,
    which, like AMX's tile product, treats subnormal bfloat16 inputs as zero: an autocast product of the identity
    (128 rows: the row kernel, not the few-rows dot kernel) with a B holding subnormals gives 0 there, and every
    other element equals torch's rounding of B; with ``LUMINAL_AMX=0`` (the float32 conversion and OpenBLAS)
    the subnormals come through. Float32 products of exact values: the oracle is bit-exact."""
    import os
    import subprocess
    import sys

    script = r'''
import numpy as np, luminal as lm
rng = np.random.default_rng(3)
b = rng.standard_normal((128, 96)).astype(np.float32)
b.reshape(-1)[rng.choice(b.size, 40, replace=False)] = np.float32(3e-39)
cx = lm.Graph()
x, w = cx.tensor((128, 128)), cx.tensor((128, 96))
x.set(np.eye(128, dtype=np.float32)); w.set(b)
with lm.autocast(lm.bfloat16):
    y = (x @ w).cast("float32").retrieve()
cx.compile(device="cpu"); cx.execute()
np.save(OUT, np.stack([y.data(), b]))
'''
    got = {}
    for amx in ("1", "0"):
        path = str(tmp_path / f"out{amx}.npy")
        env = dict(os.environ, LUMINAL_AMX=amx, LUMINAL_CACHE_DIR=str(tmp_path / amx))
        proc = subprocess.run([sys.executable, "-c", f"OUT = {path!r}\n" + script], capture_output=True, text=True,
                              env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got[amx] = np.load(path)
    b = got["1"][1]
    want = _bf16_bits(b)
    tiny = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny)
    assert tiny.sum() == 40
    np.testing.assert_array_equal(got["1"][0][~tiny], want[~tiny])
    assert np.all(got["1"][0][tiny] == 0)  # vdpbf16ps: subnormal inputs are zero
    np.testing.assert_array_equal(got["0"][0], want)  # float32 products keep them
