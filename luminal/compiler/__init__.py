"""Compiler infrastructure: the pass protocol and combinators, generic passes, the pattern matcher.

    >>> from luminal.compiler import GenericCompiler
    >>> cx.compile(GenericCompiler(), (output,))   # doctest: +SKIP
"""

from .egraph import EqualitySaturation, explain
from .base import Compiler, Looped, Pass, Timed, debug_level, run, sequence
from .generic import CSE, GenericCompiler, RemoveSingleReductions, RemoveUnusedNodes
from .pattern import Match, Pattern, replace_matches
from .schedule import DepthFirst, peak_memory

__all__ = ["Compiler", "Pass", "Looped", "Timed", "run", "sequence", "debug_level", "CSE", "RemoveUnusedNodes",
           "RemoveSingleReductions", "DepthFirst", "GenericCompiler", "peak_memory",
           "Pattern", "Match", "replace_matches", "EqualitySaturation", "explain"]
