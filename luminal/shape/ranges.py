"""Symbolic ranges: proofs about expressions whose symbols have symbolic upper bounds (loop indices).

A loop index ``Expression.symbol("i1", seq - 1)`` satisfies ``0 <= i1 <= seq - 1``. ``_sym_bounds(e)`` replaces
every bounded symbol by the end of its range that maximizes (minimizes) ``e``: sums term by term, products of
non-negative factors with sums distributed (so ``64*(seq - 1) + 63 - 64*seq`` cancels to ``-1``), floor
division by a positive divisor as monotone in the dividend. The result mentions only free symbols (sizes), and
its interval bound decides ``e < 0`` / ``e >= 0`` (:func:`_negative`, :func:`_non_negative`), which the
simplifying constructors of ``simplify.py`` use for div/mod elimination, comparisons and min/max.
"""

from __future__ import annotations

from .expression import ADD, AND, DIV, GE, LT, MIN, MOD, MUL, NUM, OR, VAR, Expression
from .division import _div
from .simplify import ONE, ZERO, _add, _max, _min, _mul, _num, _split_coef


def _negative(e: Expression) -> bool:
    """Proof that ``e < 0`` for every value of its symbols within their ranges (numeric, then symbolic)."""
    hi = e.bounds()[1]
    if hi is not None and hi < 0:
        return True
    if e.ranged():
        shi = _sym_bounds(e)[1]
        if shi is not None:
            hi = shi.bounds()[1]
            return hi is not None and hi < 0
    return False


def _non_negative(e: Expression) -> bool:
    """Proof that ``e >= 0`` for every value of its symbols within their ranges."""
    lo = e.bounds()[0]
    if lo is not None and lo >= 0:
        return True
    if e.ranged():
        slo = _sym_bounds(e)[0]
        if slo is not None:
            lo = slo.bounds()[0]
            return lo is not None and lo >= 0
    return False


def _expand(a: Expression, b: Expression) -> Expression:
    """``a * b`` with sums distributed, so symbolic bounds such as ``64*(seq - 1) + 63 - 64*seq`` cancel."""
    if a.op == ADD:
        out = ZERO
        for t in a.args:
            out = _add(out, _expand(t, b))
        return out
    if b.op == ADD:
        out = ZERO
        for t in b.args:
            out = _add(out, _expand(a, t))
        return out
    return _mul(a, b)


def _sym_bounds(e: Expression) -> tuple[Expression | None, Expression | None]:
    """Inclusive symbolic bounds of ``e`` free of ranged symbols (see ``Expression.symbolic_bounds``)."""
    if e._sbounds is None:
        e._sbounds = _compute_sym_bounds(e)
    return e._sbounds


def _compute_sym_bounds(e: Expression) -> tuple[Expression | None, Expression | None]:
    op = e.op
    if op == NUM or op == VAR and (len(e.args) == 1 or e.args[1] is None):  # constants, sizes: themselves
        return e, e
    if op == VAR:  # lower <= i <= upper
        up = e.args[1]
        return _num(e.lower()), (_sym_bounds(up)[1] if isinstance(up, Expression) else _num(up))
    if op == ADD:
        lo, hi = ZERO, ZERO
        for t in e.args:
            tlo, thi = _sym_bounds(t)
            lo = None if lo is None or tlo is None else _add(lo, tlo)
            hi = None if hi is None or thi is None else _add(hi, thi)
        return lo, hi
    if op == MUL:
        c, base = _split_coef(e)
        factors = base.args if base.op == MUL else (base,)
        lo, hi = ONE, ONE
        for f in factors:  # monotone in each factor while all factors are non-negative
            flo, fhi = _sym_bounds(f)
            if flo is None or fhi is None or not _non_negative(flo):
                return None, None
            lo, hi = _expand(lo, flo), _expand(hi, fhi)
        return (_expand(_num(c), lo), _expand(_num(c), hi)) if c > 0 else (_expand(_num(c), hi), _expand(_num(c), lo))
    if op in (LT, GE, AND, OR):
        return ZERO, ONE
    a, b = e.args
    if op in (DIV, MOD):
        blo = b.bounds()[0]
        if b.ranged() or blo is None or blo < 0:  # b >= 0 and b != 0 where defined: b >= 1
            return None, None
        if op == MOD:
            return ZERO, _add(b, _num(-1))
        alo, ahi = _sym_bounds(a)  # floor division by a positive divisor is monotone in the dividend
        return (None if alo is None else _div(alo, b)), (None if ahi is None else _div(ahi, b))
    (alo, ahi), (blo, bhi) = _sym_bounds(a), _sym_bounds(b)
    pick = _min if op == MIN else _max
    return (None if alo is None or blo is None else pick(alo, blo)), \
        (None if ahi is None or bhi is None else pick(ahi, bhi))
