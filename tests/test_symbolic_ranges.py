"""Range-aware simplification: symbols whose upper bound is symbolic (loop indices ``0 <= i < seq``).

Oracles: plain Python integer arithmetic (floor ``//`` / ``%``) evaluated at bindings that respect every
declared range, and the numpy reference interpreter for compiled graphs. All integer comparisons are exact.
The codegen tests assert that index expressions (and so generated C) do not grow with the length of an
op chain over ``("batch", "seq", d)`` shapes, the blow-up these ranges exist to prevent.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.shape import Expression, sym

E = Expression
PROP = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# sizes s, t (free symbols); loop indices i < s, j < t, k <= 6 (constant bound), m < s*t (a flat index);
# declared ranges: p >= 1 (a size declared non-empty), 2 <= q <= 30, and a loop index u < p
S, T = sym("s"), sym("t")
I, J, K = E.symbol("i", S - 1), E.symbol("j", T - 1), E.symbol("k", 6)
M = E.symbol("m", S * T - 1)
P, Q = sym("p", lower=1), E.symbol("q", 30, lower=2)
U = E.symbol("u", P - 1)
LEAVES = {"s": S, "t": T, "i": I, "j": J, "k": K, "m": M, "p": P, "q": Q, "u": U}


def _envs(rng: random.Random, n: int):
    out = []
    for _ in range(n):
        s, t, p = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
        out.append({"s": s, "t": t, "i": rng.randrange(s), "j": rng.randrange(t), "k": rng.randint(0, 6),
                    "m": rng.randrange(s * t), "p": p, "q": rng.randint(2, 30), "u": rng.randrange(p)})
    # the edges of every range
    out += [{"s": 1, "t": 1, "i": 0, "j": 0, "k": 0, "m": 0, "p": 1, "q": 2, "u": 0},
            {"s": 7, "t": 5, "i": 6, "j": 4, "k": 6, "m": 34, "p": 6, "q": 30, "u": 5},
            {"s": 9, "t": 2, "i": 0, "j": 1, "k": 3, "m": 17, "p": 2, "q": 17, "u": 1}]
    return out


ENVS = _envs(random.Random(1234), 12)

_leaf = st.one_of(st.integers(-9, 9).map(lambda v: (E.num(v), lambda env, v=v: v)),
                  st.sampled_from(sorted(LEAVES)).map(lambda n: (LEAVES[n], lambda env, n=n: env[n])))

# divisors: positive constants and monomials of the sizes (what views over symbolic shapes divide by)
_divisors = st.sampled_from([
    (E.num(3), lambda env: 3), (E.num(64), lambda env: 64), (S, lambda env: env["s"]),
    (T, lambda env: env["t"]), (4 * S, lambda env: 4 * env["s"]), (S * T, lambda env: env["s"] * env["t"]),
    (7 * S * T, lambda env: 7 * env["s"] * env["t"]), (S + 2, lambda env: env["s"] + 2),
    (P, lambda env: env["p"]), (3 * P * S, lambda env: 3 * env["p"] * env["s"]), (Q, lambda env: env["q"]),
    (P - 1 + Q, lambda env: env["p"] - 1 + env["q"])])


def _extend(children):
    def binop(t):
        op, (a, fa), (b, fb) = t
        table = {"+": (lambda: a + b, lambda env: fa(env) + fb(env)),
                 "-": (lambda: a - b, lambda env: fa(env) - fb(env)),
                 "*": (lambda: a * b, lambda env: fa(env) * fb(env)),
                 "<": (lambda: a < b, lambda env: int(fa(env) < fb(env))),
                 ">=": (lambda: a >= b, lambda env: int(fa(env) >= fb(env))),
                 "min": (lambda: a.min(b), lambda env: min(fa(env), fb(env))),
                 "max": (lambda: a.max(b), lambda env: max(fa(env), fb(env)))}
        build, oracle = table[op]
        return build(), oracle

    def divmod_(t):
        op, (a, fa), (d, fd) = t
        if op == "//":
            return a // d, (lambda env: fa(env) // fd(env))
        return a % d, (lambda env: fa(env) % fd(env))

    # linear index forms a view over (s, t, 64) produces: i*t*64 + j*64 + k, scaled and offset
    def index_form(t):
        (c0, (a, fa)) = t
        e = I * T * 64 + J * 64 + K + c0 * a
        return e, (lambda env: env["i"] * env["t"] * 64 + env["j"] * 64 + env["k"] + c0 * fa(env))

    return st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*", "<", ">=", "min", "max"]), children, children).map(binop),
        st.tuples(st.sampled_from(["//", "%"]), children, _divisors).map(divmod_),
        st.tuples(st.integers(-2, 2), children).map(index_form),
    )


trees = st.recursive(_leaf, _extend, max_leaves=10)


@PROP
@given(trees)
def test_range_aware_simplification_matches_integer_arithmetic(node):
    expr, oracle = node
    for env in ENVS:
        assert expr.evaluate(env) == oracle(env), (expr, env)
    again = expr.simplify()
    assert again == again.simplify()  # idempotent
    for env in ENVS:
        assert again.evaluate(env) == oracle(env), (again, env)


@PROP
@given(trees)
def test_symbolic_bounds_enclose_every_value(node):
    expr, oracle = node
    lo, hi = expr.symbolic_bounds()
    for env in ENVS:
        value = oracle(env)
        if lo is not None:
            assert lo.evaluate(env) <= value, (expr, lo, env)
        if hi is not None:
            assert value <= hi.evaluate(env), (expr, hi, env)


def test_index_identities_over_symbolic_extents():
    seq, batch = sym("seq"), sym("batch")
    i0, i1, i2 = E.symbol("i0", batch - 1), E.symbol("i1", seq - 1), E.symbol("i2", 63)
    flat = i2 + 64 * i1 + 64 * seq * i0
    assert flat // (64 * seq) == i0
    assert flat % (64 * seq) == i2 + 64 * i1
    assert (i1 + seq * i0) % seq == i1
    assert (i1 + seq * i0) // seq == i0
    assert (flat // 64) % seq == i1
    assert (i1 < seq) == 1 and (i1 >= seq) == 0
    assert (i2 + 64 * i1).symbolic_bounds() == (0, 64 * seq - 1)
    # a transposed layout: i1 + seq*i2 < 64*seq
    assert (i1 + seq * i2) // (64 * seq) == 0
    assert i1.min(seq) == i1 and i1.max(seq) == seq
    # recombination over a symbolic divisor: a GEMM epilogue recovering (batch, seq) from its row index
    row = E.symbol("r", batch * seq - 1)
    assert i2 + 384 * (row % seq) + 384 * seq * (row // seq) == i2 + 384 * row
    assert 3 * (row % (4 * seq)) + 12 * seq * (row // (4 * seq)) == 3 * row
    # nothing is claimed that does not hold: i1 may reach 1 or more
    assert (i1 < 1) != 1 and (i1 < 1) != 0
    assert i1 % 2 != i1


def test_repeated_views_do_not_grow_the_expression():
    """Re-deriving (batch, seq, 64) axis indices from a flat index k times gives the same small expression."""
    seq, batch = sym("seq"), sym("batch")
    i0, i1, i2 = E.symbol("i0", batch - 1), E.symbol("i1", seq - 1), E.symbol("i2", 63)
    idx = (i0, i1, i2)
    sizes = []
    for _ in range(10):
        flat = idx[0] * (64 * seq) + idx[1] * 64 + idx[2]
        idx = (flat // (64 * seq), (flat // 64) % seq, flat % 64)
        sizes.append(len(repr(idx)))
    assert idx == (i0, i1, i2)
    assert len(set(sizes)) == 1


def test_symbol_upper_validation():
    seq = sym("seq")
    with pytest.raises(ValueError, match="may not mention"):
        E.symbol("i", sym("i") + 1)
    with pytest.raises(TypeError, match="int or an Expression"):
        E.symbol("i", 2.5)
    assert E.symbol("i", E.num(0)) == 0
    assert E.symbol("i", seq - 1).upper() == seq - 1
    assert E.symbol("i", seq - 1) != E.symbol("i")  # the range is part of the symbol
    with pytest.raises(TypeError, match="symbols"):
        (seq + 1).upper()


# --------------------------------------------------------------------------------- generated code
def _floor_ops(src: str) -> int:
    return src.count("LUMINAL_FLOORDIV(") + src.count("LUMINAL_FLOORMOD(")


def _relu_chain(shape, k):
    cx = lm.Graph()
    x = cx.tensor(shape)
    y = x
    for _ in range(k):
        y = y.relu()
    return cx, x, y.retrieve()


@pytest.mark.parametrize("k", [1, 3, 6, 10])
def test_relu_chain_source_does_not_grow_with_symbolic_batch_and_seq(k):
    rng = np.random.default_rng(k)
    cx, x, y = _relu_chain(("batch", "seq", 64), k)
    cx.compile(device="cpu")
    src = cx.runtime.source
    fixed, _, _ = _relu_chain(("n", 64), k)
    fixed.compile(device="cpu")
    # the same size class as over ("n", 64): the kernel bodies' index math does not depend on k
    assert _floor_ops(src) <= _floor_ops(fixed.runtime.source) + 2
    assert len(src) < 1.3 * len(fixed.runtime.source) + 1500
    for b, s in ((2, 3), (1, 1), (3, 17)):
        xs = rng.standard_normal((b, s, 64)).astype(np.float32)
        x.set(xs)
        cx.execute()
        np.testing.assert_array_equal(y.data(), np.maximum(xs, 0))


@pytest.mark.parametrize("case", ["gelu_tanh", "gelu_erf", "masked_softmax", "layer_norm"])
def test_row_and_transcendental_ops_stay_small_over_batch_and_seq(case):
    rng = np.random.default_rng(7)

    def build(shape):
        cx = lm.Graph()
        x = cx.tensor(shape)
        if case == "gelu_tanh":
            y = x.gelu("tanh")
        elif case == "gelu_erf":
            y = x.gelu()
        elif case == "masked_softmax":
            y = (x + (x < -1.0).cast(lm.float32) * -1e9).softmax(-1)
        else:
            y = x.layer_norm(-1)
        return cx, x, y.retrieve()

    d = 96
    sym_graph, x, y = build(("batch", "seq", d))
    sym_graph.compile(device="cpu")
    fixed_graph, _, _ = build(("n", d))
    fixed_graph.compile(device="cpu")
    src, fsrc = sym_graph.runtime.source, fixed_graph.runtime.source
    assert _floor_ops(src) <= _floor_ops(fsrc) + 2
    assert len(src) < 1.3 * len(fsrc) + 1500
    ref_graph, xr, yr = build(("batch", "seq", d))  # oracle: the numpy reference interpreter
    for b, s in ((2, 5), (1, 1)):
        xs = rng.standard_normal((b, s, d)).astype(np.float32)
        x.set(xs)
        sym_graph.execute()
        xr.set(xs)
        ref_graph.execute()
        np.testing.assert_allclose(y.data(), yr.data(), rtol=2e-6, atol=2e-6)


# --------------------------------------------------------------------------------- slices of a symbolic axis
def test_slice_sizes_of_a_symbolic_axis():
    """Integer bounds on a symbolic axis: simplified assuming the axis is non-empty (as ``x[:, k]`` assumes), so
    the common cases are plain sizes that squeeze and broadcast; a stop past a short axis stays clamped."""
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 8))
    seq = sym("seq")
    sizes = {(0, 1): 1, (-1, None): 1, (1, None): seq - 1, (None, -1): seq - 1, (None, 4): seq.min(4),
             (-4, None): seq.min(4), (2, None): (seq - 2).max(0), (1, -1): (seq - 2).max(0)}
    for (start, stop), want in sizes.items():
        assert x[:, start:stop].dims[1] == want, (start, stop, x[:, start:stop].dims[1])
    assert x[:, 0].dims == (sym("batch"), 8) and x[:, -1].dims == (sym("batch"), 8)
    assert x[:, 0:1].squeeze(1).dims == (sym("batch"), 8)
    assert (x[:, 0:1] + x).dims == x.dims  # broadcasts like 1
    assert x[:, 1:].pad_axis(1, 1, 0).dims == x.dims and lm.cat([x[:, 1:], x[:, :1]], 1).dims == x.dims
    assert x[:, ::2].dims[1] == (seq + 1) // 2 and x[:, ::-1].dims[1] == seq
    # a size declared non-empty needs no assumption
    y = cx.tensor(("batch", sym("n", lower=1)))
    assert y[:, 0:1].dims[1] == 1 and y[:, 2:].dims[1] == (sym("n", lower=1) - 2).max(0)


_SLICE_KEYS = ([slice(a, b, st) for st in (1, 2, -1, -2) for a in (None, -5, -2, -1, 0, 1, 3, 7)
                for b in (None, -4, -1, 0, 1, 2, 4, 9)] + [0, -1])


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_slices_of_a_symbolic_axis_match_numpy(device):
    """Every slice (any sign of start/stop, steps +-1, +-2) and the integer indices 0, -1 of a symbolic axis,
    computed in a kernel, equal numpy's at several bindings (the sizes need the axis to be non-empty: seq >= 1)."""
    rng = np.random.default_rng(3)
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 3))
    outs = [(x[:, k] * 2.0).retrieve() for k in _SLICE_KEYS]
    tail = (x[:, -4:].sum(1) + x[:, 0]).retrieve()  # last 4 rows (fewer when seq < 4) + the first row
    if device == "cpu":
        cx.compile(device="cpu")
    for seq in (1, 2, 3, 5, 8):
        xs = rng.standard_normal((2, seq, 3)).astype(np.float32)
        x.set(xs)
        cx.execute()
        for k, out in zip(_SLICE_KEYS, outs):
            np.testing.assert_array_equal(out.data(), xs[:, k] * 2.0, err_msg=f"seq={seq} key={k}")
        np.testing.assert_allclose(tail.data(), xs[:, -4:].sum(1) + xs[:, 0], rtol=1e-6)


