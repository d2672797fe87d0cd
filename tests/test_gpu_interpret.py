"""The GPU backend's Triton kernels, executed on the CPU by Triton's interpreter (``device="gpu-interpret"``).

Oracle: the reference interpreter on the same graph (built twice, with the same data). Every test builds the
graph, compiles it for both devices and compares every retrieved tensor after every execute.

The fixed sample (about 40 s on 2 cores): elementwise chains with special values (NaN, +-inf, +-0, huge
values), every primitive (log2 / exp2 / sin / sqrt / recip, add / mul / mod / less-than in float, int and
bool, casts incl. float->int truncation and ->bool, float16, iota, constants, gathers), views (broadcast, permute, pad,
slice, flip, strided and overlapping windows), sum / max reductions over every axis incl. symbolic extents and
empty axes, softmax, layer norm, matmuls (batched, transposed, broadcast, sliced, float64, symbolic sizes),
gathers / embeddings and their error reporting, an MLP forward and SGD training steps (autograd; weights
carried between executes), with symbolic dims rebound between executes.

Tolerances: exact for bool / int results; float32 rtol = atol = 1e-5 for single ops and 1e-4 for chains,
matmuls and training (sums are blocked in another order than numpy's pairwise sums; transcendentals in
the interpreter are numpy's, on a GPU they may differ by a few ulp); float64 and float16
results at the tolerances their tests state.

``LUMINAL_GPU_INTERPRET_FULL=1`` adds a larger sweep (the random elementwise programs of the CPU backend's
differential test, every unary / binary high-level op on special values, more reduction / matmul shapes).
triton is in the test extra, so a missing triton fails these tests; ``LUMINAL_SKIP_TRITON=1`` skips them (with
the reason) on a machine set up without it. Tests marked
``gpu`` need a real CUDA device (``pytest -m gpu``).
"""

import contextlib
import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import luminal as lm

REQUIRE = os.environ.get("LUMINAL_SKIP_TRITON", "0") != "1"
FULL = os.environ.get("LUMINAL_GPU_INTERPRET_FULL", "0") == "1"
HAVE_TRITON = importlib.util.find_spec("triton") is not None and importlib.util.find_spec("torch") is not None

if not HAVE_TRITON and not REQUIRE:
    pytestmark = pytest.mark.skip(reason="triton (and torch) are not installed: pip install triton torch "
                                         "(LUMINAL_SKIP_TRITON=1 is set; without it this is a failure)")

DEV = os.environ.get("LUMINAL_GPU_TEST_DEVICE", "gpu-interpret")  # "cuda": the same tests on a real GPU
F32 = dict(rtol=1e-5, atol=1e-5)
CHAIN = dict(rtol=1e-4, atol=1e-4)


def _require():
    if not HAVE_TRITON:
        pytest.fail("triton/torch are not installed (both are in the test extra): pip install -e '.[test]', or set "
                    "LUMINAL_SKIP_TRITON=1 to skip these tests")


def run_graph(make, feeds, device):
    """``(outputs of each execute, runtime)`` of the graph ``make(cx) -> (inputs, outputs)`` compiled for
    ``device``, run once per tuple of arrays in ``feeds``."""
    cx = lm.Graph()
    inputs, outs = make(cx)
    for o in outs:
        o.retrieve()
    for t, a in zip(inputs, feeds[0]):
        t.set(a)
    cx.compile(device=device)
    got = []
    for feed in feeds:
        for t, a in zip(inputs, feed):
            t.set(a)
        cx.execute()
        got.append([np.array(o.data()) for o in outs])
    return got, cx.runtime


def compare(make, feeds, rtol=1e-5, atol=1e-5):
    """``make(cx) -> (inputs, outputs)``; ``feeds``: one tuple of arrays per execute (set on ``inputs``).
    Runs the graph on the reference and on ``gpu-interpret``; asserts every output matches after every run
    (same shape and dtype; exact for bool/int). Returns the gpu-interpret runtime."""
    _require()
    results = {}
    for device in ("reference", DEV):
        results[device], runtime = run_graph(make, feeds, device)
    assert type(runtime).__name__ == "GPURuntime"
    for step, (want, have) in enumerate(zip(results["reference"], results[DEV])):
        for k, (w, h) in enumerate(zip(want, have)):
            assert h.shape == w.shape, (step, k, h.shape, w.shape)
            assert h.dtype == w.dtype, (step, k, h.dtype, w.dtype)
            if w.dtype.kind in "biu":
                np.testing.assert_array_equal(h, w, err_msg=f"run {step}, output {k}")
            else:
                np.testing.assert_allclose(h, w, rtol=rtol, atol=atol, equal_nan=True,
                                           err_msg=f"run {step}, output {k}")
    return runtime


def _mlp_training_step(make_optimizer):
    """A graph training a 5-8-3 tanh MLP (seeded weights) on one fixed batch with ``make_optimizer(parameters)``:
    ``(graph, model, x, x's array)``."""
    from luminal import nn

    X, Y = rand((8, 5), 4), rand((8, 3), 5)
    cx = lm.Graph()
    nn.init.manual_seed(1)
    m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = cx.tensor((8, 5)).set(X), cx.tensor((8, 3)).set(Y)
    make_optimizer(m.parameters()).minimize(((m(x) - y) ** 2).mean())
    return cx, m, x, X


def rand(shape, seed=0, dtype=np.float32, low=-3, high=3):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(low, high, size=shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, 0.5, -0.5, 2.5, -7.25, 3.0, 1.0, -1.0,
                    100.0], np.float32)


# ---------------------------------------------------------------------------- elementwise
def test_unary_primitives_on_special_values():
    def make(cx):
        x = cx.tensor((16,))
        return [x], [x.exp(), x.log(), x.sqrt(), x.sin(), x.recip(), x.abs(), -x, x.relu(), x.sigmoid(), x.tanh(),
                     x.cos(), x.square()]

    compare(make, [(SPECIAL,)], **F32)


def test_binary_primitives_float_int_bool():
    a, b = rand((4, 6), 1), rand((4, 6), 2)
    b[0, :3] = 0.0
    ia, ib = rand((4, 6), 3, np.int32, -20, 20), rand((4, 6), 4, np.int32, -6, 6)
    ib[ib == 0] = 3
    ba, bb = rand((4, 6), 5, np.bool_), rand((4, 6), 6, np.bool_)

    def make(cx):
        x, y = cx.tensor((4, 6)), cx.tensor((4, 6))
        i, j = cx.tensor((4, 6), lm.int32), cx.tensor((4, 6), lm.int32)
        p, q = cx.tensor((4, 6), lm.bool_), cx.tensor((4, 6), lm.bool_)
        return [x, y, i, j, p, q], [x + y, x * y, x - y, x / (y.abs() + 1), x % y, x < y, x.maximum(y),
                                    i + j, i * j, i % j, i < j, i // j, i.max(1), p & q, p | q, p < q, ~p,
                                    x.where(p, y), (x > 0).logical_xor(q)]

    compare(make, [(a, b, ia, ib, ba, bb)], **F32)


def test_narrow_ints_wrap_and_bitwise():
    """int8/uint8/int16/uint32 arithmetic wrapping at the edges, the Bitwise primitive (and/or/xor/not, shifts by
    in- and out-of-range amounts), modulo incl. INT_MIN % -1, narrow sums (int64) and max, casts between ints."""
    e8 = np.array([0, 1, -1, 127, -128, 5, -7, 64, 100, -100, 3, 2], np.int8)
    s8 = np.array([1, 7, -1, 1, -1, 2, 3, 8, 9, -3, 0, 6], np.int8)
    u8 = np.array([0, 1, 255, 128, 254, 7, 200, 60, 3, 99, 16, 2], np.uint8)
    u32 = np.array([0, 1, 2 ** 32 - 1, 2 ** 31, 5, 7, 40, 31, 32, 33, 3, 2], np.uint32)

    def make(cx):
        a, b = cx.tensor((12,), lm.int8), cx.tensor((12,), lm.int8)
        u, w = cx.tensor((12,), lm.uint8), cx.tensor((12,), lm.uint32)
        nz = b.where(b != 0, 1)
        return [a, b, u, w], [a + b, a * b, a - b, -a, a < b, a % nz, a // nz, a & b, a | b, a ^ b, ~a, a << b,
                              a >> b, u + u, u * 3, ~u, u << 7, u >> (u % 9), u + a, a.sum(), u.max(), u.min(),
                              w * w, w >> w, w << w, w & 0xF0F0F0F0, a.cast(lm.uint8), u.cast(lm.int8),
                              w.cast(lm.int16), (a.cast(lm.int16) << 9) >> 3]

    compare(make, [(e8, s8, u8, u32)])


def test_modulo_signs_float_and_int64():
    xs = np.array([-7.5, 7.5, -7.5, 7.5, 0.0, -3.0, 3.0, np.inf, 5.0], np.float32)
    ys = np.array([2.0, -2.0, -2.0, 2.0, 3.0, 3.0, -3.0, 2.0, np.inf], np.float32)
    i = np.array([-7, 7, -7, 7, 0, -6, 6, 9, -9], np.int64)
    j = np.array([2, -2, -2, 2, 3, 3, -3, 4, 4], np.int64)

    def make(cx):
        x, y = cx.tensor((9,)), cx.tensor((9,))
        a, b = cx.tensor((9,), lm.int64), cx.tensor((9,), lm.int64)
        return [x, y, a, b], [x % y, a % b, a // b, x.fmod(y)]

    compare(make, [(xs, ys, i, j)], **F32)


def test_casts_truncate_and_bool():
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 1e5, -3.0, 9.99], np.float32)

    def make(cx):
        t = cx.tensor((8,))
        i = t.cast(lm.int32)
        return [t], [i, t.cast(lm.int64), t.cast(lm.bool_), i.cast(lm.float32), t.cast(lm.bool_).cast(lm.float32),
                     t.cast(lm.float64), t.cast(lm.float16), t.floor(), t.round()]

    compare(make, [(x,)], **F32)


def test_iota_constants_and_arange():
    def make(cx):
        x = cx.tensor(("n", 3))
        ar = cx.arange(12).reshape((4, 3)).cast(lm.float32)
        return [x], [x + x.graph.arange(3).cast(lm.float32), ar * 2.0, x * float("inf") * 0 + 1.0,
                     (x + 1).cumsum(0), cx.arange(5, dtype=lm.int64) * 3]

    compare(make, [(rand((2, 3)),), (rand((5, 3), 1),)], **F32)


def test_elementwise_chain_with_symbolic_dims_rebound():
    def make(cx):
        x, y = cx.tensor(("a", "b")), cx.tensor(("b",))
        z = ((x * 1.5 + y).exp2() - (x.abs() + 1e-3).log2()).sin() * (x - y).sqrt().where(x > y, x * 0 + 0.25)
        return [x, y], [z, (z * z + 1).recip()]

    feeds = [(rand((3, 5), 1), rand((5,), 2)), (rand((7, 2), 3), rand((2,), 4)), (rand((1, 1), 5), rand((1,), 6))]
    compare(make, feeds, **CHAIN)


