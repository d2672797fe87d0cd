"""The eager :class:`Tensor`: PyTorch-style tensors whose operations record and realize on read.

Every method of :class:`~luminal.GraphTensor` works on a ``Tensor`` (``dim=`` may be spelled for ``axis=``);
results are new ``Tensor``s whose value is computed when first read. See ``docs/eager.md``.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from ..dtype import DType, as_dtype
from ..tensor import GraphTensor
from . import _core
from ._core import call_function, call_method, realize

__all__ = ["Tensor"]

MaxResult = collections.namedtuple("max", ["values", "indices"])
MinResult = collections.namedtuple("min", ["values", "indices"])


def _with_indices(t, axis, keepdim, largest):
    if largest:
        return MaxResult(t.max(axis, keepdim), t.argmax(axis, keepdim))
    return MinResult(t.min(axis, keepdim), t.argmin(axis, keepdim))


AminmaxResult = collections.namedtuple("aminmax", ["min", "max"])


def _aminmax(t, dim, keepdim):
    return AminmaxResult(t.min(dim, keepdim), t.max(dim, keepdim))


def _identity(graph, gts):
    return gts[0]


class Tensor:
    """An eager tensor (``lm.tensor(data)``): PyTorch's API over luminal's lazy graphs.

    Operations record; reading a value (``numpy()``, ``print``, ``float()``, ``bool()``, ``tolist()``,
    ``item()``, ``np.asarray``) compiles the pending computation (cached by structure) and runs it.

    Attributes:
        shape: a tuple of ints.
        dtype: a :class:`luminal.DType`.
        requires_grad: whether gradients flow to / through this tensor.
        grad: the accumulated gradient of a leaf after ``backward()`` (a ``Tensor``) or None.
    """

    __slots__ = ("_v", "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # numpy arrays defer to our reflected operators (ndarray + Tensor -> Tensor)

    @classmethod
    def _make(cls, v) -> "Tensor":
        t = object.__new__(cls)
        t._v = v
        return t

    def __init__(self, data, dtype=None, requires_grad: bool = False):
        from .creation import _as_array
        arr = _as_array(data, dtype)
        self._v = _core._leaf(arr, False)
        if requires_grad:
            self.requires_grad_(True)

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple:
        """The shape, a tuple of ints (``torch.Size`` is a tuple too)."""
        return self._v.shape

    @property
    def dtype(self) -> DType:
        return self._v.dtype

    @property
    def ndim(self) -> int:
        return len(self._v.shape)

    @property
    def device(self) -> str:
        """The device eager tensors run on (:func:`luminal.set_default_device`)."""
        return _core.get_default_device()

    def dim(self) -> int:
        return len(self._v.shape)

    def size(self, dim: int | None = None):
        """The shape (a tuple), or the size of one dim."""
        if dim is None:
            return self._v.shape
        return self._v.shape[self._axis(dim)]

    def numel(self) -> int:
        return int(math.prod(self._v.shape))

    nelement = numel

    def _axis(self, dim: int) -> int:
        n = self.ndim
        if not -max(n, 1) <= dim < max(n, 1):
            raise IndexError(f"dimension {dim} out of range for a {n}-d tensor (expected in [{-max(n, 1)}, "
                             f"{max(n, 1) - 1}])")
        return dim % max(n, 1)

    def __len__(self) -> int:
        if not self._v.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._v.shape[0]

    def __iter__(self):
        if not self._v.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._v.shape[0]))

    __hash__ = object.__hash__

    # ------------------------------------------------------------------ autograd
    @property
    def requires_grad(self) -> bool:
        return self._v.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        """Make this tensor a leaf that accumulates ``.grad`` (float tensors only, as in PyTorch)."""
        v = self._v
        if flag and not v.dtype.is_float:
            raise RuntimeError(f"only tensors of floating point dtype can require gradients, this one is {v.dtype}")
        if v.op is not None and v.requires_grad and not flag:
            raise RuntimeError("you can only change requires_grad flags of leaf variables; use detach()")
        if v.param is not None:
            v.param.requires_grad = bool(flag)
        elif v.op is not None:  # a computed tensor becomes a leaf: realize it and drop its history
            realize([v], "requires_grad_()")
            v.op = None
        v.requires_grad = bool(flag)
        return self

    @property
    def is_leaf(self) -> bool:
        """True for tensors created by the user (or not requiring grad), as in PyTorch."""
        return not self._v.requires_grad or self._v.op is None

    @property
    def grad(self):
        return self._v.grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None and not isinstance(value, Tensor):
            value = Tensor(value, dtype=self.dtype)
        if value is not None and value.shape != self.shape:
            raise RuntimeError(f"assigned grad has shape {value.shape}, expected {self.shape}")
        self._v.grad = value

    def repeat_interleave(self, repeats, dim=None):
        """``torch.repeat_interleave``: an int, or per-element repeats (a list, numpy array or tensor, whose
        values are read now: they set the result's size)."""
        if isinstance(repeats, Tensor):
            repeats = repeats.numpy()
        if isinstance(repeats, (list, tuple, np.ndarray)):
            arr = np.asarray(repeats)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"repeat_interleave: repeats must be integers, got {arr.dtype}")
            repeats = int(arr) if arr.ndim == 0 else tuple(int(v) for v in arr.reshape(-1))
        return call_method("repeat_interleave", self, (repeats,), {"dim": dim})

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of every leaf it depends on (or of ``inputs``).

        Lazy: the backward pass is recorded and computed with the next realization (reading a ``.grad``, an
        optimizer ``step()``), in the same compiled graph as the forward pass. ``gradient`` is needed for a
        non-scalar tensor (``torch.Tensor.backward``). ``create_graph=True`` keeps the history of the gradients
        (higher-order gradients); ``retain_graph`` is accepted and ignored (see :func:`luminal.autograd.backward`).
        """
        if not self._v.requires_grad:
            raise RuntimeError("backward(): this tensor does not require grad and has no recorded operation "
                               "(create leaves with requires_grad=True, and do not compute it under no_grad())")
        _autograd.backward([self], None if gradient is None else [gradient], retain_graph, create_graph, inputs)

    def register_hook(self, hook):
        """``hook(grad)`` runs (eagerly, on an eager tensor) when this tensor's gradient is computed by a backward
        pass; a non-None result replaces the gradient. Returns a handle whose ``remove()`` unregisters it."""
        from .autograd import register_hook
        return register_hook(self, hook)

    def retain_grad(self) -> None:
        """Keep the gradient of this non-leaf tensor in ``.grad`` after ``backward()`` (``torch``'s retain_grad)."""
        from .autograd import retain_grad
        retain_grad(self)

    @property
    def retains_grad(self) -> bool:
        return self._v.retains

    def detach(self) -> "Tensor":
        """The same value without gradient history (``torch.Tensor.detach``)."""
        v = self._v
        if not v.pending:
            out = Tensor._make(_core._Val(v.shape, v.dtype, value=v.host()))
            return out
        return _core._record(("detach",), _identity, [v], grad=False)

    def detach_(self) -> "Tensor":
        self._v = self.detach()._v
        return self

    def clone(self) -> "Tensor":
        """A copy with the same value (gradients flow through it, as in PyTorch)."""
        return _core._record(("clone",), _identity, [self._v])

    # ------------------------------------------------------------------ realization
    def _value(self, what: str) -> np.ndarray:
        v = self._v
        if v.pending:
            realize([v], what)
        elif _core._tls.tracing is not None:
            _core._tls.tracing.fail(what)
        return v.host()

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (shares memory with the tensor, as ``torch.Tensor.numpy``)."""
        return self._value("numpy()")

    def __array__(self, dtype=None, copy=None):
        arr = self._value("np.asarray()")
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        return np.array(arr, copy=True) if copy else arr

    def tolist(self):
        return self._value("tolist()").tolist()

    def item(self):
        """The value of a one-element tensor as a Python number."""
        arr = self._value("item()")
        if arr.size != 1:
            raise ValueError(f"item(): only one-element tensors can be converted to Python scalars, this one has "
                             f"shape {arr.shape}")
        return arr.reshape(()).item()

    def _scalar(self, what: str):
        arr = self._value(what)
        if arr.size != 1:
            raise (RuntimeError if what == "bool()" else TypeError)(
                f"{what}: a tensor with {arr.size} elements (shape {arr.shape}) has no single value"
                + ("; use .any() or .all()" if what == "bool()" else ""))
        return arr.reshape(()).item()

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __bool__(self) -> bool:
        return bool(self._scalar("bool()"))

    def __index__(self) -> int:
        if self.dtype.is_float or self.dtype == DType.bool:
            raise TypeError(f"only integer tensors can be used as an index, this one is {self.dtype}")
        return int(self._scalar("__index__()"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex()"))

    def __format__(self, spec: str) -> str:
        if self.numel() == 1 and spec:
            return format(self.item(), spec)
        return str(self)

    def __repr__(self) -> str:
        if _core._tls.tracing is not None:
            return f"Tensor(shape={self.shape}, dtype={self.dtype.value}, traced)"
        arr = self._value("repr()")
        body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3)
        extras = []
        if self.dtype not in (DType.float32, DType.int64, DType.bool):
            extras.append(f"dtype=luminal.{self.dtype.value}")
        if self.requires_grad:
            extras.append("requires_grad=True" if self.is_leaf else "grad_fn=<recorded>")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    __str__ = __repr__

    # ------------------------------------------------------------------ torch-style helpers
    def max(self, dim=None, keepdim: bool = False, *, axis=None):
        """``max()`` of all elements, ``max(dim)`` -> ``(values, indices)``, ``max(other)`` -> elementwise."""
        return self._extreme(dim if axis is None else axis, keepdim, True)

    def min(self, dim=None, keepdim: bool = False, *, axis=None):
        """``min()`` of all elements, ``min(dim)`` -> ``(values, indices)``, ``min(other)`` -> elementwise."""
        return self._extreme(dim if axis is None else axis, keepdim, False)

    def _extreme(self, dim, keepdim, largest):
        if isinstance(dim, (Tensor, np.ndarray)):
            return call_method("maximum" if largest else "minimum", self, (dim,), {})
        if dim is None:
            return call_method("max" if largest else "min", self, (), {})
        if isinstance(dim, (tuple, list)):
            return call_method("max" if largest else "min", self, (tuple(dim), keepdim), {})
        return call_function(_with_indices, (self, int(dim), bool(keepdim), largest), {},
                             name="max" if largest else "min")

    def cummax(self, dim: int, *, axis=None):
        """``torch.cummax``: the namedtuple ``(values, indices)`` of the running maximum along ``dim``."""
        return call_method("cummax", self, (dim if axis is None else axis,), {"return_indices": True})

    def cummin(self, dim: int, *, axis=None):
        """``torch.cummin``: the namedtuple ``(values, indices)`` of the running minimum along ``dim``."""
        return call_method("cummin", self, (dim if axis is None else axis,), {"return_indices": True})

    def aminmax(self, *, dim=None, keepdim: bool = False):
        """``torch.aminmax``: the namedtuple ``(min, max)`` over ``dim`` (all elements when None)."""
        return call_function(_aminmax, (self, dim, bool(keepdim)), {}, name="aminmax")

    def nonzero(self, *, as_tuple: bool = False):
        """``torch.nonzero``: the (n, ndim) int64 indices of the nonzero entries (``as_tuple``: one index tensor per
        dim). The result's size depends on the values, so the tensor is realized now (as torch synchronizes; inside
        ``lm.jit`` that is a ``JitTraceError``); the indices are a new tensor without gradient history."""
        arr = self._value("nonzero()")
        if arr.ndim == 0:  # torch: a 0-d input has one "dim" of size 1 for as_tuple, zero index columns otherwise
            hit = np.array([0] if arr else [], np.int64)
            return (Tensor(hit),) if as_tuple else Tensor(np.zeros((hit.size, 0), np.int64))
        nz = [i.astype(np.int64) for i in np.nonzero(arr)]
        return tuple(Tensor(i) for i in nz) if as_tuple else Tensor(np.stack(nz, axis=1))

    def argwhere(self):
        """``torch.argwhere``: ``nonzero()``."""
        return self.nonzero()

    def masked_select(self, mask):
        """``torch.masked_select``: the entries of ``self`` where ``mask`` (broadcast with ``self``) is True, as a
        1-D tensor; ``x.expand(shape)[mask]``, so the mask is realized now (see ``nonzero``) and gradients flow
        to ``self``."""
        m = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
        if m.dtype != np.bool_:
            raise TypeError(f"masked_select: mask must be a bool tensor, got {m.dtype}")
        shape = np.broadcast_shapes(tuple(self.shape), m.shape)
        x = self if tuple(self.shape) == shape else self.expand(*shape)
        return x[np.broadcast_to(m, shape)]

    def to(self, *args, dtype=None, **kwargs) -> "Tensor":
        """``to(dtype)`` casts; ``to("cpu")`` / ``to(device=...)`` keeps the tensor (one device per process, see
        :func:`luminal.set_default_device`)."""
        for a in (*args, kwargs.get("device")):
            if isinstance(a, str) and a.split(":")[0] in ("cpu", "reference", "cuda", "mps"):
                if a.split(":")[0] in ("cuda", "mps"):
                    raise RuntimeError(f"device {a!r} is not available in luminal's eager mode (cpu only); use "
                                       "lm.set_default_device('cpu' | 'reference')")
                continue
            if a is not None:
                dtype = a
        if dtype is None or as_dtype(dtype) == self.dtype:
            return self
        return call_method("cast", self, (as_dtype(dtype),), {})

    def cpu(self) -> "Tensor":
        return self

    def __getitem__(self, key):
        """PyTorch indexing: ints, slices, None, ``...``, integer index tensors / arrays / lists (advanced
        indexing, broadcast together) and boolean masks. A mask's result size depends on its values: a mask
        tensor is realized here (as torch synchronizes) and becomes its ``nonzero()`` indices; the result differs
        in shape from mask to mask (a new compile per number of True entries)."""
        return call_method("__getitem__", self, (_eager_key(self, key, True),), {})

    def __setitem__(self, key, value):
        """``x[key] = value``: functional underneath (:meth:`luminal.GraphTensor.setitem`), then ``x`` takes the new
        value, as the in-place methods do; gradients flow to the old value (zero where overwritten) and to
        ``value``. A boolean mask is realized only when ``value`` has one entry per True entry."""
        from ..hl_ops.subscript import DataDependentShapeError
        try:
            result = call_function(_setitem, (self, _eager_key(self, key, False), value), {}, name="setitem")
        except DataDependentShapeError:
            result = call_function(_setitem, (self, _eager_key(self, key, True), value), {}, name="setitem")
        return self._inplace(result)

    # in place (functional underneath: the tensor takes the new value)
    def _inplace(self, result) -> "Tensor":
        v = self._v
        if v.requires_grad and v.op is None and _core.is_grad_enabled():
            raise RuntimeError("a leaf tensor that requires grad is used in an in-place operation; wrap it in "
                               "lm.no_grad()")
        if result.shape != self.shape:
            raise RuntimeError(f"in-place result has shape {result.shape}, expected {self.shape}")
        result = result if result.dtype == self.dtype else result.cast(self.dtype)
        if v.param is not None:  # a module parameter: write the new value to the host array
            v.param.data = np.array(result.numpy(), dtype=v.dtype.numpy, order="C")
            return self
        rg = v.requires_grad
        self._v = result._v
        if v.op is None and rg:  # a leaf stays a leaf
            realize([self._v], "in-place update")
            self._v.op = None
            self._v.requires_grad = True
        return self

    def add_(self, other, alpha=1):
        return self._inplace(self + other * alpha if alpha != 1 else self + other)

    def sub_(self, other, alpha=1):
        return self._inplace(self - other * alpha if alpha != 1 else self - other)

    def mul_(self, other):
        return self._inplace(self * other)

    def div_(self, other):
        return self._inplace(self / other)

    def zero_(self):
        from .creation import zeros
        return self._inplace(zeros(self.shape, dtype=self.dtype))

    def fill_(self, value):
        from .creation import full
        return self._inplace(full(self.shape, value, dtype=self.dtype))

    def copy_(self, src):
        src = src if isinstance(src, Tensor) else Tensor(np.asarray(src))
        return self._inplace(src.cast(self.dtype).expand(self.shape) if src.shape != self.shape else src)

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)


def _setitem(x, key, value):
    return x.setitem(key, value)


def _index_item(k):
    """A list / numpy index as a numpy array (bool or int64) or a Python scalar; other items unchanged (the
    lazy graph's rule, with eager tensors inside a list read as arrays)."""
    from ..hl_ops.subscript import _as_index_array

    if isinstance(k, list) and any(isinstance(e, Tensor) for e in k):
        k = [np.asarray(e) for e in k]
    return _as_index_array(k)


def _is_mask(k) -> bool:
    return (isinstance(k, np.ndarray) and k.dtype == np.bool_) or (isinstance(k, Tensor) and k.dtype == DType.bool)


def _eager_key(t, key, realize_masks: bool):
    """``key`` with lists as numpy arrays and, when ``realize_masks``, boolean masks replaced by their nonzero()
    integer indices (one array per mask dim, as torch), after checking each mask's shape against ``t``'s."""
    items = [_index_item(k) for k in (key if isinstance(key, tuple) else (key,))]
    if not realize_masks or not any(_is_mask(k) for k in items):
        return tuple(items) if isinstance(key, tuple) else items[0]

    def consumed(k):
        if k is None or k is Ellipsis or isinstance(k, bool):
            return 0
        return k.ndim if _is_mask(k) else 1

    total = sum(consumed(k) for k in items)
    out, pos = [], 0
    for k in items:
        if k is Ellipsis:
            pos += max(t.ndim - total, 0)
        elif _is_mask(k):
            arr = k if isinstance(k, np.ndarray) else k._value("x[mask]")
            if arr.ndim == 0:
                out.append(bool(arr))
                continue
            dims = t.shape[pos:pos + arr.ndim]
            for j, (md, xd) in enumerate(zip(arr.shape, dims)):
                if md != xd:
                    raise IndexError(f"the shape of the mask {list(arr.shape)} at index {j} does not match the shape "
                                     f"of the indexed tensor {list(dims)} at index {j}")
            out.extend(nz.astype(np.int64) for nz in np.nonzero(arr))
            pos += arr.ndim
            continue
        else:
            pos += consumed(k)
        out.append(k)
    return tuple(out)


# ---------------------------------------------------------------------------------------------- method wrappers
_SKIP = {"graph", "id", "shape", "tracker", "dims", "ndim", "size", "concrete_shape", "numel", "set", "set_dyn",
         "set_deferred", "keep", "retrieve", "drop", "data", "numpy", "item", "set_name", "compare_file", "print",
         "dtype", "max", "min", "graph_break", "detach"}
_DUNDERS = ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__",
            "__abs__", "__lt__", "__gt__", "__le__", "__ge__", "__eq__", "__ne__", "__invert__", "__and__", "__or__",
            "__xor__", "__rand__", "__ror__", "__rxor__", "__lshift__", "__rshift__", "__rlshift__", "__rrshift__",
            "__matmul__", "__rmatmul__"]


def _make_method(name, fn):
    # (GraphTensor's methods take PyTorch's dim= themselves: luminal.tensor._accept_dim_keywords)
    def method(self, *args, **kwargs):
        return call_method(name, self, args, kwargs)
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


def _make_property(name, prop):
    def getter(self):
        return call_method("__getattribute__", self, (name,), {})
    return property(getter, doc=prop.__doc__)


def _install():
    seen = set(Tensor.__dict__)
    for klass in GraphTensor.__mro__:
        for name, attr in vars(klass).items():
            if name in seen or name in _SKIP or (name.startswith("_") and name not in _DUNDERS):
                continue
            seen.add(name)
            if isinstance(attr, property):
                setattr(Tensor, name, _make_property(name, attr))
            elif callable(attr):
                setattr(Tensor, name, _make_method(name, attr))


_install()


from . import autograd as _autograd  # noqa: E402  (it uses Tensor)
