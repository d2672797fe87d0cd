"""Symbolic integer expressions for shapes and index arithmetic.

An :class:`Expression` is an immutable, hashable tree over integer constants and
named symbols (``"batch"``, ``"s"``, the flat index ``"z"``...). Every operator
builds its result through a *smart constructor* that keeps the tree in a
canonical, simplified form (constant folding, like-term collection, the
div/mod rules index arithmetic needs), so simplification costs microseconds and
happens as expressions are built.

Semantics
---------
* Symbols denote **non-negative** integers (sizes and indices). The simplifier
  relies on this for its bound reasoning; expressions may still *evaluate* to
  negative numbers (``i - pad``), and constants may be negative.
* ``//`` and ``%`` are *floor* division and modulo (Python semantics). The C
  renderer emits plain ``/`` and ``%`` only where both operands are provably
  non-negative and a helper macro otherwise.
* ``<``, ``>=``, ``&``, ``|`` produce 0/1-valued expressions; ``<`` and ``>=``
  on expressions therefore build expressions rather than Python booleans, and
  ``==`` is *structural* equality (so expressions can be dict keys).

Example::

    >>> b = Expression.symbol("b")
    >>> ((b * 4 + 3) // 4).evaluate({"b": 5})
    5
    >>> (b * 4 + 3) // 4
    b
"""

from __future__ import annotations

import zlib
from typing import Mapping, Union

import numpy as np

IntLike = Union[int, "Expression"]

# Operator names. Commutative n-ary ops keep sorted argument tuples.
NUM, VAR, ADD, MUL, DIV, MOD, MIN, MAX, LT, GE, AND, OR = (
    "num", "var", "add", "mul", "div", "mod", "min", "max", "lt", "ge", "and", "or")
_OP_RANK = {op: i for i, op in enumerate((NUM, VAR, ADD, MUL, DIV, MOD, MIN, MAX, LT, GE, AND, OR))}


