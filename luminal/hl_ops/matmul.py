"""Matrix products as broadcast views -> ``Mul`` -> ``SumReduce`` (no matmul primitive).

Follows ``torch.matmul`` for every rank combination: 1-D x 1-D is a dot product,
a 1-D left operand is a row vector and a 1-D right operand a column vector
(the added axis is removed again), and leading batch dims broadcast.

Inside :class:`luminal.autocast` (float operands, no float64) the operands are rounded to the autocast dtype,
multiplied and summed in float32, and the result is rounded once to the autocast dtype (torch's CPU autocast).
With :func:`luminal.set_float32_matmul_precision` ``("medium")`` float32 operands are rounded to bfloat16 and the
result stays float32 (:mod:`luminal.precision`).
"""

from __future__ import annotations

from .. import ops
from ..dtype import DType, promote_types
from ..amp import autocast_off, lower_precision_dtype, round_to
from ..graph import GraphError
from ..precision import matmul_precision, rounds_float32_products
from ._util import as_tensor, broadcast_dims, broadcast_view


class MatmulOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with ``matmul``/``@``/``dot``."""

    def matmul(self, other):
        """Matrix product with ``torch.matmul`` semantics (see the module docstring; under
        :class:`luminal.autocast` the result has the autocast dtype).

        Shapes ``(..., M, K) @ (..., K, N) -> (broadcast(...), M, N)``. The graph is
        ``a[..., M, 1, K] * b^T[..., 1, N, K]`` summed over the last axis; compilers
        recognise the pattern and call a GEMM.
        """
        other = as_tensor(self, other)
        if self.ndim == 0 or other.ndim == 0:
            raise GraphError(f"matmul needs tensors with at least 1 dim, got shapes {[str(d) for d in self.dims]} "
                             f"and {[str(d) for d in other.dims]}")
        dtype = promote_types(self.dtype, other.dtype)
        low = lower_precision_dtype(self, other)
        if low is not None:
            with autocast_off():
                return round_to(self, low).matmul(round_to(other, low)).cast(low)
        if dtype == DType.bool:
            raise TypeError("matmul is not defined for bool tensors")
        if dtype in (DType.bfloat16, DType.float16):
            # PyTorch's CPU GEMM (and numpy's half dot): products exact in float32, float32 sums, the output rounded
            # once -- and a float32 GEMM kernel instead of a plain reduction (float16: 60x faster at 1024^3)
            return self.cast(DType.float32).matmul(other.cast(DType.float32)).cast(dtype)
        a, b = self.cast(dtype), other.cast(dtype)
        if a.ndim == 1 and b.ndim == 1:
            return a.dot(b)
        if dtype == DType.float32 and a.ndim >= 2 and b.ndim >= 2 and rounds_float32_products():
            # set_float32_matmul_precision("medium"): bfloat16 operands, float32 sums and result (luminal.precision;
            # a 1-D operand is a matrix-vector product, which torch leaves in float32)
            with matmul_precision("highest"):
                return round_to(a, DType.bfloat16).matmul(round_to(b, DType.bfloat16))
        squeeze_m, squeeze_n = a.ndim == 1, b.ndim == 1
        if squeeze_m:
            a = a.unsqueeze(0)
        if squeeze_n:
            b = b.unsqueeze(-1)
        m, k = a.dims[-2:]
        k2, n = b.dims[-2:]
        if k != k2:
            raise GraphError(f"matmul: inner dims differ: {[str(d) for d in self.dims]} @ "
                             f"{[str(d) for d in other.dims]} ({k} vs {k2})")
        batch = broadcast_dims(a.dims[:-2], b.dims[:-2])
        a_view = broadcast_view(a.tracker, batch + (m, k)).expand_dim(len(batch) + 1, n)      # (..., M, N, K)
        b_t = b.tracker.permute(tuple(range(b.ndim - 2)) + (b.ndim - 1, b.ndim - 2))          # (..., N, K)
        b_view = broadcast_view(b_t, batch + (n, k)).expand_dim(len(batch), m)              # (..., M, N, K)
        prod = a._view(a_view)._apply(ops.Mul(), b._view(b_view), dims=batch + (m, n, k))
        out = prod._apply(ops.SumReduce(prod.ndim - 1), dims=batch + (m, n))
        if squeeze_n:
            out = out.squeeze(-1)
        if squeeze_m:
            out = out.squeeze(-2 if not squeeze_n else -1)
        return out

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        return as_tensor(self, other).matmul(self)

    def dot(self, other):
        """Inner product of two 1-D tensors: ``(a * b).sum(0)``."""
        other = as_tensor(self, other)
        if self.ndim != 1 or other.ndim != 1:
            raise GraphError(f"dot needs two 1-D tensors, got shapes {[str(d) for d in self.dims]} and "
                             f"{[str(d) for d in other.dims]}")
        if self.dims[0] != other.dims[0]:
            raise GraphError(f"dot: sizes differ: {[str(d) for d in self.dims]} and {[str(d) for d in other.dims]} "
                             f"({self.dims[0]} vs {other.dims[0]})")
        prod = self * other
        return prod._apply(ops.SumReduce(0), dims=())
