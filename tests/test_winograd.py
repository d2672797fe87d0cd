"""Winograd convolutions against torch CPU in float64: F(4x4, 3x3) (from 8 x 8 outputs) and F(2x2, 3x3) for the
forward and the input gradient (luminal/codegen/gemm_winograd.py), F(3x3, 4x4) (from 8 x 8 positions) and
F(3x3, 2x2) for the weight gradient (luminal/codegen/gemm_winograd_dw.py).

3x3 stride-1 convolutions from 16 input and output channels: even and odd output sizes (partial tiles at the
edges), rows of one tile and of several vectors of tiles, output channels not a multiple of the register tile,
padding, a bias and ReLU epilogue, a symbolic batch, 3-D kernels (a 3x3x3 kernel: three 2-D ones summed), the
input gradient (a 3x3 stride-1 convolution itself), float32 and float64, non-finite inputs. Each case checks
that the Winograd kernel is the one that ran (its comment is in the generated C) and the cases it must not take
(strided, dilated, few channels, ``LUMINAL_WINOGRAD=0``). Tolerance: the largest error at most 1e-4 (float32) /
1e-10 (float64) of the largest reference value. Weight gradients: odd and even sizes, padding on one axis, both or
none, channels not a multiple of the vector (the channels-last copy padded), output channels past the register
tile, a symbolic batch. No timings are asserted.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn.functional as F
from luminal.training import grad

TOL = {"float32": 1e-4, "float64": 1e-10}
MARK = "Winograd F("
MARK_DW = "weight gradient (see luminal/codegen/gemm_winograd_dw.py)"
MARK_DW_TILE = {2: "Winograd F(3x3, 2x2) weight gradient", 4: "Winograd F(3x3, 4x4) weight gradient"}


def _close(got, exp, dtype):
    assert got.shape == exp.shape
    scale = max(float(np.max(np.abs(exp))), 1e-30)
    assert np.max(np.abs(got.astype(np.float64) - exp)) <= TOL[dtype] * scale


def _case(xs, ws, dtype, kw, bias=False, relu=False, grads=False, seed=0, batch=None):
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal(xs).astype(dtype)
    wa = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(dtype)
    ba = rng.standard_normal(ws[0]).astype(dtype) if bias else None
    conv = F.conv3d if len(xs) == 5 else F.conv2d
    cx = lm.Graph()
    x = cx.tensor(xs if batch is None else (batch,) + tuple(xs[1:]), dtype).set(xa)
    w = cx.tensor(ws, dtype).set(wa)
    b = cx.tensor((ws[0],), dtype).set(ba) if bias else None
    y = conv(x, w, b, **kw)
    if relu:
        y = y.relu()
    outs = [y] + (grad((y * y).sum() * 0.5, [x, w]) if grads else [])
    for t in outs:
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(xa.astype(np.float64)).requires_grad_()
    tw = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    tb = torch.from_numpy(ba.astype(np.float64)) if bias else None
    ty = (torch.nn.functional.conv3d if len(xs) == 5 else torch.nn.functional.conv2d)(tx, tw, tb, **kw)
    if relu:
        ty = ty.relu()
    exp = [ty.detach().numpy()]
    if grads:
        (ty * ty).sum().mul(0.5).backward()
        exp += [tx.grad.numpy(), tw.grad.numpy()]
    return cx, [t.data() for t in outs], exp


CASES = [  # (input shape, weight shape, conv kwargs, outputs per tile side by default: F(4x4) from 8 x 8 outputs)
    ((32, 16, 12, 12), (16, 16, 3, 3), dict(padding=1), 4),  # 12 x 12: whole tiles (288 of 4 x 4)
    ((12, 16, 7, 7), (32, 16, 3, 3), dict(padding=1), 2),    # 7 x 7: a partial tile per row and column
    ((8, 20, 9, 13), (17, 20, 3, 3), {}, 2),                 # 7 x 11 unpadded; 17 outputs: a partial register tile
    ((2, 16, 5, 70), (16, 16, 3, 3), dict(padding=1), 2),    # rows of 35 tiles: three vectors, the last partial
    ((48, 24, 4, 4), (16, 24, 3, 3), dict(padding=(1, 1)), 2),  # rows of 2 tiles: a vector spans 8 rows of tiles
    ((24, 16, 13, 10), (24, 16, 3, 3), dict(padding=1), 4),  # 13 x 10: partial 4 x 4 tiles on both axes
    ((5, 20, 12, 75), (17, 20, 3, 3), {}, 4),                # 10 x 73 unpadded: rows of 19 tiles (two vectors)
    ((6, 16, 12, 12), (16, 16, 3, 3), dict(padding=1), 2),   # 12 x 12, 54 tiles of 4 x 4: too few for F(4x4)
    ((16, 16, 10, 26), (32, 16, 3, 3), dict(padding=(1, 0)), 4),  # 10 x 24: rows of 6 tiles (half vectors)
]


@pytest.mark.parametrize("mode", ["1", "2"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw,e", CASES)
def test_winograd_forward_matches_torch(xs, ws, kw, e, dtype, mode, monkeypatch):
    """Each case by default (F(4x4, 3x3) from 8 x 8 outputs, else F(2x2, 3x3)) and with ``LUMINAL_WINOGRAD=2``
    (F(2x2, 3x3) only)."""
    monkeypatch.setenv("LUMINAL_WINOGRAD", mode)
    cx, got, exp = _case(xs, ws, dtype, kw, bias=True, relu=True)
    e = e if mode == "1" else 2
    assert f"Winograd F({e}x{e}, 3x3)" in cx.runtime.source, "the Winograd kernel did not run in the expected form"
    _close(got[0], exp[0], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_winograd_gradients(dtype):
    """The forward and the input gradient (a full 3x3 convolution of the output's gradient) run the Winograd
    kernel; all three results against torch."""
    cx, got, exp = _case((32, 16, 10, 11), (24, 16, 3, 3), dtype, dict(padding=1), bias=True, grads=True)
    assert cx.runtime.source.count("Winograd F(4x4, 3x3)") >= 2 and MARK_DW in cx.runtime.source
    for g, e in zip(got, exp):
        _close(g, e, dtype)


DW_CASES = [  # (input shape, weight shape, conv kwargs): the weight gradient's Winograd kernel
    ((8, 16, 15, 13), (24, 16, 3, 3), dict(padding=1)),   # 15 x 13 outputs: partial tiles on both axes
    ((3, 20, 17, 40), (17, 20, 3, 3), {}),                # 20 channels (copy padded to 32), 17 output channels
    ((2, 32, 20, 21), (40, 32, 3, 3), dict(padding=(1, 0))),  # padded rows only; 40 outputs
    ((8, 16, 12, 12), (16, 16, 3, 3), dict(padding=(0, 1))),  # padded columns only
]


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", DW_CASES)
def test_winograd_weight_gradient(xs, ws, kw, dtype, tile, monkeypatch):
    """F(3x3, 2x2) and F(3x3, 4x4) (the count rule replaced to take one or the other: 2 x 2 and 4 x 4 tiles of
    positions, partial ones at odd edges, 4 x 4 and 6 x 6 input patches)."""
    from luminal.codegen import gemm_winograd_dw
    monkeypatch.setattr(gemm_winograd_dw, "wino_tile", lambda *args: tile)
    cx, got, exp = _case(xs, ws, dtype, kw, grads=True)
    assert MARK_DW_TILE[tile] in cx.runtime.source, "the weight gradient's Winograd kernel did not run"
    for g, e in zip(got, exp):
        _close(g, e, dtype)


def test_winograd_weight_gradient_symbolic_batch():
    """One program for every batch size: the images are counted from K at run time."""
    rng = np.random.default_rng(6)
    wa = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float64)
    cx = lm.Graph()
    x = cx.tensor(("batch", 16, 32, 32), "float64")
    w = cx.tensor(wa.shape, "float64").set(wa)
    y = F.conv2d(x, w, padding=1)
    gw = grad((y * y).sum() * 0.5, [w])[0].retrieve()
    cx.compile(device="cpu")
    assert MARK_DW in cx.runtime.source
    for n in (1, 2):
        xa = rng.standard_normal((n, 16, 32, 32))
        x.set(xa)
        cx.execute()
        tx, tw = torch.from_numpy(xa), torch.from_numpy(wa).requires_grad_()
        ty = torch.nn.functional.conv2d(tx, tw, padding=1)
        (ty * ty).sum().mul(0.5).backward()
        _close(gw.data(), tw.grad.numpy(), "float64")


def test_winograd_3d_kernel():
    """A 3x3x3 kernel: the depth offset joins the channels (three 2-D convolutions summed)."""
    cx, got, exp = _case((3, 16, 5, 6, 9), (16, 16, 3, 3, 3), "float64", dict(padding=1))
    assert MARK in cx.runtime.source
    _close(got[0], exp[0], "float64")


def test_winograd_symbolic_batch():
    """One program for every batch size (taken where a batch of 1 has enough tiles): the rows of tiles are
    counted at run time."""
    rng = np.random.default_rng(3)
    wa = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(("batch", 16, 32, 32), "float32")
    w = cx.tensor(wa.shape, "float32").set(wa)
    y = F.conv2d(x, w, padding=1).retrieve()
    cx.compile(device="cpu")
    assert MARK in cx.runtime.source
    for n in (1, 3):
        xa = rng.standard_normal((n, 16, 32, 32)).astype(np.float32)
        x.set(xa)
        cx.execute()
        exp = torch.nn.functional.conv2d(torch.from_numpy(xa.astype(np.float64)),
                                         torch.from_numpy(wa.astype(np.float64)), padding=1).numpy()
        _close(y.data(), exp, "float32")


def test_f4_partial_tiles_read_zeros_past_the_image():
    """F(4x4, 3x3)'s partial tiles at the right and bottom edges read a 6 x 6 patch past the image: the copy is
    zero-padded there (an output of a tile depends on its whole patch in rounding). Every row's and channel's first
    element is 1e20, so a patch reading the next row or channel instead of zeros would be off by ~1e13; the outputs
    whose windows leave out row 0 and column 0 must be exact to float32 tolerance."""
    rng = np.random.default_rng(6)
    xa = rng.standard_normal((24, 16, 15, 12)).astype(np.float32)  # 13 x 10 outputs: partial tiles on both axes
    xa[:, :, 0, :] = 1e20
    xa[:, :, :, 0] = 1e20
    wa = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    cx = lm.Graph()
    x, w = cx.tensor(xa.shape, "float32").set(xa), cx.tensor(wa.shape, "float32").set(wa)
    y = F.conv2d(x, w).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert "Winograd F(4x4, 3x3)" in cx.runtime.source
    exp = torch.nn.functional.conv2d(torch.from_numpy(xa.astype(np.float64)),
                                     torch.from_numpy(wa.astype(np.float64))).numpy()[:, :, 1:, 1:]
    got = y.data()[:, :, 1:, 1:]
    assert np.max(np.abs(got - exp)) <= 1e-4 * np.max(np.abs(exp))


@pytest.mark.parametrize("mode", ["2", "1"])
def test_winograd_non_finite_inputs(mode, monkeypatch):
    """F(2x2, 3x3) (``LUMINAL_WINOGRAD=2``): an output whose window holds an infinity or a NaN is not finite (it
    may be NaN where the direct sum is infinite); every other output is exact to tolerance (each output reads only
    its own window). F(4x4, 3x3) (the default here: 8 x 8 outputs): the same, except that an output of a tile whose
    6 x 6 patch holds a non-finite input may be NaN (its transforms add and subtract the whole patch); never a
    wrong finite value."""
    monkeypatch.setenv("LUMINAL_WINOGRAD", mode)
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((64, 16, 8, 8)).astype(np.float32)  # (256 tiles of 4 x 4)
    bad = [(4, 3, 2, 5), (4, 7, 6, 1)]
    xa[bad[0]], xa[bad[1]] = np.inf, np.nan
    wa = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    cx = lm.Graph()
    x, w = cx.tensor(xa.shape, "float32").set(xa), cx.tensor(wa.shape, "float32").set(wa)
    y = F.conv2d(x, w, padding=1).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    e = 2 if mode == "2" else 4
    assert f"Winograd F({e}x{e}, 3x3)" in cx.runtime.source
    exp = torch.nn.functional.conv2d(torch.from_numpy(xa.astype(np.float64)),
                                     torch.from_numpy(wa.astype(np.float64)), padding=1).numpy()
    got = y.data()
    reach = np.zeros(exp.shape, bool)  # outputs of the tiles whose patch (padded coordinates) holds a bad input
    for n, _, r, c in bad:
        for tr in range(0, 8, e):
            for tc in range(0, 8, e):
                if tr <= r + 1 <= tr + e + 1 and tc <= c + 1 <= tc + e + 1:
                    reach[n, :, tr:tr + e, tc:tc + e] = True
    fin = np.isfinite(exp)
    assert not np.isfinite(got[~fin]).any()  # (each non-finite input reaches 9 positions of every output channel)
    if e == 2:
        np.testing.assert_array_equal(np.isfinite(got), fin)
    assert np.isfinite(got[fin & ~reach]).all() and (fin & ~reach).sum() > 0.9 * fin.size
    ok = fin & np.isfinite(got)  # (inside the reach: NaN, or the right value)
    assert np.max(np.abs(got[ok] - exp[ok])) <= 1e-4 * np.max(np.abs(exp[fin]))


@pytest.mark.parametrize("xs,ws,kw", [((8, 16, 10, 10), (16, 16, 3, 3), dict(stride=2, padding=1)),
                                      ((8, 16, 10, 10), (16, 16, 3, 3), dict(dilation=2, padding=2)),
                                      ((8, 8, 10, 10), (16, 8, 3, 3), dict(padding=1)),
                                      ((8, 16, 10, 10), (8, 16, 3, 3), dict(padding=1)),
                                      ((8, 16, 10, 10), (16, 16, 5, 5), dict(padding=2)),
                                      ((1, 16, 10, 10), (16, 16, 3, 3), dict(padding=1))])
def test_not_taken(xs, ws, kw):
    """Strided, dilated, under 16 input or output channels, 5x5, under 192 tiles (25): not Winograd (still
    right)."""
    cx, got, exp = _case(xs, ws, "float32", kw, grads=True)
    assert MARK not in cx.runtime.source and MARK_DW not in cx.runtime.source
    for g, e in zip(got, exp):
        _close(g, e, "float32")


def test_bad_mode(monkeypatch):
    monkeypatch.setenv("LUMINAL_WINOGRAD", "4")
    with pytest.raises(ValueError, match="LUMINAL_WINOGRAD='4'"):
        xs, ws, kw, _ = CASES[0]
        _case(xs, ws, "float32", kw)


def test_switched_off(monkeypatch):
    monkeypatch.setenv("LUMINAL_WINOGRAD", "0")
    xs, ws, kw, _ = CASES[1]
    cx, got, exp = _case(xs, ws, "float32", kw, grads=True)
    assert MARK not in cx.runtime.source and MARK_DW not in cx.runtime.source
    for g, e in zip(got, exp):
        _close(g, e, "float32")


CHECK_SCRIPT = r"""
import sys, numpy as np, torch, luminal as lm
import luminal.nn.functional as F
from luminal.training import grad
width = sys.argv[1] if len(sys.argv) > 1 else "native"
if width == "32":  # 32-byte vectors (AVX2) whatever this machine has: every module that holds the function
    import importlib, pkgutil, luminal.codegen
    for info in pkgutil.iter_modules(luminal.codegen.__path__):
        try:
            importlib.import_module("luminal.codegen." + info.name)
        except ImportError:
            pass
    for name, mod in list(sys.modules.items()):
        if name.startswith("luminal.codegen") and hasattr(mod, "vector_bytes"):
            mod.vector_bytes = lambda: 32
cases = [((16, 16, 15, 13), (17, 16, 3, 3), dict(padding=1), "float32"),  # partial tiles, odd rows and columns
         ((2, 20, 17, 40), (16, 20, 3, 3), {}, "float64"),                # channels past a vector, float64
         ((16, 16, 7, 7), (24, 16, 3, 3), dict(padding=(1, 0)), "float32")]  # one vector spans rows of tiles
rng = np.random.default_rng(0)
forms = set()
for xs, ws, kw, dt in cases:
    xa, wa = rng.standard_normal(xs).astype(dt), (rng.standard_normal(ws) / 12).astype(dt)
    cx = lm.Graph()
    x, w = cx.tensor(xs, dt).set(xa), cx.tensor(ws, dt).set(wa)
    y = F.conv2d(x, w, **kw)
    ts = [y] + grad((y * y).sum() * 0.5, [x, w])
    for t in ts:
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    src = cx.runtime.source
    assert "weight gradient (see" in src and ("Winograd F(2x2, 3x3)" in src or "Winograd F(4x4, 3x3)" in src), xs
    forms |= {f for f in ("F(2x2, 3x3)", "F(4x4, 3x3)", "F(3x3, 2x2)", "F(3x3, 4x4)") if f in src}
    assert width != "32" or "vector_size(64), aligned(4)" not in src
    tx = torch.from_numpy(xa.astype(np.float64)).requires_grad_()
    tw = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, **kw)
    (ty * ty).sum().mul(0.5).backward()
    for got, exp in zip([t.data() for t in ts], [ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()]):
        assert np.max(np.abs(got - exp)) <= 1e-4 * np.max(np.abs(exp)), (xs, np.max(np.abs(got - exp)))
