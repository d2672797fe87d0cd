"""Floor division and modulo of symbolic expressions: the ``//`` and ``%`` constructors and their rules (exact
quotients by monomials and sums, common factors, splits below a divisor ``(k*B + r) // (k*C)``, nested mods), with
range proofs from :mod:`luminal.shape.ranges`. Part of the simplifying constructors of :mod:`.simplify`, which
re-exports :func:`_div` and :func:`_mod`.
"""

from __future__ import annotations

import math

from .expression import ADD, DIV, MOD, MUL, NUM, Expression
from .simplify import ONE, ZERO, _add, _memoized, _mul, _num, _scale, _split_coef


def _remove_factor(a: Expression, f: Expression) -> Expression | None:
    """``a / f`` when ``f`` is literally one of ``a``'s symbolic factors, else None."""
    if a == f:
        return ONE
    if a.op == MUL and f in a.args:
        rest = list(a.args)
        rest.remove(f)
        out = ONE
        for r in rest:
            out = _mul(out, r)
        return out
    return None


@_memoized
def _div(a: Expression, b: Expression) -> Expression:
    """``a // b``, simplified."""
    if b.op == NUM:
        d = b.args[0]
        if d == 0:
            raise ZeroDivisionError(f"symbolic division of {a} by zero")
        if d == 1:
            return a
        if a.op == NUM:
            return _num(a.args[0] // d)
        if d > 0:
            lo, hi = a.bounds()
            if lo is not None and hi is not None and lo // d == hi // d:
                return _num(lo // d)
            if a.op == DIV and a.args[1].op == NUM and a.args[1].args[0] > 0:
                return _div(a.args[0], _num(a.args[1].args[0] * d))
            if a.op == MUL:
                c, base = _split_coef(a)
                if c % d == 0:
                    return _scale(c // d, base) if c // d != 0 else ZERO
            if a.op == ADD:
                whole = ZERO
                rest = []
                for t in a.args:
                    c, base = (t.args[0], ONE) if t.op == NUM else _split_coef(t)
                    if c % d == 0:
                        whole = _add(whole, _mul(_num(c // d), base))
                    else:
                        rest.append(t)
                if whole != ZERO:
                    rem = ZERO
                    for t in rest:
                        rem = _add(rem, t)
                    return _add(whole, _div(rem, b))
                split = _split_small(a, d)
                if split is not None:  # (k*B + r) // d == B // (d/k) when 0 <= r < k and k | d
                    k, big, _ = split
                    return _div(big, _num(d // k))
        if a.ranged() and d > 0:  # symbolic ranges: lo // d == hi // d decides the quotient
            slo, shi = _sym_bounds(a)
            if slo is not None and shi is not None:
                qlo, qhi = _div(slo, b), _div(shi, b)
                if qlo == qhi:
                    return qlo
    else:
        if a == b:
            return ONE
        if a.op != NUM:
            q = _remove_factor(a, b)
            if q is not None:
                return q
        if a.op == NUM and a.args[0] == 0:
            return ZERO
        common = _cancel_common(a, b)
        if common is not None:  # (f*x) // (f*y) == x // y for every f != 0
            return _div(common[0], common[1])
        if a.op == DIV and _non_negative(b) and _non_negative(a.args[1]):  # (x // c) // b == x // (c*b), b > 0
            return _div(a.args[0], _mul(a.args[1], b))
        if a.op == ADD:  # (q*b + r) // b == q + r // b for any integer q and b != 0
            whole, rest = _split_multiples(a, b)
            if whole is not None:
                return _add(whole, _div(rest, b))
        if _non_negative(a) and _negative(_add(a, _mul(_num(-1), b))):  # 0 <= a < b
            return ZERO
        split = _split_symbolic_divisor(a, b)
        if split is not None:  # (k*B + r) // (k*C) == B // C when 0 <= r < k and C >= 1
            k, big, _, rest_b = split
            return _div(big, rest_b)
    return Expression(DIV, (a, b))


def _multiple_of(g: Expression, f: Expression) -> int | None:
    """``k`` when the sum ``g`` is ``k * f`` for the sum ``f`` and a non-zero integer ``k``, else None."""
    if len(g.args) != len(f.args):
        return None
    c0, _ = (g.args[0].args[0], ONE) if g.args[0].op == NUM else _split_coef(g.args[0])
    d0, _ = (f.args[0].args[0], ONE) if f.args[0].op == NUM else _split_coef(f.args[0])
    if d0 == 0 or c0 % d0:
        return None
    k = c0 // d0
    return k if k != 0 and _mul(_num(k), f) == g else None


def _exact_quotient(t: Expression, b: Expression) -> Expression | None:
    """``t / b`` when the monomial ``b`` (a constant times symbols) divides the monomial ``t`` exactly."""
    tc, tbase = (t.args[0], ONE) if t.op == NUM else _split_coef(t)
    bc, bbase = _split_coef(b)
    if bc == 0 or tc % bc:
        return None
    rest = list(tbase.args) if tbase.op == MUL else ([] if tbase == ONE else [tbase])
    scale = 1
    for f in (bbase.args if bbase.op == MUL else (bbase,)):
        if f in rest:
            rest.remove(f)
            continue
        if f.op == ADD:  # a sum factor may appear scaled: i3*(2*seq + 2*past) holds 2 * (seq + past)
            k = next((_multiple_of(g, f) for g in rest if g.op == ADD), None)
            if k is not None:
                rest.remove(next(g for g in rest if g.op == ADD and _multiple_of(g, f) == k))
                scale *= k
                continue
        return None
    out = _num(tc * scale // bc)
    for f in rest:
        out = _mul(out, f)
    return out


def _monomial(t: Expression) -> tuple[int, list[Expression]]:
    """``3*x*y`` -> ``(3, [x, y])``; a constant -> ``(c, [])``; anything else -> ``(1, [t])``."""
    if t.op == NUM:
        return t.args[0], []
    c, base = _split_coef(t)
    return c, list(base.args) if base.op == MUL else [base]


def _cancel_common(a: Expression, b: Expression):
    """``(x, y, f)`` with ``a == f*x``, ``b == f*y`` for ``f`` the largest monomial (a positive constant times
    symbolic factors) dividing the monomial ``b`` and every term of ``a``; None when ``f == 1``.

    ``(160*b) // (5*b) == 32``, ``(a*b*c) // (b*c) == a``: exact wherever the division is defined (``b != 0``
    implies ``f != 0``, and ``(f*x) // (f*y) == x // y``, ``(f*x) % (f*y) == f*(x % y)`` for every ``f != 0``).
    """
    if b.op in (NUM, ADD):
        return None
    bc, common = _monomial(b)
    g = abs(bc)
    terms = [_monomial(t) for t in (a.args if a.op == ADD else (a,))]
    for c, fs in terms:
        g = math.gcd(g, c)
        rest, kept = list(fs), []
        for f in common:
            if f in rest:
                rest.remove(f)
                kept.append(f)
        common = kept
        if g <= 1 and not common:
            return None
    if g == 0:
        return None

    def divide(c, fs):
        out = _num(c // g)
        fs = list(fs)
        for f in common:
            fs.remove(f)
        for f in fs:
            out = _mul(out, f)
        return out

    x = ZERO
    for c, fs in terms:
        x = _add(x, divide(c, fs))
    f = _num(g)
    for s in common:
        f = _mul(f, s)
    return x, divide(bc, _monomial(b)[1]), f


def _split_multiples(a: Expression, b: Expression):
    """A sum ``a`` as ``(q, r)`` with ``a == q*b + r`` where ``q`` collects the terms ``b`` divides; ``(None, a)``
    when no term is a multiple of ``b`` (a symbolic monomial such as ``64*seq``, or a sum such as ``seq + past``
    that appears as a factor of the terms: ``i3*(seq + past)``, the row stride of a KV-cache attention)."""
    if b.op == NUM:
        return None, a
    whole, rest = ZERO, ZERO
    found = False
    for t in a.args:
        q = _exact_quotient(t, b)
        if q is None:
            rest = _add(rest, t)
        else:
            whole = _add(whole, q)
            found = True
    return (whole, rest) if found else (None, a)


def _split_symbolic_divisor(a: Expression, b: Expression):
    """For a sum ``a`` and a symbolic monomial divisor ``b = kb*m`` (``kb > 1``, ``m`` non-negative sizes, so
    ``b >= 1`` wherever the division is defined): ``(k, big, small, b / k)`` with ``a == k*big + small``,
    ``k`` a divisor of ``kb`` and ``0 <= small < k``, or None. E.g. ``(i1 + 1536*i0) // (1536*seq)`` with
    ``0 <= i1 < 1536`` is ``i0 // seq``: the row index of a GEMM epilogue over ``(batch, seq, n)``."""
    if a.op != ADD or b.op != MUL or b.ranged():
        return None
    kb, bm = _split_coef(b)
    if kb <= 1 or bm.bounds()[0] is None or bm.bounds()[0] < 0:
        return None
    split = _split_small(a, kb, proper=False)
    if split is None:
        return None
    k, big, small = split
    return k, big, small, _scale(kb // k, bm)


def _split_small(a: Expression, d: int, proper: bool = True):
    """``a`` (a sum) as ``k*big + small`` with ``k`` a proper divisor of ``d`` and ``0 <= small < k``, or None.

    Candidates for ``k`` are ``gcd(coefficient, d)`` of the sum's terms, e.g. ``i3 + 24*i2`` with
    ``0 <= i3 < 24`` and ``d = 48`` splits as ``24*i2 + i3``: index math of a view over a view.
    """
    coefs = []
    for t in a.args:
        c, base = (t.args[0], ONE) if t.op == NUM else _split_coef(t)
        coefs.append((c, base, t))
    tried = set()
    for c, _, _ in coefs:
        k = math.gcd(c, d)
        if k <= 1 or (k >= d and proper) or k in tried:
            continue
        tried.add(k)
        big, small = ZERO, ZERO
        for c2, base, t in coefs:
            if c2 % k == 0:
                big = _add(big, _scale(c2 // k, base))
            else:
                small = _add(small, t)
        if big == ZERO:
            continue
        lo, hi = small.bounds()
        if lo is not None and hi is not None and lo >= 0 and hi < k:
            return k, big, small
        if small.ranged() and _non_negative(small) and _negative(_add(small, _num(-k))):
            return k, big, small
    return None


def _unwrap_inner_mods(a: Expression, b: Expression) -> Expression | None:
    """A sum ``a`` with every term ``k*(x % m)``, ``m`` a multiple of ``b``, replaced by ``k*x`` (the same value
    modulo ``b``: ``x % m == x - m*(x // m)``), or None when there is none: ``(c + x % b) % b == (c + x) % b``."""
    changed = False
    out = ZERO
    for t in a.args:
        k, base = (1, t) if t.op == NUM else _split_coef(t)
        if base.op == MOD and base.args[1].op != ADD and (
                _exact_quotient(base.args[1], b) is not None if b.op != NUM
                else base.args[1].op == NUM and base.args[1].args[0] % b.args[0] == 0):
            t = _mul(_num(k), base.args[0])
            changed = True
        out = _add(out, t)
    return out if changed else None


@_memoized
def _mod(a: Expression, b: Expression) -> Expression:
    """``a % b``, simplified."""
    if a.op == ADD and b.op != ADD and (b.op != NUM or b.args[0] != 0):
        inner = _unwrap_inner_mods(a, b)
        if inner is not None:
            return _mod(inner, b)
    if b.op == NUM:
        d = b.args[0]
        if d == 0:
            raise ZeroDivisionError(f"symbolic modulo of {a} by zero")
        if d == 1 or d == -1:
            return ZERO
        if a.op == NUM:
            return _num(a.args[0] % d)
        if d > 0:
            lo, hi = a.bounds()
            if lo is not None and hi is not None and lo >= 0 and hi < d:
                return a
            if a.ranged() and _non_negative(a) and _negative(_add(a, _num(-d))):
                return a
            if a.op == MOD and a.args[1].op == NUM and a.args[1].args[0] > 0 and a.args[1].args[0] % d == 0:
                return _mod(a.args[0], b)
            if a.op == MUL:
                c, _ = _split_coef(a)
                if c % d == 0:
                    return ZERO
            if a.op == ADD:
                kept = []
                changed = False
                for t in a.args:
                    if t.op == NUM:
                        if t.args[0] % d != t.args[0]:
                            changed = True
                        if t.args[0] % d:
                            kept.append(_num(t.args[0] % d))
                        continue
                    c, base = _split_coef(t)
                    if c % d == 0:
                        changed = True
                        continue
                    kept.append(t)
                if changed:
                    rem = ZERO
                    for t in kept:
                        rem = _add(rem, t)
                    return _mod(rem, b)
                split = _split_small(a, d)
                if split is not None:  # (k*B + r) % d == k*(B % (d/k)) + r when 0 <= r < k and k | d
                    k, big, small = split
                    return _add(_scale(k, _mod(big, _num(d // k))), small)
    else:
        if a == b:
            return ZERO
        if a.op != NUM and _remove_factor(a, b) is not None:
            return ZERO
        if a.op == NUM and a.args[0] == 0:
            return ZERO
        common = _cancel_common(a, b)
        if common is not None:  # (f*x) % (f*y) == f * (x % y) for every f != 0
            return _mul(common[2], _mod(common[0], common[1]))
        if a.op == MOD and _exact_quotient(a.args[1], b) is not None:  # (x % (k*b)) % b == x % b
            return _mod(a.args[0], b)
        if a.op == ADD:  # (q*b + r) % b == r % b
            whole, rest = _split_multiples(a, b)
            if whole is not None:
                return _mod(rest, b)
        if _non_negative(a) and _negative(_add(a, _mul(_num(-1), b))):  # 0 <= a < b
            return a
        split = _split_symbolic_divisor(a, b)
        if split is not None:  # (k*B + r) % (k*C) == k*(B % C) + r when 0 <= r < k and C >= 1
            k, big, small, rest_b = split
            return _add(_scale(k, _mod(big, rest_b)), small)
    return Expression(MOD, (a, b))


# range proofs (loop indices over symbolic extents); imported last: ranges builds expressions through the
# constructors above
from .ranges import _negative, _non_negative, _sym_bounds  # noqa: E402
