"""``x.view(dtype)`` for a dtype of another width (see ``GraphTensor.view``): the last dim resized, the bytes of
each element least significant first, built from same-width bit casts, shifts, masks and ors."""

from __future__ import annotations

from ..dtype import DType
from .movement import stack


def view_resized(x, dtype):
    """``view(dtype)`` for a dtype of another width (see :meth:`view`): through the unsigned integers of both
    widths, the bytes split with shifts and masks or joined with shifts and ors (exact in every dtype)."""
    src, dst = x.dtype, dtype
    sn, dn = src.value, dst.value
    if x.ndim == 0:
        raise ValueError(f"view({dn}): a 0-d {sn} tensor cannot be viewed as a dtype of another width "
                         f"({src.bits} vs {dst.bits} bits): it has no last dim to resize")
    unsigned = {8: DType.uint8, 16: DType.uint16, 32: DType.uint32, 64: DType.uint64}
    u = x.bitcast(unsigned[src.bits])
    n = x.dims[-1]
    if dst.bits < src.bits:
        r, w = src.bits // dst.bits, dst.bits
        mask = (1 << w) - 1
        parts = [((u >> (w * j)) & mask).cast(unsigned[w]) for j in range(r)]
        joined = stack(parts, axis=-1).reshape(x.dims[:-1] + (n * r,))
        return joined.bitcast(dst)
    r, w = dst.bits // src.bits, src.bits
    if n.is_constant() and n.to_int() % r:
        raise ValueError(f"view({dn}): the last dim of a {sn} tensor must hold whole {dn} elements "
                         f"({r} {sn} each), but it has {n}")
    grouped = u.reshape(x.dims[:-1] + (n // r, r)).cast(unsigned[dst.bits])
    out = grouped[..., 0]
    for j in range(1, r):
        out = out | (grouped[..., j] << (w * j))
    return out.bitcast(dst)
