"""Symbolic shapes: :class:`Expression` (symbolic integers) and :class:`ShapeTracker` (zero-copy views),
:class:`Size` (a tensor's user-facing shape, a tuple)."""

from .expression import Expression, UnboundSymbolError, sym, to_expr
from .expression_eval import C_PRELUDE, parse
from .size import Size
from .tracker import ShapeTracker

__all__ = ["Expression", "ShapeTracker", "Size", "UnboundSymbolError", "sym", "to_expr", "parse", "C_PRELUDE"]
