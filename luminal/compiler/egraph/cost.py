"""Size-aware extraction cost per backend: work and memory traffic per element, times the element counts.

The e-graph's constructors carry their view keys, and the loader's table maps each key to its ``ShapeTracker``,
so every e-node knows how many elements it touches:

* elementwise ops (and ``Cast``/``BitCast``/``Copy``/``Break``) work over their output, whose dims are their first operand
  view's dims; ``Sum``/``Max`` over their operand (the reduced axis included); ``Gather`` over its index view;
* every operand is read through its view: a whole row-major read streams memory (``read_contiguous``), a
  strided, permuted or padded read costs more (``read_strided``), a broadcast constant (all strides 0) is free;
* ops that write a buffer the backend materializes pay ``write`` per output element and a ``kernel`` overhead per
  launch: on the CPU backend reductions and ``Break`` (its code generator inlines elementwise ops, ``Copy`` and
  ``Gather`` into their consumers' loops: ``luminal/codegen/kernel.py``); on the reference interpreter every op
  (one numpy call, one array each).

Symbolic extents are evaluated at a representative value (:data:`SYMBOL_VALUE`, or the symbol's upper bound
when that is smaller), so the same graph always extracts the same program (no dependence on the bindings of the
moment). A rewrite that moves work to a smaller tensor (``max(x + c) -> max(x) + c``) or drops a materialized
copy therefore wins, where a per-op constant cost saw a tie.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...shape import Expression, ShapeTracker
from .encode import CHILD_SLOTS, SPLIT_ROWS
from .extract import ENode

SYMBOL_VALUE = 64  # a symbolic extent is costed as this (or its upper bound when smaller)


@dataclass(frozen=True)
class BackendCosts:
    """Per-element costs of one backend (arbitrary units; only ratios matter)."""

    compute: dict  # op -> work per element
    read_contiguous: float
    read_strided: float
    write: float
    kernel: float  # per materialized op
    materialized: frozenset  # ops that write their own buffer
    # a reduction with r outputs runs on about r rows of programs: below parallel_rows its work costs
    # parallel_rows / r times more (a GPU runs few long rows on few of its cores); 0: no such term
    parallel_rows: float = 0.0


PARALLEL_ROWS = SPLIT_ROWS  # GPU: outputs a reduction needs to fill the device (a few rows per program)
GEMM_WORK = 0.05  # per multiply-add of a MatMul: a GEMM kernel runs tens of times faster than a generic reduction loop
_COMPUTE = {"Copy": 0.0, "Break": 0.0, "Add": 1.0, "Mul": 1.0, "Less": 1.0, "Bit": 1.0, "Cast": 1.0, "BitCast": 0.0,
            "Sum": 1.0, "Max": 1.0, "Gather": 1.0, "Scatter": 1.0, "MatMul": GEMM_WORK, "Mod": 4.0, "Recip": 4.0,
            "Sqrt": 4.0, "Log2": 8.0, "Exp2": 8.0, "Sin": 8.0}

BACKENDS = {
    # compiled C: elementwise chains, copies and gathers are inlined into one loop; reductions and breaks write
    "cpu": BackendCosts(_COMPUTE, read_contiguous=0.5, read_strided=1.5, write=1.0, kernel=64.0,
                        materialized=frozenset({"Sum", "Max", "Break", "Scatter", "MatMul"})),
    # Triton kernels: fused like the C backend's (the same kernel IR), and a reduction's programs each take a few
    # rows: fewer than PARALLEL_ROWS outputs leave most of the GPU idle (what the split-* rules remedy)
    "gpu": BackendCosts(_COMPUTE, read_contiguous=0.5, read_strided=1.5, write=1.0, kernel=64.0,
                        materialized=frozenset({"Sum", "Max", "Break", "Scatter", "MatMul"}),
                        parallel_rows=float(PARALLEL_ROWS)),
    # the reference interpreter: one numpy call per node, each writing its own array
    "reference": BackendCosts(_COMPUTE, read_contiguous=0.5, read_strided=1.5, write=1.0, kernel=2000.0,
                              materialized=frozenset(_COMPUTE)),
}


def _count(expr: Expression) -> float:
    if expr.is_constant():
        return float(expr.to_int())
    binding = {}
    for name in sorted(expr.symbols()):
        binding[name] = SYMBOL_VALUE
    try:
        return float(max(expr.evaluate(binding), 0))
    except Exception:  # an expression the representative binding cannot evaluate (e.g. a division by 0)
        return float(SYMBOL_VALUE)


class SizeCost:
    """``op_cost`` for the extractor: ``SizeCost(views, "cpu")(enode)`` is the e-node's own cost (its operands'
    e-classes are added by the extractor)."""

    def __init__(self, views: list[ShapeTracker], backend: str = "cpu"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown cost backend {backend!r}; expected one of {sorted(BACKENDS)}")
        self.backend = backend
        self.costs = BACKENDS[backend]
        self.views = views
        self._elements: dict[int, float] = {}
        self._read: dict[int, float] = {}
        self._memo: dict = {}
        self.constants: set = set()  # e-classes holding a Num: read as a scalar through any key, so free

    def bind(self, eg) -> "SizeCost":
        """Note the e-graph's constant e-classes (:class:`~luminal.compiler.egraph.extract.EGraphData`)."""
        self.constants = {cls for cls, nodes in eg.classes.items() if any(n.op == "Num" for n in nodes)}
        self._memo.clear()
        return self

    def elements(self, key: int) -> float:
        n = self._elements.get(key)
        if n is None:
            n = self._elements[key] = _count(self.views[key].n_elements())
        return n

    def unique(self, key: int) -> float:
        """How many distinct elements view ``key`` reads (its broadcast axes count once)."""
        v = self.views[key]
        n = 1.0
        for d, st in zip(v.dims, v.strides):
            if not st == 0:
                n *= _count(d)
        return n

    def read(self, key: int) -> float:
        """The cost of reading every element of view ``key`` once."""
        c = self._read.get(key)
        if c is None:
            v = self.views[key]
            if all(s == 0 for s in v.strides) and not v.masks:
                c = 0.0  # a broadcast scalar: stays in a register
            else:
                per = self.costs.read_contiguous if v.is_contiguous() else self.costs.read_strided
                c = per * self.elements(key)
            self._read[key] = c
        return c

    def __call__(self, e: ENode) -> float:
        op = e.op
        if op in ("Leaf", "Num", "Node"):
            return 0.01
        memo = self._memo.get((op, e.args))
        if memo is None:
            memo = self._memo[(op, e.args)] = self._compute(e)
        return memo

    def _compute(self, e: ENode) -> float:
        op = e.op
        slots = CHILD_SLOTS[op]
        keys = [e.args[s + 1] for s in slots]
        # the same buffer through the same view, read twice (x + x), is loaded once
        reads = sorted({k for s, k in zip(slots, keys) if e.args[s] not in self.constants})
        c = self.costs
        if op in ("Sum", "Max"):
            work = self.elements(keys[0])
            out = work / max(_count(self.views[keys[0]].dims[e.args[1]]), 1.0)
        elif op == "Gather":  # reads one data element per index, anywhere in the data
            work = out = self.elements(keys[1])
            reads = [k for k in reads if k == keys[1]]
        elif op == "Scatter":  # adds each source element somewhere into a zeroed output (its size: unknown here)
            work = out = self.elements(keys[1])
        elif op == "MatMul":  # a GEMM: each operand element read once (packed), work at GEMM speed
            vs = e.args[6]
            work = self.elements(vs)
            out = work / max(_count(self.views[vs].dims[e.args[1]]), 1.0)
            reads = []
            total = c.compute[op] * work + sum(c.read_contiguous * self.unique(keys[i]) for i in (0, 1)
                                                if e.args[CHILD_SLOTS[op][i]] not in self.constants)
            return total + c.write * out + c.kernel
        else:
            work = out = self.elements(keys[0])
        total = c.compute.get(op, 10.0) * work + sum(self.read(k) for k in reads)
        if c.parallel_rows and op in ("Sum", "Max") and out < c.parallel_rows:
            total *= c.parallel_rows / max(out, 1.0)
        if op == "Gather":
            total += c.read_strided * out
        if op in c.materialized:
            total += c.write * out + c.kernel
        return total
