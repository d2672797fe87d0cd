"""Simplifying constructors of :class:`~luminal.shape.expression.Expression` and their interval analysis.

Every operator on expressions goes through these functions, which keep trees canonical: constants folded,
sums as sorted linear combinations with collected coefficients, products with the constant first, floor
div/mod rules (in :mod:`.division`), and comparisons / min / max decided from bounds (symbols are non-negative).
"""

from __future__ import annotations

from typing import Callable, Mapping

from .expression import ADD, AND, DIV, GE, LT, MAX, MIN, MOD, MUL, NUM, OR, VAR, _OP_RANK, Expression


# ====================================================================== smart constructors
_NUM_CACHE: dict[int, Expression] = {}


def _num(v: int) -> Expression:
    e = _NUM_CACHE.get(v)
    if e is None:
        e = Expression(NUM, (v,))
        if -1024 <= v <= 1 << 20:
            _NUM_CACHE[v] = e
    return e


ZERO, ONE = _num(0), _num(1)


def _sort_key(e: Expression):
    return (_OP_RANK[e.op], e._hash)


def _split_coef(e: Expression) -> tuple[int, Expression]:
    """``3*x*y`` -> ``(3, x*y)``; a non-product -> ``(1, e)``."""
    if e.op == MUL and e.args[0].op == NUM:
        rest = e.args[1:]
        return e.args[0].args[0], rest[0] if len(rest) == 1 else Expression(MUL, rest)
    return 1, e


def _scale(coef: int, base: Expression) -> Expression:
    if coef == 1:
        return base
    if base.op == MUL:
        return Expression(MUL, (_num(coef),) + base.args)
    return Expression(MUL, (_num(coef), base))


def _add(a: Expression, b: Expression) -> Expression:
    if a.op == NUM and b.op == NUM:
        return _num(a.args[0] + b.args[0])
    if a.op == NUM and a.args[0] == 0:
        return b
    if b.op == NUM and b.args[0] == 0:
        return a
    return _add_terms(a, b)


_MEMO_LIMIT = 1 << 16


def _memoized(fn):
    """``fn(a, b)`` with a bounded memo. The simplifying constructors are pure functions of their immutable,
    structurally compared operands, and code generation asks the same questions over and over (every layer of a
    model renders the same index expressions): a repeated question becomes a dictionary lookup. The memo is
    emptied when it reaches ``_MEMO_LIMIT`` entries."""
    memo: dict = {}

    def memoized(a: Expression, b: Expression) -> Expression:
        key = (a, b)
        out = memo.get(key)
        if out is None:
            out = fn(a, b)
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[key] = out
        return out

    memoized.__doc__ = fn.__doc__
    memoized.memo = memo
    return memoized


@_memoized
def _add_terms(a: Expression, b: Expression) -> Expression:
    coefs: dict[Expression, int] = {}
    const = _collect_terms((a, b), 1, coefs)
    if len(coefs) >= 2:
        const += _recombine_div_mod(coefs)
        const += _recombine_min_max(coefs)
    terms = sorted((_scale(c, base) for base, c in coefs.items() if c != 0), key=_sort_key)
    if const != 0:
        terms.insert(0, _num(const))
    if not terms:
        return ZERO
    if len(terms) == 1:
        return terms[0]
    out = Expression(ADD, tuple(terms))
    pushed = _push_into_minmax(out)
    return out if pushed is None else pushed


def _size(e: Expression) -> int:
    return 1 if e.op in (NUM, VAR) else 1 + sum(_size(a) for a in e.args)


def _push_into_minmax(s: Expression) -> Expression | None:
    """``r + k*min(a, b)`` -> ``min(r + k*a, r + k*b)`` (``max`` for ``k < 0``; likewise for ``max``) when that is
    smaller, e.g. ``seq - min(2, seq)`` -> ``max(0, seq - 2)``: the sizes of slices over symbolic axes."""
    idx = [j for j, t in enumerate(s.args) if _split_coef(t)[1].op in (MIN, MAX)]
    if len(idx) != 1:
        return None
    k, mm = _split_coef(s.args[idx[0]])
    rest = ZERO
    for j, t in enumerate(s.args):
        if j != idx[0]:
            rest = _add(rest, t)
    a, b = (_add(rest, _mul(_num(k), x)) for x in mm.args)
    if a.op != NUM and b.op != NUM:  # only when a bound becomes a constant (keeps simplify() idempotent)
        return None
    out = _minmax(mm.op if k > 0 else (MAX if mm.op == MIN else MIN), a, b)
    return out if _size(out) < _size(s) else None