# --------------------------------------------------------------------------------- chains of views over seq
def _view_chain(kind, shape, k):
    cx = lm.Graph()
    x = cx.tensor(shape)
    y = x
    for _ in range(k):
        if kind == "slice_pad":  # drop the first row, pad it back
            y = y[:, 1:].pad_axis(1, 1, 0)
        elif kind == "slice_pad_end":
            y = y[:, :-2].pad_axis(1, 0, 2)
        elif kind == "split_cat":  # cut and glue back (the identity)
            y = lm.cat([y[:, :1], y[:, 1:]], 1)
        elif kind == "roll":  # rotate by one row
            y = lm.cat([y[:, 1:], y[:, :1]], 1)
        elif kind == "roll_back":
            y = lm.cat([y[:, -1:], y[:, :-1]], 1)
        elif kind == "cat_input":  # a growing symbolic axis: (k + 1)*seq
            y = lm.cat([y, x], 1)
        elif kind == "slice_pad_relu":
            y = y[:, 1:].pad_axis(1, 1, 0).relu()
    return cx, x, y.retrieve()


def _oracle(kind, xs, k):
    y = xs
    for _ in range(k):
        if kind in ("slice_pad", "slice_pad_relu"):
            y = np.concatenate([np.zeros_like(y[:, :1]), y[:, 1:]], 1)
            y = np.maximum(y, 0) if kind == "slice_pad_relu" else y
        elif kind == "slice_pad_end":
            y = np.concatenate([y[:, :-2], np.zeros((y.shape[0], 2, y.shape[2]), y.dtype)], 1)
        elif kind == "split_cat":
            y = np.concatenate([y[:, :1], y[:, 1:]], 1)
        elif kind == "roll":
            y = np.concatenate([y[:, 1:], y[:, :1]], 1)
        elif kind == "roll_back":
            y = np.concatenate([y[:, -1:], y[:, :-1]], 1)
        elif kind == "cat_input":
            y = np.concatenate([y, xs], 1)
    return y


