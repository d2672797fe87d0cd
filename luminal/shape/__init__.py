"""Symbolic shapes: :class:`Expression` (symbolic integers) and :class:`ShapeTracker` (zero-copy views)."""

from .expression import C_PRELUDE, Expression, UnboundSymbolError, sym, to_expr
from .tracker import ShapeTracker

__all__ = ["Expression", "ShapeTracker", "UnboundSymbolError", "sym", "to_expr", "C_PRELUDE"]
