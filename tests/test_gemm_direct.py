"""Direct convolution (luminal/codegen/gemm_direct.py): a convolution's GEMM reading its input in place.

Forward convolutions (1-D, 2-D, 3-D; padding, dilation, bias, output rows shorter and longer than a vector,
output channels not a multiple of the register tile, float32 and float64) and the gradients of a graph whose
forward runs the direct kernel, against torch CPU in float64 (fixed seeds; error <= 1e-4 (float32) / 1e-10
(float64) of the largest reference value). Each case also checks that the direct kernel is the one that ran
(its function is in the generated C), that weight gradients take its "dot" form, and that the cases it must
not take (``LUMINAL_DIRECT_CONV=0``) keep the pack; strided convolutions read their input in phases. No timings
are asserted.
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
MARK = "direct convolution (see luminal/codegen/gemm_direct.py)"
CONV = {1: (F.conv1d, torch.nn.functional.conv1d), 2: (F.conv2d, torch.nn.functional.conv2d),
        3: (F.conv3d, torch.nn.functional.conv3d)}


def _close(got, exp, dtype):
    scale = max(float(np.max(np.abs(exp))), 1e-30)
    assert got.shape == exp.shape
    assert np.max(np.abs(got.astype(np.float64) - exp)) <= TOL[dtype] * scale


def _graph(xs, ws, dtype, kw, bias=False, grads=False, seed=0, special=False):
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal(xs).astype(dtype)
    if special:  # non-finite inputs travel the same way as through torch (the halo is zeros, not the input)
        xa.flat[3], xa.flat[-2] = np.inf, np.nan
    wa = rng.standard_normal(ws).astype(dtype)
    ba = rng.standard_normal(ws[0]).astype(dtype) if bias else None
    cx = lm.Graph()
    x, w = cx.tensor(xs, dtype).set(xa), cx.tensor(ws, dtype).set(wa)
    b = cx.tensor((ws[0],), dtype).set(ba) if bias else None
    y = CONV[len(xs) - 2][0](x, w, b, **kw)
    outs = [y]
    if grads:
        outs += grad((y * y).sum() * 0.5, [x, w])
    for t in outs:
        t.retrieve()
    return cx, (xa, wa, ba), outs


def _torch(xs, arrays, kw, grads=False):
    xa, wa, ba = arrays
    x = torch.from_numpy(xa.astype(np.float64)).requires_grad_()
    w = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    b = torch.from_numpy(ba.astype(np.float64)) if ba is not None else None
    y = CONV[len(xs) - 2][1](x, w, b, **kw)
    if not grads:
        return [y.detach().numpy()]
    (y * y).sum().mul(0.5).backward()
    return [y.detach().numpy(), x.grad.numpy(), w.grad.numpy()]


def _run(monkeypatch, xs, ws, dtype, kw, **opts):
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    cx, arrays, outs = _graph(xs, ws, dtype, kw, **opts)
    cx.compile(device="cpu")
    cx.execute()
    return cx, arrays, [t.data() for t in outs]


CASES = [  # (input shape, weight shape, conv kwargs)
    ((2, 4, 16, 16, 16), (16, 4, 3, 3, 3), dict(padding=1)),      # the Conv3d of benchmarks/layer_training.py
    ((1, 3, 9, 10, 17), (5, 3, 3, 2, 3), dict(padding=(1, 0, 2))),  # rows of 17 + 4 - 2 = 19: a vector and a tail
    ((2, 6, 12, 33), (9, 6, 3, 3), dict(padding=1)),               # 9 output channels: a partial register tile
    ((1, 5, 11, 20), (4, 5, 3, 3), dict(padding=2, dilation=2)),
    ((3, 7, 40), (6, 7, 5), dict(padding=2)),                      # 1-D, rows of 40
    ((2, 8, 9, 8), (8, 8, 1, 3), dict(padding=(0, 1))),            # rows of 8: half a vector
    ((2, 3, 10, 12), (4, 3, 3, 3), {}),                            # no padding (no masks at all)
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", CASES)
def test_direct_conv_forward_matches_torch(monkeypatch, xs, ws, kw, dtype):
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, bias=True)
    assert MARK in cx.runtime.source, "the direct kernel did not run"
    _close(got[0], _torch(xs, arrays, kw)[0], dtype)


@pytest.mark.parametrize("xs,ws,kw", [CASES[0], CASES[2], CASES[4]])
def test_gradients_of_a_direct_conv_graph(monkeypatch, xs, ws, kw):
    cx, arrays, got = _run(monkeypatch, xs, ws, "float64", kw, grads=True)
    assert MARK in cx.runtime.source
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, "float64")


def test_non_finite_inputs(monkeypatch):
    xs, ws, kw = (1, 2, 6, 20), (3, 2, 3, 3), dict(padding=1)
    cx, arrays, got = _run(monkeypatch, xs, ws, "float32", kw, special=True)
    assert MARK in cx.runtime.source
    exp = _torch(xs, arrays, kw)[0]
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(exp))
    np.testing.assert_array_equal(np.isinf(got[0]), np.isinf(exp))
    fin = np.isfinite(exp)
    assert np.max(np.abs(got[0][fin] - exp[fin])) <= 1e-4 * np.max(np.abs(exp[fin]))


def _plans(cx):
    prog = cx.runtime.program
    return [direct_plan(prog, k) for k in prog.kernels if isinstance(k, GemmKernel) and k.b_pro is not None]


STRIDED = [  # output rows of 16 / 32 / 16: whole vectors in float32 and float64 (so the "dot" form applies too)
    ((2, 4, 12, 32), (8, 4, 3, 3), dict(stride=2, padding=1)),
    ((1, 3, 7, 96), (5, 3, 3, 4), dict(stride=(1, 3), padding=(1, 2), dilation=(1, 2))),
    ((2, 3, 6, 6, 31), (4, 3, 3, 3, 3), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", STRIDED)
def test_strided_conv_reads_the_input_in_phases(monkeypatch, xs, ws, kw, dtype):
    """A stride-s convolution reads every s-th input element along the rows: the copy stores the innermost axis
    as s phases (element c at (c % s, c // s)), where the reads are contiguous again: forward ("rows") and weight
    gradient ("dot"). Its input gradient is one stride-1 convolution per phase of the input (nn.conv_grad), each
    a direct kernel too where its rows apply."""
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, grads=True)
    plans = [p for p in _plans(cx) if p is not None]
    s = kw["stride"] if isinstance(kw["stride"], int) else kw["stride"][-1]
    assert {p.mode for p in plans if p.phase == s} == {"rows", "dot"}, plans
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", [((1, 2, 5, 35), (4, 2, 5, 5), dict(stride=2, padding=2)),  # odd row, even pad
                                      ((2, 3, 4, 66), (4, 3, 3, 3), dict(stride=2, padding=(1, 0))),  # no pad
                                      ((1, 4, 3, 33), (4, 1, 3, 3), dict(stride=2, padding=1, groups=4))])
def test_stride_two_copy_splits_rows_by_shuffles(monkeypatch, xs, ws, kw, dtype):
    """A stride-2 convolution's copy splits each input row into its even and odd elements two vectors at a time
    (one shuffle each), the rest one by one: rows longer and shorter than two vectors, odd and even, with even,
    odd and no padding (which phase the even elements go to), against torch."""
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw)
    assert any(p is not None and p.phase == 2 for p in _plans(cx)), _plans(cx)
    assert "__builtin_shufflevector" in cx.runtime.source
    _close(got[0], _torch(xs, arrays, kw)[0], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", [CASES[0], ((2, 3, 10, 32), (5, 3, 3, 3), dict(padding=1)),
                                      ((1, 4, 6, 16), (6, 4, 3, 5), dict(padding=(1, 2), dilation=(2, 1))),
                                      ((3, 7, 32), (6, 7, 5), dict(padding=2))])
def test_weight_gradient_dot_form(monkeypatch, xs, ws, kw, dtype):
    """The weight gradient's output runs along the kernel's width (too short for vectors): the kernel sums along
    the input's rows instead ("dot"); the forward and the input's gradient (a convolution, nn.conv's "conv"
    gradient rule) take the "rows" form."""
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, grads=True)
    modes = sorted(p.mode for p in _plans(cx) if p is not None)
    assert "dot" in modes and "rows" in modes, modes
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, dtype)


def test_switched_off(monkeypatch):
    monkeypatch.setenv("LUMINAL_DIRECT_CONV", "0")
    xs, ws, kw = CASES[2]
    cx, arrays, got = _run(monkeypatch, xs, ws, "float32", kw)
    assert MARK not in cx.runtime.source and cx.runtime.fused_buffers
    _close(got[0], _torch(xs, arrays, kw)[0], "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_window_of_a_computed_input(monkeypatch, dtype):
    """The input of the convolution is computed (a ReLU; a padded input plus 1.5, whose padding is part of the
    stored tensor and reads 1.5): the window reads the stored result, with and without masks; against torch."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(5)
    xa = rng.standard_normal((2, 3, 9, 16)).astype(dtype)
    wa = rng.standard_normal((8, 3, 3, 3)).astype(dtype)
    cx = lm.Graph()
    x, w = cx.tensor(xa.shape, dtype).set(xa), cx.tensor(wa.shape, dtype).set(wa)
    y1 = F.conv2d(x.relu(), w, padding=1).retrieve()
    y2 = F.conv2d(F.pad(x, (1, 1, 2, 0)) + 1.5, w).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert cx.runtime.source.count(MARK) >= 2
    tx, tw = torch.from_numpy(xa.astype(np.float64)), torch.from_numpy(wa.astype(np.float64))
    _close(y1.data(), torch.nn.functional.conv2d(tx.relu(), tw, padding=1).numpy(), dtype)
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(tx, (1, 1, 2, 0)) + 1.5, tw).numpy()
    _close(y2.data(), ref, dtype)


def test_conv4d_forward_and_gradients_against_the_reference(monkeypatch):
    """Conv4d (spacetime data; no torch counterpart): the direct kernels against the reference interpreter, and
    the forward against a numpy sum over the kernel offsets."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(7)
    xa = rng.standard_normal((1, 3, 5, 6, 5, 16))
    wa = rng.standard_normal((4, 3, 3, 3, 3, 3))

    def build():
        cx = lm.Graph()
        x, w = cx.tensor(xa.shape, "float64").set(xa), cx.tensor(wa.shape, "float64").set(wa)
        y = F.conv4d(x, w, padding=1)
        outs = [y] + grad((y * y).sum() * 0.5, [x, w])
        for t in outs:
            t.retrieve()
        return cx, outs

    cx, got = build()
    cx.compile(device="cpu")
    cx.execute()
    assert {p.mode for p in _plans(cx) if p is not None} == {"rows", "dot"}
    ref_cx, ref = build()
    ref_cx.compile(device="reference")
    ref_cx.execute()
    for g, r in zip(got, ref):
        _close(g.data(), r.data(), "float64")
    xp = np.pad(xa, [(0, 0), (0, 0)] + [(1, 1)] * 4)
    exp = np.zeros((1, 4) + xa.shape[2:])
    for off in np.ndindex(3, 3, 3, 3):
        win = xp[(slice(None), slice(None)) + tuple(slice(o, o + n) for o, n in zip(off, xa.shape[2:]))]
        exp += np.einsum("bc...,oc->bo...", win, wa[(slice(None), slice(None)) + off])
    _close(got[0].data(), exp, "float64")


WIDE = [  # output rows that are not whole vectors, a padded row past them: vectors run over padded rows
    ((2, 16, 12, 24), (24, 16, 3, 3), dict(padding=1)),          # rows of 24 in rows of 26 (float32: 16 + 8)
    ((1, 5, 16, 13), (40, 5, 3, 3), dict(padding=1)),            # 13 in 15, 40 channels (past FEW)
    ((1, 3, 4, 18, 29), (6, 3, 3, 3, 3), dict(padding=(1, 0, 1))),  # 3-D, 16 rows of 29 in 31
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", WIDE)
def test_rows_over_padded_rows(monkeypatch, xs, ws, kw, dtype):
    """Where output rows are not whole vectors, the rows form runs its vectors over the padded rows of the copy
    (positions past a row computed and dropped), planes of rows at a time; forward (with a bias epilogue) and
    gradients against torch."""
    monkeypatch.setenv("LUMINAL_WINOGRAD", "0")  # (the first case is a 3x3 layer Winograd would take)
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, grads=True)
    plans = [p for p in _plans(cx) if p is not None]
    if dtype == "float32" or xs[-1] % 8:
        assert any(p.q2 is not None for p in plans), plans
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, dtype)
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, bias=True)
    _close(got[0], _torch(xs, arrays, kw)[0], dtype)


def _batched_direct(cx):
    """The batched GEMMs (a grouped convolution's, one per group) and whether each runs the direct kernel."""
    prog = cx.runtime.program
    return [direct_plan(prog, k) is not None for k in prog.kernels
            if isinstance(k, GemmKernel) and int(np.prod([int(d.to_int()) for d in k.dims[:-2]])) > 1]


GROUPED = [  # (input shape, weight shape, conv kwargs incl. groups)
    ((2, 8, 10, 32), (8, 1, 3, 3), dict(padding=1, groups=8)),                 # depthwise, rows of whole vectors
    ((2, 6, 9, 28), (6, 1, 7, 7), dict(padding=3, groups=6)),                  # depthwise 7x7, rows of 28 = 16 + 12
    ((1, 8, 6, 16), (12, 2, 3, 3), dict(padding=1, groups=4)),                 # 4 groups, 3 output channels each
    ((2, 4, 5, 6, 16), (8, 1, 3, 3, 3), dict(padding=1, groups=4)),            # 3-D, 2 output channels per group
    ((3, 6, 48), (6, 2, 5), dict(padding=2, groups=3)),                         # 1-D
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", GROUPED)
def test_grouped_and_depthwise_convolutions(monkeypatch, xs, ws, kw, dtype):
    """A grouped convolution is a batched GEMM (one per group): the direct kernel runs all groups in one call,
    each group's window at its channels; its input gradient is a grouped convolution too (nn.conv's "conv" rule),
    its weight gradient the "dot" form per group. Forward (with a bias) and gradients against torch."""
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, grads=True)
    direct = _batched_direct(cx)
    assert direct and all(direct), direct
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, dtype)
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, bias=True)
    assert all(_batched_direct(cx))
    _close(got[0], _torch(xs, arrays, kw)[0], dtype)


