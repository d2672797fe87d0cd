"""Tests for ``luminal.shape.Expression``: simplification soundness, canonical forms, evaluation, C rendering.

Oracles: the unsimplified (raw) tree's own evaluation, plain Python integer arithmetic (floor ``//``/``%``),
and gcc for ``to_c()``. Everything is exact integer arithmetic, so comparisons are exact (no tolerance).
Symbols denote non-negative integers, so every binding below draws from 0..50.
"""

from __future__ import annotations

import random
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from luminal.shape import C_PRELUDE, Expression, UnboundSymbolError, sym, to_expr

E = Expression
SYMS = ("a", "b", "z")
x, y, z, a, b = sym("x"), sym("y"), sym("z"), sym("a"), sym("b")

PROP = settings(max_examples=500, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---------------------------------------------------------------------------------------------- strategies
# Raw (unsimplified) trees. Divisors never evaluate to 0: non-zero constants, `symbol + k` (k >= 1),
# or `max(subtree, 1)`.
_leaf = st.one_of(
    st.integers(-20, 20).map(lambda v: E.raw("num", v)),
    st.sampled_from(SYMS).map(lambda n: E.raw("var", n)),
)


def _raw_divisor(children):
    return st.one_of(
        st.integers(1, 12).map(lambda v: E.raw("num", v)),
        st.integers(-7, -1).map(lambda v: E.raw("num", v)),
        st.tuples(st.sampled_from(SYMS), st.integers(1, 4)).map(
            lambda t: E.raw("add", E.raw("var", t[0]), E.raw("num", t[1]))),
        children.map(lambda c: E.raw("max", c, E.raw("num", 1))),
    )


def _raw_extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(["add", "mul", "min", "max", "lt", "ge", "and", "or"]), children, children)
        .map(lambda t: E.raw(*t)),
        st.tuples(st.sampled_from(["add", "mul"]), children, children, children).map(lambda t: E.raw(*t)),
        st.tuples(st.sampled_from(["div", "mod"]), children, _raw_divisor(children)).map(lambda t: E.raw(*t)),
        # sums of predicates (counting valid masks): 0/1 values that must add up as integers
        st.tuples(st.sampled_from(["lt", "ge", "and", "or"]), children, children,
                  st.sampled_from(["lt", "ge", "and", "or"]), children, children)
        .map(lambda t: E.raw("add", E.raw(t[0], t[1], t[2]), E.raw(t[3], t[4], t[5]))),
    )


raw_trees = st.recursive(_leaf, _raw_extend, max_leaves=14)
bindings_list = st.lists(st.fixed_dictionaries({n: st.integers(0, 50) for n in SYMS}), min_size=4, max_size=6)

# Fixed bindings always checked in addition to the drawn ones (the edges of the domain).
EDGE_BINDINGS = [{"a": 0, "b": 0, "z": 0}, {"a": 1, "b": 0, "z": 7}, {"a": 50, "b": 50, "z": 50}, {"a": 3, "b": 17, "z": 49}]


