"""PyTorch-parity tensor methods a PyTorch user reaches for, composed from the other families' ops.

Norms and distances (``norm``, ``dist``), products (``bmm``, ``mv``, ``dot``, ``inner``, ``outer``, ``addmm``,
``baddbmm``, ``kron``, ``tensordot``, ``cross``, ``trace``), NaN-aware reductions (``nansum``, ``nanmean``),
elementwise helpers (``logit``, ``nan_to_num``, ``frac``, ``hypot``, ``xlogy``, ``addcmul``, ``addcdiv``,
``signbit``, ``sgn``, ``deg2rad``, ``rad2deg``, ``sinc``, ``logaddexp2``, ``clamp_min``/``clamp_max``,
``isposinf``/``isneginf``), layout helpers (``t``, ``movedim``, ``tile``, ``fliplr``, ``flipud``, ``rot90``,
``view_as``, ``reshape_as``, ``type_as``) and ``new_zeros``/``new_ones``/``new_full``/``new_empty``.
Each follows the PyTorch function of the same name (arguments, dtypes, special values); gradients come from
the primitives they are built of. The free functions at the bottom (``bmm``, ``outer``, ``kron``, ``cdist``...)
are exported as ``luminal.<name>``.
"""

from __future__ import annotations

import math

import numpy as np

from ..amp import autocast_disabled, autocast_float32, autocast_lower_precision
from ..dtype import DType, as_dtype
from ._util import as_tensor, constant

_TWO_PI = 2.0 * math.pi


