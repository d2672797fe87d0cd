"""Kernels that differ only in constant buffer offsets share one compiled body (luminal/codegen/rebase.py).

Oracle: numpy for the results; the rebased text is checked against hand-written expectations.
"""

from __future__ import annotations

import re

import numpy as np

import luminal as lm
from luminal.codegen.rebase import rebase

BODY = """static int KERNEL(void **bufs, const long long *syms) {
    const float *restrict b0 = (const float *)bufs[0];
    float *restrict b1 = (float *)bufs[1];
    const float *restrict b2 = (const float *)bufs[2];
    for (long long i0 = 0; i0 < 4; i0++) {
        float t0 = b0[(512 + i0)];
        float t1 = b0[(520 + (2 * i0))];
        float t2 = b2[(i0 * 3)];
        b1[i0] = t0 + t1 + t2;
    }
    err = lm_gemm_f32(4, 4, 4, b0 + 512, 4, 1, b2 + 0, 4, 1, b1 + 0, NULL, bufs, syms);
}"""


def test_rebase_moves_the_smallest_offset_into_the_pointer():
    text, shifts = rebase(BODY)
    assert shifts == {0: ("float", 512)}  # b1 (a store without a constant) and b2 (offset 0) stay
    assert "b0[(0 + i0)]" in text and "b0[(8 + (2 * i0))]" in text and "b0 + 0, 4, 1" in text
    assert "b2[(i0 * 3)]" in text and "b1[i0]" in text


def test_rebase_leaves_a_buffer_with_any_other_use():
    text, shifts = rebase(BODY.replace("b1[i0] = t0", "b1[i0] = b0[LUMINAL_FLOORMOD(i0, 3)] + t0"))
    assert shifts == {}
    text, shifts = rebase(BODY.replace("(512 + i0)", "(-4 + i0)").replace("b0 + 512", "b0 + 0"))
    assert shifts == {}  # the smallest offset is not positive: the pointer is left alone


def test_unrolled_steps_share_one_body():
    rng = np.random.default_rng(0)
    steps, n = 12, 6
    xv = rng.standard_normal((steps, 4, n)).astype(np.float32)
    wv = rng.standard_normal((n, n)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xv.shape).set(xv)
    w = cx.tensor(wv.shape).set(wv)
    h = cx.tensor((4, n)).set(np.zeros((4, n), np.float32))
    hs = []
    for t in range(steps):  # a recurrence: each step reads its own slice of x (a constant offset)
        h = (x[t] * 0.5 + h @ w).relu() + x[t].exp2() * 0.25
        hs.append(h)
    y = lm.stack(hs, 0).retrieve()
    cx.compile(None, y, device="cpu")
    cx.execute()
    hv, want = np.zeros((4, n), np.float32), []
    for t in range(steps):
        hv = np.maximum(xv[t] * 0.5 + hv @ wv, 0) + np.exp2(xv[t]) * 0.25
        want.append(hv)
    np.testing.assert_allclose(y.data(), np.stack(want), rtol=1e-5, atol=1e-5)
    source = cx.runtime.source
    wrappers = int(re.search(r"lm_first\[(\d+)\]", source).group(1)) - 1  # kernels dispatched
    bodies = len(re.findall(r"^static int kbody_\d+\(", source, re.M))
    # (without the rebase every step has a body of its own: bodies == kernels)
    assert wrappers >= steps and 2 * bodies <= wrappers, (bodies, wrappers)
    assert re.search(r"[1-9]\d* \* \(long long\)sizeof\(float\)", source)  # a shifted pointer is passed
