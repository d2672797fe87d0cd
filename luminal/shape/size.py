"""``Size``: the user-facing shape of a tensor, a tuple as ``torch.Size`` is.

``GraphTensor.shape`` returns one: a plain Python ``int`` for each constant dim and the symbolic
:class:`~luminal.shape.Expression` for each symbolic one, so ``x.shape[-1]``, ``len(x.shape)``, unpacking,
slicing and ``x.shape == (2, 3)`` work as with torch and numpy. The view itself (strides, masks...) is
``GraphTensor.tracker``.

    >>> import luminal as lm
    >>> x = lm.Graph().tensor(("seq", 4))
    >>> x.shape
    Size([seq, 4])
    >>> x.shape[1], x.shape[0] == lm.sym("seq"), len(x.shape)
    (4, True, 2)
"""

from __future__ import annotations

from typing import Iterable

from .expression import Expression, to_expr


class Size(tuple):
    """A tuple of dims: ``int`` where constant, :class:`Expression` where symbolic.

    Equal to a plain tuple of the same entries (``Size([2, 3]) == (2, 3)``); slicing and ``+`` return a
    ``Size``. :meth:`numel` is the product of the dims (an ``int``, or an ``Expression`` when symbolic).
    """

    __slots__ = ()

    def __new__(cls, dims: Iterable = ()) -> "Size":
        out = []
        for d in dims:
            if isinstance(d, Expression):
                out.append(d.to_int() if d.is_constant() else d)
            elif isinstance(d, str):
                out.append(to_expr(d))
            else:
                out.append(int(d))
        return super().__new__(cls, out)

    def __getitem__(self, key):
        item = super().__getitem__(key)
        return Size(item) if isinstance(key, slice) else item

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(self) + tuple(other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(other) + tuple(self))

    def __repr__(self) -> str:
        return f"Size([{', '.join(str(d) for d in self)}])"

    __str__ = __repr__

    def __reduce__(self):
        return (Size, (tuple(self),))

    def is_symbolic(self) -> bool:
        """True when some dim is a symbolic :class:`Expression`."""
        return any(isinstance(d, Expression) for d in self)

    def numel(self):
        """The number of elements: an ``int``, or an :class:`Expression` when some dim is symbolic."""
        n = to_expr(1)
        for d in self:
            n = n * d
        return n.to_int() if n.is_constant() else n