def _collect_terms(parts, k: int, coefs: dict) -> int:
    """Accumulate ``k * sum(parts)`` into ``coefs`` (base -> coefficient); returns the constant part."""
    const = 0
    for part in parts:
        for t in (part.args if part.op == ADD else (part,)):
            if t.op == NUM:
                const += k * t.args[0]
            else:
                c, base = _split_coef(t)
                coefs[base] = coefs.get(base, 0) + k * c
    return const


def _recombine_div_mod(coefs: dict[Expression, int]) -> int:
    """``k*c*(x//c) + k*(x%c)`` -> ``k*x`` (the identity that makes merged views simple).

    Rewrites ``coefs`` in place; returns the constant that the expansion of ``x`` adds.
    """
    const = 0
    changed = True
    while changed:
        changed = False
        for base, k in coefs.items():
            if base.op != MOD or k == 0:
                continue
            x, c = base.args
            div = Expression(DIV, (x, c))
            cc, cm = _split_coef(c) if c.op != NUM else (c.args[0], ONE)  # (a sum c: 1, c)
            term = div if c.op == NUM else _mul(cm, div)  # k*cc*cm*(x // c) is stored as base cm*(x // c)
            if coefs.get(term, 0) == k * cc:
                del coefs[base], coefs[term]
                const += _collect_terms((x,), k, coefs)
                changed = True
                break
            # k*c*((x // c) % m) + k*(x % c) -> k*(x % (c*m)): the row and column of a flat index seen through
            # a reshape ((seq*batch) rows read as (batch, seq)) are one mod, or x itself where x < c*m
            outer = _mod_of(coefs, x, c, cm, k * cc) if cc > 0 else None
            if outer is not None:
                from .division import _mod
                term, x2, m = outer
                del coefs[base], coefs[term]
                const += _collect_terms((_mod(x2, _mul(c, m)),), k, coefs)
                changed = True
                break
    return const


def _mod_of(coefs: dict, x: Expression, c: Expression, cm: Expression, coef: int):
    """``(base, x2, m)`` of a term ``coef * cm * ((x2 // c) % m)`` in ``coefs`` whose ``x2 % c`` is ``x % c``
    (``x2 == x``, or, for a constant ``c``, ``x2 - x`` a constant multiple of it: the mod's constant offset is
    kept modulo c, the division's is not), ``m`` positive or symbolic; ``cm`` the symbolic part of ``c`` (ONE
    for a constant); else None."""
    for base, k in coefs.items():
        if k != coef:
            continue
        factors = base.args if base.op == MUL else (base,)
        for f in factors:
            if f.op != MOD or f.args[0].op != DIV or f.args[0].args[1] != c or \
                    (f.args[1].op == NUM and f.args[1].args[0] <= 0):
                continue
            x2 = f.args[0].args[0]
            if x2 != x:
                if c.op != NUM:
                    continue
                d = x2 - x
                if d.op != NUM or d.args[0] % c.args[0]:
                    continue
            if _mul_all([g for g in factors if g is not f]) == cm:
                return base, x2, f.args[1]
    return None


def _mul_all(factors) -> Expression:
    out = ONE
    for f in factors:
        out = _mul(out, f)
    return out


def _recombine_min_max(coefs: dict[Expression, int]) -> int:
    """``k*min(a, b) + k*max(a - t, b - t)`` -> ``k*(a + b - t)`` (``min + max`` of a pair is its sum): e.g.
    ``min(2, seq) + max(0, seq - 2) == seq``, the size of a symbolic axis split at 2 and glued back.

    Rewrites ``coefs`` in place; returns the constant that the expansion adds.
    """
    mins = [e for e, k in coefs.items() if e.op == MIN and k != 0]
    maxs = [e for e, k in coefs.items() if e.op == MAX and k != 0]
    const = 0
    for mn in mins:
        k = coefs.get(mn, 0)
        if k == 0:
            continue
        a, b = mn.args
        for mx in maxs:
            if coefs.get(mx, 0) != k:
                continue
            p, q = mx.args
            for x, y in ((p, q), (q, p)):
                t = _add(a, _mul(_num(-1), x))
                if t == _add(b, _mul(_num(-1), y)):
                    del coefs[mn], coefs[mx]
                    const += _collect_terms((a, b, _mul(_num(-1), t)), k, coefs)
                    break
            else:
                continue
            break
    return const