def test_strided_depthwise_forward(monkeypatch):
    """A strided depthwise convolution (MobileNet's downsampling): phases and groups together."""
    xs, ws, kw = (2, 4, 9, 64), (4, 1, 3, 3), dict(stride=2, padding=1, groups=4)
    for dtype in ("float32", "float64"):
        cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw)
        plans = [direct_plan(cx.runtime.program, k) for k in cx.runtime.program.kernels if isinstance(k, GemmKernel)]
        assert [p.phase for p in plans if p is not None] == [2]
        _close(got[0], _torch(xs, arrays, kw)[0], dtype)


SMALL_DEPTHWISE = [  # (input shape, weight shape, conv kwargs): rows of 7, 5 and 4 outputs: 7/16, 5/16, 4/16 lanes
    ((1, 12, 14, 14), (12, 1, 3, 3), dict(stride=2, padding=1, groups=12)),
    ((2, 6, 9, 9), (6, 1, 3, 3), dict(stride=2, padding=1, groups=6)),
    ((1, 8, 4, 4), (8, 1, 3, 3), dict(padding=1, groups=8)),
]


@pytest.mark.parametrize("xs,ws,kw", SMALL_DEPTHWISE)
def test_depthwise_on_small_images_takes_the_direct_kernel(monkeypatch, xs, ws, kw):
    """A depthwise layer whose output rows fill a quarter to a half of a vector (MobileNet's last stages: 7 x 7,
    4 x 4, stride 2 from 14 x 14) runs the direct kernel, not a batch of one-row GEMMs over an im2col copy;
    forward (with a bias) and both gradients against torch float64."""
    cx, arrays, got = _run(monkeypatch, xs, ws, "float32", kw, bias=True)
    assert _batched_direct(cx) == [True]
    _close(got[0], _torch(xs, arrays, kw)[0], "float32")
    cx, arrays, got = _run(monkeypatch, xs, ws, "float32", kw, grads=True)
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, "float32")


