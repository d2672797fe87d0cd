"""The compiled CPU backend: differential tests against the reference interpreter, symbolic dims without
recompilation, caching, error reporting, no-compiler fallback, and a sanitizer run of generated kernels.

Oracle: the reference interpreter on the same graph. Tolerance: rtol=atol=1e-5 for float32 (the C code
sums with vectorized reassociation and calls libm), exact for integer results.
"""

import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import luminal as lm
from luminal.runtime.cpu import CompileStats, CPURuntime, find_compiler
from test_compiler_passes import build, program

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")


def _both(make):
    """Run a graph built by ``make(cx) -> [outputs]`` on the reference and the CPU backend."""
    results = []
    for device in ("reference", "cpu"):
        cx = lm.Graph()
        outs = make(cx)
        cx.compile(device=device)
        cx.execute()
        results.append([o.data() for o in outs])
    return results


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(program)
def test_random_graphs_match_reference(prog):
    cx, outs = build(prog)
    cx.execute()
    want = [o.data() for o in outs]
    cx.compile(device="cpu")
    cx.execute()
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.data(), w, rtol=1e-5, atol=1e-5)


def test_symbolic_dims_rerun_without_recompiling():
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 8), name="x")
    w = cx.tensor((8, 5), name="w").set(rng.standard_normal((8, 5)).astype(np.float32))
    y = ((x @ w).softmax(-1) * x.mean(-1, keepdim=True)).sum(1).retrieve()
    x.set(rng.standard_normal((2, 3, 8)).astype(np.float32))
    cx.compile(device="cpu")
    compiled = CompileStats.compilations + CompileStats.cache_hits
    runtime = cx.runtime
    for shape in ((2, 3, 8), (5, 7, 8), (1, 1, 8), (3, 7, 8)):
        data = rng.standard_normal(shape).astype(np.float32)
        x.set(data)
        cx.execute()
        logits = data @ w.data()
        e = np.exp(logits - logits.max(-1, keepdims=True))
        want = (e / e.sum(-1, keepdims=True) * data.mean(-1, keepdims=True)).sum(1)
        np.testing.assert_allclose(y.data(), want, rtol=1e-5, atol=1e-5)
    assert cx.runtime is runtime
    assert CompileStats.compilations + CompileStats.cache_hits == compiled


def test_second_compile_of_the_same_graph_hits_the_cache():
    def make():
        cx = lm.Graph()
        x = cx.tensor((4, 4)).set(np.eye(4, dtype=np.float32))
        out = (x.exp() @ x).retrieve()
        return cx, out

    cx, out = make()
    cx.compile(device="cpu")
    hits, builds = CompileStats.cache_hits, CompileStats.compilations
    cx2, out2 = make()
    cx2.compile(device="cpu")
    # the program and each of its library parts (codegen.library: here the "auto" GEMM) come from the cache
    parts = len(cx2.runtime.cprogram.parts)
    assert parts >= 1 and CompileStats.cache_hits == hits + 1 + parts and CompileStats.compilations == builds
    cx2.execute()
    np.testing.assert_allclose(out2.data(), np.exp(np.eye(4)) @ np.eye(4), rtol=1e-6)


def test_graph_changes_after_compile_trigger_a_rebuild():
    cx = lm.Graph()
    x = cx.tensor(3).set([1.0, 2.0, 3.0])
    a = (x * 2.0).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    b = (a + 1.0).retrieve()  # added after compile
    cx.execute()
    np.testing.assert_array_equal(b.data(), [3.0, 5.0, 7.0])


