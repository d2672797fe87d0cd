"""The C renderer's split of a vector loop at the edges of its masked reads (luminal.codegen.mask_split): the
transform itself on rendered bodies (bounds, row checks, what it refuses), and compiled graphs whose reads go
through padded views (pads, convolution windows, shifted slices) against the reference interpreter (copies
exactly, convolutions at 1e-5) and torch."""

import os

import numpy as np
import pytest

import luminal as lm
import luminal.nn.functional as F
from luminal.codegen.mask_split import split_masked

BODY = ["float t0 = ((((-1 + i7 + i3) < 16) && (((-1 + i7 + i3) >= 0) && (((-1 + i6 + i2) < 16) && "
        "((-1 + i6 + i2) >= 0)))) ? b0[(-17 + i7 + i3 + (16 * i6) + (16 * i2))] : (float)0;",
        "b1[(i7 + (16 * i6))] = t0;"]


def test_split_bounds_and_row_checks():
    lines = split_masked(BODY, "i7", 16)
    assert lines is not None
    text = "\n".join(lines)
    assert "if (((-1 + i6 + i2) < 16) && ((-1 + i6 + i2) >= 0)) {" in text  # the row checks, once
    assert "if ((0 - (-1 + i3)) > lm_lo) lm_lo = (0 - (-1 + i3));" in text
    assert "if ((16 - (-1 + i3)) < lm_hi) lm_hi = (16 - (-1 + i3));" in text
    middle = text.split("#pragma omp simd")[1]
    assert "?" not in middle.split("for (long long i7 = lm_hi")[0]  # the middle loop reads unmasked
    assert text.count("? b0[") == 2  # the edge loops keep the masked body


def test_split_single_variable_checks():
    """The col2im form: the value loaded unconditionally, selected by checks on bare loop variables."""
    body = ["float t0 = b0[(1 + i4 + (16 * i3))];",
            "float t1 = (((i4 < 15) && ((i2 < 15) && (i3 < 15)))) ? t0 : (float)0;",
            "float t2 = b0[(i4 + (16 * i3))];",
            "float t3 = (((i4 >= 1) && (i3 >= 1))) ? t2 : (float)0;",
            "b1[(i4 + (16 * i3))] = (t1 + t3);"]
    text = "\n".join(split_masked(body, "i4", 16))
    assert "if ((i2 < 15) && (i3 < 15) && (i3 >= 1)) {" in text
    assert "if ((15 - (0)) < lm_hi) lm_hi = (15 - (0));" in text
    assert "if ((1 - (0)) > lm_lo) lm_lo = (1 - (0));" in text


@pytest.mark.parametrize("body", [
    # a select that is not a masked read
    ["float t0 = (t3 == 0) ? t5 : t4;", "b1[i7] = t0;"],
    # the loop variable scaled (a strided window): not a + i7 term
    ["float t0 = (((-1 + (2 * i7)) < 16) && ((-1 + (2 * i7)) >= 0)) ? b0[(2 * i7)] : (float)0;", "b1[i7] = t0;"],
    # a disjunction
    ["float t0 = (((-1 + i7) < 16) || ((-1 + i7) >= 0)) ? b0[i7] : (float)0;", "b1[i7] = t0;"],
    # no masked read at all
    ["b1[i7] = b0[i7] * 2.0f;"],
    # a check on a value computed in the body (a gathered index), not known outside the loop
    ["long long g1 = (long long)(t0);", "float t1 = (((1 + g1) < 9) && ((-1 + i7) >= 0)) ? b0[i7] : (float)0;",
     "b1[i7] = t1;"],
    # a nested select
    ["float t0 = (((-1 + i7) < 16) && ((-1 + i7) >= 0)) ? ((t2 > 0) ? b0[i7] : t3) : (float)0;", "b1[i7] = t0;"],
    # a select of a non-zero constant
    ["float t0 = (((-1 + i7) < 16) && ((-1 + i7) >= 0)) ? b0[i7] : (float)0.5;", "b1[i7] = t0;"],
])
def test_split_refuses_other_forms(body):
    assert split_masked(body, "i7", 16) is None


def _compare(make, feeds, env=None, rtol=0.0):
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        got = {}
        for device in ("reference", "cpu"):
            cx = lm.Graph()
            ins, outs = make(cx)
            for t, a in zip(ins, feeds):
                t.set(a)
            for o in outs:
                o.retrieve()
            cx.compile(device=device)
            cx.execute()
            got[device] = [np.array(o.data()) for o in outs]
            if device == "cpu":
                source = cx.runtime.cprogram.source
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for w, h in zip(got["reference"], got["cpu"]):
        if rtol:  # a GEMM's sums in another order
            np.testing.assert_allclose(h, w, rtol=rtol, atol=rtol * float(np.max(np.abs(w))))
        else:
            np.testing.assert_array_equal(h, w)
    return source


def test_padded_views_match_the_reference_exactly():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 17, 19)).astype(np.float32)

    def make(cx):
        x = cx.tensor((3, 5, 17, 19))
        return [x], [x.pad([(0, 0), (0, 0), (2, 3), (4, 1)]) * 2.0,  # pads on both axes
                     x.pad([(0, 0), (0, 0), (0, 0), (-3, 5)]),          # a crop and a pad
                     x.pad([(0, 0), (1, 1), (0, 0), (7, 0)])[:, :, :, 2:20] + 1.0,
                     x.pad([(0, 0), (0, 0), (0, 0), (20, 20)])]         # a pad wider than the row
    source = _compare(make, [a])
    assert "lm_lo" in source  # (the split is what this test exercises)


@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=(2, 0), dilation=(1, 2)), dict(padding=3)])
def test_materialized_convolution_windows_match_exactly(kw):
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((2, 4, 9, 11)).astype(np.float32)
    wa = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)

    def make(cx):
        x, w = cx.tensor((2, 4, 9, 11)), cx.tensor((6, 4, 3, 3))
        return [x, w], [F.conv2d(x, w, **kw)]

    cx_src = _compare(make, [xa, wa], env={"LUMINAL_PROLOGUE": "materialized"}, rtol=1e-5)
    assert "lm_lo" in cx_src


def test_conv3d_training_step_matches_torch():
    """The padded Conv3d whose im2col copy the split was measured on: forward and gradients against torch."""
    import torch

    from luminal.training import grad
    rng = np.random.default_rng(2)
    xa = rng.standard_normal((2, 4, 8, 8, 8)).astype(np.float32)
    wa = rng.standard_normal((5, 4, 3, 3, 3)).astype(np.float32)
    cx = lm.Graph()
    x, w = cx.tensor(xa.shape).set(xa), cx.tensor(wa.shape).set(wa)
    y = F.conv3d(x, w, padding=1)
    gx, gw = grad((y * y).sum() * 0.5, [x, w])
    for t in (y, gx, gw):
        t.retrieve()
    os.environ["LUMINAL_PROLOGUE"] = "materialized"
    try:
        cx.compile(device="cpu")
    finally:
        os.environ.pop("LUMINAL_PROLOGUE")
    cx.execute()
    # the im2col copy and the input gradient's col2im (a sum of 27 masked reads) are both split
    assert cx.runtime.cprogram.source.count("long long lm_lo = 0, lm_hi = 0;") >= 2
    tx, tw = torch.from_numpy(xa.astype(np.float64)).requires_grad_(), torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    ty = torch.nn.functional.conv3d(tx, tw, padding=1)
    (ty * ty).sum().mul(0.5).backward()
    for got, want in ((y.data(), ty.detach().numpy()), (gx.data(), tx.grad.numpy()), (gw.data(), tw.grad.numpy())):
        assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