@pytest.mark.parametrize("case", ["upstream", "input"])
def test_partial_vectors_of_the_dot_form(monkeypatch, case):
    """Weight gradients over rows of 28 (16 + 12 lanes): a dot-form vector that crosses into the next row loads 16
    elements from the row's place in the copy, of which the last 4 lie past the row, and blends in the next
    row's. A depthwise 7x7 convolution: "upstream": the loss ``sum(y**2)/2`` with inf at the first input element
    of channel 1, so channel 1's upstream gradient starts with inf, right after channel 0's; "input": a linear
    loss (finite upstream gradient) and NaN at the last element of a row of channel 2, which the lanes past the
    row read for the taps that never reach it. The non-finite positions of every gradient are torch's, the rest
    equal to torch's."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    xs, ws, kw = (1, 3, 5, 28), (3, 1, 7, 7), dict(padding=3, groups=3)
    rng = np.random.default_rng(3)
    xa = rng.standard_normal(xs).astype("float32")
    wa = rng.standard_normal(ws).astype("float32")
    ra = rng.standard_normal(xs).astype("float32")
    if case == "upstream":
        xa[0, 1, 0, 0] = np.inf
    else:
        xa[0, 2, 2, 27] = np.nan
    cx = lm.Graph()
    x, w, r = cx.tensor(xs).set(xa), cx.tensor(ws).set(wa), cx.tensor(xs).set(ra)
    y = F.conv2d(x, w, **kw)
    outs = [y] + grad((y * y).sum() * 0.5 if case == "upstream" else (y * r).sum(), [x, w])
    for t in outs:
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    prog = cx.runtime.program
    assert "dot" in {p.mode for p in (direct_plan(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)) if p}
    tx = torch.from_numpy(xa.astype(np.float64)).requires_grad_()
    tw = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, **kw)
    (ty * ty * 0.5 if case == "upstream" else ty * torch.from_numpy(ra.astype(np.float64))).sum().backward()
    exp = [ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()]
    assert np.isfinite(exp[2][0]).all() and not np.isfinite(exp[2]).all()
    if case == "input":
        assert np.isfinite(exp[2][2, 0, :, :3]).all()  # the taps left of the NaN never reach it
    for t, e in zip(outs, exp):
        g = t.data()
        np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(e))
        fin = np.isfinite(e)
        assert np.max(np.abs(g[fin] - e[fin])) <= 1e-4 * np.max(np.abs(e[fin]))


POLYPHASE = [  # (input shape, weight shape, conv kwargs): strided convolutions whose input gradient is per phase
    ((2, 3, 6, 64), (5, 3, 3, 3), dict(stride=2, padding=1)),                   # phases of 32 rows
    ((1, 4, 7, 63), (4, 4, 3, 3), dict(stride=2, padding=1)),                   # 32 and 31: uneven phases
    ((2, 4, 8, 64), (8, 1, 3, 3), dict(stride=2, padding=1, groups=4)),         # grouped (2 outputs per group)
    ((2, 6, 6, 64), (6, 1, 5, 5), dict(stride=(1, 2), padding=2, groups=6)),   # depthwise 5x5, one axis strided
    ((2, 4, 8, 64), (6, 4, 1, 1), dict(stride=2)),                              # 1x1 (a shortcut): phases without taps
    ((1, 3, 6, 96), (4, 3, 3, 4), dict(stride=(2, 3), padding=(0, 2), dilation=(1, 2))),  # dilation 2, stride 3
    ((1, 2, 4, 6, 64), (3, 2, 3, 3, 3), dict(stride=(1, 2, 2), padding=1)),    # 3-D
]


@pytest.mark.parametrize("xs,ws,kw", POLYPHASE)
def test_strided_input_gradient_by_phases(monkeypatch, xs, ws, kw):
    """The input gradient of a strided convolution as one stride-1 convolution per phase (nn.conv_grad), against
    torch in float64: the "conv" gradient rule was registered and its phases ran the direct kernel (but for a 1x1
    kernel)."""
    cx, arrays, got = _run(monkeypatch, xs, ws, "float64", kw, grads=True)
    assert any(rule[0] == "conv" for rule in cx.grad_rules.values())
    s = kw["stride"] if isinstance(kw["stride"], int) else kw["stride"][-1]
    if max(ws[2:]) > 1:  # (a 1x1 kernel's phases are plain GEMMs of the upstream gradient, or zeros)
        assert any(p.phase == 1 and p.mode == "rows" for p in _plans(cx) if p is not None)
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, "float64")
    assert s > 1


def test_phase_taps_against_enumeration():
    """conv_grad.phase: for each input position s*i + r, the taps it gives and the upstream positions they read
    (through the stride-1 convolution it describes) are exactly those of the forward's index map
    ``input = s*o + d*k - pad``, enumerated, over extents, kernels, strides, dilations and paddings."""
    from luminal.nn.conv_grad import phase

    for x in (1, 2, 5, 8, 11):
        for k in (1, 2, 3, 5):
            for s in (1, 2, 3):
                for d in (1, 2, 3):
                    for lo, hi in ((0, 0), (1, 1), (2, 0), (0, 3)):
                        out = (x + lo + hi - d * (k - 1) - 1) // s + 1
                        if out < 1:
                            continue
                        want = {(s * o + d * j - lo, j, o) for o in range(out) for j in range(k)
                                if 0 <= s * o + d * j - lo < x}
                        got = set()
                        for r in range(s):
                            p = phase(x, k, s, d, (lo, hi), r)
                            n = (x - r + s - 1) // s
                            if p is None:
                                continue
                            k0, step, taps, dil, (before, after), n_out = p
                            assert n_out == n and out + before + after - dil * (taps - 1) == n
                            for i in range(n):
                                for m in range(taps):  # flipped tap m reads padded upstream position i + dil * m
                                    o = i + dil * m - before
                                    if 0 <= o < out:
                                        got.add((s * i + r, k0 + step * (taps - 1 - m), o))
                        assert got == want, (x, k, s, d, lo, hi)


ACROSS = [  # weight gradients whose rows are not whole vectors: the dot form's vectors cross into the next row
    ((2, 8, 6, 24), (6, 8, 3, 3), dict(padding=1)),                 # rows of 24 (W4's conv2): 16, then 8 + 8
    ((1, 4, 5, 12), (3, 4, 3, 3), dict(padding=1)),                 # rows of 12, shorter than a vector
    ((2, 3, 4, 8), (5, 3, 3, 3), dict(padding=1)),                  # rows of 8: every vector spans two rows
    ((1, 3, 7, 21), (4, 3, 3, 3), dict(padding=1)),                 # 7 x 21 = 147 per image: a 3-element tail
    ((2, 2, 9, 40), (3, 2, 3, 3), dict(stride=(1, 2), padding=1)),  # strided: rows of 20 in phases
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", ACROSS)
def test_dot_form_across_rows(monkeypatch, xs, ws, kw, dtype):
    """The dot form's vectors are consecutive stretches of the sum; where one crosses from a row of the input
    into the next, it loads both places and blends them, and the last K % VW products are summed one by one:
    the weight gradient takes the dot form for these rows and equals torch's (float64 reference)."""
    cx, arrays, got = _run(monkeypatch, xs, ws, dtype, kw, grads=True)
    prog = cx.runtime.program
    assert "dot" in {p.mode for p in (direct_plan(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)) if p}
    for g, e in zip(got, _torch(xs, arrays, kw, grads=True)):
        _close(g, e, dtype)


