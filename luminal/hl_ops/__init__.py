"""High-level ops, each decomposed into the primitives of :mod:`luminal.ops`.

The methods live in mixins (one module per family) that
:class:`~luminal.tensor.GraphTensor` inherits; the free functions here are the
ones that take several tensors or make new ones.
"""

from .binary import where
from .creation import arange, constant, full, iota, ones, rand, randn, tril_mask, triu_mask, zeros
from .einsum import einsum
from .indexing import eye, linspace, logspace, meshgrid, one_hot, scatter_elements
from .movement import concat, stack
from .parity import addmm, baddbmm, bmm, cdist, cross, dot, inner, kron, mm, mv, outer, tensordot, trace

cat = concat

__all__ = ["where", "concat", "cat", "stack", "arange", "constant", "full", "iota", "ones", "rand", "randn",
           "zeros", "tril_mask", "triu_mask", "einsum", "eye", "linspace", "logspace", "meshgrid", "one_hot",
           "scatter_elements", "addmm", "baddbmm", "bmm", "cdist", "cross", "dot", "inner", "kron", "mm", "mv",
           "outer", "tensordot", "trace"]