def _mul(a: Expression, b: Expression) -> Expression:
    if a.op == NUM and b.op == NUM:
        return _num(a.args[0] * b.args[0])
    return _mul_terms(a, b)


@_memoized
def _mul_terms(a: Expression, b: Expression) -> Expression:
    if a.op == NUM:
        a, b = b, a
    if b.op == NUM:
        c = b.args[0]
        if c == 0:
            return ZERO
        if c == 1:
            return a
        if a.op == ADD:  # distribute constants over sums: keeps index math linear
            out = ZERO
            for t in a.args:
                out = _add(out, _mul(t, b))
            return out
        ac, base = _split_coef(a)
        if ac * c == 1:
            return base
        return _scale(ac * c, base)
    const = 1
    factors = []
    for part in (a, b):
        for f in (part.args if part.op == MUL else (part,)):
            if f.op == NUM:
                const *= f.args[0]
            else:
                factors.append(f)
    if const == 0:
        return ZERO
    factors.sort(key=_sort_key)
    if const != 1:
        factors.insert(0, _num(const))
    if len(factors) == 1:
        return factors[0]
    return Expression(MUL, tuple(factors))


def _minmax(op: str, a: Expression, b: Expression) -> Expression:
    pick_min = op == MIN
    if a.op == NUM and b.op == NUM:
        return _num(min(a.args[0], b.args[0]) if pick_min else max(a.args[0], b.args[0]))
    if a == b:
        return a
    diff = _add(a, _mul(_num(-1), b))
    if _negative(_add(diff, _num(-1))):  # a <= b
        return a if pick_min else b
    if _non_negative(diff):  # a >= b
        return b if pick_min else a
    args = tuple(sorted((a, b), key=_sort_key))
    return Expression(op, args)


def _min(a, b): return _minmax(MIN, a, b)
def _max(a, b): return _minmax(MAX, a, b)


def _lt(a: Expression, b: Expression) -> Expression:
    if a.op == NUM and b.op == NUM:
        return _num(int(a.args[0] < b.args[0]))
    diff = _add(a, _mul(_num(-1), b))
    if _negative(diff):
        return ONE
    if _non_negative(diff):
        return ZERO
    return Expression(LT, (a, b))


def _ge(a: Expression, b: Expression) -> Expression:
    if a.op == NUM and b.op == NUM:
        return _num(int(a.args[0] >= b.args[0]))
    diff = _add(a, _mul(_num(-1), b))
    if _non_negative(diff):
        return ONE
    if _negative(diff):
        return ZERO
    return Expression(GE, (a, b))


def _and(a: Expression, b: Expression) -> Expression:
    if a.op == NUM and b.op == NUM:
        return _num(int(bool(a.args[0]) and bool(b.args[0])))
    for x, y in ((a, b), (b, a)):
        if x.op == NUM:
            if x.args[0] == 0:
                return ZERO
            return y if _is_boolean(y) else Expression(AND, (ONE, y))
    if a == b and _is_boolean(a):
        return a
    return Expression(AND, tuple(sorted((a, b), key=_sort_key)))


def _or(a: Expression, b: Expression) -> Expression:
    if a.op == NUM and b.op == NUM:
        return _num(int(bool(a.args[0]) or bool(b.args[0])))
    for x, y in ((a, b), (b, a)):
        if x.op == NUM:
            if x.args[0] != 0:
                return ONE
            return y if _is_boolean(y) else Expression(OR, (ZERO, y))
    if a == b and _is_boolean(a):
        return a
    return Expression(OR, tuple(sorted((a, b), key=_sort_key)))


def _is_boolean(e: Expression) -> bool:
    lo, hi = e.bounds()
    return lo is not None and hi is not None and lo >= 0 and hi <= 1