SANITIZER_SCRIPT = r"""
import numpy as np, luminal as lm
import luminal.nn.functional as F
from luminal.training import grad
cases = [((2, 4, 6, 32), (4, 1, 3, 3), dict(padding=1, groups=4)),       # depthwise (batched rows + dot)
         ((1, 6, 5, 28), (6, 1, 7, 7), dict(padding=3, groups=6)),       # 7x7, dot vectors across rows
         ((2, 3, 5, 24), (5, 3, 3, 3), dict(padding=1)),                 # rows of 24
         ((1, 3, 6, 32), (4, 3, 3, 3), dict(stride=2, padding=1)),       # phases (forward, input gradient)
         ((1, 2, 5, 35), (4, 2, 5, 5), dict(stride=2, padding=2)),       # the two phases' split: a tail, even pad
         ((1, 2, 4, 21), (3, 2, 3, 3), dict(padding=1)),                 # a K tail in the dot form
         ((2, 8, 7, 7), (8, 1, 3, 3), dict(padding=1, groups=8)),        # planes of padded rows (7 in 9): with
         ((1, 3, 14, 14), (5, 3, 3, 3), dict(padding=1)),               # AVX-512, compressed masked stores
         ((1, 4, 20, 20), (80, 4, 3, 3), dict(padding=1)),               # cols form: a partial row block
         ((2, 8, 14, 14), (32, 8, 3, 3), dict(stride=2, padding=1))]     # cols form: strided, two images
rng = np.random.default_rng(0)
for xs, ws, kw in cases:
    xa, wa = rng.standard_normal(xs), rng.standard_normal(ws)
    outs = []
    for dev in ("reference", "cpu"):
        cx = lm.Graph()
        x, w = cx.tensor(xs).set(xa.astype(np.float32)), cx.tensor(ws).set(wa.astype(np.float32))
        y = F.conv2d(x, w, **kw)
        ts = [y] + grad((y * y).sum() * 0.5, [x, w])
        for t in ts:
            t.retrieve()
        cx.compile(device=dev)
        cx.execute()
        if dev == "cpu":
            assert "direct convolution (see" in cx.runtime.source
        outs.append([t.data() for t in ts])
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-3 * np.abs(a).max())
# a symbolic batch (the copy's size, its rows and the batch coordinates run-time values), run at two batch sizes
cx = lm.Graph()
x = cx.tensor(("batch", 4, 6, 20))
ws = [cx.tensor(s) for s in ((8, 4, 3, 3), (8, 1, 3, 3), (6, 8, 3, 3))]
wa = [rng.standard_normal(w.shape).astype(np.float32) for w in ws]
for w, a in zip(ws, wa):
    w.set(a)
y = F.conv2d(F.conv2d(F.conv2d(x, ws[0], padding=1), ws[1], padding=1, groups=8), ws[2], stride=2, padding=1)
ts = [y] + grad((y * y).sum() * 0.5, [x] + ws)
for t in ts:
    t.retrieve()
cx.compile(device="cpu")
assert cx.runtime.source.count("direct convolution (see") >= 6
for n in (3, 1):
    xa = rng.standard_normal((n, 4, 6, 20)).astype(np.float32)
    x.set(xa)
    cx.execute()
    got = [t.data() for t in ts]
    rx = lm.Graph()
    x2, w2 = rx.tensor(xa.shape).set(xa), [rx.tensor(a.shape).set(a) for a in wa]
    y2 = F.conv2d(F.conv2d(F.conv2d(x2, w2[0], padding=1), w2[1], padding=1, groups=8), w2[2], stride=2, padding=1)
    r2 = [y2] + grad((y2 * y2).sum() * 0.5, [x2] + w2)
    for t in r2:
        t.retrieve()
    rx.execute()
    for a, b in zip([t.data() for t in r2], got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-3 * np.abs(a).max())
print("SANITIZED-OK")
"""


