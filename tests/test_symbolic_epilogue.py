"""Symbolic divisors in index math, and the GEMM epilogue over ``("batch", "seq", n)`` they make possible.

A GEMM over symbolic ``(batch, seq)`` rows has ``M = seq*batch``; its epilogue (bias + activation) runs over
``(batch, seq, n)`` and must read the product at ``i0*n + i1``. That needs, for a row index ``0 <= i0 <
seq*batch`` and a column ``0 <= i1 < n``:
``(i1 + n*i0) // (n*seq) == i0 // seq``, ``(i0 % seq) % seq == i0 % seq`` and
``(i1 + n*(i0 % seq)) // (n*seq) == 0``: a size used as a divisor is at least 1 wherever the division is
defined. Oracles: Python integer arithmetic at bindings inside every declared range; numpy for the
compiled graphs; the fixed-shape compile of the same graph for the kernel structure.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.shape import Expression, sym

E = Expression


def test_size_divisor_identities():
    seq, batch = sym("seq"), sym("batch")
    i0, i1 = E.symbol("i0", seq * batch - 1), E.symbol("i1", 1535)
    assert (i0 % seq) % seq == i0 % seq
    assert (i1 + 1536 * (i0 % seq)) // (1536 * seq) == 0
    assert (i1 + 1536 * i0) // (1536 * seq) == i0 // seq
    assert (i1 + 1536 * i0) % (1536 * seq) == i1 + 1536 * (i0 % seq)
    # a proper divisor of the coefficient: (8*B + r) // (24*seq) == B // (3*seq) when 0 <= r < 8
    r = E.symbol("r", 7)
    assert (r + 8 * i0) // (24 * seq) == i0 // (3 * seq)
    assert (r + 8 * i0) % (24 * seq) == r + 8 * (i0 % (3 * seq))
    # not claimed when the remainder may reach the factor
    r9 = E.symbol("r9", 8)
    assert (r9 + 8 * i0) // (24 * seq) != i0 // (3 * seq)


_SIZES = st.integers(1, 7)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(kb=st.integers(2, 48), kdiv=st.integers(1, 48), small_hi=st.integers(0, 50), extra=st.integers(-3, 3),
       s=_SIZES, t=_SIZES, data=st.data())
def test_split_over_symbolic_divisor_matches_integer_arithmetic(kb, kdiv, small_hi, extra, s, t, data):
    """``(k*B + r) // (kb*s)`` and ``% (kb*s)`` (``k`` a common factor, ``r`` a bounded index) against Python's
    floor division at random bindings inside the ranges, including remainders that may exceed ``k``."""
    k = math.gcd(kb, kdiv)
    S, T = sym("s"), sym("t")
    m = E.symbol("m", S * T - 1)
    r = E.symbol("r", small_hi)
    big = m + extra * S if extra >= 0 else m  # non-negative either way
    a = k * big + r
    for div in (kb * S, kb * S * T):
        q, rem = a // div, a % div
        for _ in range(6):
            env = {"s": s, "t": t, "m": data.draw(st.integers(0, s * t - 1)), "r": data.draw(st.integers(0, small_hi))}
            dv = div.evaluate(env)
            av = a.evaluate(env)
            assert q.evaluate(env) == av // dv, (a, div, q, env)
            assert rem.evaluate(env) == av % dv, (a, div, rem, env)


def _groups(cx):
    from luminal.codegen.groups import kernel_groups

    prog = cx.runtime.program
    return collections.Counter(f"{type(prog.kernels[g[0]]).__name__} x{len(g)}" for g in kernel_groups(prog))


@pytest.mark.parametrize("act", ["gelu", "relu", "tanh_gelu"])
def test_gemm_epilogue_fuses_over_symbolic_batch_and_seq(act):
    """Linear + activation over ``("batch", "seq", d)`` compiles to the same kernel groups as over fixed
    shapes (the activation runs as the GEMM's epilogue), and matches numpy at several bindings."""
    import luminal.nn as nn

    rng = np.random.default_rng(7)
    w = rng.standard_normal((24, 16)).astype(np.float32) / 4
    b = rng.standard_normal(24).astype(np.float32)

    def build(dims):
        cx = lm.Graph()
        x = cx.tensor(dims, name="x")
        lin = nn.Linear(16, 24)
        lin.weight.data = w.copy()
        lin.bias.data = b.copy()
        h = lin(x)
        y = (h.gelu("tanh") if act == "tanh_gelu" else getattr(h, act)()).retrieve()
        cx.compile(device="cpu")
        return cx, x, y

    sym_cx, sx, sy = build(("batch", "seq", 16))
    fix_cx, fx, fy = build((3, 5, 16))
    assert _groups(sym_cx) == _groups(fix_cx)
    assert _groups(sym_cx)["GemmKernel x2"] == 1  # the GEMM and its epilogue in one group
    for shape in [(3, 5), (1, 1), (2, 17)]:
        xv = rng.standard_normal(shape + (16,)).astype(np.float32)
        sx.set(xv)
        sym_cx.execute()
        h = xv.astype(np.float64) @ w.T.astype(np.float64) + b
        if act == "relu":
            ref = np.maximum(h, 0)
        elif act == "gelu":
            ref = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        else:
            ref = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        np.testing.assert_allclose(sy.data(), ref, rtol=1e-4, atol=1e-5)


def test_sum_divisors_divide_their_multiples():
    """A KV-cache attention row has the symbolic stride ``seq + past``: ``(r + i3*(seq + past)) // (seq + past)``
    is ``i3`` for ``0 <= r < seq + past`` (and scaled sums: ``i3*(2*seq + 2*past)`` holds ``2*(seq + past)``)."""
    seq, past = sym("seq"), sym("past")
    s = seq + past
    r, i3, i2 = E.symbol("r", s - 1), E.symbol("i3", seq - 1), E.symbol("i2", 11)
    row = r + i3 * s + i2 * seq * s
    assert row // s == i3 + i2 * seq
    assert (row // s) % seq == i3
    assert row % s == r
    assert (r + 2 * s * i3) // s == 2 * i3
    assert (r + 2 * s * i3) % s == r
    # a sum that is not a multiple stays a division
    assert ((r + i3 * (seq + 2 * past)) // s) != i3


@settings(max_examples=200, deadline=None, derandomize=True)
@given(k=st.integers(-3, 3), c=st.integers(0, 20), s=_SIZES, p=st.integers(0, 6), data=st.data())
def test_sum_divisor_quotients_match_integer_arithmetic(k, c, s, p, data):
    seq, past = sym("seq"), sym("past")
    tot = seq + past
    r = E.symbol("r", tot - 1)
    i = E.symbol("i", seq - 1)
    a = r + (k * tot) * i + c
    for _ in range(5):
        env = {"seq": s, "past": p, "r": data.draw(st.integers(0, s + p - 1)), "i": data.draw(st.integers(0, s - 1))}
        av, dv = a.evaluate(env), s + p
        assert (a // tot).evaluate(env) == av // dv, (a, env)
        assert (a % tot).evaluate(env) == av % dv, (a, env)


def test_kv_cache_attention_indexes_without_dividing_by_the_cache_length():
    """The compiled GPT-2 step (symbolic prompt and past lengths) reads its scores and mask without any division
    or modulo by ``seq + past`` (the unsimplified form cost about a fifth of a prompt step)."""
    import re

    from luminal.models import DecoderLM

    cfg = dict(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=48, bos_token_id=None,
               eos_token_id=None, model_type="gpt2")
    model = DecoderLM.from_config(cfg, seed=1)
    model.generate(np.array([1, 2, 3]), 2)
    src = model.program("cpu").graph.runtime.source
    assert "past" in src
    assert not [line for line in src.splitlines() if re.search(r"[/%] *\(+[^;]*past", line)]