def test_float16_elementwise_and_reductions():
    """float16: transcendentals are computed in float32 and rounded once, sums accumulate in float32."""
    x = (rand((6, 40), 8) * 2).astype(np.float16)

    def make(cx):
        t = cx.tensor((6, 40), lm.float16)
        return [t], [t.exp(), t * t + 1, t.sqrt(), t.sum(1), t.max(0), t.softmax(-1), t % 0.75]

    compare(make, [(x,)], rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------- views
def test_views_broadcast_permute_pad_slice_flip():
    def make(cx):
        x = cx.tensor((3, 4, 5))
        row = cx.tensor((5,))
        return [x, row], [x + row, x.permute(2, 0, 1) * 2, x.pad(((1, 0), (0, 2), (1, 1))) + 1.0,
                          x[:, 1:3, ::2].exp(), x.flip(1) - x, x.transpose(0, 2).contiguous().sum(0),
                          x.reshape((12, 5))[3:9] * row, x.unfold(2, 3, 1).sum(-1)]

    compare(make, [(rand((3, 4, 5)), rand((5,), 1))], **F32)


def test_concat_repeat_roll_tril_and_where_branches():
    def make(cx):
        x, y = cx.tensor((3, 4)), cx.tensor((2, 4))
        return [x, y], [x.concat(y, 0), x.repeat((2, 1)), x.roll(1, 1), x.tril(),
                        (x > 0).where(x, -x * 2)]

    compare(make, [(rand((3, 4)), rand((2, 4), 1))], **F32)


# ---------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_sum_max_mean_over_each_axis(axis):
    x = rand((4, 37, 6), axis)
    x[1, 2, 3] = np.nan

    def make(cx):
        t = cx.tensor((4, 37, 6))
        return [t], [t.sum(axis), t.max(axis), t.mean(axis), t.min(axis), (t * 2).exp().sum(axis)]

    compare(make, [(x,)], **CHAIN)


def test_reductions_symbolic_extent_long_rows_ints_and_empty():
    def make(cx):
        t = cx.tensor(("r", "k"))
        i = cx.tensor(("k",), lm.int64)
        return [t, i], [t.sum(1), t.max(1), t.sum(0), i.sum(0), i.max(0), t.argmax(1)]

    feeds = [(rand((3, 300)), rand((300,), 1, np.int64, -50, 50)),
             (rand((5, 2000), 2), rand((2000,), 3, np.int64, -50, 50)),
             (rand((2, 1), 4), rand((1,), 5, np.int64))]
    compare(make, feeds, **CHAIN)
    empty = np.zeros((3, 0), np.float32)

    def make_empty(cx):
        t = cx.tensor((3, 0))
        return [t], [t.sum(1), t.max(1)]

    compare(make_empty, [(empty,)])


def test_long_reductions_with_few_outputs_run_in_two_stages():
    """A sum / max / mean over 50000 elements with at most 3 outputs (a loss, a gradient norm, batch statistics)
    is split by the e-graph's split-* rules (the "gpu" cost model: one program per few rows would loop over the
    whole row): the first stage's many partial results, then a short second stage, as two reduce launches; a
    reduction with many outputs keeps one. Values: the reference's (sums reordered: float tolerance)."""
    def make(cx):
        t, u, w = cx.tensor((3, 50000)), cx.tensor((60000,)), cx.tensor((50000, 4))
        return [t, u, w], [t.sum(1), t.max(1), u.mean(), (w * w).sum(0), w.sum(1)]

    x, u, w = rand((3, 50000), 1), rand((60000,), 3), rand((50000, 4), 2)
    x[1, 777] = np.nan
    runtime = compare(make, [(x, u, w)], rtol=1e-4, atol=1e-3)
    from luminal import ops
    reductions = [n for n in runtime.graph.nodes.values() if isinstance(n.op, (ops.SumReduce, ops.MaxReduce))]
    # five reductions built; all but w.sum(1) (50000 outputs) get a first stage
    assert len(reductions) == 9, [(type(n.op).__name__, [str(d) for d in n.dims]) for n in reductions]
    assert sum(launch.kind == "reduce" for launch in runtime.tprogram.launches) == 9


def test_softmax_and_layer_norm_rebound():
    def make(cx):
        x = cx.tensor(("b", 24))
        w, b = cx.tensor((24,)), cx.tensor((24,))
        return [x, w, b], [x.softmax(-1), x.log_softmax(-1), x.layer_norm(-1) * w + b, x.softmax(0)]

    feeds = [(rand((5, 24)) * 4, rand((24,), 1), rand((24,), 2)), (rand((9, 24), 3), rand((24,), 1), rand((24,), 2))]
    compare(make, feeds, **F32)


# ---------------------------------------------------------------------------- matmul
def test_matmul_layouts_batches_and_transposes():
    a_np, b_np, w_np = rand((3, 5, 7)), rand((3, 7, 4), 1), rand((6, 7), 2)

    def make(cx):
        a, b, w = cx.tensor((3, 5, 7)), cx.tensor((3, 7, 4)), cx.tensor((6, 7))
        return [a, b, w], [a @ b, a @ w.T, b.mT @ a.mT, a[:, 1:4, :] @ w.T, a.permute(1, 0, 2) @ w.T, a[0] @ a[1].T,
                           (a @ w.T).relu() + 1.0]

    compare(make, [(a_np, b_np, w_np)], **CHAIN)


def test_conv_gradient_rule_forms():
    """The graphs of nn.conv's "conv" gradient rule (luminal/nn/conv_grad.py: a grouped convolution's input
    gradient a grouped convolution, a strided one's one convolution per input phase) through the Triton
    kernels, against the reference interpreter: depthwise, 2 groups, strided, strided depthwise."""
    import luminal.nn.functional as F
    from luminal.training import grad

    cases = [((2, 4, 6, 32), (4, 1, 3, 3), dict(padding=1, groups=4)),
             ((2, 4, 6, 32), (8, 2, 3, 3), dict(padding=1, groups=2)),
             ((1, 3, 6, 32), (4, 3, 3, 3), dict(stride=2, padding=1)),
             ((1, 4, 5, 32), (4, 1, 3, 3), dict(stride=2, padding=1, groups=4))]
    for k, (xs, ws, kw) in enumerate(cases):
        def make(cx, xs=xs, ws=ws, kw=kw):
            x, w = cx.tensor(xs), cx.tensor(ws)
            y = F.conv2d(x, w, **kw)
            assert any(rule[0] == "conv" for rule in cx.grad_rules.values())
            return [x, w], [y] + grad((y * y).sum() * 0.5, [x, w])

        compare(make, [(rand(xs, k), rand(ws, 10 + k))], rtol=1e-4, atol=1e-3)


def test_a_widened_operand_read_by_a_narrowed_copy():
    """A bfloat16-valued GEMM operand that another kernel reads too is stored as bfloat16 and widened where that
    kernel loads it (``narrow_operands(widen_readers=True)``), also when that kernel is itself narrowed (a
    rounded, transposed copy for a second GEMM: before, it read the stored bits as floats). And the graph that
    showed it: a convolution's input gradient under autocast (the gradient rule reads the rounded weight
    flipped)."""
    import luminal.nn.functional as F
    from luminal.training import grad

    def make(cx):
        a, bb = cx.tensor((5, 7)), cx.tensor((7, 3), lm.bfloat16)
        b = bb.cast(lm.float32)
        return [a, bb], [a @ b.flip(1), a @ b]

    compare(make, [(rand((5, 7), 1), rand((7, 3), 2).astype(np.float32))], rtol=1e-5, atol=1e-5)

    def conv(cx):
        x, w = cx.tensor((6, 4, 4, 4)), cx.tensor((6, 4, 3, 3))
        with lm.autocast(dtype=lm.bfloat16):
            y = F.conv2d(x, w)
        return [x, w], [y] + grad((y.cast(lm.float32) ** 2).sum(), [x, w])

    compare(conv, [(rand((6, 4, 4, 4), 3), rand((6, 4, 3, 3), 4))], rtol=1e-3, atol=1e-2)


def test_matmul_symbolic_sizes_larger_than_a_tile_and_float64():
    def make(cx):
        x, w = cx.tensor(("m", 70)), cx.tensor((70, 90))
        d = cx.tensor((5, 6), lm.float64)
        return [x, w, d], [x @ w, (d @ d.T).softmax(-1)]

    d = rand((5, 6), 9, np.float64)
    feeds = [(rand((3, 70)), rand((70, 90), 1), d), (rand((130, 70), 2), rand((70, 90), 3), d)]
    runtime = compare(make, feeds, **CHAIN)
    assert any(launch.kind == "gemm" for launch in runtime.tprogram.launches)


def test_matmul_tile_order_covers_every_tile_once():
    """Output tiles are visited in groups of ``GROUP_M`` rows of tiles (L2 reuse): with 11 rows of tiles (one
    full group and a partial one) and 3 columns, batched, every element is computed once and right."""
    from luminal.codegen.triton_gemm import GEMM_BLOCKS, GROUP_M

    bm, bn, _ = GEMM_BLOCKS
    m, n = bm * (GROUP_M + 3) - 5, bn * 2 + 7

    def make(cx):
        x, y = cx.tensor((2, m, 9)), cx.tensor((9, n))
        return [x, y], [x @ y]

    compare(make, [(rand((2, m, 9), 1), rand((9, n), 2))], rtol=1e-5, atol=1e-5)


def test_gemm_epilogues_are_computed_in_the_gemm_tiles():
    """The elementwise kernel after an unbatched GEMM that reads the product only at its own element (a bias, an
    activation, autocast's rounding, a residual) runs in the GEMM's launch, on the accumulator tile: one launch
    fewer, and the product is not stored unless something else reads it. The epilogue's output is planned in the
    arena as written during the GEMM (it must not take the place of an operand the GEMM is still reading: ``t``
    below dies at the GEMM, ``h`` is born there). Its own function stays for a product computed by cuBLAS."""
    def make(cx):
        x, w, w2, b = cx.tensor(("m", 128)), cx.tensor((128, 128)), cx.tensor((128, 96)), cx.tensor((128,))
        t = x * 2.0 - 1.0                      # an intermediate GEMM operand, last read by the GEMM
        h = ((t @ w) + b).relu()               # bias + relu epilogue; the product is read by nothing else
        p = h @ w2
        return [x, w, w2, b], [(p + h[:, :96]) * 0.5, p.sum(0)]  # p is read twice: stored, epilogue too

    feeds = [(rand((70, 128), 1), rand((128, 128), 2) / 8, rand((128, 96), 3) / 8, rand((128,), 4)),
             (rand((5, 128), 5), rand((128, 128), 6) / 8, rand((128, 96), 7) / 8, rand((128,), 8))]
    runtime = compare(make, feeds, **CHAIN)
    gemms = [launch for launch in runtime.tprogram.launches if launch.kind == "gemm"]
    assert len(gemms) == 2 and all(g.epilogue is not None for g in gemms)
    assert len(runtime.tprogram.launches) < len(runtime.program.kernels)
    source = runtime.tprogram.source
    first = source[source.find(f"def {gemms[0].name}("):source.find(f"def {gemms[0].epilogue.name}(")]
    assert "# epilogue" in first and "acc, mask=" not in first  # h's product is never stored
    second = source[source.find(f"def {gemms[1].name}("):]
    assert "acc, mask=" in second.split("# epilogue")[0]         # p's is (p.sum reads it)


def _row_group_case(width: int, dtype):
    """``(make, feeds)`` for ``compare``: softmax, log-softmax, layer norm and a masked softmax over ``("r",
    width)`` rows, fed rows with -inf (masked), NaN, all -inf and a wide spread, then 9 rows and the other mask."""
    dt = lm.DType(np.dtype(dtype).name)

    def make(cx):
        x, keep = cx.tensor(("r", width), dt), cx.tensor((width,), "bool")
        masked = lm.where(keep, x, float("-inf")).softmax(-1)
        return [x, keep], [x.softmax(-1), x.log_softmax(-1), x.layer_norm(-1), masked]

    x = rand((12, width), 1, dtype) * 4
    x[0, ::3] = -np.inf
    x[1, 5] = np.nan
    x[2, :] = -np.inf
    x[3] *= 1e3
    keep = rand((width,), 2, np.bool_)
    return make, [(x, keep), (x[:9] * 0.5, ~keep)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_groups_run_as_one_kernel(dtype):
    """Softmax, log-softmax, layer norm (mean, variance, normalize) and a masked softmax over rows are row groups
    (the C backend's fused loop nests): each is one launch whose program holds its rows in registers, the
    reductions and row-wise kernels reading the earlier ones' results from there. Rows with -inf (masked), NaN,
    all -inf (softmax NaN), a wide spread; an odd extent (37, masked lanes); a symbolic row count; results equal
    the reference's."""
    runtime = compare(*_row_group_case(37, dtype), rtol=1e-5, atol=1e-6)
    tp, kernels = runtime.tprogram, runtime.program.kernels
    assert len(tp.launches) + len(tp.fused) == len(kernels)
    # the reductions over x's rows (softmax's, log-softmax's, layer norm's) and the row-wise kernels after them
    # are one group; the masked softmax another (its mask's where() is a kernel of its own before it)
    assert len(kernels) >= 15 and len(tp.launches) <= 4, [(launch.name, launch.kind) for launch in tp.launches]
    assert all(i in tp.fused or f"kernel_{i}" in {launch.name for launch in tp.launches}
               for i, k in enumerate(kernels) if type(k).__name__ == "ReduceKernel")
    # a group stores its results only (the maxima, sums, means, variances, exponentials stay in registers)
    for lead in {g for g in tp.fused.values()}:
        members = [lead] + [i for i, g in tp.fused.items() if g == lead]
        results = sum(kernels[i].out in runtime.program.outputs for i in members)
        text = tp.source.split(f"def kernel_{lead}(")[1].split("\ndef ")[0]
        assert text.count("tl.store(b") == results < len(members)


def test_row_groups_over_rows_longer_than_a_chunk_loop_in_one_kernel():
    """Rows of 3000 (over REDUCE_MAX_K: a vocabulary's softmax) are still one launch per row group: each
    reduction and each per-element member loops over the row in chunks, row scalars (maxima, sums, statistics)
    stay in registers, and a per-element output a later member reads (the masked softmax's exponentials) is
    stored and read back after a barrier. Masked, NaN, all -inf and wide rows; results equal the reference's."""
    runtime = compare(*_row_group_case(3000, np.float32), rtol=1e-5, atol=1e-6)
    tp = runtime.tprogram
    reduces = [launch for launch in tp.launches if launch.kind == "reduce"]
    assert len(reduces) == 1 and len(tp.launches) == 2, [(launch.name, launch.kind) for launch in tp.launches]
    text = tp.source.split(f"def {reduces[0].name}(")[1].split("\ndef ")[0]
    assert text.count("for k0 in range(0, extent, BLOCK_K):") >= 8 and "tl.debug_barrier()" in text


def test_language_model_head_trains_over_a_long_vocabulary():
    """An embedding, a tanh and a Linear head over a 1500-word vocabulary trained with cross-entropy and SGD with
    momentum for three steps (the weights carried between executes): the loss's log-softmax, its gradient and the
    head's bias gradient run as looping row groups and a column reduction. Losses and logits equal the
    reference's at every step. (Not Adam: its first step moves a weight by about lr * sign(gradient), so a
    gradient that cancels to near 0 turns summation-order rounding into a difference of 2 * lr.)"""
    from luminal import nn
    from luminal.training import SGD

    vocab, d, b, t = 1500, 16, 2, 16
    rng = np.random.default_rng(0)
    ids, target = rng.integers(0, vocab, (b, t)), rng.integers(0, vocab, (b * t,))

    def make(cx):
        nn.init.manual_seed(3)
        emb, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
        i, y = cx.tensor((b, t), "int64"), cx.tensor((b * t,), "int64")
        logits = head(emb(i).reshape((b * t, d)).tanh())
        loss = nn.functional.cross_entropy(logits, y)
        SGD(list(emb.parameters()) + list(head.parameters()), lr=0.5, momentum=0.9).minimize(loss)
        return [i, y], [loss, logits]

    runtime = compare(make, [(ids, target)] * 3, rtol=1e-4, atol=1e-5)
    assert "for k0 in range(0, extent, BLOCK_K):" in runtime.tprogram.source


def test_attention_runs_as_one_fused_kernel():
    """softmax(f(Q K^T)) V with a padding mask (a whole row of keys masked: NaN, as the reference), a causal mask,
    a NaN query, large scores, symbolic sequence lengths rebound from 7 to 100 (two key blocks), head dims 24 and
    80 (two K steps): one fused "attention" launch per chain (online softmax; scores and probabilities never
    stored), results equal to the reference's."""
    from luminal.nn.functional import scaled_dot_product_attention as sdpa

    def make(cx):
        q, k, v = cx.tensor((2, 3, "s", 24)), cx.tensor((2, 3, "s", 24)), cx.tensor((2, 3, "s", 24))
        pad = cx.tensor((2, "s"), "bool")
        mask = lm.where(pad.reshape((2, 1, 1, "s")), float("-inf"), 0.0)
        c = cx.tensor((1, 2, "s", 80))
        return [q, k, v, pad, c], [sdpa(q, k, v, attn_mask=mask), sdpa(c, c * 0.5, c, is_causal=True)]

    feeds = []
    for n, seed in ((7, 1), (100, 2)):
        q, k, v = rand((2, 3, n, 24), seed) * 3, rand((2, 3, n, 24), seed + 1), rand((2, 3, n, 24), seed + 2)
        pad = np.zeros((2, n), bool)
        pad[1, n // 2:] = True
        q[0, 1, 2, 5] = np.nan
        q[1, 2] *= 100.0  # scores in the thousands
        feeds.append((q, k, v, pad, rand((1, 2, n, 80), seed + 3)))
    pad = feeds[0][3].copy()
    pad[0] = True  # every key of batch 0 masked: softmax of -inf rows is NaN
    feeds.insert(1, feeds[0][:3] + (pad, feeds[0][4]))
    runtime = compare(make, feeds, rtol=1e-5, atol=1e-5)  # (the last run, at 100 positions, sized the arena)
    kinds = [launch.kind for launch in runtime.tprogram.launches]
    assert kinds.count("attention") == 2 and "gemm" not in kinds, kinds
    # the scores and probabilities are never written, so the arena holds none of them: at 100 positions the
    # first attention's scores alone are 2 * 3 * 100 * 100 float32 (240 kB; the arena was 732 kB with them); it
    # keeps the causal mask (40 kB) and the scaled keys (64 kB)
    assert runtime.arena_bytes < 2 * 3 * 100 * 100 * 4, runtime.arena_bytes


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_attention_fuses_low_precision_operands_and_autocast(low):
    """The fused attention takes low-precision operands: scores of explicitly bfloat16 / float16 queries and keys
    (bfloat16 crashed the kernel: it multiplied the stored bits as integers) equal the reference's to float32
    rounding; under autocast (low-precision queries, keys, values and probabilities, the output rounded by the
    second product's epilogue) a MultiheadAttention with a padding mask (bfloat16; float16 autocast keeps its
    softmax in float16, unfused) and a causal sdpa, over symbolic lengths 7 and 100, are one fused kernel each
    and as close to the float32 model as the reference's own autocast result
    is (max and RMS error within 1.25x of it: the kernel rounds the exponentials before normalizing, the
    reference the probabilities). Rendered for a GPU, the products of low-precision values multiply tiles of the
    low type (tensor cores)."""
    from luminal import nn
    from luminal.codegen.triton import render
    from luminal.nn.functional import scaled_dot_product_attention as sdpa

    def explicit(cx):
        q, k, v = cx.tensor((2, 3, 40, 24)), cx.tensor((2, 3, 40, 24)), cx.tensor((2, 3, 40, 24))
        s = q.cast(low) @ k.cast(low).transpose(-1, -2)
        return [q, k, v], [s.cast("float32").softmax(-1) @ v]

    feed = [(rand((2, 3, 40, 24), 1), rand((2, 3, 40, 24), 2), rand((2, 3, 40, 24), 3))]
    if DEV == "gpu-interpret":
        runtime = compare(explicit, feed, **F32)
    else:
        # A low-precision score is a float32 sum rounded once; tensor cores add in another order, so a sum within
        # float32 rounding of a rounding boundary may round to the neighbouring value (an H200 put 12 of 5760
        # outputs 4.5e-5 off in float16): nearly all outputs as above, the rest within one ulp of the low type
        # in a score (|scores| < 32 here, |values - output| <= 6)
        (want,), _ = run_graph(explicit, feed, "reference")
        (have,), runtime = run_graph(explicit, feed, DEV)
        off = ~np.isclose(have[0], want[0], **F32)
        assert off.mean() < 0.01, off.mean()
        ulp = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[low] * 16
        np.testing.assert_allclose(have[0], want[0], rtol=0, atol=6 * ulp)
    assert [launch.kind for launch in runtime.tprogram.launches].count("attention") == 1

    def model(autocast):
        def make(cx):
            nn.init.manual_seed(5)
            with lm.autocast(dtype=low) if autocast else contextlib.nullcontext():
                mha = nn.MultiheadAttention(32, 2, batch_first=True).eval()
                x, pad, q = cx.tensor((2, "s", 32)), cx.tensor((2, "s"), "bool"), cx.tensor((2, 3, "s", 24))
                outs = [mha(x, x, x, key_padding_mask=pad)[0], sdpa(q, q * 0.5, q, is_causal=True)]
            return [x, pad, q], [o.cast("float32") for o in outs]
        return make

    feeds = []
    for n, seed in ((7, 1), (100, 2)):
        pad = np.zeros((2, n), bool)
        pad[1, n // 2:] = True
        feeds.append((rand((2, n, 32), seed), pad, rand((2, 3, n, 24), seed + 1)))
    exact, _ = run_graph(model(False), feeds, "reference")
    want, _ = run_graph(model(True), feeds, "reference")
    have, runtime = run_graph(model(True), feeds, DEV)
    # (float16 autocast keeps the float16 scores' softmax in float16, as torch on the CPU: MHA's chain stays
    # unfused; sdpa's softmax is float32 inside)
    assert [launch.kind for launch in runtime.tprogram.launches].count("attention") == (2 if low == "bfloat16" else 1)
    for step in range(len(feeds)):
        for k, (t, w, h) in enumerate(zip(exact[step], want[step], have[step])):
            assert not np.isnan(h).any()
            for err in (lambda e: np.abs(e).max(), lambda e: np.sqrt(np.mean(e * e))):
                assert err(h - t) <= 1.25 * err(w - t) + 1e-6, (step, k, err(h - t), err(w - t))
            np.testing.assert_allclose(h, w, rtol=2e-2, atol=1e-2)
    source = render(runtime.program, interpret=False).source
    # the sdpa's probabilities stay float32 (autocast's sdpa is one op, float32 inside): its second product not
    fused = 2 if low == "bfloat16" else 1
    assert source.count("s = tl.dot(q, k, s)\n") == fused and source.count("tl.dot(p, v)\n") == fused - 1, source


def test_attention_stays_unfused_where_training_reads_the_probabilities():
    """A training step's backward reads the softmax's probabilities: the chain then runs as GEMM, row group and
    GEMM (and the gradients equal the reference's); the same layer in inference is one fused kernel."""
    from luminal import nn
    from luminal.training import SGD

    def layer():
        nn.init.manual_seed(5)
        return nn.MultiheadAttention(16, 2, batch_first=True)

    def train(cx):
        mha = layer()
        x = cx.tensor((2, 9, 16))
        out = mha(x, x, x)[0]
        SGD(mha.parameters(), lr=0.1).minimize((out * out).mean())
        return [x], [out]

    def infer(cx):
        mha = layer().eval()
        x = cx.tensor((2, 9, 16))
        return [x], [mha(x, x, x)[0]]

    x = rand((2, 9, 16), 3)
    trained = compare(train, [(x,), (x,)], rtol=1e-4, atol=1e-5)
    assert "attention" not in [launch.kind for launch in trained.tprogram.launches]
    fused = compare(infer, [(x,)], rtol=1e-5, atol=1e-5)
    assert [launch.kind for launch in fused.tprogram.launches].count("attention") == 1


def test_row_groups_over_a_symbolic_extent_size_at_each_binding(monkeypatch):
    """A row group over a symbolic extent (attention's softmax over a symbolic key length) is one kernel whose
    block sizes are chosen at each binding; where the rows are longer than one chunk (1100 > 1024) the group's
    looping kernel runs instead (one launch too). Results equal the reference's at every binding; the
    one-chunk kernel runs at the short bindings only."""
    import luminal.runtime.gpu as gpu

    ran = []
    real = gpu._run_triton
    monkeypatch.setattr(gpu, "_run_triton", lambda fn, programs, args, kwargs: (
        ran.append((fn.__name__, kwargs.get("BLOCK_K"))), real(fn, programs, args, kwargs))[1])

    def make(cx):
        x = cx.tensor(("r", "n"))
        return [x], [x.softmax(-1), x.layer_norm(-1)]

    feeds = [(rand((9, 37), 1),), (rand((3, 1100), 2),), (rand((10, 200), 3),)]
    runtime = compare(make, feeds, rtol=1e-5, atol=1e-6)
    group = [launch for launch in runtime.tprogram.launches if launch.fallback]
    assert len(group) == 1 and group[0].row_extent is not None
    fused = [block for name, block in ran if name == group[0].name]
    assert fused == [64, 256], ran  # n = 37 and n = 200 (first execute of each binding); 1100: the loop
    (loop,) = group[0].fallback
    assert loop.name.endswith("_loop") and (loop.name, 1024) in ran, ran


def test_row_groups_with_bfloat16_results_are_bit_exact():
    """A bfloat16 softmax / log-softmax (computed in float32, rounded once: PyTorch's CPU kernels) is a row group
    with a bfloat16 member; fused, its results are the reference's bit for bit."""
    def make(cx):
        x = cx.tensor((16, 40), "bfloat16")
        return [x], [x.softmax(-1), x.log_softmax(-1)]

    x = (rand((16, 40), 3) * 5).astype(lm.bfloat16.numpy)
    x[0, :7] = -np.inf
    runtime = compare(make, [(x,)], rtol=0, atol=0)
    assert runtime.tprogram.fused and any(type(runtime.program.kernels[g]).__name__ == "ReduceKernel"
                                          for g in runtime.tprogram.fused.values())


def test_runs_of_elementwise_kernels_share_one_launch():
    """Consecutive elementwise kernels over the same elements (Adam's moment and weight updates of a parameter,
    each reading the gradient) run in one launch, a later one taking an earlier one's output from registers
    (the C backend's runs). Weights and moments equal the reference interpreter's after every step."""
    from luminal.training import Adam

    _require()
    state = {}
    for device in ("reference", DEV):
        cx, m, _, _ = _mlp_training_step(lambda params: Adam(params, lr=0.05))
        cx.compile(device=device)
        for _ in range(3):
            cx.execute()
        state[device] = {k: np.array(v) for k, v in m.state_dict().items()}
        if device == DEV:
            tp = cx.runtime.tprogram
            stores = [tp.source.split(f"def {launch.name}(")[1].split("\ndef ")[0].count("tl.store(")
                      for launch in tp.launches if launch.kind == "elementwise"]
            assert max(stores) >= 3, stores  # a moment, the other moment and the weight in one launch
            assert len(tp.launches) + len(tp.fused) == len(cx.runtime.program.kernels)
    for k, v in state["reference"].items():
        np.testing.assert_allclose(state[DEV][k], v, **CHAIN)


def test_batched_gemm_epilogue_reads_its_batch_and_rows():
    """A batched GEMM's epilogue (a bias per row of each batch, a relu) runs on its tiles too: the epilogue's
    element of batch ``b``, row ``m`` is the product's row ``b * M + m``. A symbolic batch; results equal the
    reference's."""
    def make(cx):
        a, w, bias = cx.tensor(("b", 70, 40)), cx.tensor(("b", 40, 66)), cx.tensor(("b", 70, 1))
        return [a, w, bias], [((a @ w) + bias).relu()]

    feeds = [(rand((3, 70, 40), 1), rand((3, 40, 66), 2), rand((3, 70, 1), 3)),
             (rand((2, 70, 40), 4), rand((2, 40, 66), 5), rand((2, 70, 1), 6))]
    runtime = compare(make, feeds, **CHAIN)
    gemms = [launch for launch in runtime.tprogram.launches if launch.kind == "gemm"]
    assert len(gemms) == 1 and gemms[0].epilogue is not None and len(runtime.tprogram.launches) == 1
    assert len(runtime.program.kernels[0].dims) == 3  # (b, 70, 66): a batched GEMM


def test_repeated_layers_share_one_function_per_distinct_kernel():
    """Kernels whose source is the same up to their names (every layer of a stack after the first) are one
    Triton function, compiled once, launched once per kernel on that kernel's own buffers: results equal the
    reference's, and the source holds one function per distinct kernel."""
    from luminal import nn

    def make(cx):
        nn.init.manual_seed(3)
        m = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)])
        x = cx.tensor((5, 16))
        return [x], [m(x) * 1.0]

    runtime = compare(make, [(rand((5, 16), 1),), (rand((5, 16), 2),)], **CHAIN)
    launches = runtime.tprogram.launches
    gemms = [launch for launch in launches if launch.kind == "gemm"]
    assert len(gemms) == 4 and len({g.name for g in gemms}) == 1, launches  # four layers, one GEMM function
    assert len({launch.out for launch in launches}) == len(launches)        # each writes its own buffer
    # (each GEMM computes its bias + tanh as an epilogue, whose own function is there for a cuBLAS product)
    names = {launch.name for launch in launches} | {g.epilogue.name for g in gemms if g.epilogue is not None}
    assert runtime.tprogram.source.count("\ndef kernel_") == len(names) < len(runtime.program.kernels)


# ---------------------------------------------------------------------------- gather
def test_gather_embedding_and_index_errors():
    table = rand((10, 4))
    ids = np.array([[1, 9, 0], [3, 3, 7]], np.int64)
    data = rand((3, 5), 1)
    idx = np.array([[0, 4, 2, 2, 1], [1, 1, 0, 3, 4], [4, 3, 2, 1, 0]], np.int64)

    def make(cx):
        t, i = cx.tensor((10, 4)), cx.tensor(("b", 3), lm.int64)
        d, j = cx.tensor((3, 5)), cx.tensor((3, 5), lm.int64)
        emb = t.index_select(0, i.reshape((-1,)))
        return [t, i, d, j], [emb * 2.0, d.gather(1, j), d.take_along_dim(j, 1).sum(1)]

    compare(make, [(table, ids, data, idx), (table, ids[:1], data, idx[:, ::-1].copy())], **F32)
    _require()
    cx = lm.Graph()
    t = cx.tensor((4, 2)).set(np.ones((4, 2), np.float32))
    i = cx.tensor(3, lm.int64).set([0, 1, 7])
    out = t.index_select(0, i).retrieve()
    cx.compile(device=DEV)
    with pytest.raises(IndexError, match="out of range"):
        cx.execute()
    i.set([0, 1, 3])
    cx.execute()
    np.testing.assert_array_equal(out.data(), np.ones((3, 2)))
    cx = lm.Graph()
    a = cx.tensor(2, lm.int32).set(np.array([5, 6], np.int32))
    b = cx.tensor(2, lm.int32).set(np.array([2, 0], np.int32))
    (a % b).retrieve()
    cx.compile(device=DEV)
    with pytest.raises(ZeroDivisionError):
        cx.execute()


def test_scatter_add_embedding_gradient_and_index_errors():
    """ScatterAdd (two launches: zero fill, then the in-order walk): an embedding table's gradient over symbolic
    ids rebound, a scatter along the last axis, int64 sums; bit for bit the interpreter's position-order sums."""
    from luminal.training import grad
    ids = np.array([[1, 9, 0, 1], [3, 3, 7, 1]], np.int64)
    g = rand((2, 4, 5), 2)
    base, idx, src = rand((3, 6), 3), np.array([[0, 5, 5, 2], [1, 1, 0, 4], [3, 3, 3, 3]], np.int64), rand((3, 4), 4)

    def make(cx):
        from luminal import nn
        emb = nn.Embedding(200, 5)
        emb.weight.copy_(rand((200, 5), 5))
        i, gg = cx.tensor(("b", 4), lm.int64), cx.tensor(("b", 4, 5))
        b, j, s_ = cx.tensor((3, 6)), cx.tensor((3, 4), lm.int64), cx.tensor((3, 4))
        (gw,) = grad((emb(i) * gg).sum(), [emb.weight])
        ints = b.cast(lm.int64).scatter_add(1, j, (s_ * 100).cast(lm.int64))
        return [i, gg, b, j, s_], [gw, b.scatter_add(1, j, s_), ints]

    compare(make, [(ids, g, base, idx, src), (ids[:1], g[:1], base, idx[:, ::-1].copy(), src)], rtol=0, atol=0)
    _require()
    cx = lm.Graph()
    x = cx.tensor((4, 2)).set(np.zeros((4, 2), np.float32))
    out = x.scatter_add(0, cx.tensor((2, 2), lm.int64).set(np.array([[0, 4], [1, 1]])),
                        cx.tensor((2, 2)).set(np.ones((2, 2), np.float32))).retrieve()
    cx.compile(device=DEV)
    with pytest.raises(IndexError, match="out of range"):
        cx.execute()
    assert out is not None


# ---------------------------------------------------------------------------- models
def test_mlp_forward_with_symbolic_batch():
    from luminal import nn

    def make(cx):
        nn.init.manual_seed(3)
        m = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 5))
        x = cx.tensor(("b", 12))
        return [x], [m(x).softmax(-1)]

    compare(make, [(rand((4, 12)),), (rand((33, 12), 1),)], **CHAIN)