def test_direct_kernels_under_address_and_undefined_sanitizers(tmp_path, monkeypatch):
    """The direct kernels (batched groups, vectors across rows, phases, a K tail, the cols form) in a build with
    AddressSanitizer and UBSan (exact-size scratch buffers), forward and gradients against the reference
    interpreter."""
    from hl_helpers import run_sanitized
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    run_sanitized(SANITIZER_SCRIPT, tmp_path, "SANITIZED-OK", extra_cflags="-DLM_OWN_GEMM_EXACT_BUFFERS")


SYMBOLIC = [  # (input shape after the batch, weight shape, conv kwargs)
    ((4, 10, 20), (8, 4, 3, 3), dict(padding=1)),                  # rows form, weight gradient's dot form
    ((8, 10, 24), (8, 1, 3, 3), dict(padding=1, groups=8)),        # depthwise: batched, rows of 24
    ((4, 10, 20), (6, 4, 3, 3), dict(stride=2, padding=1)),        # phases; the input gradient by phases
    ((3, 4, 5, 16), (4, 3, 3, 3, 3), dict(padding=1)),             # 3-D
    ((5, 40), (6, 5, 5), dict(padding=2)),                         # 1-D
]


@pytest.mark.parametrize("xs,ws,kw", SYMBOLIC)
def test_symbolic_batch_takes_the_direct_kernel(monkeypatch, xs, ws, kw):
    """A convolution over ``("batch", ...)`` compiled once runs the direct kernel (as many of them as the same
    graph with a fixed batch: the copy's size, its rows and the batch coordinates are run-time values) and matches
    torch in float64 at several batch sizes, 1 included, forward and both gradients."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(4)
    wa = rng.standard_normal(ws)
    conv = CONV[len(xs) - 1][0]

    def build(dims):
        cx = lm.Graph()
        x, w = cx.tensor(dims, "float64"), cx.tensor(ws, "float64").set(wa)
        y = conv(x, w, **kw)
        ts = [y] + grad((y * y).sum() * 0.5, [x, w])
        for t in ts:
            t.retrieve()
        return cx, x, ts

    fixed, fx, _ = build((2,) + xs)
    fx.set(rng.standard_normal((2,) + xs))
    fixed.compile(device="cpu")
    cx, x, ts = build(("batch",) + xs)
    x.set(rng.standard_normal((2,) + xs))
    cx.compile(device="cpu")
    count = fixed.runtime.source.count(MARK)
    assert count >= 2 and cx.runtime.source.count(MARK) == count
    for n in (3, 1, 2):
        xa = rng.standard_normal((n,) + xs)
        x.set(xa)
        cx.execute()
        for got, exp in zip([t.data() for t in ts], _torch((n,) + xs, (xa, wa, None), kw, grads=True)):
            _close(got, exp, "float64")


@pytest.mark.parametrize("search", ["quick", "full"])
def test_searching_a_symbolic_batch_keeps_the_unmeasured_plan(monkeypatch, tmp_path, search):
    """With the batch symbolic nothing can be measured at ``compile()``: a searching compile fuses the window
    copies as ``"off"`` does (it left every one materialized: MobileNet's depthwise layers as im2col copies and
    one-row GEMMs, 2-3x slower than the unsearched program), and the results match torch at two batches."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(5)
    ws = [(6, 1, 3, 3), (8, 6, 3, 3)]
    was = [rng.standard_normal(w).astype(np.float32) for w in ws]
    sources = {}
    for mode in ("off", search):
        cx = lm.Graph()
        x = cx.tensor(("batch", 6, 12, 32))
        y = F.conv2d(F.conv2d(x, cx.tensor(ws[0]).set(was[0]), padding=1, groups=6).relu(),
                     cx.tensor(ws[1]).set(was[1]), padding=1).retrieve()
        cx.compile(device="cpu", search=mode, budget_s=3)
        sources[mode] = cx.runtime.source.count(MARK)
        for n in (2, 1):
            xa = rng.standard_normal((n, 6, 12, 32)).astype(np.float32)
            x.set(xa)
            cx.execute()
            t = torch.nn.functional.conv2d(torch.from_numpy(xa).double(), torch.from_numpy(was[0]).double(),
                                           padding=1, groups=6).relu()
            want = torch.nn.functional.conv2d(t, torch.from_numpy(was[1]).double(), padding=1).numpy()
            _close(y.data(), want, "float32")
    assert sources["off"] == 2 and sources[search] == sources["off"], sources


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize("xs,ws,kw", [((2, 8, 10, 32), (8, 1, 3, 3), dict(padding=1, groups=8)),
                                      ((2, 4, 9, 16), (8, 4, 3, 3), dict(padding=1)),
                                      ((2, 4, 10, 32), (6, 4, 3, 3), dict(stride=2, padding=1))])