assert forms == {"F(2x2, 3x3)", "F(4x4, 3x3)", "F(3x3, 2x2)", "F(3x3, 4x4)"}, forms  # (every form ran)
print("WINOGRAD-OK")
"""


def test_winograd_under_address_and_undefined_sanitizers(tmp_path):
    """Both Winograd kernels (partial tiles, padded channels, float32 and float64) in a build with AddressSanitizer
    and UBSan and exact-size scratch buffers: no read or write past a buffer (the forward's reads past its rows stay
    in the copy's slack; the weight gradient's row ends are masked), results against torch."""
    from hl_helpers import run_sanitized
    run_sanitized(CHECK_SCRIPT, tmp_path, "WINOGRAD-OK", extra_cflags="-DLM_OWN_GEMM_EXACT_BUFFERS")


def test_winograd_kernels_shared_between_layers():
    """Two layers of the same shape on different inputs share one compiled body (the renderer renames the buffer
    pointers ``b<slot>`` in it): the kernels' own variables must not look like buffer pointers; forward and both
    gradients of each layer against torch."""
    rng = np.random.default_rng(9)
    xs, ws = (8, 16, 12, 12), (16, 16, 3, 3)
    xa = [rng.standard_normal(xs).astype(np.float32) for _ in range(2)]
    wa = (rng.standard_normal(ws) / 12).astype(np.float32)
    cx = lm.Graph()
    xt = [cx.tensor(xs, "float32").set(a) for a in xa]
    w = cx.tensor(ws, "float32").set(wa)
    ys = [F.conv2d(x, w, padding=1) for x in xt]
    loss = sum(((y * y).sum() for y in ys[1:]), (ys[0] * ys[0]).sum()) * 0.5
    outs = ys + grad(loss, xt + [w])
    for t in outs:
        t.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert MARK in cx.runtime.source and MARK_DW in cx.runtime.source
    tx = [torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in xa]
    tw = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    ty = [torch.nn.functional.conv2d(x, tw, padding=1) for x in tx]
    sum((y * y).sum() for y in ty).mul(0.5).backward()
    exp = [y.detach().numpy() for y in ty] + [x.grad.numpy() for x in tx] + [tw.grad.numpy()]
    for g, e in zip(outs, exp):
        _close(g.data(), e, "float32")


@pytest.mark.parametrize("width,flags", [("native", "-O2 -march=native -DLM_WINO_PORTABLE"),
                                         ("32", "-O2 -mavx2 -mfma -DLM_WINO_PORTABLE"),
                                         ("32", "-O2 -mavx2 -mfma")])
def test_winograd_portable_and_avx2_builds(tmp_path, width, flags):
    """The kernels' branches this machine's build does not take: without the shuffles and AVX-512's masked loads
    and stores (``-DLM_WINO_PORTABLE``: the element-by-element splits and interleaves, memcpy through the stack),
    and rendered for 32-byte vectors (AVX2: 16 registers' tiles, 8 lanes), forward and both gradients against
    torch (the sanitizer test's cases and checks)."""
    import os
    import subprocess
    import sys

    from luminal.runtime.cpu import find_compiler
    probe = subprocess.run([find_compiler(), *flags.split()[1:], "-x", "c", "-", "-fsyntax-only"],
                           input="int main(void){return 0;}", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the C compiler cannot target " + flags)
    env = dict(os.environ, LUMINAL_CACHE_DIR=str(tmp_path), LUMINAL_CFLAGS=flags + " -fno-math-errno")
    env.pop("LUMINAL_DEVICE", None)
    proc = subprocess.run([sys.executable, "-c", CHECK_SCRIPT, width], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0 and "WINOGRAD-OK" in proc.stdout, proc.stderr[-3000:]