# floor division and modulo live in division.py (imported here: _BUILDERS needs them)
from .division import _div, _mod  # noqa: E402

_BUILDERS: dict[str, Callable[..., Expression]] = {
    # MUL folds its constant factors last: a product node keeps its coefficient outside a sum factor
    # (c*(x + 1)*y), so distributing it first would make simplify() non-idempotent.
    ADD: lambda *xs: _fold(_add, xs), MUL: lambda *xs: _fold(_mul, sorted(xs, key=lambda e: e.op == NUM)),
    DIV: _div, MOD: _mod, MIN: _min, MAX: _max, LT: _lt, GE: _ge, AND: _and, OR: _or,
}


def _fold(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


# ====================================================================== bounds
def _b_add(x, y):
    return None if x is None or y is None else x + y


def _compute_bounds(e: Expression) -> tuple[int | None, int | None]:
    op = e.op
    if op == NUM:
        return e.args[0], e.args[0]
    if op == VAR:
        lo = e.args[2] if len(e.args) > 2 else 0
        up = e.args[1] if len(e.args) > 1 else None
        return lo, (up.bounds()[1] if isinstance(up, Expression) else up)
    if op == ADD:
        lo, hi = 0, 0
        for t in e.args:
            tl, th = t.bounds()
            lo, hi = _b_add(lo, tl), _b_add(hi, th)
        return lo, hi
    if op == MUL:
        lo, hi = 1, 1
        for f in e.args:
            lo, hi = _mul_intervals((lo, hi), f.bounds())
        return lo, hi
    if op in (LT, GE, AND, OR):
        return 0, 1
    a, b = e.args
    (alo, ahi), (blo, bhi) = a.bounds(), b.bounds()
    if op in (DIV, MOD) and blo == 0:  # a divisor is non-zero wherever the expression is defined: b >= 1
        blo = 1
    if op == MIN:
        lo = None if alo is None or blo is None else min(alo, blo)
        hi = bhi if ahi is None else ahi if bhi is None else min(ahi, bhi)
        return lo, hi
    if op == MAX:
        lo = blo if alo is None else alo if blo is None else max(alo, blo)
        hi = None if ahi is None or bhi is None else max(ahi, bhi)
        return lo, hi
    if op == MOD:
        if blo is not None and blo > 0:
            if alo is not None and alo >= 0:
                return 0, (bhi - 1 if bhi is not None else ahi) if ahi is None else min(ahi, bhi - 1) if bhi is not None else ahi
            return 0, None if bhi is None else bhi - 1
        return None, None
    if op == DIV:
        if blo is not None and blo > 0 and alo is not None and alo >= 0:
            return 0, None if ahi is None else ahi // blo
        if blo is not None and blo > 0 and bhi is not None and blo == bhi:
            return (None if alo is None else alo // blo), (None if ahi is None else ahi // blo)
        return None, None
    return None, None


def _mul_intervals(x, y):
    (alo, ahi), (blo, bhi) = x, y
    if None in (alo, ahi, blo, bhi):
        # Extended-real corners with 0 * inf = 0, so e.g. -1 * [0, inf) is (-inf, 0] (keeps bounds(a - b) and
        # bounds(b - a) mirror images, which min/max/lt/ge rely on for order-independent simplification).
        inf = float("inf")
        xs = (-inf if alo is None else alo, inf if ahi is None else ahi)
        ys = (-inf if blo is None else blo, inf if bhi is None else bhi)
        products = [0 if p == 0 or q == 0 else p * q for p in xs for q in ys]
        lo, hi = min(products), max(products)
        return (None if lo == -inf else lo), (None if hi == inf else hi)
    products = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
    return min(products), max(products)


def _substitute(e: Expression, mapping: Mapping[str, Expression]) -> Expression:
    if e.op == VAR:
        return mapping.get(e.args[0], e)
    if e.op == NUM or not (e.symbols() & mapping.keys()):
        return e
    return _BUILDERS[e.op](*(_substitute(a, mapping) for a in e.args))


# The symbolic-range proofs (loop indices over symbolic extents) live in ranges.py; imported last because
# they build expressions through the constructors above.
from .ranges import _negative, _non_negative, _sym_bounds  # noqa: E402,F401  (_sym_bounds: re-exported for expression.py)