def test_autocast_convolution_takes_the_direct_kernel(monkeypatch, xs, ws, kw, inside):
    """Under ``lm.autocast(bfloat16)`` a convolution's window copy (of the rounded input) is read in place by the
    direct kernel too, forward and gradients (the gradient rule built inside the region, ``inside``, or outside),
    and the results match torch's CPU autocast: the output within 4 bfloat16 ulps for 75 % of its elements (both
    round one float32 sum), the gradients within 1e-2 of the largest (torch runs its backward in bfloat16)."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(5)
    xa, wa = rng.standard_normal(xs).astype(np.float32), (rng.standard_normal(ws) * 0.3).astype(np.float32)
    conv = CONV[len(xs) - 2]
    x, w = torch.from_numpy(xa).requires_grad_(), torch.from_numpy(wa).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty = conv[1](x, w, **kw)
    (ty.float() ** 2).sum().mul(0.5).backward()
    cx = lm.Graph()
    lx, lw = cx.tensor(xs).set(xa), cx.tensor(ws).set(wa)
    with lm.autocast(lm.bfloat16):
        y = conv[0](lx, lw, **kw)
        loss = (y.cast(lm.float32) ** 2).sum() * 0.5
        gs = grad(loss, [lx, lw]) if inside else None
    gs = gs or grad(loss, [lx, lw])
    for t in [y] + gs:
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert y.dtype == lm.bfloat16
    f32 = lm.Graph()  # the same graph in float32: as many direct kernels
    fx, fw = f32.tensor(xs).set(xa), f32.tensor(ws).set(wa)
    fy = conv[0](fx, fw, **kw)
    for t in [fy] + grad((fy ** 2).sum() * 0.5, [fx, fw]):
        t.retrieve()
    f32.compile(device="cpu")
    assert cx.runtime.source.count(MARK) == f32.runtime.source.count(MARK) >= 3, "the direct kernel did not run"
    got, want = np.asarray(y.data()).astype(np.float32), ty.detach().float().numpy()
    close = np.abs(got - want) <= 4 * 2.0 ** -7 * np.maximum(np.abs(want), 1e-3)
    assert close.mean() >= 0.75
    for g, t in zip(gs, [x.grad, w.grad]):
        t = t.numpy()
        np.testing.assert_allclose(np.asarray(g.data()), t, rtol=4 * 2.0 ** -7, atol=1e-2 * np.abs(t).max())