class UnboundSymbolError(KeyError):
    """Raised when an expression is evaluated without a value for one of its symbols."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a sentence
        return str(self.args[0]) if self.args else "unbound symbol"


class Expression:
    """An immutable symbolic integer expression (see the module docstring)."""

    __slots__ = ("op", "args", "_hash", "_bounds", "_symbols", "_ranged", "_sbounds")

    # ------------------------------------------------------------------ construction
    def __init__(self, op: str, args: tuple):
        self.op = op
        self.args = args
        if op == NUM:
            self._hash = hash(args[0])  # so Expression.num(3) == 3 implies equal hashes
        elif op == VAR:
            self._hash = hash((_OP_RANK[op], zlib.crc32(args[0].encode())) + args[1:])
        else:
            self._hash = hash((_OP_RANK[op],) + tuple(a._hash if isinstance(a, Expression) else a for a in args))
        self._bounds = None
        self._symbols = None
        self._ranged = None  # does the tree hold a symbol with a symbolic upper bound? (see ranged())
        self._sbounds = None  # cached symbolic bounds (simplify._sym_bounds)

    @staticmethod
    def num(value: int) -> "Expression":
        """The constant ``value``."""
        return _num(value)

    @staticmethod
    def symbol(name: str, upper: "int | Expression | None" = None, lower: int = 0) -> "Expression":
        """A named non-negative integer symbol, e.g. ``Expression.symbol("batch")``.

        ``upper`` (inclusive) bounds it for simplification: an integer (a size's maximum), or an expression over
        *other* symbols (``Expression.symbol("i1", seq - 1)`` is a loop index with ``0 <= i1 < seq``). Code
        generators give every loop variable its extent this way, so identities such as
        ``(i2 + 64*i1) // (64*seq) == 0`` are proven and index expressions stay small however many views are
        chained. ``lower`` (an int >= 0) declares a minimum: ``Expression.symbol("seq", lower=1)`` is a size
        that is never 0, so ``min(1, seq) == 1``; evaluating it with a value outside its range raises
        ``ValueError``. The range is part of the symbol: ``symbol("seq", lower=1) != symbol("seq")``.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"a symbol name must be a non-empty string, got {name!r}")
        if isinstance(lower, bool) or not isinstance(lower, (int, np.integer)) or lower < 0:
            raise TypeError(f"the lower bound of symbol {name!r} must be an int >= 0, got {lower!r}")
        lower = int(lower)
        tail = (lower,) if lower else ()
        if upper is None:
            return Expression(VAR, (name, None) + tail) if tail else Expression(VAR, (name,))
        if isinstance(upper, Expression):
            if upper.op != NUM:
                if name in upper.symbols():
                    raise ValueError(f"the upper bound {upper} of symbol {name!r} may not mention {name!r}")
                hi = upper.bounds()[1]
                if hi is not None and hi <= lower:
                    if hi < lower and lower:
                        raise ValueError(f"symbol {name!r}: the upper bound {upper} is below the lower bound {lower}")
                    return _num(lower)
                return Expression(VAR, (name, upper) + tail)
            upper = upper.args[0]
        if isinstance(upper, bool) or not isinstance(upper, (int, np.integer)):
            raise TypeError(f"the upper bound of symbol {name!r} must be an int or an Expression, "
                            f"got {type(upper).__name__}")
        if upper < lower:
            if lower:
                raise ValueError(f"symbol {name!r}: the upper bound {upper} is below the lower bound {lower}")
            return ZERO
        if upper == lower:
            return _num(lower)
        return Expression(VAR, (name, int(upper)) + tail)

    def upper(self) -> "int | Expression | None":
        """For a symbol: its declared inclusive upper bound (an int, an Expression, or ``None``)."""
        if self.op != VAR:
            raise TypeError(f"upper() is defined for symbols, not for {self}")
        return self.args[1] if len(self.args) > 1 else None

    def lower(self) -> int:
        """For a symbol: its declared inclusive lower bound (0 unless declared)."""
        if self.op != VAR:
            raise TypeError(f"lower() is defined for symbols, not for {self}")
        return self.args[2] if len(self.args) > 2 else 0

    def ranged(self) -> bool:
        """True when the expression mentions a symbol whose upper bound is itself symbolic (a loop index)."""
        if self._ranged is None:
            if self.op == VAR:
                self._ranged = len(self.args) > 1 and isinstance(self.args[1], Expression)
            elif self.op == NUM:
                self._ranged = False
            else:
                self._ranged = any(a.ranged() for a in self.args)
        return self._ranged

    @staticmethod
    def raw(op: str, *args: IntLike) -> "Expression":
        """Build a node *without* simplification (for tests and parsers); ``simplify()`` canonicalizes it."""
        if op == NUM:
            return Expression(NUM, (int(args[0]),))
        if op == VAR:
            return Expression(VAR, (str(args[0]),))
        if op not in _BUILDERS:
            raise ValueError(f"unknown expression operator {op!r}")
        return Expression(op, tuple(to_expr(a) for a in args))

    # ------------------------------------------------------------------ queries
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:  # structural equality
        if self is other:
            return True
        if isinstance(other, int) and not isinstance(other, bool):
            return self.op == NUM and self.args[0] == other
        if not isinstance(other, Expression):
            return NotImplemented
        return self._hash == other._hash and self.op == other.op and self.args == other.args

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __bool__(self) -> bool:
        if self.op == NUM:
            return self.args[0] != 0
        raise TypeError(f"the truth value of the symbolic expression {self} is unknown; "
                        "evaluate it or compare with .is_constant()")

    def is_constant(self) -> bool:
        """True when the expression has no symbols."""
        return self.op == NUM

    def to_int(self) -> int | None:
        """The value if constant, else ``None``."""
        return self.args[0] if self.op == NUM else None

    def __int__(self) -> int:
        if self.op != NUM:
            raise TypeError(f"expression {self} is symbolic; bind its symbols with evaluate()")
        return self.args[0]

    __index__ = __int__

    def symbols(self) -> frozenset[str]:
        """The names of all symbols the expression mentions."""
        if self._symbols is None:
            if self.op == VAR:
                self._symbols = frozenset(self.args[:1])
            elif self.op == NUM:
                self._symbols = frozenset()
            else:
                self._symbols = frozenset().union(*(a.symbols() for a in self.args))
        return self._symbols

    def bounds(self) -> tuple[int | None, int | None]:
        """Inclusive integer interval ``(lo, hi)`` the value lies in; ``None`` means unbounded."""
        if self._bounds is None:
            self._bounds = _compute_bounds(self)
        return self._bounds

    def symbolic_bounds(self) -> tuple["Expression | None", "Expression | None"]:
        """Inclusive bounds ``(lo, hi)`` as expressions free of loop indices (``None``: unknown).

        Every symbol with a symbolic upper bound (a loop index ``0 <= i <= seq - 1``) is replaced by the end
        of its range that maximizes/minimizes the expression; other symbols stay. ``(i2 + 64*i1).
        symbolic_bounds()`` with ``i2 <= 63``, ``i1 <= seq - 1`` is ``(0, 64*seq - 1)``.
        """
        return _sym_bounds(self)

    # ------------------------------------------------------------------ operators
    def __add__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _add(self, o)
    def __radd__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _add(o, self)
    def __sub__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _add(self, _mul(_num(-1), o))
    def __rsub__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _add(o, _mul(_num(-1), self))
    def __mul__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _mul(self, o)
    def __rmul__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _mul(o, self)
    def __floordiv__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _div(self, o)
    def __rfloordiv__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _div(o, self)
    def __mod__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _mod(self, o)
    def __rmod__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _mod(o, self)
    def __neg__(self): return _mul(_num(-1), self)
    def __pos__(self): return self
    def __lt__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _lt(self, o)
    def __ge__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _ge(self, o)
    def __gt__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _lt(o, self)
    def __le__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _ge(o, self)
    def __and__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _and(self, o)
    def __rand__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _and(o, self)
    def __or__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _or(self, o)
    def __ror__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else _or(o, self)


    def min(self, other: IntLike) -> "Expression":
        """``min(self, other)``."""
        return _min(self, to_expr(other))

    def max(self, other: IntLike) -> "Expression":
        """``max(self, other)``."""
        return _max(self, to_expr(other))

    def ceil_div(self, other: IntLike) -> "Expression":
        """``ceil(self / other)`` for a positive divisor: ``(self + other - 1) // other``."""
        other = to_expr(other)
        return _div(_add(self, _add(other, _num(-1))), other)

    # ------------------------------------------------------------------ transformations
    def simplify(self) -> "Expression":
        """Canonical simplified form (rebuilds the tree through the smart constructors)."""
        if self.op in (NUM, VAR):
            return self
        return _BUILDERS[self.op](*(a.simplify() for a in self.args))

    def substitute(self, name_or_map, value: IntLike | None = None) -> "Expression":
        """Replace symbols: ``e.substitute("x", 3)`` or ``e.substitute({"x": y + 1})``; the result is simplified."""
        mapping = {name_or_map: value} if isinstance(name_or_map, str) else dict(name_or_map)
        mapping = {k: to_expr(v) for k, v in mapping.items()}
        if not (self.symbols() & mapping.keys()):
            return self
        return _substitute(self, mapping)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, bindings: Mapping[str, int] | None = None) -> int:
        """Integer value under ``bindings``; raises :class:`UnboundSymbolError` naming a missing symbol."""
        if self.op == NUM:
            return self.args[0]
        from .expression_eval import _eval
        return _eval(self, bindings or {})

    def evaluate_array(self, bindings: Mapping[str, object]):
        """Vectorized evaluation: symbols may be bound to numpy integer arrays (broadcasting applies)."""
        if self.op == NUM:
            return self.args[0]
        from .expression_eval import _COMPILED, _compile_numpy
        fn = _COMPILED.get(self)
        if fn is None:
            fn = _compile_numpy(self)
            if len(_COMPILED) > 20000:
                _COMPILED.clear()
            _COMPILED[self] = fn
        missing = self.symbols() - bindings.keys()
        if missing:
            raise UnboundSymbolError(f"no value for symbol(s) {sorted(missing)} in expression {self}")
        return fn(bindings)

    # ------------------------------------------------------------------ rendering
    def __repr__(self) -> str:
        from .expression_eval import _py_style, _render
        return _render(self, _py_style)

    __str__ = __repr__

    def to_c(self, names: Mapping[str, str] | None = None) -> str:
        """C source for the expression (``long long`` arithmetic); ``names`` maps symbols to C identifiers.

        Floor division/modulo that might see negative operands render as the
        ``LUMINAL_FLOORDIV``/``LUMINAL_FLOORMOD`` macros from :data:`C_PRELUDE`.
        """
        from .expression_eval import _c_style, _render
        names = names or {}
        return _render(self, lambda e, parts: _c_style(e, parts, names))