def test_sgd_training_steps_carry_weights():
    from luminal import nn
    from luminal.training import SGD

    X, Y = rand((32, 5), 4), rand((32, 3), 5)
    state = {}

    def make(cx):
        nn.init.manual_seed(1)
        m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        x, y = cx.tensor(("b", 5)), cx.tensor(("b", 3))
        loss = ((m(x) - y) ** 2).mean()
        SGD(m.parameters(), lr=0.1, momentum=0.9).minimize(loss)
        state.setdefault("models", []).append(m)
        return [x, y], [loss]

    feeds = [(X[k * 8:(k + 1) * 8], Y[k * 8:(k + 1) * 8]) for k in range(4)] + [(X[:5], Y[:5])]
    compare(make, feeds, **CHAIN)
    ref, gpu = state["models"]
    for name, value in ref.state_dict().items():
        np.testing.assert_allclose(gpu.state_dict()[name], value, **CHAIN)


# ---------------------------------------------------------------------------- the runtime itself
def test_generated_source_is_triton_and_printed_with_debug(capsys, monkeypatch):
    _require()
    monkeypatch.setenv("LUMINAL_DEBUG", "1")
    cx = lm.Graph()
    x = cx.tensor((4, 8)).set(rand((4, 8)))
    (x.exp().sum(1) + 1).retrieve()
    cx.compile(device=DEV)
    out = capsys.readouterr().out
    assert "@triton.jit" in out and "tl.store" in out
    assert cx.runtime.source.count("@triton.jit") >= 2
    assert {launch.kind for launch in cx.runtime.tprogram.launches} >= {"reduce"}


