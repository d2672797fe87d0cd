"""Sizes that may be symbolic (a batch of any size), for the direct convolution's planning and C
(:mod:`.gemm_direct`, :mod:`.gemm_winograd_dw`, :mod:`.layout_order`): constants where they are, bounds and
divisibility proved for every binding of the symbols from 1 up."""

from __future__ import annotations

from ..shape import Expression, to_expr


def _int(x):
    return to_expr(x).to_int()


def _size(x):
    """A size as an ``int`` when it is a constant, else its :class:`~luminal.shape.Expression` (a batch of any size)."""
    e = to_expr(x)
    return e.to_int() if e.is_constant() else e


def _long(n) -> bool:
    """Whether an extent may exceed 1 (a symbolic one may)."""
    return not isinstance(n, int) or n > 1


def _least(e) -> int | None:
    """A lower bound of ``e`` over every binding of its symbols from 1 up (a batch of 0 never reaches the kernel:
    it returns before its first index), or None."""
    e = to_expr(e)
    if e.is_constant():
        return e.to_int()
    return e.substitute({n: Expression.symbol(n) + 1 for n in e.symbols()}).bounds()[0]


def _below(a, b) -> bool:
    """Whether ``a < b`` for every binding of their symbols (from 1 up)."""
    low = _least(to_expr(b) - to_expr(a))
    return low is not None and low >= 1


def same_size(a, b) -> bool:
    """Whether sizes ``a == b`` for every binding of their symbols."""
    return _int(to_expr(a) - to_expr(b)) == 0


def _divides(a, b) -> bool:
    """Whether ``a`` divides ``b`` for every binding of their symbols."""
    return _int(to_expr(b) % to_expr(a)) == 0


def _c(n, r) -> str:
    """A size in C: a literal, or a symbolic size through the renderer ``r``'s names for the symbols."""
    n = _size(n)
    return f"{n}LL" if isinstance(n, int) else f"({r.index(n)})"


def _prod(sizes):
    """The product of ``sizes`` (an ``int`` where it is a constant)."""
    n = 1
    for d in sizes:
        n = _size(to_expr(n) * to_expr(d))
    return n