_NO_GROWTH = ["slice_pad", "slice_pad_end", "split_cat", "cat_input", "slice_pad_relu", "roll", "roll_back"]


@pytest.mark.parametrize("kind", _NO_GROWTH)
def test_view_chains_over_a_symbolic_axis_do_not_grow(kind):
    """Slices, pads and concatenations along ``seq`` repeated k times: the sizes stay ``seq`` (``(k+1)*seq``),
    the number of floor divisions/modulos does not grow with k and stays in the class of a fixed seq (16), and
    the result equals numpy's at several bindings."""
    rng = np.random.default_rng(11)
    floors = []
    for k in (1, 3, 10):
        cx, x, y = _view_chain(kind, ("batch", "seq", 8), k)
        seq = sym("seq")
        # x[:, :-2] of a 1-row x is empty, padded back to 2 rows (as in PyTorch): max(2, seq)
        want = {"cat_input": (k + 1) * seq, "slice_pad_end": seq.max(2)}.get(kind, seq)
        assert y.dims[1] == want, (k, y.dims[1])
        cx.compile(device="cpu")
        src = cx.runtime.source
        fixed, _, _ = _view_chain(kind, ("batch", 16, 8), k)
        fixed.compile(device="cpu")
        fsrc = fixed.runtime.source
        if kind.startswith("roll"):
            # a rotation wraps ((i1 - 2) % seq): where the dividend may be negative, C needs the floor macro
            # (a fixed seq folds the constant into the dividend), so only a bound on the count
            assert _floor_ops(src) <= 3 * _floor_ops(fsrc) + 2, (k, _floor_ops(src), _floor_ops(fsrc))
        else:
            assert _floor_ops(src) <= _floor_ops(fsrc) + 2, (k, _floor_ops(src), _floor_ops(fsrc))
        assert len(src) < 1.3 * len(fsrc) + 1500, (k, len(src), len(fsrc))
        floors.append(_floor_ops(src))
        for b, s in ((2, 3), (1, 1), (3, 6)) if k == 3 else ((2, 5),):
            xs = rng.standard_normal((b, s, 8)).astype(np.float32)
            x.set(xs)
            cx.execute()
            np.testing.assert_array_equal(y.data(), _oracle(kind, xs, k), err_msg=f"k={k} b={b} s={s}")
    assert floors[-1] <= floors[1], floors  # no growth from k = 3 to k = 10