def test_unbound_symbol_raises():
    _require()
    cx = lm.Graph()
    x = cx.tensor(("n",))
    (x * 2.0).retrieve()
    cx.compile(device=DEV)
    with pytest.raises(lm.UnboundSymbolError, match="n"):
        cx.execute()


def test_cpu_compile_does_not_import_triton_or_cupy():
    code = textwrap.dedent("""
        import sys
        import luminal
        g = luminal.Graph()
        x = g.tensor((2,)).set([1.0, 2.0])
        (x * 2).retrieve()
        g.compile(device="cpu")
        g.execute()
        bad = [m for m in ("triton", "cupy") if m in sys.modules]
        assert not bad, bad
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_cuda_device_without_gpu_gives_a_clear_error():
    code = textwrap.dedent("""
        import luminal
        g = luminal.Graph()
        x = g.tensor((2,)).set([1.0, 2.0])
        (x * 2).retrieve()
        try:
            g.compile(device="cuda")
        except RuntimeError as e:
            print("ERROR:", e)
        else:
            print("COMPILED")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    text = out.stdout
    if "COMPILED" in text:
        pytest.skip("a CUDA device and the GPU extra are present here")
    assert "ERROR:" in text, out.stderr
    assert "luminal[gpu]" in text or "CUDA device" in text or "TRITON_INTERPRET" in text, text


@pytest.mark.gpu
def test_cuda_matches_reference():
    """Needs a real CUDA device with ``luminal[gpu]`` installed (``pytest -m gpu``); run in a fresh process
    because this module's other tests put triton into interpreter mode."""
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed: pip install 'luminal[gpu]'")
    code = textwrap.dedent("""
        import numpy as np, luminal as lm
        try:
            import cupy
            assert cupy.cuda.runtime.getDeviceCount() > 0
        except Exception as e:
            print("NOGPU", e); raise SystemExit(0)
        rng = np.random.default_rng(0)
        a, w = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((70, 90)).astype(np.float32)
        res = []
        for device in ("reference", "cuda"):
            cx = lm.Graph()
            x, y = cx.tensor(("m", 70)).set(a), cx.tensor((70, 90)).set(w)
            outs = [((x @ y).softmax(-1) + x.sum(1, keepdim=True)).retrieve(), x.layer_norm(-1).retrieve()]
            cx.compile(device=device)
            cx.execute()
            res.append([o.data() for o in outs])
        for r, c in zip(*res):
            np.testing.assert_allclose(c, r, rtol=1e-4, atol=1e-4)
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if "NOGPU" in out.stdout:
        pytest.skip(f"no CUDA device: {out.stdout.strip()}")
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr


# ---------------------------------------------------------------------------- device-resident data
def _count_uploads(runtime):
    calls = []
    real = runtime.memory.upload

    def upload(dst, arr):
        calls.append(arr.size)
        return real(dst, arr)
    runtime.memory.upload = upload
    return calls


def _count_downloads(runtime):
    calls = []
    real = runtime.memory.download

    def download(src, n, dtype):
        calls.append(n)
        return real(src, n, dtype)
    runtime.memory.download = download
    return calls


def test_inputs_are_copied_to_the_device_only_when_set_changes_them():
    """An unchanged input is not copied again; set() (even of the same, mutated numpy array) copies it."""
    _require()
    a = rand((6, 5), 1)
    cx = lm.Graph()
    x, w = cx.tensor(("n", 5)).set(a), cx.tensor((5, 3)).set(rand((5, 3), 2))
    y = (x @ w).relu().retrieve()
    cx.compile(device=DEV)
    calls = _count_uploads(cx.runtime)
    cx.execute()
    first = y.data()
    assert sorted(calls) == [15, 30]  # w, x (the error flag is zeroed on the device, not uploaded)
    calls.clear()
    cx.execute()  # nothing changed: nothing copied
    assert calls == []
    np.testing.assert_allclose(y.data(), first)
    a[:] = rand((6, 5), 3)
    x.set(a)  # the same array object, changed in place, set again
    calls.clear()
    cx.execute()
    assert sorted(calls) == [30]
    np.testing.assert_allclose(y.data(), np.maximum(a @ w.data(), 0), rtol=1e-5, atol=1e-5)


def test_carried_training_state_stays_on_the_device():
    """SGD + momentum with a fixed batch, results copied to the host (the default): after the first step the
    weights and moments are not copied to the device again (only the batch and the hyperparameters), nor to
    the host (only the error flag: the next step reads them on the device; a read fetches them:
    ``optimizer.state`` gives numpy arrays), the fetched carried arrays are read-only, and the weights and
    moments equal the reference interpreter's (read between steps too)."""
    from luminal.training import SGD

    _require()
    weights, moments = {}, {}
    for device in ("reference", DEV):
        opts = []
        cx, m, x, X = _mlp_training_step(lambda params: opts.append(SGD(params, lr=0.1, momentum=0.9)) or opts[0])
        cx.compile(device=device)
        calls = _count_uploads(cx.runtime) if device == DEV else []
        downloads = _count_downloads(cx.runtime) if device == DEV else []
        for step in range(4):
            calls.clear()
            downloads.clear()
            x.set(X)
            cx.execute()
            if device == DEV and step > 0:
                # the optimizer's 4 hyperparameters (a deferred input, read every step) and x; y is unchanged,
                # the weights and moments come from the device
                assert sorted(calls) == [4, 40], calls
                assert downloads == [1], downloads  # the error flag; no weight or moment
            if step == 1:  # a read between steps fetches the values; the next step still reads the device's
                weights.setdefault("between", {})[device] = {k: np.array(v) for k, v in m.state_dict().items()}
        weights[device] = {k: np.array(v) for k, v in m.state_dict().items()}
        if device == DEV:
            absent = [i for _, i in cx.carries if (i, 0) not in cx.tensors]
            assert len(absent) == 4, absent  # the momentum buffers: nothing read them, so nothing downloaded them
        # the optimizer's state reads as numpy arrays (fetched from the device), as PyTorch's optimizer.state
        moments[device] = [opts[0].state[p]["momentum_buffer"] for p in m.parameters()]
        assert all(type(a) is np.ndarray for a in moments[device])
        if device == DEV:
            carried = [cx.tensors[(i, 0)] for _, i in cx.carries]
            assert all(not a.flags.writeable for a in carried)
    for have, want in zip(moments[DEV], moments["reference"]):
        np.testing.assert_allclose(have, want, **CHAIN)
    for k, v in weights["between"]["reference"].items():
        np.testing.assert_allclose(weights["between"][DEV][k], v, **CHAIN)
    for k, v in weights["reference"].items():
        np.testing.assert_allclose(weights[DEV][k], v, **CHAIN)


def test_results_left_on_the_device_until_data_asks():
    _require()
    a = rand((6, 5), 1)
    cx = lm.Graph()
    x = cx.tensor((6, 5)).set(a)
    y, z = (x * 2).retrieve(), x.sum(0).retrieve()
    cx.compile(device=DEV)
    cx.runtime.host_outputs = False
    cx.execute()
    assert (y.id, 0) not in cx.tensors and (z.id, 0) not in cx.tensors
    np.testing.assert_allclose(y.data(), a * 2, rtol=1e-6)
    assert (z.id, 0) not in cx.tensors  # fetched one by one
    np.testing.assert_allclose(z.data(), a.sum(0), rtol=1e-5, atol=1e-5)


def test_training_with_results_and_state_left_on_the_device():
    """host_outputs=False: the carried weights and moments never go through the host between steps (no
    uploads of them, nothing in graph.tensors), reading them (state_dict, loss) fetches them, and a new batch
    size (re-allocation) keeps them; the weights equal the reference interpreter's after every phase."""
    from luminal import nn
    from luminal.training import SGD

    _require()
    X, Y = rand((13, 5), 4), rand((13, 3), 5)
    feeds = [(X[:8], Y[:8])] * 3 + [(X[:5], Y[:5])] * 2 + [(X[5:13], Y[5:13])]
    weights, losses = {}, {}
    for device in ("reference", DEV):
        cx = lm.Graph()
        nn.init.manual_seed(1)
        m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        x, y = cx.tensor(("b", 5)), cx.tensor(("b", 3))
        loss = ((m(x) - y) ** 2).mean().retrieve()
        SGD(m.parameters(), lr=0.1, momentum=0.9).minimize(loss)
        x.set(X[:8]), y.set(Y[:8])
        cx.compile(device=device)
        if device == DEV:
            cx.runtime.host_outputs = False
            calls = _count_uploads(cx.runtime)
        weights[device], losses[device] = [], []
        for step, (xb, yb) in enumerate(feeds):
            x.set(xb), y.set(yb)
            if device == DEV:
                calls.clear()
            cx.execute()
            if device == DEV and step in (1, 2, 4):
                assert max(calls) <= 5 * 8, calls  # batches and hyperparameters only, no weights or moments
                assert all((i, 0) not in cx.tensors for _, i in cx.carries)
            losses[device].append(float(loss.data()))
            if step in (2, 5):
                weights[device].append({k: np.array(v) for k, v in m.state_dict().items()})
    np.testing.assert_allclose(losses[DEV], losses["reference"], **CHAIN)
    for ref, got in zip(weights["reference"], weights[DEV]):
        for k, v in ref.items():
            np.testing.assert_allclose(got[k], v, **CHAIN)


def test_intermediates_share_one_planned_arena():
    """A chain of GEMMs: h1 is dead once h2 exists, so h3 reuses its bytes; the arena is smaller than the
    intermediates together, and every result equals the reference interpreter's (two batch sizes)."""
    def make(cx):
        x = cx.tensor(("n", 64))
        ws = [cx.tensor((64, 64)).set(rand((64, 64), 10 + k) * 0.2) for k in range(4)]
        h = x
        for w in ws:
            h = (h @ w).relu()
        return [x], [h.sum(1)]

    runtime = compare(make, [(rand((40, 64), 1),), (rand((40, 64), 2),), (rand((9, 64), 3),)], **CHAIN)
    program = runtime.program
    owned = set(program.inputs) | set(program.outputs)
    total = 0
    for node_id, (dims, dtype) in program.buffers.items():
        if node_id not in owned:
            total += dtype.itemsize * int(np.prod([d.evaluate({"n": 9}) for d in dims]))
    assert 0 < runtime.arena_bytes < total, (runtime.arena_bytes, total)


def test_gemm_operand_layouts_for_blas_match_numpy():
    """The strided layouts the cuBLAS candidate hands to ``cupy.matmul`` (no GPU needed to check them): for
    transposed, batched, broadcast and sliced operands, numpy's matmul over ``as_strided`` views of the input
    buffers at those layouts equals the reference interpreter's product."""
    from numpy.lib.stride_tricks import as_strided

    from luminal.runtime.gpu_gemm import gemm_operand_layout

    _require()
    a = rand((2, 6, 5), 1)
    w = rand((5, 7), 2)
    b = rand((2, 7, 5), 3)
    cases = {
        "plain": lambda x, y, z: x[0] @ y,
        "a transposed": lambda x, y, z: x[1].T @ x[0],
        "b transposed": lambda x, y, z: x[0] @ z[0].T,
        "batched, broadcast weight": lambda x, y, z: x @ y,
        "batched, both transposed": lambda x, y, z: z.permute((0, 2, 1)).permute((0, 2, 1)) @ x.permute((0, 2, 1)),
        "sliced": lambda x, y, z: x[:, 1:4, :] @ y[:, 2:6],
    }
    checked = 0
    for name, build in cases.items():
        cx = lm.Graph()
        ta, tw, tb = cx.tensor(a.shape).set(a), cx.tensor(w.shape).set(w), cx.tensor(b.shape).set(b)
        out = build(ta, tw, tb).retrieve()
        ref = lm.Graph()
        ra, rw, rb = ref.tensor(a.shape).set(a), ref.tensor(w.shape).set(w), ref.tensor(b.shape).set(b)
        want_t = build(ra, rw, rb).retrieve()
        ref.execute()
        cx.compile(device=DEV)
        runtime = cx.runtime
        arrays = {ta.id: a, tw.id: w, tb.id: b}
        for kernel in runtime._gemm_kernels.values():
            if kernel.a not in arrays or kernel.b not in arrays:
                continue  # an operand computed by an earlier kernel
            layout = gemm_operand_layout(kernel, dict(cx.dyn_map))
            assert layout is not None, name
            (ad, ast, ao), (bd, bst, bo), shape = layout
            fa, fb = arrays[kernel.a].reshape(-1), arrays[kernel.b].reshape(-1)
            A = as_strided(fa[ao:], ad, [s * fa.itemsize for s in ast])
            B = as_strided(fb[bo:], bd, [s * fb.itemsize for s in bst])
            got = np.matmul(A.astype(np.float64), B.astype(np.float64)).reshape(shape)
            if kernel.out == out.id or got.size == want_t.data().size:
                np.testing.assert_allclose(got.reshape(want_t.data().shape), want_t.data(), rtol=1e-5, atol=1e-5,
                                           err_msg=name)
                checked += 1
    assert checked >= 5, checked  # every case but at most one whose operand is an earlier kernel's result


class _FakeCudaArray:
    """Only the CUDA array interface of a device array (no GPU needed to test set()'s checks)."""

    def __init__(self, shape, typestr="<f4", strides=None):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (0, False), "version": 3}


def test_device_arrays_checked_by_set_and_refused_off_cuda():
    cx = lm.Graph()
    x = cx.tensor(("n", 4))
    (x * 2).retrieve()
    with pytest.raises(TypeError, match="dtype float64"):
        x.set(_FakeCudaArray((3, 4), "<f8"))
    with pytest.raises(ValueError, match="C-contiguous"):
        x.set(_FakeCudaArray((3, 4), "<f4", strides=(4, 12)))
    x.set(_FakeCudaArray((3, 4)))
    assert cx.dyn_map["n"] == 3
    with pytest.raises(TypeError, match="holds a CUDA array.*device='cuda'"):
        cx.execute()


def test_data_on_the_device_needs_cuda():
    cx = lm.Graph()
    y = (cx.tensor((2,)).set([1.0, 2.0]) * 2).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    with pytest.raises(RuntimeError, match="device='cuda'"):
        y.data(device=True)


def test_gemm_configurations_parse_and_cover_the_grid():
    from luminal.runtime.gpu_gemm import GEMM_CANDIDATES, GemmConfig, gemm_programs

    for cfg in GEMM_CANDIDATES:
        assert GemmConfig.parse(cfg.name) == cfg
        assert gemm_programs((2, 300, 129, 7), cfg) == 2 * -(-300 // cfg.bm) * -(-129 // cfg.bn)
    assert GemmConfig.parse("blas") is None and GemmConfig.parse("triton:64x64:w4:s3") is None
    assert GemmConfig.parse("cublas").cublas


# ---------------------------------------------------------------------------- a real GPU only (pytest -m gpu)
cuda_only = pytest.mark.skipif(DEV != "cuda", reason="needs a real GPU: LUMINAL_GPU_TEST_DEVICE=cuda pytest -m gpu "
                                                     "(tools/gpu_check.sh)")


@pytest.mark.gpu
@cuda_only
def test_cuda_graph_replays_and_rebinding():
    """The second run with the same bindings is captured, later ones replay the CUDA graph; a new binding
    re-allocates and captures again; every result equals the reference interpreter's."""
    def make(cx):
        x = cx.tensor(("n", 40))
        w = cx.tensor((40, 24)).set(rand((40, 24), 9))
        return [x], [(x @ w).softmax(-1) + x.sum(1, keepdim=True), (x * 2).exp().max(0)]

    feeds = [(rand((7, 40), k),) for k in range(4)] + [(rand((33, 40), 5),)] * 3 + [(rand((7, 40), 6),)]
    runtime = compare(make, feeds, **CHAIN)
    assert runtime.memory.graphs, "CUDA graph capture was turned off (a capture failed)"
    assert runtime.graph_replays >= 4


@pytest.mark.gpu
@cuda_only
def test_cuda_device_arrays_in_and_out():
    import cupy

    a, b = rand((64, 48), 1), rand((48, 32), 2)
    cx = lm.Graph()
    x, w = cx.tensor(("m", 48)).set(cupy.asarray(a)), cx.tensor((48, 32)).set(b)
    y = (x @ w).retrieve()
    cx.compile(device="cuda")
    cx.execute()
    dev = y.data(device=True)
    assert isinstance(dev, cupy.ndarray) and dev.shape == (64, 32)
    np.testing.assert_allclose(cupy.asnumpy(dev), a.astype(np.float64) @ b, **CHAIN)
    np.testing.assert_allclose(y.data(), cupy.asnumpy(dev))
    x.set(cupy.asarray(a[:5]))
    cx.execute()
    np.testing.assert_allclose(y.data(device=True).get(), a[:5].astype(np.float64) @ b, **CHAIN)


@pytest.mark.gpu
@cuda_only
def test_cuda_gemm_search_measures_checks_and_caches():
    """A GEMM above the search threshold (2^28 multiply-adds) is measured (tile configurations and cuBLAS),
    the winner is cached, and the program (two GEMMs with elementwise work between them) is captured in
    segments around any cuBLAS call: replays give the same results."""
    a, b = rand((1024, 512), 1), rand((512, 1024), 2)

    def build(search):
        cx = lm.Graph()
        x = cx.tensor((1024, 512)).set(a)
        w = cx.tensor((512, 1024)).set(b)
        y = (((x @ w).relu() * 0.01) @ w.T).retrieve()
        cx.compile(device="cuda", search=search)
        cx.execute()
        return cx, y

    want = (np.maximum(a.astype(np.float64) @ b, 0) * 0.01) @ b.T
    cx, y = build("quick")
    timed = [e for e in cx.runtime.search_log if "seconds" in e]
    assert len(timed) >= 4, cx.runtime.search_log
    assert {e["config"] for e in timed} >= {"cublas", "triton:64x64x32:w4:s3"}, timed
    np.testing.assert_allclose(y.data(), want, rtol=1e-4, atol=1e-3)
    for _ in range(3):
        cx.execute()
        np.testing.assert_allclose(y.data(), want, rtol=1e-4, atol=1e-3)
    assert cx.runtime.memory.graphs and cx.runtime.graph_replays >= 2
    chosen = set(cx.runtime._gemm_choice.values())
    cx2, y2 = build("off")  # the cached winner, no measuring
    assert not cx2.runtime.search_log and set(cx2.runtime._gemm_choice.values()) == chosen
    np.testing.assert_allclose(y2.data(), y.data(), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------- the larger sweep
full = pytest.mark.skipif(not FULL, reason="set LUMINAL_GPU_INTERPRET_FULL=1 for the larger sweep")


@full
@pytest.mark.parametrize("seed", range(40))
def test_full_random_elementwise_programs(seed):
    from test_compiler_passes import BINARY, SPECIAL as OPS_SPECIAL, UNARY, build

    rng = np.random.default_rng(seed)
    names = UNARY + BINARY + OPS_SPECIAL
    prog = [(names[rng.integers(len(names))], int(rng.integers(0, 1000))) for _ in range(int(rng.integers(1, 14)))]
    _require()
    results = []
    for device in ("reference", DEV):
        cx, outs = build(prog)
        cx.compile(device=device)
        cx.execute()
        results.append([np.array(o.data()) for o in outs])
    for w, h in zip(*results):
        np.testing.assert_allclose(h, w, rtol=1e-4, atol=1e-4, equal_nan=True)


@full
@pytest.mark.parametrize("shape", [(1, 1), (2, 1025), (129, 3), (17, 4097), (3, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_full_reduction_shapes(shape, dtype):
    x = rand(shape, 7, dtype, -100, 100)

    def make(cx):
        t = cx.tensor(shape, lm.DType(np.dtype(dtype).name))
        return [t], [t.sum(0), t.sum(1), t.max(0), t.max(1)]

    compare(make, [(x,)], rtol=1e-4, atol=1e-3)


@full
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (15, 17, 16), (64, 32, 64), (65, 33, 129), (200, 3, 5)])
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_full_matmul_shapes(m, k, n, batch):
    a, b = rand(batch + (m, k), 1), rand(batch + (k, n), 2)

    def make(cx):
        x, y = cx.tensor(batch + (m, k)), cx.tensor(batch + (k, n))
        return [x, y], [x @ y, (x.mT.mT @ y).sum(-1)]

    compare(make, [(a, b)], rtol=1e-4, atol=1e-4)


_UNARY_HL = ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "gelu", "silu", "abs", "neg",
             "floor", "ceil", "round", "trunc", "sign", "erf", "softplus", "mish", "elu", "selu", "logsigmoid",
             "rsqrt", "square", "recip", "asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh", "isnan", "isinf",
             "isfinite", "logical_not", "hardswish", "hardsigmoid", "softsign", "leaky_relu", "celu", "quick_gelu"]
_BINARY_HL = ["add", "sub", "mul", "div", "remainder", "fmod", "maximum", "minimum", "pow", "lt", "le", "gt", "ge",
              "eq", "ne", "logaddexp", "copysign", "logical_and", "logical_or", "logical_xor"]
_HAS = lm.Graph().tensor((1,))


@full
@pytest.mark.parametrize("name", [n for n in _UNARY_HL if hasattr(_HAS, n)])
def test_full_unary_hl_ops(name):
    x = np.concatenate([SPECIAL, rand((48,), 3) * 3]).astype(np.float32)

    def make(cx):
        t = cx.tensor((64,))
        return [t], [getattr(t, name)(), getattr(t.reshape((8, 8)).permute(1, 0), name)()]

    compare(make, [(x,)], **CHAIN)


@full
@pytest.mark.parametrize("name", [n for n in _BINARY_HL if hasattr(_HAS, n)])
def test_full_binary_hl_ops(name):
    a = np.concatenate([SPECIAL, rand((48,), 4) * 3]).astype(np.float32)
    b = np.concatenate([SPECIAL[::-1], rand((48,), 5) * 3]).astype(np.float32)

    def make(cx):
        x, y = cx.tensor((64,)), cx.tensor((64,))
        return [x, y], [getattr(x, name)(y), getattr(x.reshape((8, 8)), name)(y.reshape((8, 8))[0])]

    compare(make, [(a, b)], **CHAIN)


def test_bfloat16_bit_for_bit_with_the_reference():
    # bfloat16 buffers hold bit patterns; every op computes in float32 and rounds to nearest even (NaN quieted),
    # as the reference and the C backend: elementwise, casts in and out (float64 and int64 round to float32 first),
    # sums (float32 accumulation, one rounding), max with NaN, softmax, matmul (float32 GEMM), mod, compare
    _require()
    from luminal.dtype import BFLOAT16_NUMPY as BF

    def build(cx):
        rng = np.random.default_rng(11)
        a = (rng.standard_normal((7, 33)) * 3).astype(np.float32)
        a[0, :6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.3e38]
        a[1, :3] = [1 + 2 ** -8, 1 + 3 * 2 ** -8, 1e-39]  # ties (to even) and a subnormal
        x = cx.tensor((7, 33), "bfloat16").set(a.astype(BF))
        f = cx.tensor((7, 33), "float32").set(a)
        d = cx.tensor((7, 33), "float64").set(a.astype(np.float64) * (1 + 2 ** -30))
        i = cx.tensor((7, 33), "int64").set(np.nan_to_num(a * 1e5, posinf=0, neginf=0).astype(np.int64))
        outs = [x * 3 + x, (x * 1.1).exp2(), x.sum(1), x.max(0), f.cast("bfloat16"), d.cast("bfloat16"),
                i.cast("bfloat16"), x.cast("float32") * 0.5, x.cast("int32"), x.softmax(-1),
                x @ x.permute(1, 0), x.sqrt(), x % 1.5, x < 1.0, x.recip()]
        return [o.retrieve() for o in outs]

    got = {}
    for device in ("reference", DEV):
        cx = lm.Graph()
        outs = build(cx)
        cx.compile(device=device)
        with np.errstate(all="ignore"):
            cx.execute()
        got[device] = [np.array(o.data()) for o in outs]
    for k, (want, have) in enumerate(zip(got["reference"], got[DEV])):
        assert have.dtype == want.dtype, (k, have.dtype, want.dtype)
        if want.dtype == BF:
            np.testing.assert_array_equal(have.view(np.uint16), want.view(np.uint16), err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(have, want, err_msg=f"output {k}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_gemms_read_low_precision_operands(dtype):
    """Under autocast a GEMM's operands are bfloat16 / float16 values. The GPU program reads them as such (no
    float32 copy of an operand: a float32 input is rounded as it is loaded, an activation is stored in the low
    type) and, on ``cuda``, multiplies them on tensor cores (bfloat16 products are exact, summed in float32);
    results match the reference within an ulp of the low type (the order of the float32 sums differs). The
    float32 inputs are rounded by a kernel that stores the bfloat16 values (``round_on_load=False``): rounding
    them in the GEMM's inner loop halved its speed on an H200."""
    _require()
    from luminal.codegen.gemm_lowp import narrow_operands
    from luminal.codegen.kernel import GemmKernel, lower
    from luminal.codegen.triton import render
    from luminal.runtime.gpu_gemm import gemm_operand_layout

    def make(cx):
        x, w1, w2 = cx.tensor((37, 70)), cx.tensor((45, 70)), cx.tensor((9, 45))
        q = cx.tensor((3, 20, 16))
        with lm.autocast(dtype=dtype):
            h = (x @ w1.T).relu()  # float32 operands rounded on load; h stored as the low type
            y = h @ w2.T
            att = q @ q.permute(0, 2, 1)  # batched, one buffer read twice
        return [x, w1, w2, q], [y.cast("float32"), att.cast("float32")]

    feeds = [(rand((37, 70), 1), rand((45, 70), 2) / 8, rand((9, 45), 3) / 8, rand((3, 20, 16), 4))]
    tol = dict(rtol=8e-3, atol=1e-2) if dtype == "bfloat16" else dict(rtol=1e-3, atol=1e-3)
    compare(make, feeds, **tol)
    cx = lm.Graph()
    inputs, outs = make(cx)
    for o in outs:
        o.retrieve()
    program = narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False)
    gemms = [k for k in program.kernels if isinstance(k, GemmKernel)]
    assert len(gemms) == 3
    for g in gemms:  # every operand is the low type: rounded on load or stored so
        for buf, rounded in ((g.a, g.a_round), (g.b, g.b_round)):
            assert rounded == lm.bfloat16 or program.buffers[buf][1].value == dtype, (buf, rounded)
        if g.a_round is not None or g.b_round is not None:  # never cuBLAS on values it would not round
            assert gemm_operand_layout(g, {}) is None
    source = render(program, interpret=False).source
    assert source.count("tl.dot(a, b, acc)") == 3, source
    if dtype == "bfloat16":  # the stored bits go to the tensor cores as they are, read through bfloat16 pointers
        assert source.count(".to(tl.pointer_type(tl.bfloat16))") == 6, source
        assert "bitcast=True)\n        acc = tl.dot" not in source
    assert 'input_precision="ieee"' not in source


@pytest.mark.gpu
@cuda_only
def test_cuda_kernels_compile_in_parallel_before_the_first_launch(monkeypatch):
    """Every kernel of a program is compiled, concurrently, before the first launch (Triton would otherwise
    compile them one at a time as they are launched); results equal the reference's."""
    import luminal.runtime.gpu as gpu

    done = []
    real = gpu.compile_parallel
    monkeypatch.setattr(gpu, "compile_parallel", lambda jobs: done.append((len(jobs), real(jobs))) or done[-1][1])

    def make(cx):
        x, w = cx.tensor((33, 40)), cx.tensor((40, 24))
        return [x, w], [(x @ w).softmax(-1) + x.sum(1, keepdim=True), (x * 2).exp().max(0), (x.relu() @ w).tanh()]

    runtime = compare(make, [(rand((33, 40), 1), rand((40, 24), 2))], **CHAIN)
    assert done and done[0] == (len(runtime.tprogram.launches), len(runtime.tprogram.launches)), done


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cuda_autocast_gemm_search_on_tensor_cores(dtype):
    """A large autocast GEMM with search="quick": the tensor-core tile candidates are measured, the result stays
    within an ulp of the low type of the reference's."""
    _require()
    a, b = rand((1024, 512), 1), rand((512, 640), 2)
    out = {}
    for device in ("reference", "cuda"):
        cx = lm.Graph()
        x, w = cx.tensor((1024, 512)).set(a), cx.tensor((512, 640)).set(b)
        with lm.autocast(dtype=dtype):
            y = (x @ w).cast("float32").retrieve()
        cx.compile(device=device, search="quick")
        cx.execute()
        out[device] = np.array(y.data())
        if device == "cuda":
            log = cx.runtime.search_log
    np.testing.assert_allclose(out["cuda"], out["reference"], rtol=8e-3 if dtype == "bfloat16" else 1e-3, atol=0.05)
    assert any(e.get("config", "").endswith(("x64:w8:s3", "x64:w4:s4")) for e in log), log


def _compile_check(code: str) -> dict:
    """Run ``code`` (which compiles kernels with Triton's real compiler and prints ``RESULT<json>``) in a fresh
    process without Triton's interpreter mode; returns the JSON."""
    import json
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    line = [s for s in out.stdout.splitlines() if s.startswith("RESULT")]
    assert line, out.stderr[-3000:]
    return json.loads(line[0][6:])


def _run_ptx_block(lines, regs):
    """A tiny interpreter of the 32/16-bit moves and 16-bit add/sub/min/max that ``scalarize_packed_int16``
    writes: ``regs`` maps register names to ints (updated in place)."""
    def val(x):
        return regs[x] if x.startswith("%") else int(x) & 0xFFFFFFFF
    for line in (ln.strip().rstrip(";") for ln in lines):
        if line in ("{", "}") or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        dst, *srcs = [t.strip() for t in rest.replace("{", "").replace("}", "").split(",")]
        if op == "mov.b32" and rest.startswith("{"):  # unpack: {lo, hi}, word
            lo, hi, word = [t.strip() for t in rest.replace("{", "").replace("}", "").split(",")]
            regs[lo], regs[hi] = val(word) & 0xFFFF, val(word) >> 16
        elif op == "mov.b32" and "{" in rest:  # pack: word, {lo, hi}
            regs[dst] = (val(srcs[0]) & 0xFFFF) | (val(srcs[1]) & 0xFFFF) << 16
        elif op == "mov.b32":
            regs[dst] = val(srcs[0])
        else:
            name, kind = op.split(".")
            a, b = val(srcs[0]), val(srcs[1])
            if kind == "s16":
                a, b = a - ((a & 0x8000) << 1), b - ((b & 0x8000) << 1)
            regs[dst] = {"add": a + b, "sub": a - b, "min": min(a, b), "max": max(a, b)}[name] & 0xFFFF


def test_packed_int16_ptx_is_rewritten_lane_by_lane():
    """ptxas miscompiled a packed 16-bit add (``add.s16x2``, LLVM's pairing of two narrowed index computations)
    into an add of 0 on an H200, so an adaptive average pool read the wrong batch element: every NVIDIA
    kernel's PTX has such instructions replaced by two scalar 16-bit ones. The rewrite, run by a small
    interpreter, gives what the packed instruction means (each 16-bit lane on its own, wrapping) for register and
    immediate operands; the adaptive pool program compiled for sm_90 has packed adds in its PTX without the
    rewrite and none with it, nor packed adds in its machine code (SASS, read with Triton's cuobjdump)."""
    _require()
    from luminal.runtime.gpu_compile import scalarize_packed_int16

    rng = np.random.default_rng(0)
    for op in ("add", "sub", "min", "max"):
        for sign in "su":
            for b in ("%r88", "16646398", "-7"):
                ptx = f"\tmov.b32 \t%r5, 1;\n\t{op}.{sign}16x2 \t%r89, %r87, {b};\n\tadd.s32 %r6, %r5, 1;\n"
                out = scalarize_packed_int16(ptx)
                assert "16x2" not in out and out.startswith("\tmov.b32 \t%r5, 1;\n") and \
                    out.endswith("\tadd.s32 %r6, %r5, 1;\n"), out
                block = out.splitlines()[1:-1]
                for x, y in rng.integers(0, 2 ** 32, size=(20, 2)).tolist() + [[0xFFFF7FFF, 0x00018001]]:
                    regs = {"%r87": x, "%r88": y}
                    _run_ptx_block(block, regs)
                    y = regs["%r88"] if b == "%r88" else int(b) & 0xFFFFFFFF
                    want = 0
                    for shift in (0, 16):  # the packed instruction: each lane alone
                        u, v = (x >> shift) & 0xFFFF, (y >> shift) & 0xFFFF
                        if sign == "s":
                            u, v = u - ((u & 0x8000) << 1), v - ((v & 0x8000) << 1)
                        lane = {"add": u + v, "sub": u - v, "min": min(u, v), "max": max(u, v)}[op] & 0xFFFF
                        want |= lane << shift
                    assert regs["%r89"] == want, (op, sign, b, hex(x), hex(y))
    code = textwrap.dedent("""
        import json, os, subprocess, tempfile
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # (Triton 3.6 keys its cache without the hook)
        import luminal as lm, triton
        from luminal import nn
        from luminal.codegen.gemm_lowp import narrow_operands
        from luminal.codegen.kernel import lower
        from luminal.codegen.triton import render
        from luminal.codegen.triton_support import storage_name
        from luminal.compiler.base import run
        from luminal.compiler.generic import GenericCompiler
        from luminal.runtime.gpu_compile import compile_for_target
        cx = lm.Graph()
        nn.AdaptiveAvgPool2d((4, 5))(cx.tensor((2, 3, 9, 8))).retrieve()
        run(GenericCompiler("cuda"), cx, None)
        p = narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False)
        tp = render(p)
        store = {b: storage_name(d) for b, (_, d) in p.buffers.items()}
        os.environ["LUMINAL_PTX_WORKAROUND"] = "0"
        before = compile_for_target(tp, store, kinds=("elementwise",))
        os.environ["LUMINAL_PTX_WORKAROUND"] = "1"
        after = compile_for_target(tp, store, kinds=("elementwise",))
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        sass = []
        for name, asm in after.items():
            if os.path.exists(tool):
                path = os.path.join(tempfile.mkdtemp(), "k.cubin")
                open(path, "wb").write(asm["cubin"])
                sass.append(subprocess.run([tool, "-sass", path], capture_output=True, text=True).stdout)
        print("RESULT" + json.dumps({"before": sum(a["ptx"].count("16x2 ") for a in before.values()),
                                     "after": sum(a["ptx"].count("16x2 ") for a in after.values()),
                                     "sass": [s.count("VIADD.16x2") for s in sass], "kernels": len(after)}))
    """)
    got = _compile_check(code)
    assert got["kernels"] >= 2 and got["before"] > 0, got  # (the rewrite is tested on what LLVM really emits)
    assert got["after"] == 0 and not any(got["sass"]), got


def test_kernels_compile_for_hopper_without_a_gpu():
    """Triton's real compiler (not its interpreter) takes every generated kernel kind down to PTX and a cubin for
    an H100/H200 (sm_90) on this CPU-only machine: elementwise (float fmod through libdevice in float64, float ->
    int casts), reductions, a float32 GEMM (IEEE: no TF32) and autocast's bfloat16 GEMM, which must use the
    tensor cores (wgmma), as must every GEMM of an autocast training step. No elementwise kernel contracts
    ``a * b + c`` into a fused multiply-add (the reference rounds twice). Tensor-core GEMMs feed wgmma from shared
    memory, asynchronously. Runs in a fresh process (this module's other tests put Triton into interpreter mode)."""
    _require()
    code = textwrap.dedent("""
        import json, luminal as lm
        from luminal.codegen.gemm_lowp import narrow_operands
        from luminal.codegen.kernel import lower
        from luminal.codegen.triton import render
        from luminal.codegen.triton_support import storage_name
        from luminal.runtime.gpu_compile import compile_for_target
        cx = lm.Graph()
        x, w, a = cx.tensor((64, 128)), cx.tensor((96, 128)), cx.tensor((64, 96))
        with lm.autocast(dtype=lm.bfloat16):
            (x @ w.T).retrieve()
        (x @ w.T).retrieve()
        (a * x[:, :96] + w[:64, :96]).retrieve()
        (a * 1.5 + 0.5).tanh().retrieve()
        cx.tensor(("b", "s", 64)).relu().relu().retrieve()  # symbolic sizes: computed in the kernel, 64 | numel
        (a % 1.5).retrieve()
        a.cast(lm.int8).retrieve()
        a.softmax(-1).retrieve()
        cx.tensor((512, 96)).sum(0).retrieve()  # over the rows of a row-major matrix (a bias gradient)
        cx.tensor((16, 3000)).softmax(-1).retrieve()  # rows longer than a chunk: a looping row group
        from luminal.nn.functional import scaled_dot_product_attention as sdpa
        qa, pad = cx.tensor((2, 2, 128, 64)), cx.tensor((2, 128), "bool")
        sdpa(qa, qa * 0.5, qa, attn_mask=pad.reshape((2, 1, 1, 128))).retrieve()  # one fused attention kernel
        p = narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False)
        tp = render(p)
        asm = compile_for_target(tp, {b: storage_name(d) for b, (_, d) in p.buffers.items()})
        def smem_fed(a):  # wgmma reads both tiles from shared memory as copied there, and overlaps the next copy
            dots = [l for l in a["ttgir"].splitlines() if "ttng.warp_group_dot " in l]
            return (len(dots) == 1 and ": !ttg.memdesc<" in dots[0] and "> * !ttg.memdesc<" in dots[0]
                    and "pendings = 1" in a["ttgir"])
        out = [{"kind": l.kind, "cubin": len(asm[l.name]["cubin"]), "ptx": asm[l.name]["ptx"],
                "smem_fed": smem_fed(asm[l.name]),
                "layouts": [t for t in asm[l.name]["ttgir"].splitlines() if "#ttg.blocked<" in t]} for l in tp.launches]
        # an autocast training step: every GEMM (forward, input and weight gradients) on tensor cores
        from luminal import nn
        from luminal.training import SGD
        cx = lm.Graph()
        m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 128))  # K > BLOCK_K: pipelined loops
        x, y = cx.tensor((256, 256)), cx.tensor((256, 128))
        with lm.autocast(dtype=lm.bfloat16):
            h = m(x)
        SGD(m.parameters(), lr=0.1).minimize(((h.cast("float32") - y) ** 2).mean().retrieve())
        p = narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False, widen_readers=True)
        tp = render(p)
        asm = compile_for_target(tp, {b: storage_name(d) for b, (_, d) in p.buffers.items()}, kinds=("gemm",))
        train = [("wgmma" in a["ptx"]) and smem_fed(a) for a in asm.values()]
        # autocast attention (inference): one fused kernel, both products on bfloat16 tensor-core instructions
        cx = lm.Graph()
        with lm.autocast(dtype=lm.bfloat16):
            xa = cx.tensor((2, 128, 128))
            nn.MultiheadAttention(128, 2, batch_first=True).eval()(xa, xa, xa, need_weights=False)[0].retrieve()
        with lm.autocast(dtype=lm.float16):  # the scores on float16 tiles (sdpa's probabilities stay float32)
            qh = cx.tensor((2, 2, 128, 64))
            sdpa(qh, qh * 0.5, qh, is_causal=True).retrieve()
        p = narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False, widen_readers=True)
        asm = compile_for_target(render(p), {b: storage_name(d) for b, (_, d) in p.buffers.items()},
                                 kinds=("attention",))
        amp = [[l.split(":")[-1] for l in a["ttgir"].splitlines() if " = tt.dot " in l or "warp_group_dot " in l]
               for a in asm.values()]
        print("RESULT" + json.dumps({"kernels": out, "training_gemms_on_tensor_cores": train, "amp_attention": amp}))
    """)
    result = _compile_check(code)
    kernels = result["kernels"]
    assert all(k["cubin"] > 0 for k in kernels)
    # the bfloat16 autocast attention kernel's two products (scores, probabilities times values) multiply
    # bfloat16 tiles; the float16 one's scores float16 tiles, its float32 probabilities float32 ones
    bf16, f16 = sorted(result["amp_attention"], key=lambda dots: "xf16" in str(dots))
    assert len(bf16) == 2 and all(d.count("xbf16") == 2 for d in bf16), bf16
    assert len(f16) == 2 and sorted(d.count("xf16") for d in f16) == [0, 2] and "xf32" in str(f16), f16
    attention = [k["ptx"] for k in kernels if k["kind"] == "attention"]
    assert attention and not any(".bf16" in a or "tf32" in a for a in attention)  # float32: IEEE products
    train = result["training_gemms_on_tensor_cores"]
    assert len(train) >= 5 and all(train), train
    gemms = [k["ptx"] for k in kernels if k["kind"] == "gemm"]
    assert len(gemms) == 2
    assert sum("wgmma" in g and "bf16" in g for g in gemms) == 1, "the bfloat16 GEMM is not on tensor cores"
    # bfloat16 operands are read through bfloat16 pointers: a bitcast of loaded int16 bits made Triton move each
    # B tile from shared memory to registers and back, read A with ldmatrix and wait for every MMA (H200: 129
    # against cuBLAS's 530 TFLOP/s)
    assert sum(k["smem_fed"] for k in kernels if k["kind"] == "gemm") == 1
    # known sizes are constants in the kernel: Triton proves the masks uniform and pipelines the tile loads into
    # shared memory (16-byte cp.async); with the sizes as run-time arguments it loaded one element at a time
    assert all("cp.async.cg.shared.global" in g for g in gemms), "GEMM tile loads are not pipelined"
    assert not any("tf32" in g for g in gemms)
    elementwise = [k["ptx"] for k in kernels if k["kind"] == "elementwise"]
    assert not any("fma.rn.f32" in e for e in elementwise), "an elementwise kernel contracted a multiply-add"
    # known sizes (and symbolic ones with a known factor): 128-bit loads and stores (scalar ones before the
    # sizes were computed in the kernels)
    for k in kernels:
        if k["kind"] in ("elementwise", "reduce"):
            assert "ld.global.v4" in k["ptx"] or "ld.global.v2" in k["ptx"], k["kind"]
    assert any("cvt.f64.f32" in e for e in elementwise)  # the float32 fmod, computed in float64
    assert any(k["kind"] == "reduce" for k in kernels) and any(k["kind"] == "attention" for k in kernels)
    # the sum over the rows of a (512, 96) matrix: each warp reads runs of at least 8 memory-adjacent elements of
    # the output axis, whole 32-byte sectors (4 rows per program used half of each)
    import re
    wide = []
    for k in kernels:
        for t in k["layouts"] if k["kind"] == "reduce" else ():
            m = re.search(r"sizePerThread = \[(\d+), \d+\], threadsPerWarp = \[(\d+), \d+\].*order = \[0, 1\]", t)
            if m and int(m.group(1)) * int(m.group(2)) >= 8:
                wide.append(t)
    assert wide, [k["layouts"] for k in kernels if k["kind"] == "reduce"]


def test_kernels_compile_for_amd_mi300_without_a_gpu():
    """The AMD path, checked without an AMD GPU: Triton's HIP backend takes every generated kernel kind down to
    AMDGCN and a code object for an MI300 (gfx942, 64-wide wavefronts): autocast's bfloat16 GEMMs (also every GEMM
    of an autocast training step) run on the matrix cores (``v_mfma_*_bf16``), the float32 GEMM uses full-precision
    ``v_mfma_f32_*_f32`` (no xf32: ``input_precision="ieee"``), the options reach the AMD backend (``a * b + c``
    is not contracted into a fused multiply-add), the float32 fmod goes through float64, elementwise and reduction
    kernels use 128-bit loads. Runs in a fresh process (this module's other tests put Triton into interpreter
    mode). Not run on AMD hardware."""
    _require()
    code = textwrap.dedent("""
        import json, re, luminal as lm
        from luminal.codegen.gemm_lowp import narrow_operands
        from luminal.codegen.kernel import lower
        from luminal.codegen.triton import render
        from luminal.codegen.triton_support import storage_name
        from luminal.runtime.gpu_compile import compile_for_target

        def amd(p, kinds=None):
            tp = render(p)
            asm = compile_for_target(tp, {b: storage_name(d) for b, (_, d) in p.buffers.items()}, arch="gfx942",
                                     backend="hip", kinds=kinds)
            return [{"kind": l.kind, "hsaco": len(asm[l.name]["hsaco"]), "gcn": asm[l.name]["amdgcn"],
                     "source": tp.source.split(f"def {l.name}(")[1].split("\\ndef ")[0]}
                    for l in tp.launches if l.name in asm]
        cx = lm.Graph()
        x, w, a = cx.tensor((64, 128)), cx.tensor((96, 128)), cx.tensor((64, 96))
        with lm.autocast(dtype=lm.bfloat16):
            (x @ w.T).retrieve()
        (x @ w.T).retrieve()
        (a * 1.5 + 0.5).tanh().retrieve()
        (a % 1.5).retrieve()
        a.cast(lm.int8).retrieve()
        a.softmax(-1).retrieve()
        cx.tensor((512, 96)).sum(0).retrieve()
        cx.tensor((16, 3000)).softmax(-1).retrieve()
        from luminal.nn.functional import scaled_dot_product_attention as sdpa
        qa = cx.tensor((2, 2, 128, 64))
        sdpa(qa, qa * 0.5, qa, is_causal=True).retrieve()
        kernels = amd(narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False))
        cx = lm.Graph()
        (cx.tensor((64, 96)) * cx.tensor((64, 96)) + cx.tensor((64, 96))).retrieve()
        fma = amd(lower(cx))
        from luminal import nn
        from luminal.training import SGD
        cx = lm.Graph()
        m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 128))
        x, y = cx.tensor((256, 256)), cx.tensor((256, 128))
        with lm.autocast(dtype=lm.bfloat16):
            h = m(x)
        SGD(m.parameters(), lr=0.1).minimize(((h.cast("float32") - y) ** 2).mean().retrieve())
        train = amd(narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False,
                                    widen_readers=True), kinds=("gemm",))
        strip = lambda ks: [{k: v for k, v in e.items() if k != "source"} for e in ks]
        print("RESULT" + json.dumps({"kernels": kernels, "fma": strip(fma), "train": strip(train)}))
    """)
    import re
    result = _compile_check(code)
    kernels = result["kernels"]
    assert kernels and all(k["hsaco"] > 0 for k in kernels) and any(k["kind"] == "attention" for k in kernels)
    gemms = [k["gcn"] for k in kernels if k["kind"] == "gemm"]
    assert len(gemms) == 2
    assert sum(bool(re.search(r"v_mfma_f32_\w+_bf16", g)) for g in gemms) == 1, "the bfloat16 GEMM is not on MFMA"
    assert any(re.search(r"v_mfma_f32_\w+x\d+_f32", g) for g in gemms)  # float32 on full-precision matrix cores
    assert not any("xf32" in g for g in gemms)
    train = result["train"]
    assert len(train) >= 5 and all(re.search(r"v_mfma_f32_\w+_bf16", k["gcn"]) for k in train)
    (fma,) = result["fma"]
    assert not re.search(r"v_(pk_)?fma(c|mk|ak)?_f32", fma["gcn"]), "a * b + c was contracted"
    assert any("lm_fmod" in k["source"] and "v_cvt_f64_f32" in k["gcn"] for k in kernels)
    for k in kernels:  # (the causal mask's kernel loads nothing: it compares indices)
        if k["kind"] in ("elementwise", "reduce") and re.search(r"(global|buffer)_load", k["gcn"]):
            assert re.search(r"(global|buffer)_load_dwordx4", k["gcn"]), k["kind"]


@pytest.mark.parametrize("host_outputs", [False, True])
def test_carried_state_swaps_buffers_instead_of_copying(host_outputs):
    """A carried weight / moment takes over the buffer its new value was written to (the old one becomes the
    output's): no device->device copy per step, whether the results stay on the device or are also copied to
    the host (the default); the swapped assignment alternates. Reading a
    weight between steps, setting a new one and a new batch size (re-allocation) keep every result equal to the
    reference's, as does the same run with swapping off (``LUMINAL_CARRY_SWAP=0``, which copies). (A weight set
    by the user between steps keeps its own assignment: up to four captured CUDA graphs then alternate.)"""
    from luminal import nn
    from luminal.training import Adam

    _require()
    X, Y = rand((13, 5), 4), rand((13, 3), 5)
    feeds = [(X[:8], Y[:8])] * 4 + [(X[:5], Y[:5])] * 3
    results = {}
    for device, swap in (("reference", "1"), (DEV, "1"), (DEV, "0")):
        os.environ["LUMINAL_CARRY_SWAP"] = swap
        try:
            cx = lm.Graph()
            nn.init.manual_seed(1)
            m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
            x, y = cx.tensor(("b", 5)), cx.tensor(("b", 3))
            loss = ((m(x) - y) ** 2).mean().retrieve()
            Adam(m.parameters(), lr=0.05).minimize(loss)
            x.set(X[:8]), y.set(Y[:8])
            cx.compile(device=device)
            copies, swapped = [], []
            if device == DEV:
                cx.runtime.host_outputs = host_outputs
                real_copy = cx.runtime.memory.copy
                cx.runtime.memory.copy = lambda *a: copies.append(a[2]) or real_copy(*a)
            out = []
            for step, (xb, yb) in enumerate(feeds):
                x.set(xb), y.set(yb)
                if step == 2:  # a weight read between steps, then replaced by the user
                    w = m[0].weight
                    out.append(np.array(w.data))
                    w.copy_(np.array(w.data) * 0.5)
                copies.clear()
                cx.execute()
                if device == DEV:
                    swapped.append(len(cx.runtime._swapped))
                    if step in (1, 5) and swap == "1":
                        assert copies == [], copies  # every carried value swapped in, nothing copied
                out.append(float(loss.data()))
            out += [np.array(v) for v in m.state_dict().values()]
            results[(device, swap)] = out
            if device == DEV and swap == "1":  # alternating assignments
                assert swapped[0] != swapped[1] and swapped[5] != swapped[6] and max(swapped) > 0, swapped
            if device == DEV and swap == "0":
                assert set(swapped) == {0}
        finally:
            os.environ.pop("LUMINAL_CARRY_SWAP", None)
    want = results[("reference", "1")]
    for key in ((DEV, "1"), (DEV, "0")):
        for w, h in zip(want, results[key]):
            np.testing.assert_allclose(h, w, **CHAIN)


def test_training_steps_with_swapped_buffers_replay_captured_graphs():
    """Carried state swaps buffers every step, so the plan key (which buffers are swapped) alternates; each
    key is captured on its second uncaptured run and replayed afterwards (an H200 replayed none of W3x16's
    training steps: only a key equal to the last run's was captured, never the case when two alternate). On
    the interpreter, which cannot capture, a stand-in capture keeps the launches with the buffers of the
    moment, as a CUDA graph keeps their pointers. Losses and weights equal the reference's after every step."""
    from luminal.training import Adam

    _require()
    state = {}
    for device in ("reference", DEV):
        cx, m, _, _ = _mlp_training_step(lambda params: Adam(params, lr=0.05))
        cx.compile(device=device)
        runtime = cx.runtime
        if device == "gpu-interpret":
            runtime.memory.graphs, runtime.memory.stream = True, None
            runtime._capture = lambda bindings, rt=runtime: [("call", step) for _, step in rt._steps(bindings)]
        got = []
        for _ in range(8):
            cx.execute()
            got.append({k: np.array(v) for k, v in m.state_dict().items()})
        state[device] = got
        if device == DEV:
            assert runtime.memory.graphs and len(runtime._graphs) == 2, runtime._graphs.keys()
            # each key: one uncaptured run, then captured (and replayed) on its second run, replayed after that
            assert runtime.graph_replays == 8 - 2, runtime.graph_replays
    for want, have in zip(state["reference"], state[DEV]):
        for k, v in want.items():
            np.testing.assert_allclose(have[k], v, **CHAIN)


def test_run_time_check_values_come_with_the_step_results():
    """A loss's run-time check (cross-entropy: the targets' extremes) is read after every step: with the results
    left on the device its values are copied with the step's, after its one synchronize, not fetched one by one
    (two more synchronizes per step before); a target out of range still raises IndexError and leaves the
    weights as they were, equal to the reference's."""
    from luminal import nn
    from luminal.nn import functional as F
    from luminal.training import Adam

    _require()
    X, Y = rand((6, 5), 4), np.array([0, 2, 1, 2, 0, 1])
    weights = {}
    for device in ("reference", DEV):
        cx = lm.Graph()
        nn.init.manual_seed(1)
        m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        x, y = cx.tensor((6, 5)).set(X), cx.tensor((6,), "int64").set(Y)
        Adam(m.parameters(), lr=0.05).minimize(F.cross_entropy(m(x), y).retrieve())
        cx.compile(device=device)
        if device == DEV:
            cx.runtime.host_outputs = False
            syncs, real = [], cx.runtime.memory.synchronize
            cx.runtime.memory.synchronize = lambda: syncs.append(1) or real()
        for _ in range(3):
            if device == DEV:
                syncs.clear()
            cx.execute()
            if device == DEV:
                assert len(syncs) == 1, len(syncs)
        before = {k: np.array(v) for k, v in m.state_dict().items()}
        y.set(np.array([0, 2, 1, 3, 0, 1]))
        with pytest.raises(IndexError):
            cx.execute()
        for k, v in m.state_dict().items():
            np.testing.assert_array_equal(np.array(v), before[k])
        weights[device] = before
    for k, v in weights["reference"].items():
        np.testing.assert_allclose(weights[DEV][k], v, **CHAIN)


def test_autocast_training_step_has_every_gemm_in_low_precision():
    """An autocast (bfloat16) MLP training step: the output gradients, which the bias gradients also sum, are
    stored as bfloat16 (the summing kernels widen them as they load), so all of the step's GEMMs (forward, input
    and weight gradients) take bfloat16 operands; losses and weights after three SGD steps match the
    reference's."""
    from luminal import nn
    from luminal.codegen.gemm_lowp import narrow_operands
    from luminal.codegen.kernel import GemmKernel, lower
    from luminal.training import SGD

    _require()
    X, Y = rand((16, 12), 4), rand((16, 5), 5)
    got = {}
    for device in ("reference", DEV):
        cx = lm.Graph()
        nn.init.manual_seed(2)
        m = nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 5))
        x, y = cx.tensor((16, 12)).set(X), cx.tensor((16, 5)).set(Y)
        with lm.autocast(dtype=lm.bfloat16):
            out = m(x)
        loss = ((out.cast("float32") - y) ** 2).mean().retrieve()
        SGD(m.parameters(), lr=0.1).minimize(loss)
        if device == DEV:
            program = narrow_operands(lower(cx), store_as=(lm.bfloat16, lm.float16), round_on_load=False,
                                      widen_readers=True)
            gemms = [k for k in program.kernels if isinstance(k, GemmKernel)]
            assert len(gemms) >= 5, len(gemms)
            for g in gemms:
                assert {program.buffers[g.a][1], program.buffers[g.b][1]} == {lm.bfloat16}, g
        cx.compile(device=device)
        got[device] = []
        for _ in range(3):
            cx.execute()
            got[device].append(float(loss.data()))
        got[device] += [np.array(v) for v in m.state_dict().values()]
    for w, h in zip(got["reference"], got[DEV]):
        np.testing.assert_allclose(h, w, rtol=2e-2, atol=2e-3)