def _py_ceil_div(p, q):
    return -((-p) // q)


def _logical_and(p, q):
    return int(bool(p) and bool(q))


def _logical_or(p, q):
    return int(bool(p) or bool(q))


# Trees built through the Python operators, paired with a plain-Python oracle function of the bindings.
# A node is (obj, fn): obj is an Expression, or an int for constant leaves (to exercise reflected operators).
_op_leaf = st.one_of(
    st.integers(-20, 20).map(lambda v: (v, lambda env, v=v: v)),
    st.sampled_from(SYMS).map(lambda n: (sym(n), lambda env, n=n: env[n])),
)

_BINOPS = {
    "+": (lambda p, q: p + q, lambda p, q: p + q),
    "-": (lambda p, q: p - q, lambda p, q: p - q),
    "*": (lambda p, q: p * q, lambda p, q: p * q),
    "<": (lambda p, q: p < q, lambda p, q: int(p < q)),
    ">=": (lambda p, q: p >= q, lambda p, q: int(p >= q)),
    ">": (lambda p, q: p > q, lambda p, q: int(p > q)),
    "<=": (lambda p, q: p <= q, lambda p, q: int(p <= q)),
    # Expression's & and | are logical (0/1-valued), not bitwise.
    "&": (lambda p, q: p & q, _logical_and),
    "|": (lambda p, q: p | q, _logical_or),
    "min": (lambda p, q: to_expr(p).min(q), min),
    "max": (lambda p, q: to_expr(p).max(q), max),
}


def _combine(op, left, right):
    (lo, lf), (ro, rf) = left, right
    if not isinstance(lo, Expression) and not isinstance(ro, Expression):
        lo = to_expr(lo)  # two plain ints would use Python's own operator (bitwise & / |, bool results)
    build, oracle = _BINOPS[op]
    return build(lo, ro), (lambda env: oracle(lf(env), rf(env)))


def _op_divisor(children, positive):
    options = [
        st.integers(1, 12).map(lambda v: (v, lambda env, v=v: v)),
        st.tuples(st.sampled_from(SYMS), st.integers(1, 4)).map(
            lambda t: (sym(t[0]) + t[1], lambda env, t=t: env[t[0]] + t[1])),
        children.map(lambda c: (to_expr(c[0]).max(1), lambda env, f=c[1]: max(f(env), 1))),
    ]
    if not positive:
        options.append(st.integers(-7, -1).map(lambda v: (v, lambda env, v=v: v)))
    return st.one_of(*options)


def _op_extend(children):
    def divmod_node(t):
        op, (lo, lf), (ro, rf) = t
        if not isinstance(lo, Expression) and not isinstance(ro, Expression):
            lo = to_expr(lo)
        if op == "//":
            return lo // ro, (lambda env: lf(env) // rf(env))
        if op == "%":
            return lo % ro, (lambda env: lf(env) % rf(env))
        return to_expr(lo).ceil_div(ro), (lambda env: _py_ceil_div(lf(env), rf(env)))

    return st.one_of(
        st.tuples(st.sampled_from(sorted(_BINOPS)), children, children).map(lambda t: _combine(*t)),
        children.map(lambda c: (-to_expr(c[0]), lambda env, f=c[1]: -f(env))),
        st.tuples(st.sampled_from(["//", "%"]), children, _op_divisor(children, positive=False)).map(divmod_node),
        st.tuples(st.just("ceil"), children, _op_divisor(children, positive=True)).map(divmod_node),
    )


op_trees = st.recursive(_op_leaf, _op_extend, max_leaves=12)


def _nodes(e: Expression):
    yield e
    if e.op not in ("num", "var"):
        for arg in e.args:
            yield from _nodes(arg)


def _fits_int64(e: Expression, envs, limit=2 ** 50) -> bool:
    """True when every subexpression stays well inside int64 under every binding (numpy / C overflow guard)."""
    return all(abs(n.evaluate(env)) < limit for env in envs for n in _nodes(e))


# ---------------------------------------------------------------------------------------------- property tests
@PROP
@given(raw_trees, bindings_list)
def test_simplify_preserves_value_and_is_idempotent(raw, envs):
    simplified = raw.simplify()
    for env in envs + EDGE_BINDINGS:
        assert simplified.evaluate(env) == raw.evaluate(env), (raw, simplified, env)
    again = simplified.simplify()
    assert again == simplified, (raw, simplified, again)
    assert hash(again) == hash(simplified)
    # simplification never invents symbols, and symbol-free trees fold to a constant
    assert simplified.symbols() <= raw.symbols()
    if not raw.symbols():
        assert simplified.is_constant(), (raw, simplified)
    # bounds() is a sound interval for the simplified form
    lo, hi = simplified.bounds()
    for env in envs + EDGE_BINDINGS:
        v = simplified.evaluate(env)
        assert (lo is None or lo <= v) and (hi is None or v <= hi), (simplified, (lo, hi), env, v)


@PROP
@given(op_trees, bindings_list)
def test_python_operators_match_python_int_arithmetic(node, envs):
    expr, oracle = node
    expr = to_expr(expr)
    for env in envs + EDGE_BINDINGS:
        assert expr.evaluate(env) == oracle(env), (expr, env)
    # operator-built expressions are already canonical
    assert expr.simplify() == expr


@PROP
@given(raw_trees, st.lists(st.fixed_dictionaries({n: st.integers(0, 50) for n in SYMS}), min_size=1, max_size=20))
def test_evaluate_array_matches_elementwise_evaluate(raw, envs):
    if not _fits_int64(raw, envs):
        return  # numpy int64 would overflow; Python ints would not: not a like-for-like comparison
    arrays = {n: np.array([env[n] for env in envs], dtype=np.int64) for n in SYMS}
    for e in (raw, raw.simplify()):
        # every symbol bound to an array
        got = np.broadcast_to(np.asarray(e.evaluate_array(arrays)), (len(envs),))
        assert got.tolist() == [e.evaluate(env) for env in envs], (e, envs)
        # z an array, the other symbols plain ints (broadcasting against scalars)
        mixed = {"z": arrays["z"], "a": envs[0]["a"], "b": envs[0]["b"]}
        got = np.broadcast_to(np.asarray(e.evaluate_array(mixed)), (len(envs),))
        assert got.tolist() == [e.evaluate({**envs[0], "z": env["z"]}) for env in envs], (e, envs)
    # plain ints only: same value as evaluate()
    assert int(raw.evaluate_array(envs[0])) == raw.evaluate(envs[0])


@PROP
@given(raw_trees, st.fixed_dictionaries({n: st.integers(0, 50) for n in SYMS}),
       st.sampled_from(SYMS), st.integers(0, 50), st.integers(0, 5))
def test_substitute_matches_evaluating_with_the_substituted_value(raw, env, name, value, offset):
    e = raw.simplify()
    # single name -> constant
    assert e.substitute(name, value).evaluate(env) == e.evaluate({**env, name: value})
    # mapping -> expressions of other symbols, applied simultaneously (a <-> b swap included)
    mapping = {"a": sym("b"), "b": sym("a") + offset, "z": sym("z") * 2}
    got = e.substitute(mapping)
    bound = {k: v.evaluate(env) for k, v in mapping.items()}
    assert got.evaluate(env) == e.evaluate(bound), (e, got, env)
    assert got.simplify() == got


# ---------------------------------------------------------------------------------------------- targeted simplification
def test_div_mod_recombination():
    assert (z // 5) * 5 + z % 5 == z
    assert z % 5 + 5 * (z // 5) == z
    assert 3 * (z // 7) * 7 + 3 * (z % 7) == 3 * z
    # recombination also works when other terms are present
    assert (z // 5) * 5 + z % 5 + x == z + x


def test_nested_div_mod_stays_equivalent():
    e = ((z // 5) % 10) * 5 + z % 5
    for zv in range(0, 400):
        assert e.evaluate({"z": zv}) == ((zv // 5) % 10) * 5 + zv % 5 == zv % 50
    assert e.symbols() == {"z"}


@PROP
@given(st.sampled_from([-3, -1, 1, 2]), st.one_of(st.integers(1, 12), st.sampled_from(["a", "b"])),
       st.one_of(st.integers(1, 9), st.sampled_from(["a", "b"])), st.integers(-60, 60), st.booleans(),
       bindings_list)
def test_mod_of_div_recombination_matches_integer_arithmetic(k, c, m, shift, extra, envs):
    """``k*c*((x // c) % m) + k*(x % c)`` is ``k*(x % (c*m))`` (a flat index read back through a reshape of two
    axes): the simplified form has no ``(x // c) % m`` left, and equals the raw tree under every binding (x may
    be negative: z + shift)."""
    cx = sym(c) + 1 if isinstance(c, str) else to_expr(c)  # (a symbolic divisor: a + 1 >= 1)
    mx = sym(m) + 1 if isinstance(m, str) else to_expr(m)
    xv = z + shift
    raw = E.raw("add", E.raw("mul", E.raw("num", k), E.raw("mul", cx, E.raw("mod", E.raw("div", xv, cx), mx))),
                E.raw("mul", E.raw("num", k), E.raw("mod", xv, cx)))
    if extra:
        raw = E.raw("add", raw, E.raw("mul", E.raw("num", 3), E.raw("var", "b")))
    simplified = raw.simplify()
    assert not any(n.op == "mod" and n.args[0].op == "div" for n in _nodes(simplified)), simplified
    for env in envs:
        assert simplified.evaluate(env) == raw.evaluate(env)


def test_mod_of_div_recombination_with_a_range_is_the_index():
    """With ``0 <= i < seq*batch`` known, ``seq*((i // seq) % batch) + i % seq`` is ``i`` itself: the rows of a
    (seq*batch)-row GEMM output read as (batch, seq) need no division."""
    seq, batch = sym("seq"), sym("batch")
    i = Expression.symbol("i", seq * batch - 1)
    assert seq * ((i // seq) % batch) + i % seq == i
    assert 4 * (seq * ((i // seq) % batch) + i % seq) + 7 == 4 * i + 7


def test_affine_floordiv_simplifies():
    assert (b * 4 + 3) // 4 == b
    assert (b * 4 + 3) // 4 == sym("b")
    assert ((b * 4 + 3) // 4).evaluate({"b": 5}) == 5
    assert (x * 6 + 8) // 2 == x * 3 + 4
    # a term that is not a multiple stays inside the division, and the result is still exact
    e = (x * 6 + y + 9) // 3
    for xv in range(6):
        for yv in range(8):
            assert e.evaluate({"x": xv, "y": yv}) == (xv * 6 + yv + 9) // 3


def test_div_mod_of_a_view_over_a_view_splits_off_the_bounded_part():
    """(k*B + r) // d == B // (d/k) and (k*B + r) % d == k*(B % (d/k)) + r when 0 <= r < k and k | d;
    checked against Python integer arithmetic over the whole bounded range."""
    from luminal.shape import Expression as E
    i2, i3 = E.symbol("i2", 23), E.symbol("i3", 23)
    q, m = (i3 + 24 * i2) // 48, (i3 + 24 * i2) % 48
    assert q == i2 // 2 and m == i3 + 24 * (i2 % 2)
    assert i3 + 48 * q + 24 * (i2 % 2) == i3 + 24 * i2  # the pooled-gradient index becomes affine
    cases = [(24, 48, 23), (4, 12, 3), (6, 18, 5), (8, 16, 7), (3, 9, 1)]
    for k, d, r_hi in cases:
        r, bsym = E.symbol("r", r_hi), E.symbol("b", 40)
        for off in (0, 2 * k, 5):
            e = r + k * bsym + off
            e_q, e_m = e // d, e % d
            for bv in range(41):
                for rv in range(r_hi + 1):
                    env, val = {"b": bv, "r": rv}, k * bv + rv + off
                    assert e_q.evaluate(env) == val // d, (k, d, off, str(e_q), env)
                    assert e_m.evaluate(env) == val % d, (k, d, off, str(e_m), env)


def test_identities():
    assert x + 0 == x
    assert 0 + x == x
    assert x * 1 == x
    assert 1 * x == x
    assert x * 0 == 0
    assert 0 * (x + y) == 0
    assert x - x == 0
    assert (x + y) - (y + x) == 0
    assert x // 1 == x
    assert x % 1 == 0
    assert x % -1 == 0
    assert -(-x) == x
    assert (x * 6) % 3 == 0
    assert (x * 6 + 3) % 3 == 0
    assert (x * 6 + y) % 3 == y % 3
    assert (x // 2) // 3 == x // 6
    assert (x % 12) % 4 == x % 4
    assert (x % 4) % 12 == x % 4
    assert (x % 4) // 4 == 0
    assert x // x == 1 and (x * y) // y == x and (x * y) % x == 0


def test_like_term_collection():
    assert x + x == 2 * x
    assert x + x == x * 2
    assert x + x == E.raw("mul", 2, "x").simplify()
    assert 3 * x - x == 2 * x
    assert x * y + y * x == 2 * (x * y)
    assert (x + 1) + (x + 2) == 2 * x + 3
    assert 2 * (x + 3) == 2 * x + 6  # constants distribute over sums
    assert x + y - x == y


def test_constant_folding():
    assert (E.num(3) + 4) * 2 == 14
    assert E.num(7) // 2 == 3
    assert E.num(-7) // 2 == -4          # floor, not truncation
    assert E.num(-7) % 3 == 2
    assert E.num(7) % -3 == -2
    assert E.num(7) // -2 == -4
    assert E.num(5).min(3) == 3 and E.num(5).max(3) == 5
    assert (E.num(2) < 3) == 1 and (E.num(3) < 3) == 0 and (E.num(3) >= 3) == 1
    assert (E.num(2) & 0) == 0 and (E.num(2) & 5) == 1 and (E.num(0) | 0) == 0 and (E.num(0) | 7) == 1
    assert E.raw("add", 1, E.raw("mul", 2, 3), E.raw("div", -9, 4)).simplify() == 1 + 6 + (-9 // 4)
    assert E.raw("mod", E.raw("add", "x", 7), 5).simplify().evaluate({"x": 13}) == 20 % 5
    with pytest.raises(ZeroDivisionError):
        x // 0
    with pytest.raises(ZeroDivisionError):
        x % 0


def test_min_max_with_provable_order():
    assert x.min(x + 1) == x
    assert x.max(x + 3) == x + 3
    assert x.max(0) == x            # symbols are non-negative
    assert x.min(0) == 0
    assert x.min(-1) == -1
    assert (x % 4).min(4) == x % 4
    assert (x % 4).max(3) == 3
    assert x.min(x) == x
    # not provable: stays symbolic but exact
    e = x.min(y)
    assert not e.is_constant()
    assert e.evaluate({"x": 3, "y": 2}) == 2 and e.evaluate({"x": 1, "y": 2}) == 1


def test_comparisons_fold_when_provable():
    assert (x >= 0) == 1
    assert (x < 0) == 0
    assert ((x % 4) < 4) == 1
    assert (x < x + 1) == 1
    assert bool(x >= 0) is True
    assert ((x < 3) & (x < 3)) == (x < 3)
    assert ((x < 3) & 1) == (x < 3)
    assert ((x < 3) | 0) == (x < 3)
    assert ((x < 3) | 1) == 1


# ---------------------------------------------------------------------------------------------- API
def test_substitute_single_and_mapping():
    e = x * 2 + y
    assert e.substitute("x", 3) == y + 6
    assert e.substitute({"x": 1, "y": 2}) == 4
    assert e.substitute({"x": y + 1}) == 3 * y + 2
    assert e.substitute({"w": 5}) == e           # unrelated names leave it untouched
    assert e.substitute("x", x) == e
    # simultaneous: swapping two symbols
    assert (x * 10 + y).substitute({"x": y, "y": x}) == y * 10 + x
    # substitution re-simplifies
    assert ((x * 4 + y) // 4).substitute("y", 3) == x


def test_evaluate_unbound_symbol_raises_naming_it():
    e = x * 2 + sym("batch")
    with pytest.raises(UnboundSymbolError, match="batch"):
        e.evaluate({"x": 1})
    with pytest.raises(UnboundSymbolError, match="x"):
        e.evaluate({"batch": 1})
    with pytest.raises(KeyError):  # it is a KeyError subclass
        e.evaluate()
    with pytest.raises(UnboundSymbolError, match="batch"):
        e.evaluate_array({"x": np.arange(3)})
    assert E.num(7).evaluate() == 7


def test_evaluate_array_comparisons_sum_as_integers():
    # numpy bool + bool is a logical or; the vectorized evaluator must count like Python does
    e = (x < 3) + (y < 3) + ((x >= 1) & (y >= 1)) + ((x < 1) | (y < 1))
    xs, ys = np.meshgrid(np.arange(6), np.arange(6))
    got = np.asarray(e.evaluate_array({"x": xs, "y": ys}))
    expected = [[e.evaluate({"x": int(xv), "y": int(yv)}) for xv, yv in zip(rx, ry)] for rx, ry in zip(xs, ys)]
    assert got.tolist() == expected
    assert int(got.max()) == 3


def test_hash_and_equality():
    e1 = x * 2 + y + 1
    e2 = 1 + y + 2 * x
    e3 = E.raw("add", E.raw("num", 1), E.raw("add", "y", E.raw("mul", "x", 2))).simplify()
    assert e1 == e2 == e3
    assert hash(e1) == hash(e2) == hash(e3)
    d = {e1: "first"}
    assert d[e2] == "first" and d[e3] == "first"
    d[e3] = "second"
    assert len(d) == 1
    assert len({x + 1, 1 + x, x + 2, sym("x") + 1}) == 2
    assert e1 != x * 2 + y + 2
    assert x != y and x == sym("x")
    assert E.num(3) == 3 and E.num(3) != 4 and x != 3
    assert (x + 1 != x + 1) is False


def test_symbols_to_int_bool():
    assert (x * y + 3).symbols() == frozenset({"x", "y"})
    assert E.num(4).symbols() == frozenset()
    assert ((x // sym("n")) % 3).symbols() == {"x", "n"}
    assert (x - x + 5).symbols() == frozenset()
    assert E.num(5).to_int() == 5
    assert (x - x + 5).to_int() == 5
    assert x.to_int() is None and (x + 1).to_int() is None
    assert int(E.num(-3)) == -3
    assert list(range(5))[E.num(2)] == 2   # __index__
    with pytest.raises(TypeError):
        int(x + 1)
    with pytest.raises(TypeError):
        bool(x)
    with pytest.raises(TypeError):
        bool(x < 3)
    with pytest.raises(TypeError):
        if x + 1:  # noqa: SIM108 - exercising __bool__
            pass
    assert bool(E.num(0)) is False and bool(E.num(-2)) is True
    assert E.num(3).is_constant() and not x.is_constant()


def test_construction_errors():
    with pytest.raises(ValueError, match="pow"):
        E.raw("pow", 1, 2)
    with pytest.raises(TypeError):
        sym("")
    with pytest.raises(TypeError):
        to_expr(1.5)
    assert to_expr("q") == sym("q") and to_expr(np.int32(4)) == 4 and to_expr(True) == 1


def test_repr_is_readable():
    assert str((z // 5) % 3) == "((z // 5) % 3)"
    assert str(x.min(y)) in ("min(x, y)", "min(y, x)")


# ---------------------------------------------------------------------------------------------- C rendering
def _c_cases():
    """~30 expressions: hand-picked floor-div/mod cases with negative operands plus seeded random trees."""
    cases = [
        (z - 7) // 3, (z - 7) % 3, (z - 7) // -3, (z - 7) % -3, (7 - z) // 4, (7 - z) % 4,
        (a - b) // (b + 1), (a - b) % (b + 1), (z - 20).min(a) // 6, (z - 25).max(a - 30) % 7,
        ((z - 7) // 3 < a) + ((z % 5) >= 2) * 3, (a - 3).ceil_div(4), ((z // 5) % 10) * 5 + z % 5,
        (z < 30) & (a >= 2), (z < 3) | (b - 40 >= 0), -(z // 4) % 6, (b * 4 + 3) // 4 - z,
    ]
    rng = random.Random(20240607)

    def gen(depth):
        if depth == 0 or rng.random() < 0.25:
            return rng.choice([sym(rng.choice(SYMS)), E.num(rng.randint(-12, 12))])
        op = rng.choice(["+", "-", "*", "//", "%", "min", "max", "<", ">=", "&", "|", "ceil"])
        p = gen(depth - 1)
        if op in ("//", "%"):
            q = rng.choice([E.num(rng.choice([2, 3, 5, 7, -2, -3])), sym(rng.choice(SYMS)) + 1])
            return p // q if op == "//" else p % q
        if op == "ceil":
            return p.ceil_div(rng.choice([2, 3, 4]))
        q = gen(depth - 1)
        if op == "*":
            q = E.num(rng.randint(-4, 4)) if rng.random() < 0.6 else q
        return {"+": p + q, "-": p - q, "*": p * q, "min": p.min(q), "max": p.max(q),
                "<": p < q, ">=": p >= q, "&": p & q, "|": p | q}[op]

    while len(cases) < 32:
        cases.append(gen(4))
    return cases


def test_to_c_matches_evaluate_under_gcc(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    envs = [{"a": 0, "b": 0, "z": 0}, {"a": 5, "b": 2, "z": 3}, {"a": 1, "b": 7, "z": 13},
            {"a": 50, "b": 3, "z": 6}, {"a": 9, "b": 50, "z": 49}, {"a": 2, "b": 1, "z": 41}]
    cases = [e for e in _c_cases() if _fits_int64(e, envs, limit=2 ** 40)]
    assert len(cases) >= 28
    # the symbol z is renamed in C to check the `names` mapping
    rendered = [e.to_c({"z": "zidx"}) for e in cases]
    assert not any("z" in r.replace("zidx", "") for r in rendered)
    src = "\n".join(rendered)
    assert "LUMINAL_FLOORDIV" in src and "LUMINAL_FLOORMOD" in src and "LUMINAL_MIN" in src
    rows = ", ".join("{%d, %d, %d}" % (env["a"], env["b"], env["z"]) for env in envs)
    body = "\n".join(f'        printf("%lld\\n", (long long)({r}));' for r in rendered)
    program = f"""#include <stdio.h>
{C_PRELUDE}
int main(void) {{
    static const long long rows[][3] = {{{rows}}};
    for (int t = 0; t < {len(envs)}; t++) {{
        long long a = rows[t][0], b = rows[t][1], zidx = rows[t][2];
        (void)a; (void)b; (void)zidx;
{body}
    }}
    return 0;
}}
"""
    c_file, exe = tmp_path / "exprs.c", tmp_path / "exprs"
    c_file.write_text(program)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(c_file)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    got = [int(v) for v in out]
    expected = [e.evaluate(env) for env in envs for e in cases]
    assert len(got) == len(expected)
    mismatches = [(str(cases[i % len(cases)]), envs[i // len(cases)], g, w)
                  for i, (g, w) in enumerate(zip(got, expected)) if g != w]
    assert not mismatches, mismatches[:5]


def test_to_c_uses_plain_division_only_for_non_negative_operands():
    assert (z // 4).to_c() == "(z / 4)"
    assert (z % 4).to_c() == "(z % 4)"
    assert "LUMINAL_FLOORDIV" in ((z - 7) // 4).to_c()
    assert "LUMINAL_FLOORMOD" in ((z - x) % 4).to_c()
    assert "LUMINAL_FLOORDIV" in (z // -4).to_c()


# ---------------------------------------------------------------------------------------------- common factors
# Monomials over a, b, z with small coefficients; a divisor is a monomial too (a nonzero constant times 0-3
# symbol factors, repeats allowed). Bindings draw from 0..50, and a binding where a divisor is 0 is skipped:
# the simplifier may assume a divisor is non-zero wherever the expression is defined (Python raises there).
_factor_lists = st.lists(st.sampled_from(SYMS), min_size=0, max_size=3)


def _monomial(coef, names):
    out, names = to_expr(coef), list(names)
    for n in names:
        out = out * sym(n)
    return out, (lambda env, c=coef, ns=tuple(names): c * _prod(env[n] for n in ns))


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


_monos = st.tuples(st.integers(-12, 12), _factor_lists).map(lambda t: _monomial(*t))
_divisor_monos = st.tuples(st.sampled_from([-6, -3, -1, 1, 2, 3, 4, 5, 6, 12, 160]), _factor_lists) \
    .map(lambda t: _monomial(*t))


def _sum_of(monos, common):
    """``common * sum(monos)`` built term by term (so a common factor is present in every term)."""
    (ce, cf) = common
    out, fns = to_expr(0), []
    for e, f in monos:
        out = out + ce * e
        fns.append(f)
    return out, (lambda env: cf(env) * sum(f(env) for f in fns))


@PROP
@given(st.lists(_monos, min_size=1, max_size=4), _divisor_monos, _divisor_monos, _divisor_monos,
       st.lists(st.fixed_dictionaries({n: st.integers(0, 50) for n in SYMS}), min_size=4, max_size=6))
def test_common_factor_cancellation_matches_integer_arithmetic(monos, common, div_mono, div2, envs):
    num, fnum = _sum_of(monos, common)
    (dm, fdm), (ce, fce), (d2, fd2) = div_mono, common, div2
    den, fden = ce * dm, (lambda env: fce(env) * fdm(env))  # the divisor shares the common factor
    cases = [
        (num // den, lambda env: fnum(env) // fden(env), [fden]),
        (num % den, lambda env: fnum(env) % fden(env), [fden]),
        ((num // den) // d2, lambda env: (fnum(env) // fden(env)) // fd2(env), [fden, fd2]),
        ((num % (d2 * den)) % den, lambda env: (fnum(env) % (fd2(env) * fden(env))) % fden(env),
         [lambda env: fd2(env) * fden(env), fden]),
        ((3 + num % den) % den, lambda env: (3 + fnum(env) % fden(env)) % fden(env), [fden]),
        ((num + 2 * (num % (d2 * den))) % den,
         lambda env: (fnum(env) + 2 * (fnum(env) % (fd2(env) * fden(env)))) % fden(env),
         [lambda env: fd2(env) * fden(env), fden]),
    ]
    for expr, oracle, divisors in cases:
        again = expr.simplify()
        assert again == again.simplify(), expr
        for env in envs + EDGE_BINDINGS + [{"a": 1, "b": 1, "z": 1}, {"a": 2, "b": 3, "z": 5}]:
            if any(f(env) == 0 for f in divisors):
                continue
            assert expr.evaluate(env) == oracle(env), (str(expr), env)


def test_common_factor_cancellation_examples():
    c = sym("c")
    assert (160 * b) // (5 * b) == 32 and (160 * b) % (5 * b) == 0
    assert (a * b * c) // (b * c) == a and (a * b * c) % (b * c) == 0
    assert (3 * a * b) % b == 0 and (a * b + b) // b == a + 1
    assert (6 * a * b + 4 * b) // (2 * b) == 3 * a + 2
    assert (4 * a * b + 2 * b * c) % (6 * b) == 2 * b * ((2 * a + c) % 3)
    assert 10 // (4 * b) == 5 // (2 * b)
    assert (-4 * b) // (6 * b) == -1  # floor(-2/3), exact for every b != 0
    assert (x // b) // c == x // (b * c)
    assert (x % (b * c)) % c == x % c and (x % (3 * b)) % b == x % b
    assert (3 + x % 12) % 4 == (3 + x) % 4 and (5 + x % b) % b == (5 + x) % b
    # nothing is claimed that does not hold: b need not divide a*c
    assert (a * c) // b != a * c and (a * b) // (b * c) == a // c
    assert repr((160 * z) // (7 * b)) == "(160*z // (7*b))"


# ---------------------------------------------------------------------------------------------- min/max in sums
_lin = st.tuples(st.integers(-4, 4), st.integers(-3, 3), st.integers(-3, 3), st.integers(-9, 9)).map(
    lambda t: (t[0] * a + t[1] * b + t[2] * z + t[3],
               lambda env, t=t: t[0] * env["a"] + t[1] * env["b"] + t[2] * env["z"] + t[3]))


@PROP
@given(_lin, _lin, _lin, st.integers(-3, 3), st.sampled_from(["min", "max"]), bindings_list)
def test_sums_with_a_min_or_max_match_integer_arithmetic(p, q, r, k, op, envs):
    """``r + k*min(p, q)`` (pushed into the min/max when smaller: ``seq - min(2, seq) == max(0, seq - 2)``)."""
    (pe, pf), (qe, qf), (re_, rf) = p, q, r
    mm = pe.min(qe) if op == "min" else pe.max(qe)
    pick = min if op == "min" else max
    e = re_ + k * mm
    assert e.simplify() == e.simplify().simplify()
    for env in envs + EDGE_BINDINGS:
        assert e.evaluate(env) == rf(env) + k * pick(pf(env), qf(env)), (str(e), env)


def test_sums_with_a_min_or_max_examples():
    s = sym("s")
    assert s - s.min(2) == (s - 2).max(0)
    assert s - (s - 4).max(0) == s.min(4)
    assert (s - s.min(1)).max(0) == (s - 1).max(0)
    assert 1 + (s - 1).max(0) == s.max(1)


# ---------------------------------------------------------------------------------------------- lower bounds
def test_symbol_lower_bound():
    seq = sym("seq", lower=1)
    assert seq.lower() == 1 and seq.upper() is None and sym("seq").lower() == 0
    assert seq.bounds() == (1, None)
    assert seq.min(1) == 1 and (seq - 1).max(0) == seq - 1 and (seq >= 1) == 1 and (seq < 1) == 0
    assert seq != sym("seq") and str(seq) == "seq"  # the range is part of the symbol; the name renders
    assert (seq - 1).to_c() == "(-1 + seq)"
    m = E.symbol("m", 512, lower=2)  # a declared range: 2 <= m <= 512
    assert m.bounds() == (2, 512) and m.min(1) == 1 and m.max(513) == 513 and (m // 1024) == 0
    assert E.symbol("k", 3, lower=3) == 3
    with pytest.raises(ValueError, match="below the lower bound"):
        E.symbol("k", 2, lower=3)
    with pytest.raises(TypeError, match="lower bound"):
        E.symbol("k", lower=-1)
    assert seq.evaluate({"seq": 4}) == 4
    with pytest.raises(ValueError, match="declared >= 1"):
        (seq + 1).evaluate({"seq": 0})
    i = E.symbol("i", seq - 1)  # a loop index over a non-empty axis
    assert i.min(seq) == i and (i < seq) == 1 and i.bounds() == (0, None)


@PROP
@given(_lin, _lin, _lin, st.integers(-3, 3), st.integers(-3, 3), st.integers(-2, 2), st.integers(-2, 2),
       st.booleans(), bindings_list)
def test_min_plus_max_pairs_match_integer_arithmetic(p, q, r, k1, k2, t1, t2, swap, envs):
    """``k1*min(p, q) + k2*max(p - t1, q - t2) + r``: recombined to ``k*(p + q - t)`` when ``k1 == k2`` and
    ``t1 == t2`` (``min(2, seq) + max(0, seq - 2) == seq``), left alone otherwise; always the same value."""
    (pe, pf), (qe, qf), (re_, rf) = p, q, r
    u, v = pe - t1, qe - t2
    mx = v.max(u) if swap else u.max(v)
    e = (k1 * pe.min(qe) + k2 * mx) + re_
    other_order = k1 * pe.min(qe) + re_ + k2 * mx  # r may be pushed into the min first: same value
    for expr in (e, other_order):
        assert expr.simplify() == expr.simplify().simplify()
        for env in envs + EDGE_BINDINGS:
            pv, qv = pf(env), qf(env)
            assert expr.evaluate(env) == k1 * min(pv, qv) + rf(env) + k2 * max(pv - t1, qv - t2), (str(expr), env)
    if k1 == k2 and t1 == t2:
        assert e == k1 * (pe + qe - t1) + re_