def test_gemm_layouts_and_batches():
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((3, 5, 7)).astype(np.float32)
    b_np = rng.standard_normal((3, 7, 4)).astype(np.float32)
    w_np = rng.standard_normal((6, 7)).astype(np.float32)

    def make(cx):
        a, b, w = cx.tensor((3, 5, 7)).set(a_np), cx.tensor((3, 7, 4)).set(b_np), cx.tensor((6, 7)).set(w_np)
        return [(a @ b).retrieve(), (a @ w.T).retrieve(), (b.mT @ a.mT).retrieve(), (a[:, 1:4, :] @ w.T).retrieve(),
                (a.permute(1, 0, 2) @ w.T).retrieve(), (a[0] @ a[1].T).retrieve()]

    ref, cpu = _both(make)
    for r, c in zip(ref, cpu):
        np.testing.assert_allclose(c, r, rtol=1e-5, atol=1e-5)


def test_float64_and_int_paths():
    rng = np.random.default_rng(2)
    x64 = rng.standard_normal((4, 6))
    i32 = rng.integers(-50, 50, (4, 6)).astype(np.int32)

    def make(cx):
        a = cx.tensor((4, 6), lm.float64).set(x64)
        i = cx.tensor((4, 6), lm.int32).set(i32)
        return [(a @ a.T).softmax(-1).retrieve(), (i % 7 + i.max(1, keepdim=True)).retrieve(),
                i.sum(0).retrieve(), (i // 3).retrieve(), a.cumsum(1).retrieve()]

    ref, cpu = _both(make)
    for r, c in zip(ref, cpu):
        assert r.dtype == c.dtype
        np.testing.assert_allclose(c, r, rtol=1e-12, atol=1e-12)


def test_runtime_errors_are_python_exceptions():
    cx = lm.Graph()
    table = cx.tensor((4, 2)).set(np.ones((4, 2), np.float32))
    ids = cx.tensor(3, lm.int64).set([0, 1, 7])
    out = table.index_select(0, ids).retrieve()
    cx.compile(device="cpu")
    with pytest.raises(IndexError, match="out of range"):
        cx.execute()
    ids.set([0, 1, 3])
    cx.execute()
    np.testing.assert_array_equal(out.data(), np.ones((3, 2)))
    cx = lm.Graph()
    i = cx.tensor(2, lm.int32).set(np.array([5, 6], np.int32))
    j = cx.tensor(2, lm.int32).set(np.array([2, 0], np.int32))
    (i % j).retrieve()
    cx.compile(device="cpu")
    with pytest.raises(ZeroDivisionError):
        cx.execute()


def test_unbound_symbol_raises_before_running():
    cx = lm.Graph()
    x = cx.tensor(("n",))
    (x * 2.0).retrieve()
    cx.compile(device="cpu")
    with pytest.raises(lm.UnboundSymbolError, match="n"):
        cx.execute()


def test_no_compiler_falls_back_to_reference(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    cx = lm.Graph()
    x = cx.tensor(2).set([1.0, 2.0])
    out = (x * 3.0).retrieve()
    with pytest.warns(UserWarning, match="no C compiler"):
        cx.compile(device="cpu")
    assert cx.runtime is None
    cx.execute()
    np.testing.assert_array_equal(out.data(), [3.0, 6.0])


def test_unknown_device():
    cx = lm.Graph()
    with pytest.raises(ValueError, match="unknown device"):
        cx.compile(device="tpu")


def test_elementwise_chains_fuse_into_one_kernel():
    cx = lm.Graph()
    x = cx.tensor((64, 64)).set(np.ones((64, 64), np.float32))
    out = ((x * 1.5 + 0.5).sigmoid() * x).retrieve()
    cx.compile(device="cpu")
    assert len(cx.runtime.program.kernels) == 1
    src = cx.runtime.source  # (one parallel loop: the two axes merged into one, the sigmoid's where() too)
    assert isinstance(cx.runtime, CPURuntime) and "#pragma omp parallel" in src and "#pragma omp for" in src
    cx.execute()
    want = 1.0 / (1.0 + np.exp(-2.0)) * np.ones((64, 64))
    np.testing.assert_allclose(out.data(), want, rtol=1e-6, atol=1e-6)


def test_tanh_and_gelu_tanh_are_one_kernel_without_temporaries():
    """tanh's clamped input is read three times (x^2 and the numerator) in the same loop: no buffer for it."""
    cx = lm.Graph()
    x = cx.tensor(4096).set(np.linspace(-12, 12, 4096, dtype=np.float32))
    out = x.gelu(approximate="tanh").retrieve()
    cx.compile(device="cpu")
    assert len(cx.runtime.program.kernels) == 1
    assert set(cx.runtime.program.buffers) == {x.id, out.id}
    cx.execute()
    xd = np.linspace(-12, 12, 4096, dtype=np.float32).astype(np.float64)
    want = 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))
    np.testing.assert_allclose(out.data(), want, rtol=1e-6, atol=1e-6)


SANITIZER_SCRIPT = textwrap.dedent("""
    import numpy as np, luminal as lm
    def graphs(cx):
        rng = np.random.default_rng(0)
        x = cx.tensor((5, 7)).set(rng.standard_normal((5, 7)).astype(np.float32))
        ids = cx.tensor((3, 2), lm.int64).set(rng.integers(0, 5, (3, 2)))
        outs = [x.pad([(2, 1), (0, 3)]).pool_last_dim(3, 2, 2).sum(-1),
                x[::-2, 1:6:2].flip(0).exp() @ x[:3, :3],
                x.index_select(0, ids).softmax(-1),
                (x.T.reshape((35,))[3:30].reshape((3, 9)).cumsum(1)),
                x.layer_norm(-1).max(0), lm.where(x > 0, x, x.sum(0).unsqueeze(0) * 0 + 1.0)[:, :5],
                (x @ x.T + x[:, 0:1]).relu(),  # a GEMM epilogue, not split over the threads
                (x.repeat((13, 10))[:64, :64] @ x.repeat((13, 10))[:64, :64].T + 1.0).gelu("tanh")]  # split GEMM
        return [o.retrieve() for o in outs]
    ref = lm.Graph(); ro = graphs(ref); ref.execute()
    cpu = lm.Graph(); co = graphs(cpu); cpu.compile(device="cpu"); cpu.execute()
    for a, b in zip(ro, co):
        np.testing.assert_allclose(b.data(), a.data(), rtol=1e-5, atol=1e-5)
    print("SANITIZED-OK")
""")


def test_generated_kernels_under_address_and_undefined_sanitizers(tmp_path):
    from hl_helpers import run_sanitized
    run_sanitized(SANITIZER_SCRIPT, tmp_path, "SANITIZED-OK", timeout=300)


# ---------------------------------------------------------------------------- row groups and split GEMMs
def _groups(cx):
    from luminal.codegen.groups import kernel_groups
    return kernel_groups(cx.runtime.program)


def test_softmax_and_layer_norm_rows_are_one_group_each():
    """softmax (max, exp-sum, normalize) and layer norm (mean, variance, normalize) over the last axis each
    render as one parallel loop over the rows; values against torch (rtol 1e-5, atol 1e-6)."""
    import torch
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 50, 37)) * 4).astype(np.float32)
    for make, ref in ((lambda t: t.softmax(-1), lambda t: torch.softmax(t, -1)),
                      (lambda t: t.layer_norm(-1), lambda t: torch.nn.functional.layer_norm(t, (37,))),
                      (lambda t: t.log_softmax(-1), lambda t: torch.log_softmax(t, -1))):
        cx = lm.Graph()
        out = make(cx.tensor(x.shape).set(x)).retrieve()
        cx.compile(device="cpu")
        groups = _groups(cx)
        assert len(groups) == 1 and len(groups[0]) == len(cx.runtime.program.kernels) > 1
        cx.execute()
        np.testing.assert_allclose(out.data(), ref(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_row_group_excludes_reads_of_other_rows():
    """A kernel that reads the row maximum of *another* row (through a flip) cannot join the rows' loop (that
    row may not be computed yet on another thread); results match numpy exactly (float64, no transcendental)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 33))
    cx = lm.Graph()
    t = cx.tensor(x.shape, dtype=lm.float64).set(x)
    m = t.max(-1, keepdim=True)
    out = (t - m.flip(0) + m * 2.0).retrieve()
    cx.compile(device="cpu")
    flip_reader = [k for k, kernel in enumerate(cx.runtime.program.kernels) if kernel.out == out.id]
    assert not any(len(g) > 1 and flip_reader[0] in g for g in _groups(cx))
    cx.execute()
    mx = x.max(-1, keepdims=True)
    np.testing.assert_array_equal(out.data(), x - mx[::-1] + mx * 2.0)


@pytest.mark.parametrize("m,k,n", [(200, 300, 150), (37, 500, 401), (515, 64, 33), (1, 4096, 300)])
@pytest.mark.parametrize("transpose", ["none", "a", "b", "both"])
def test_large_gemms_split_over_threads_match_numpy(m, k, n, transpose):
    """GEMMs above LM_SPLIT_MACS are split over the OpenMP threads by columns (N >= M) or rows (M > N), with
    either operand transposed; against float64 numpy, rtol 1e-4 and atol 2e-5 * sqrt(k): float32 sums of k
    unit-variance products have partial sums of size ~sqrt(k) and an accumulation-order error of a few ulp of
    them, which differs between BLAS kernels (k = 4096 on an Intel Xeon's OpenBLAS kernel: 1.8e-4)."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((k, m) if transpose in ("a", "both") else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose in ("b", "both") else (k, n)).astype(np.float32)
    cx = lm.Graph()
    ta, tb = cx.tensor(a.shape).set(a), cx.tensor(b.shape).set(b)
    out = ((ta.T if transpose in ("a", "both") else ta) @ (tb.T if transpose in ("b", "both") else tb)).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    a64 = a.T.astype(np.float64) if transpose in ("a", "both") else a.astype(np.float64)
    b64 = b.T.astype(np.float64) if transpose in ("b", "both") else b.astype(np.float64)
    np.testing.assert_allclose(out.data(), a64 @ b64, rtol=1e-4, atol=2e-5 * np.sqrt(k))


def test_big_gemm_split_over_the_openmp_threads_matches_numpy():
    """A GEMM of 2^30 multiply-adds (split over the OpenMP threads like every GEMM: OpenBLAS's own threads, which
    it used to get, competed with the spinning OpenMP workers) and a small one after it; against float64 numpy,
    rtol 1e-4 atol 1e-3 (float32 sums of 1024 terms of size ~1)."""
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((1024, 1024)).astype(np.float32), rng.standard_normal((1024, 1024)).astype(np.float32)
    cx = lm.Graph()
    x, y = cx.tensor(a.shape).set(a), cx.tensor(b.shape).set(b)
    out = (x @ y.T).retrieve()
    small = (x[:64, :64] @ y[:64, :64]).retrieve()  # a split GEMM after it in the same program
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(out.data(), a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(small.data(), a[:64, :64].astype(np.float64) @ b[:64, :64], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- GEMM epilogues
@pytest.mark.parametrize("batch,seq,k,n", [(2, 60, 48, 300), (3, 200, 64, 40), (1, 8, 16, 24)])
def test_gemm_epilogue_runs_in_the_gemm_group_and_matches_torch(batch, seq, k, n):
    """Linear + bias + GELU(tanh) + a residual-like add: the elementwise kernel after the GEMM is its epilogue
    (one group), for a GEMM split by columns (N >= M), by rows (M > N) and one too small to split; the batch
    dim is symbolic and a second batch size re-runs the same library. Against torch float64, rtol 1e-4 atol
    1e-5 (float32 sums of up to 64 terms and a 6-ulp tanh)."""
    import torch
    rng = np.random.default_rng(batch * 1000 + seq + n)
    w = rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k)
    b = rng.standard_normal(n).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(("B", seq, k))
    tw, tb = cx.tensor((n, k)).set(w), cx.tensor(n).set(b)
    h = x @ tw.T + tb
    out = (h.gelu("tanh") * 0.5 + h).retrieve()
    cx.compile(device="cpu")
    gemm = [i for i, kernel in enumerate(cx.runtime.program.kernels) if type(kernel).__name__ == "GemmKernel"]
    assert len(gemm) == 1 and [gemm[0], gemm[0] + 1] in _groups(cx)
    before = CompileStats.compilations
    for bsz in (batch, batch + 2):
        xd = rng.standard_normal((bsz, seq, k)).astype(np.float32)
        x.set(xd)
        cx.execute()
        ht = torch.from_numpy(xd).double() @ torch.from_numpy(w).double().T + torch.from_numpy(b).double()
        want = torch.nn.functional.gelu(ht, approximate="tanh") * 0.5 + ht
        np.testing.assert_allclose(out.data(), want.numpy(), rtol=1e-4, atol=1e-5)
    assert CompileStats.compilations == before


def test_autocast_linear_bias_rounding_does_not_keep_the_epilogue_apart():
    """Under autocast a Linear rounds its bias to bfloat16 in a kernel the schedule placed between the product
    and the bias add + activation; that kernel now runs before the GEMM, so every layer's epilogue is in the
    GEMM's group (3 Linears: 3 GEMM groups of two, 6 groups in all instead of 9). Values equal the reference
    interpreter's exactly (the same bfloat16 roundings, float32 sums of integers-times-powers-of-two)."""
    from luminal import nn
    rng = np.random.default_rng(9)
    xd = rng.integers(-4, 5, (32, 64)).astype(np.float32) / 4
    outs = {}
    for device in ("reference", "cpu"):
        cx = lm.Graph()
        nn.init.manual_seed(0)
        m = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        x = cx.tensor((32, 64)).set(xd)
        with lm.autocast(dtype=lm.bfloat16):
            y = m(x).cast("float32").retrieve()
        cx.compile(device=device)
        cx.execute()
        outs[device] = np.array(y.data())
    kernels = cx.runtime.program.kernels
    gemms = [i for i, k in enumerate(kernels) if type(k).__name__ == "GemmKernel"]
    groups = _groups(cx)
    assert len(gemms) == 3 and all([i, i + 1] in groups for i in gemms), groups
    assert len(groups) == 6, groups
    np.testing.assert_array_equal(outs["cpu"], outs["reference"])


def test_gemm_successor_reading_other_elements_is_not_an_epilogue():
    """A kernel that reads the product at another element (a flip of its rows) must wait for the whole GEMM:
    it stays a kernel of its own; exact against numpy in float64 (integer-valued data, exact products)."""
    rng = np.random.default_rng(5)
    a, b = rng.integers(-3, 4, (96, 40)).astype(np.float64), rng.integers(-3, 4, (40, 80)).astype(np.float64)
    cx = lm.Graph()
    p = cx.tensor(a.shape, dtype=lm.float64).set(a) @ cx.tensor(b.shape, dtype=lm.float64).set(b)
    out = (p + p.flip(0)).retrieve()
    cx.compile(device="cpu")
    assert all(len(g) == 1 for g in _groups(cx))
    cx.execute()
    np.testing.assert_array_equal(out.data(), a @ b + (a @ b)[::-1])


def test_epilogue_errors_come_back_as_python_exceptions():
    """A gather inside an epilogue (rows of a table added to the product) with an index out of range raises
    IndexError through the split GEMM's threads; in range, the result matches numpy (rtol 1e-5, atol 1e-5)."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32)
    table = rng.standard_normal((10, 96)).astype(np.float32)
    cx = lm.Graph()
    ids = cx.tensor(128, lm.int64)
    out = (cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b) + cx.tensor(table.shape).set(table)
           .index_select(0, ids)).retrieve()
    cx.compile(device="cpu")
    assert any(len(g) == 2 for g in _groups(cx))
    good = rng.integers(0, 10, 128)
    ids.set(good)
    cx.execute()
    np.testing.assert_allclose(out.data(), a.astype(np.float64) @ b + table[good], rtol=1e-5, atol=1e-5)
    bad = good.copy()
    bad[100] = 10
    ids.set(bad)
    with pytest.raises(IndexError):
        cx.execute()


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_data_without_copy_hands_over_the_result(device):
    """data(copy=False) returns the backend's result array itself (no copy); the next execute() writes a new
    array, so the handed-over one keeps its values. Exact against numpy (float64 adds)."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((300, 40)), rng.standard_normal((300, 40))
    cx = lm.Graph()
    x = cx.tensor(a.shape, dtype=lm.float64).set(a)
    out = (x * 2.0 + 1.0).retrieve()
    cx.compile(device=device)
    cx.execute()
    first = out.data(copy=False)
    assert np.shares_memory(first, cx.tensors[(out.id, 0)])
    np.testing.assert_array_equal(first, a * 2.0 + 1.0)
    x.set(b)
    cx.execute()
    np.testing.assert_array_equal(first, a * 2.0 + 1.0)
    second = out.data(copy=False)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(second, b * 2.0 + 1.0)
    copied = out.data()
    assert not np.shares_memory(copied, cx.tensors[(out.id, 0)])


def test_identical_kernels_share_one_compiled_body():
    """Layers that do the same work on different buffers compile one C body each kernel shape (a 4-layer MLP
    renders as many distinct bodies as a 1-layer one); every layer still reads and writes its own buffers."""
    import re

    rng = np.random.default_rng(3)

    def build(layers, device):
        cx = lm.Graph()
        x = cx.tensor(("batch", 32))
        h = x
        ws = []
        for _ in range(layers):
            w = cx.tensor((32, 32)).set(rng.standard_normal((32, 32)).astype(np.float32) * 0.3)
            bias = cx.tensor((32,)).set(rng.standard_normal(32).astype(np.float32))
            ws.append((w, bias))
            h = ((h @ w) + bias).gelu().softmax(-1) * 4.0
        h.retrieve()
        cx.compile(device=device)
        return cx, x, h

    bodies = []
    for layers in (1, 4):
        cx, _, _ = build(layers, "cpu")
        src = cx.runtime.source
        bodies.append(len(re.findall(r"static int kbody_\d+\(", src)))
        assert int(re.search(r"lm_first\[(\d+)\]", src).group(1)) - 1 >= layers  # kernels dispatched
    assert bodies[0] == bodies[1] > 0
    rng = np.random.default_rng(3)
    cpu, x, y = build(4, "cpu")
    rng = np.random.default_rng(3)
    ref, xr, yr = build(4, "reference")
    xs = np.random.default_rng(4).standard_normal((5, 32)).astype(np.float32)
    x.set(xs)
    xr.set(xs)
    cpu.execute()
    ref.execute()
    np.testing.assert_allclose(y.data(), yr.data(), rtol=1e-5, atol=1e-5)


def test_gather_read_through_a_padded_view_is_not_evaluated_out_of_range():
    """Regression: a producer holding a gather, read through a padded / strided view (item assignment
    ``x[0:3, idx, ::2] = v`` spreads the gathered rows over a step-2 axis), was evaluated at the padded slots'
    out-of-range positions, so its index was read outside its buffer and a valid program raised "a Gather index
    is out of range". Against the reference interpreter (exact: only copies and selects)."""
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((4, 5, 6)).astype(np.float32)
    vv = rng.standard_normal((3, 2, 3)).astype(np.float32)
    got = {}
    for device in ("reference", "cpu"):
        cx = lm.Graph()
        x = cx.tensor((4, 5, 6)).set(xv)
        idx = cx.tensor((2,), "int64").set(np.array([1, 3], np.int64))
        x[0:3, idx, ::2] = cx.tensor((3, 2, 3)).set(vv)
        out = x.retrieve()
        cx.compile(device=device)
        cx.execute()
        got[device] = out.data()
    want = xv.copy()
    want[0:3, [1, 3], ::2] = vv
    np.testing.assert_array_equal(got["reference"], want)
    np.testing.assert_array_equal(got["cpu"], want)


def test_large_column_sum_runs_on_the_threads():
    """A sum over the leading axis (a bias gradient) with a large total work is split over the threads: the
    rendered condition compares the whole loop's work (rows x outputs), not one output's, with the threshold;
    the sums equal numpy's float64 ones within float32 accumulation error."""
    import re

    from luminal.codegen.c import PARALLEL_WORK

    rng = np.random.default_rng(3)
    xs = rng.standard_normal((2048, 768)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xs.shape).set(xs)
    y = x.sum(0).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(y.data(), xs.astype(np.float64).sum(0), rtol=0,
                               atol=2048 * 2.0 ** -23 * np.abs(xs).sum(0).max())
    conds = [int(v) for v in re.findall(r"omp parallel if\(\((\d+)\) >= \d+\)", cx.runtime.source)]
    assert conds and max(conds) >= PARALLEL_WORK, conds


@pytest.mark.parametrize("n", [1000, 262144, 2 ** 21])
def test_flat_loops_and_full_reductions_below_and_above_the_thread_threshold(n):
    """Flat elementwise loops and full reductions, on one thread (small) and on all (large): values as numpy,
    and never the combined ``parallel for simd`` construct (GCC 12 does not vectorize its serial fallback when
    the if() clause is false: a 262144-element bfloat16 rounding took 0.37 ms instead of 0.05)."""
    rng = np.random.default_rng(n)
    xs = rng.standard_normal(n).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xs.shape).set(xs)
    y = (x.cast(lm.bfloat16).cast(lm.float32) * 2.0 + 1.0).retrieve()
    s, m = (x * x).sum().retrieve(), x.max().retrieve()
    cx.compile(device="cpu")
    cx.execute()
    import ml_dtypes
    np.testing.assert_array_equal(y.data(), xs.astype(ml_dtypes.bfloat16).astype(np.float32) * 2.0 + 1.0)
    np.testing.assert_allclose(s.data(), (xs.astype(np.float64) ** 2).sum(), rtol=n * 2.0 ** -24)
    assert m.data() == xs.max()
    assert "parallel for simd" not in cx.runtime.source


def test_exp2_over_its_whole_range_and_past_it():
    """The C backend's exp2 (lm_exp2f: a polynomial and two exact power-of-two steps) against float64 numpy
    rounded to float32: within 2 ulp where the result is normal, within one subnormal step where it is
    subnormal (down to 2^-149), exactly 0 below -151, inf above 128, NaN for NaN; inputs far below the range
    (a masked softmax's -inf scores) go through the same vectorized code (they are computed at 0 and then
    replaced, no subnormal intermediate)."""
    rng = np.random.default_rng(21)
    edges = np.array([-np.inf, -1e30, -200.0, -151.5, -151.0, -150.5, -150.0, -149.5, -149.0, -140.0, -127.0,
                      -126.5, -126.0, -125.9, -1.0, -0.0, 0.0, 1e-8, 1.0, 100.0, 127.0, 127.99, 128.0, 128.01,
                      1e30, np.inf, np.nan], np.float32)
    x = np.concatenate([edges, rng.uniform(-160, 130, 20000).astype(np.float32)])
    cx = lm.Graph()
    out = cx.tensor(x.shape).set(x).exp2().retrieve()
    cx.compile(device="cpu")
    cx.execute()
    got = np.asarray(out.data())
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp2(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    fin = ~np.isnan(x)
    g, w = got[fin].astype(np.float64), want[fin].astype(np.float64)
    tiny = np.finfo(np.float32).tiny
    normal = np.abs(w) >= tiny
    assert np.all(g[x[fin] < -151.0] == 0) and np.all(np.isposinf(g[x[fin] > 128.0]))
    np.testing.assert_array_less(np.abs(g - w)[normal & np.isfinite(w)], 2 * np.spacing(w[normal & np.isfinite(w)].astype(np.float32)).astype(np.float64) + 1e-300)
    np.testing.assert_array_less(np.abs(g - w)[~normal], 2.0 ** -149 * 1.01)