def _dims_tuple(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def _axes(x, dim):
    if dim is None:
        return tuple(range(x.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % x.ndim if x.ndim else 0 for d in dims)


class ParityOps:
    # ------------------------------------------------------------------ norms and distances
    def norm(self, p="fro", dim=None, keepdim: bool = False, dtype=None):
        """``torch.norm`` / ``torch.linalg.vector_norm`` over ``dim`` (all elements when None): ``p`` 2 or
        ``'fro'`` (the default), 1, ``inf``, ``-inf``, 0 (the count of non-zeros) or any other real (``sum |x|^p``
        to the ``1/p``). ``'nuc'`` and matrix norms are not supported."""
        x = self if dtype is None else self.cast(dtype)
        x = x._floating()
        axes = _axes(x, dim)
        if p == "fro" or p == 2 or p == 2.0:
            # sqrt(sum x^2) with torch's gradient at 0 (x / norm, 0 where the norm is 0)
            return _masked_sqrt(x.mul(x).sum(axes, keepdim))
        if p == "nuc" or isinstance(p, str):
            raise ValueError(f"norm: p={p!r} is not supported; use 'fro', 2, 1, inf, -inf, 0 or a real number")
        a = x.abs()
        if p == 1:
            return a.sum(axes, keepdim)
        if p == math.inf:
            return a.max(axes, keepdim)
        if p == -math.inf:
            return a.min(axes, keepdim)
        if p == 0:
            return x.ne(0).cast(x.dtype).sum(axes, keepdim)
        return a.pow(float(p)).sum(axes, keepdim).pow(1.0 / float(p))

    def dist(self, other, p: float = 2.0):
        """``torch.dist``: the ``p``-norm of ``self - other`` over all elements."""
        return (self - other).norm(p)

    # ------------------------------------------------------------------ products
    def bmm(self, other):
        """``torch.bmm``: batched ``(b, n, m) @ (b, m, p)``."""
        if self.ndim != 3 or getattr(other, "ndim", None) != 3:
            raise ValueError(f"bmm expects two 3-D tensors, got {self.ndim}-D and {getattr(other, 'ndim', '?')}-D")
        return self.matmul(other)

    @autocast_disabled  # luminal.autocast: as torch's CPU autocast (docs/mixed_precision.md)
    def mv(self, vec):
        """``torch.mv``: ``(n, m) @ (m,)``."""
        if self.ndim != 2 or getattr(vec, "ndim", None) != 1:
            raise ValueError(f"mv expects a 2-D matrix and a 1-D vector, got {self.ndim}-D and "
                             f"{getattr(vec, 'ndim', '?')}-D")
        return self.matmul(vec)

    def dot(self, other):
        """``torch.dot``: the inner product of two 1-D tensors."""
        if self.ndim != 1 or getattr(other, "ndim", None) != 1:
            raise ValueError(f"dot expects two 1-D tensors, got {self.ndim}-D and {getattr(other, 'ndim', '?')}-D")
        return self.matmul(other)

    @autocast_lower_precision  # luminal.autocast: as torch's CPU autocast (docs/mixed_precision.md)
    def inner(self, other):
        """``torch.inner``: sums over the last axis of both (a scalar operand multiplies)."""
        other = as_tensor(self, other)
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        a = self.reshape(tuple(self.dims[:-1]) + (1,) * (other.ndim - 1) + (self.dims[-1],))
        return (a * other).sum(-1)

    def outer(self, other):
        """``torch.outer`` (``ger``): ``self[:, None] * other[None, :]`` of two 1-D tensors."""
        other = as_tensor(self, other)
        if self.ndim != 1 or other.ndim != 1:
            raise ValueError(f"outer expects two 1-D tensors, got {self.ndim}-D and {other.ndim}-D")
        return self.unsqueeze(1) * other.unsqueeze(0)

    ger = outer

    @autocast_lower_precision  # luminal.autocast: as torch's CPU autocast (docs/mixed_precision.md)
    def addmm(self, mat1, mat2, beta=1.0, alpha=1.0):
        """``torch.addmm``: ``beta * self + alpha * (mat1 @ mat2)`` (``self`` broadcast to the product)."""
        return _scaled_add(self, mat1.matmul(mat2), beta, alpha)

    @autocast_lower_precision  # luminal.autocast: as torch's CPU autocast (docs/mixed_precision.md)
    def baddbmm(self, batch1, batch2, beta=1.0, alpha=1.0):
        """``torch.baddbmm``: ``beta * self + alpha * bmm(batch1, batch2)``."""
        return _scaled_add(self, batch1.bmm(batch2), beta, alpha)

    @autocast_disabled  # luminal.autocast: as torch's CPU autocast (docs/mixed_precision.md)
    def addmv(self, mat, vec, beta=1.0, alpha=1.0):
        """``torch.addmv``: ``beta * self + alpha * (mat @ vec)``."""
        return _scaled_add(self, mat.mv(vec), beta, alpha)

    def addcmul(self, tensor1, tensor2, value=1.0):
        """``torch.addcmul``: ``self + value * tensor1 * tensor2``."""
        prod = as_tensor(self, tensor1) * tensor2
        return self + (prod if value == 1 else prod * value)

    def addcdiv(self, tensor1, tensor2, value=1.0):
        """``torch.addcdiv``: ``self + value * tensor1 / tensor2``."""
        quot = as_tensor(self, tensor1) / tensor2
        return self + (quot if value == 1 else quot * value)

    def kron(self, other):
        """``torch.kron``: the Kronecker product (the lower-rank operand gets leading unit axes)."""
        other = as_tensor(self, other)
        n = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + tuple(self.dims))
        b = other.reshape((1,) * (n - other.ndim) + tuple(other.dims))
        # a[i0, 1, i1, 1, ...] * b[1, j0, 1, j1, ...] -> (i0*B0 + j0, ...)
        a2 = a.reshape(tuple(d for ad in a.dims for d in (ad, 1)))
        b2 = b.reshape(tuple(d for bd in b.dims for d in (1, bd)))
        out = a2 * b2
        return out.reshape(tuple(ad * bd for ad, bd in zip(a.dims, b.dims)))

    def tensordot(self, other, dims=2):
        """``torch.tensordot``: contract the last ``dims`` axes of ``self`` with the first of ``other``, or the
        axis lists ``dims = (self_axes, other_axes)``."""
        other = as_tensor(self, other)
        if isinstance(dims, int):
            if dims < 0:
                raise ValueError(f"tensordot expects dims >= 0, got {dims}")
            da, db = list(range(self.ndim - dims, self.ndim)), list(range(dims))
        else:
            da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        da, db = [d % self.ndim for d in da], [d % other.ndim for d in db]
        if len(da) != len(db):
            raise ValueError(f"tensordot: {len(da)} axes of the first tensor against {len(db)} of the second")
        for i, j in zip(da, db):
            if self.dims[i] != other.dims[j]:
                raise ValueError(f"tensordot: contracted sizes differ ({self.dims[i]} vs {other.dims[j]})")
        free_a = [d for d in range(self.ndim) if d not in da]
        free_b = [d for d in range(other.ndim) if d not in db]
        k = 1
        for d in da:
            k = k * self.dims[d]
        m = 1
        for d in free_a:
            m = m * self.dims[d]
        n = 1
        for d in free_b:
            n = n * other.dims[d]
        a = self.permute(free_a + da).reshape((m, k))
        b = other.permute(db + free_b).reshape((k, n))
        return a.matmul(b).reshape(tuple(self.dims[d] for d in free_a) + tuple(other.dims[d] for d in free_b))

    def cross(self, other, dim=None):
        """``torch.linalg.cross`` (and ``torch.cross`` with ``dim``): the cross product of 3-vectors along
        ``dim`` (default: the last axis; ``torch.cross`` without ``dim`` takes the first axis of size 3)."""
        other = as_tensor(self, other)
        if dim is None:
            dim = -1
        d = dim % self.ndim
        if self.dims[d] != 3:
            raise ValueError(f"cross expects size 3 along dim {dim}, got {self.dims[d]}")
        a = [self.narrow(d, i, 1) for i in range(3)]
        b = [other.narrow(d, i, 1) for i in range(3)]
        from .movement import concat
        return concat([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]], d)

    def trace(self):
        """``torch.trace``: the sum of the main diagonal of a 2-D tensor."""
        if self.ndim != 2:
            raise ValueError(f"trace expects a 2-D tensor, got {self.ndim}-D")
        return self.diagonal().sum()

    # ------------------------------------------------------------------ NaN-aware reductions
    def nansum(self, dim=None, keepdim: bool = False):
        """``torch.nansum``: the sum treating NaN as zero."""
        if not self.dtype.is_float:
            return self.sum(dim, keepdim)
        from .binary import where
        return where(self.isnan(), 0.0, self).sum(dim, keepdim)

    def nanmean(self, dim=None, keepdim: bool = False):
        """``torch.nanmean``: the mean of the non-NaN values (NaN where there are none)."""
        if not self.dtype.is_float:
            raise TypeError(f"nanmean expects a floating tensor, got {self.dtype}")
        count = self.isnan().logical_not().cast(self.dtype).sum(dim, keepdim)
        return self.nansum(dim, keepdim) / count

    # ------------------------------------------------------------------ elementwise
    def logit(self, eps=None):
        """``torch.logit``: ``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given."""
        p = self._floating()
        if eps is not None:
            p = p.clip(float(eps), 1.0 - float(eps))
        return (p / (1.0 - p)).log()

    def nan_to_num(self, nan: float = 0.0, posinf=None, neginf=None):
        """``torch.nan_to_num``: NaN -> ``nan``, +inf -> ``posinf`` (default: the dtype's largest finite value),
        -inf -> ``neginf`` (default: its lowest)."""
        if not self.dtype.is_float:
            return self
        from .binary import where
        info = np.finfo(self.dtype.numpy)
        hi = float(info.max) if posinf is None else float(posinf)
        lo = float(info.min) if neginf is None else float(neginf)
        out = where(self.isnan(), float(nan), self)
        out = where(self.eq(math.inf), hi, out)
        return where(self.eq(-math.inf), lo, out)

    def frac(self):
        """``torch.frac``: ``x - trunc(x)`` (the sign of ``x``)."""
        return self - self.trunc()

    def hypot(self, other):
        """``torch.hypot``: ``sqrt(x^2 + y^2)`` without intermediate overflow (inf wins over NaN)."""
        from .binary import where
        other = as_tensor(self, other, self.dtype)
        if self.dtype != DType.float64:  # exact enough in float64, then rounded once
            return self.cast(DType.float64).hypot(other.cast(DType.float64)).cast(self.dtype)
        ax, ay = self.abs(), other.abs()
        big = ax.maximum(ay)
        small = ax.minimum(ay)
        safe = where(big.eq(0.0), 1.0, big)
        r = small / safe
        out = big * (r * r + 1.0).sqrt()
        inf = ax.eq(math.inf).logical_or(ay.eq(math.inf))
        return where(inf, math.inf, out)

    def xlogy(self, other):
        """``torch.xlogy``: ``x * log(y)``, 0 where ``x == 0`` (unless ``y`` is NaN)."""
        from .binary import where
        x = self._floating()
        y = as_tensor(x, other, x.dtype)
        return where(x.eq(0.0).logical_and(y.isnan().logical_not()), 0.0, x * y.log())

    def sgn(self):
        """``torch.sgn`` (real tensors): ``sign``."""
        return self.sign()

    def signbit(self):
        """``torch.signbit``: the sign bit -- True for negative values, -0.0 and NaNs with the sign bit set (read
        through ``view`` as the signed integer of the float's width)."""
        if not self.dtype.is_float:
            return self < 0
        return self.view({16: DType.int16, 32: DType.int32, 64: DType.int64}[self.dtype.bits]) < 0

    def deg2rad(self):
        """``torch.deg2rad``."""
        return self._floating() * (math.pi / 180.0)

    def rad2deg(self):
        """``torch.rad2deg``."""
        return self._floating() * (180.0 / math.pi)

    def sinc(self):
        """``torch.sinc``: ``sin(pi x) / (pi x)``, 1 at 0."""
        from .binary import where
        x = self._floating()
        px = x * math.pi
        return where(x.eq(0.0), 1.0, px.sin() / where(x.eq(0.0), 1.0, px))

    def logaddexp2(self, other):
        """``torch.logaddexp2``: ``log2(2^x + 2^y)``, computed stably."""
        x = self._floating()
        ln2 = math.log(2.0)
        return (x * ln2).logaddexp(as_tensor(x, other, x.dtype) * ln2) * (1.0 / ln2)

    def clamp_min(self, min):  # noqa: A002 - PyTorch's name
        """``torch.clamp_min``."""
        return self.clip(min=min)

    def clamp_max(self, max):  # noqa: A002 - PyTorch's name
        """``torch.clamp_max``."""
        return self.clip(max=max)

    def isposinf(self):
        """``torch.isposinf``."""
        return self.eq(math.inf) if self.dtype.is_float else self.ne(self)

    def isneginf(self):
        """``torch.isneginf``."""
        return self.eq(-math.inf) if self.dtype.is_float else self.ne(self)

    # ------------------------------------------------------------------ layout
    def t(self):
        """``torch.Tensor.t``: the transpose of a tensor of at most 2 dimensions."""
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, got {self.ndim}-D; use transpose or mT")
        return self if self.ndim < 2 else self.transpose(0, 1)

    def movedim(self, source, destination):
        """``torch.movedim``: move the axes ``source`` to the positions ``destination`` (ints or sequences)."""
        src = [source] if isinstance(source, int) else list(source)
        dst = [destination] if isinstance(destination, int) else list(destination)
        if len(src) != len(dst):
            raise ValueError(f"movedim: {len(src)} source axes but {len(dst)} destinations")
        n = self.ndim
        src, dst = [s % n for s in src], [d % n for d in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ValueError("movedim: repeated axis in source or destination")
        order = [None] * n
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(a for a in range(n) if a not in src)
        order = [o if o is not None else next(rest) for o in order]
        return self.permute(order)

    moveaxis = movedim

    def tile(self, *dims):
        """``torch.tile``: ``repeat`` with ``dims`` padded by leading ones (or the tensor by leading unit axes)."""
        reps = _dims_tuple(dims)
        if len(reps) < self.ndim:
            reps = (1,) * (self.ndim - len(reps)) + tuple(reps)
        x = self
        if len(reps) > self.ndim:
            x = self.reshape((1,) * (len(reps) - self.ndim) + tuple(self.dims))
        return x.repeat(*reps)

    def fliplr(self):
        """``torch.fliplr``: reverse axis 1 (at least 2-D)."""
        if self.ndim < 2:
            raise ValueError(f"fliplr expects at least 2 dimensions, got {self.ndim}")
        return self.flip(1)

    def flipud(self):
        """``torch.flipud``: reverse axis 0 (at least 1-D)."""
        if self.ndim < 1:
            raise ValueError("flipud expects at least 1 dimension")
        return self.flip(0)

    def rot90(self, k: int = 1, dims=(0, 1)):
        """``torch.rot90``: rotate by 90 degrees ``k`` times in the plane ``dims`` (from the first toward the
        second axis)."""
        if len(dims) != 2:
            raise ValueError(f"rot90 expects two dims, got {dims}")
        a, b = dims[0] % self.ndim, dims[1] % self.ndim
        if a == b:
            raise ValueError(f"rot90: the two dims must differ, got {dims}")
        k %= 4
        if k == 0:
            return self
        if k == 2:
            return self.flip((a, b))
        if k == 1:
            return self.flip(b).transpose(a, b)
        return self.transpose(a, b).flip(b)

    def view_as(self, other):
        """``torch.Tensor.view_as``: ``reshape`` to ``other``'s dims."""
        return self.reshape(tuple(other.dims))

    def reshape_as(self, other):
        """``torch.Tensor.reshape_as``."""
        return self.reshape(tuple(other.dims))

    def type_as(self, other):
        """``torch.Tensor.type_as``: cast to ``other``'s dtype."""
        return self.cast(other.dtype)

    # ------------------------------------------------------------------ new tensors like self
    def new_full(self, size, fill_value, dtype=None):
        """``torch.Tensor.new_full``: a constant tensor of ``size`` in ``self``'s graph (``self``'s dtype)."""
        return constant(self.graph, fill_value, as_dtype(dtype) if dtype is not None else self.dtype,
                        tuple(size) if not isinstance(size, int) else (size,))

    def new_zeros(self, *size, dtype=None):
        """``torch.Tensor.new_zeros``."""
        return self.new_full(_dims_tuple(size), 0, dtype)

    def new_ones(self, *size, dtype=None):
        """``torch.Tensor.new_ones``."""
        return self.new_full(_dims_tuple(size), 1, dtype)

    def new_empty(self, *size, dtype=None):
        """``torch.Tensor.new_empty`` (zeros: a lazy graph has no uninitialized memory to hand out)."""
        return self.new_full(_dims_tuple(size), 0, dtype)


def _masked_sqrt(s):
    """``sqrt(s)`` whose gradient is 0 where ``s == 0`` (torch's norm backward) instead of ``inf * 0``."""
    from .binary import where
    zero = s.eq(0.0)
    return where(zero, 0.0, where(zero, 1.0, s).sqrt())


def _scaled_add(base, prod, beta, alpha):
    base = as_tensor(prod, base, prod.dtype)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:  # torch: beta = 0 ignores self (NaN and inf in it included)
        return prod
    return prod + (base if beta == 1 else base * beta)


# ---------------------------------------------------------------------------------------------- free functions
def bmm(input, mat2):  # noqa: A002 - PyTorch's argument name
    """``torch.bmm``."""
    return input.bmm(mat2)


def mm(input, mat2):  # noqa: A002
    """``torch.mm``: the product of two 2-D tensors."""
    if input.ndim != 2 or getattr(mat2, "ndim", None) != 2:
        raise ValueError(f"mm expects two 2-D tensors, got {input.ndim}-D and {getattr(mat2, 'ndim', '?')}-D")
    return input.matmul(mat2)


def mv(input, vec):  # noqa: A002
    """``torch.mv``."""
    return input.mv(vec)


def dot(input, other):  # noqa: A002
    """``torch.dot``."""
    return input.dot(other)


def inner(input, other):  # noqa: A002
    """``torch.inner``."""
    return input.inner(other)


def outer(input, vec2):  # noqa: A002
    """``torch.outer``."""
    return input.outer(vec2)


def kron(input, other):  # noqa: A002
    """``torch.kron``."""
    return input.kron(other)


def tensordot(a, b, dims=2):
    """``torch.tensordot``."""
    return a.tensordot(b, dims)


def cross(input, other, dim=None):  # noqa: A002
    """``torch.linalg.cross`` (the last axis by default)."""
    return input.cross(other, dim)


def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0):  # noqa: A002
    """``torch.addmm``."""
    return input.addmm(mat1, mat2, beta=beta, alpha=alpha)


def baddbmm(input, batch1, batch2, *, beta=1.0, alpha=1.0):  # noqa: A002
    """``torch.baddbmm``."""
    return input.baddbmm(batch1, batch2, beta=beta, alpha=alpha)


def trace(input):  # noqa: A002
    """``torch.trace``."""
    return input.trace()


@autocast_float32  # luminal.autocast: computed in float32, as torch
def cdist(x1, x2, p: float = 2.0):
    """``torch.cdist``: the ``p``-norm distance between each row of ``x1`` (``(..., P, M)``) and each row of ``x2``
    (``(..., R, M)``), shape ``(..., P, R)``, from the difference tensor (``P x R x M`` elements; exact, unlike
    the ``|a|^2 + |b|^2 - 2 a.b`` GEMM form PyTorch may pick for large inputs)."""
    if x1.ndim < 2 or x2.ndim < 2:
        raise ValueError(f"cdist expects at least 2-D inputs, got {x1.ndim}-D and {x2.ndim}-D")
    if x1.dims[-1] != x2.dims[-1]:
        raise ValueError(f"cdist: feature sizes differ ({x1.dims[-1]} vs {x2.dims[-1]})")
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, R, M)
    return diff.norm(p, dim=-1)
