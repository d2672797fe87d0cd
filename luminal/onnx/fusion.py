"""Decomposed operators recognized while importing: GELU written out as ``x/2 (1 + erf(x / sqrt 2))``.

ONNX had no ``Gelu`` before opset 20, so ``torch.onnx.export`` (and most BERT exports) write the exact GELU as
``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5``. Imported node by node, that is luminal's ``erf`` (two
fitted polynomials, both computed per element) and then ``1 + erf``, which cancels for negative x (105 ulp at
x = -3 in float32). When the importer reaches the last ``Mul`` of such a chain it asks :func:`match_gelu`
which value the chain starts from, and computes ``x.gelu()`` instead (one exponential, within 17 ulp there:
:meth:`luminal.GraphTensor.gelu`); the chain's other nodes, already imported, are then unused and removed by the
compiler (or kept, where the model reads them elsewhere).

Matched, in any operand order: ``(x * A) * 0.5``, ``(x * 0.5) * A`` and ``x * (A * 0.5)`` with ``A = erf(D) + 1``
and ``D = x / sqrt 2`` or ``x * (1 / sqrt 2)``; each constant a scalar known at import (a ``Constant`` node or
an initializer, read once: a later ``load_state_dict`` changing it does not undo the match), within 1e-6 of its
value, of at most one axis (so that it does not add axes to x). Every node must have produced the value the
importer still holds under its name.
"""

from __future__ import annotations

import math

import numpy as np

SQRT2 = math.sqrt(2.0)


def _scalar(value, want: float) -> bool:
    """Whether ``value`` (an importer ``Value`` or None) is a floating scalar known at import, close to ``want``."""
    if value is None or value.static is None:
        return False
    a = np.asarray(value.static)
    return a.size == 1 and a.ndim <= 1 and a.dtype.kind == "f" and \
        math.isclose(float(a.reshape(())), want, rel_tol=1e-6)


def match_gelu(node, scope, producers: dict) -> str | None:
    """The name of ``x`` when ``node`` (a ``Mul``) ends ``x/2 (1 + erf(x / sqrt 2))`` (see the module docstring),
    else None. ``producers`` maps a value's name to ``(node, value)`` of the node that produced it."""
    if node.op_type != "Mul" or len(node.input) != 2:
        return None

    def made(name, op):
        """The node of type ``op`` that produced the value ``scope`` holds under ``name``, or None."""
        entry = producers.get(name)
        if entry is None or entry[0].op_type != op or scope.get(name) is not entry[1]:
            return None
        return entry[0]

    def pairs(n):
        a, b = n.input[0], n.input[1]
        return ((a, b), (b, a))

    def half_of(name):
        """z where ``name`` is ``z * 0.5``."""
        m = made(name, "Mul")
        if m is not None and len(m.input) == 2:
            for z, c in pairs(m):
                if _scalar(scope.get(c), 0.5):
                    return z
        return None

    def one_plus_erf(name):
        """x where ``name`` is ``erf(x / sqrt 2) + 1``."""
        add = made(name, "Add")
        if add is None or len(add.input) != 2:
            return None
        for e, c in pairs(add):
            erf = made(e, "Erf")
            if erf is None or not _scalar(scope.get(c), 1.0):
                continue
            d = made(erf.input[0], "Div")
            if d is not None and len(d.input) == 2 and _scalar(scope.get(d.input[1]), SQRT2):
                return d.input[0]
            d = made(erf.input[0], "Mul")
            if d is not None and len(d.input) == 2:
                for x, c2 in pairs(d):
                    if _scalar(scope.get(c2), 1.0 / SQRT2):
                        return x
        return None

    for p, q in pairs(node):
        if _scalar(scope.get(q), 0.5):  # (x * A) * 0.5
            m = made(p, "Mul")
            if m is not None and len(m.input) == 2:
                for x, a in pairs(m):
                    if one_plus_erf(a) == x:
                        return x
        x = one_plus_erf(q)
        if x is not None and half_of(p) == x:  # (x * 0.5) * A
            return x
        a = half_of(q)
        if a is not None and one_plus_erf(a) == p:  # x * (A * 0.5)
            return p
    return None
