"""Symbolic shapes: :class:`Expression` (symbolic integers) and :class:`ShapeTracker` (zero-copy views)."""

from .expression import Expression, UnboundSymbolError, sym, to_expr
from .expression_eval import C_PRELUDE, parse
from .tracker import ShapeTracker

__all__ = ["Expression", "ShapeTracker", "UnboundSymbolError", "sym", "to_expr", "parse", "C_PRELUDE"]