def test_roll_then_relu_over_seq_stays_in_the_fixed_size_class():
    """``cat([y[:, 1:], y[:, :1]]).relu()`` repeated: the fused kernel re-reads both halves of every level, so the
    source grows with k for a fixed seq as well (a fusion matter); the symbolic one stays in the same class (it
    had 16450 floor ops at k = 5 before the range rules)."""
    for k in (2, 3):
        def build(shape):
            cx = lm.Graph()
            x = cx.tensor(shape)
            y = x
            for _ in range(k):
                y = lm.cat([y[:, 1:], y[:, :1]], 1).relu()
            return cx, x, y.retrieve()
        cx, x, y = build(("batch", "seq", 8))
        cx.compile(device="cpu")
        fixed, _, _ = build(("batch", 16, 8))
        fixed.compile(device="cpu")
        src, fsrc = cx.runtime.source, fixed.runtime.source
        assert _floor_ops(src) <= _floor_ops(fsrc) + 2 and len(src) < 1.3 * len(fsrc) + 1500
        xs = np.random.default_rng(k).standard_normal((2, 5, 8)).astype(np.float32)
        x.set(xs)
        cx.execute()
        np.testing.assert_array_equal(y.data(), np.maximum(np.roll(xs, -k, axis=1), 0))


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_item_assignment_into_slices_of_a_symbolic_axis(device):
    """``x[:, a:b] = v`` over a symbolic axis: the region is padded back to the axis' size (``min(2, seq) +
    max(0, seq - 2) == seq``), checked against numpy at several bindings."""
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 4))
    cases = {(1, None): 0.0, (0, 1): 5.0, (-2, None): 7.0, (None, 3): -1.0, (1, -1): 2.0}
    outs = []
    for (start, stop), value in cases.items():
        y = x * 1.0
        y[:, start:stop] = value
        assert y.dims == x.dims
        outs.append(y.retrieve())
    if device == "cpu":
        cx.compile(device="cpu")
    rng = np.random.default_rng(5)
    for seq in (1, 2, 5):
        xs = rng.standard_normal((2, seq, 4)).astype(np.float32)
        x.set(xs)
        cx.execute()
        for ((start, stop), value), out in zip(cases.items(), outs):
            want = xs.copy()
            want[:, start:stop] = value
            np.testing.assert_array_equal(out.data(), want, err_msg=f"seq={seq} [{start}:{stop}]")


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_a_size_declared_non_empty(device):
    """``sym("seq", lower=1)``: ``x[:, 0:1]`` is 1 row without any assumption, and binding ``seq`` to 0 is
    refused when the graph runs."""
    seq = sym("seq", lower=1)
    cx = lm.Graph()
    x = cx.tensor(("batch", seq, 8))
    first, rest = x[:, 0:1].squeeze(1), x[:, 2:]
    assert first.dims == (sym("batch"), 8) and rest.dims[1] == (seq - 2).max(0)
    y, z = (first * 2.0).retrieve(), (rest + 1.0).retrieve()
    if device == "cpu":
        cx.compile(device="cpu")
    for b, s in ((2, 3), (1, 1), (3, 5)):
        xs = np.random.default_rng(s).standard_normal((b, s, 8)).astype(np.float32)
        x.set(xs)
        cx.execute()
        np.testing.assert_array_equal(y.data(), xs[:, 0] * 2.0)
        np.testing.assert_array_equal(z.data(), xs[:, 2:] + 1.0)
    x.set(np.zeros((2, 0, 8), np.float32))
    with pytest.raises(ValueError, match="declared >= 1"):
        cx.execute()