def _coerce(value) -> "Expression | None":
    """``to_expr`` for operator overloads: ``None`` (-> NotImplemented) for types we do not combine with."""
    if isinstance(value, Expression):
        return value
    if isinstance(value, (int, np.integer, str)):
        return to_expr(value)
    return None


def to_expr(value: IntLike) -> Expression:
    """Coerce an int, a symbol name (``str``) or an Expression to an Expression."""
    if isinstance(value, Expression):
        return value
    if isinstance(value, (bool, np.bool_)):
        return _num(int(value))
    if isinstance(value, (int, np.integer)):
        return _num(int(value))
    if isinstance(value, str):
        if value.isidentifier():
            return Expression.symbol(value)
        from .expression_eval import parse
        return parse(value)
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as a symbolic integer expression")


def sym(name: str, upper: "int | Expression | None" = None, lower: int = 0) -> Expression:
    """Shorthand for :meth:`Expression.symbol`: ``sym("seq", lower=1)`` is a size declared non-empty."""
    return Expression.symbol(name, upper, lower)


# The simplifying constructors and the interval analysis live in simplify.py; imported last because they
# build Expression objects (the class above must exist first).
from .simplify import (_BUILDERS, ZERO, _add, _and, _compute_bounds, _div, _ge, _lt, _max, _min,  # noqa: E402
                       _mod, _mul, _num, _or, _substitute, _sym_bounds)
