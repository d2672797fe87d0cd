"""Graph -> egglog program text: every node becomes ``(union (Node id) TERM)``; views become interned keys.

Constant-only elementwise subgraphs whose folding egglog cannot do exactly (it has no float32/float16
arithmetic; unary ops) are folded here with the op's own reference semantics (as the former ArithmeticElimination pass did);
float64 and integer ``Add``/``Mul`` of constants are left to the ``fold-*`` rules of ``algebra.egg``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ... import ops
from ...dtype import DType
from ...graph import Graph
from ...shape import Expression, ShapeTracker
from .sexpr import float_literal

UNARY = {ops.Log2: "Log2", ops.Exp2: "Exp2", ops.Sin: "Sin", ops.Sqrt: "Sqrt", ops.Recip: "Recip",
         ops.Contiguous: "Copy", ops.GraphBreak: "Break"}
BINARY = {ops.Add: "Add", ops.Mul: "Mul", ops.Mod: "Mod", ops.LessThan: "Less"}
REDUCE = {ops.SumReduce: "Sum", ops.MaxReduce: "Max"}
_FOLDABLE = (ops.Log2, ops.Exp2, ops.Sin, ops.Sqrt, ops.Recip, ops.Add, ops.Mul, ops.Mod, ops.LessThan, ops.Bitwise,
             ops.Cast, ops.BitCast)
_EGGLOG_FOLDS = {(ops.Add, "float64"), (ops.Mul, "float64"), (ops.Add, "int32"), (ops.Mul, "int32"),
                 (ops.Add, "int64"), (ops.Mul, "int64")}


def _bits(value) -> tuple:
    """A constant's exact identity: a float's bit pattern (NaN payloads, -0.0 and 0.0 differ), else the value."""
    if isinstance(value, (float, np.floating)):
        return ("f", np.float64(value).tobytes())
    return ("v", type(value).__name__, value)


def num_value(value, dtype: DType):
    """The f64 a ``Num`` holds for a numeric constant, or ``None`` when it must stay an opaque leaf
    (non-finite, -0.0, symbolic, or an integer f64 cannot hold exactly)."""
    if isinstance(value, Expression) or isinstance(value, (str, bytes)):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v) or (v == 0.0 and math.copysign(1.0, v) < 0):
        return None
    if dtype.is_int or dtype == DType.bool:
        if isinstance(value, float) and not v.is_integer():
            return None
        if abs(int(value)) >= 2 ** 53:
            return None
        return float(int(value))
    return v


@dataclass
class Encoding:
    """A graph as egglog facts plus the Python-side tables needed to read the e-graph back.

    ``terms`` maps each node to ``(constructor, *args)`` with child *node ids* at :data:`CHILD_SLOTS`; the
    loader turns each into ``(union (Node id) (constructor ...))``, in bulk through ``input`` files (one
    command per node would cost time quadratic in the graph size).
    """

    lines: list[str]  # small facts, as program text (dtype facts)
    views: list[ShapeTracker]  # view key -> tracker
    contig: set[int]
    nomask: set[int]
    terms: dict[int, tuple]  # node id -> (constructor, literal/child args) as encoded
    folded: dict[int, float]  # node id -> constant the loader folded it to
    view_keys: dict = field(default_factory=dict)
    extent: set = field(default_factory=set)  # (key, axis, n): axis of the view has the constant extent n
    dims: set = field(default_factory=set)  # (key, dims id): the view's dims, interned in dims_ids
    dims_ids: dict = field(default_factory=dict)  # dims tuple -> id
    reduced: set = field(default_factory=set)  # (key, axis, key of the row-major read of the reduced dims)
    gemm: set = field(default_factory=set)  # (sum key, axis, x key, y key): a matrix-shaped sum of products
    split: set = field(default_factory=set)  # (key, axis, split key, outer key): see split_choice
    offered: list = field(default_factory=list)  # (kept node, alternative node, kind): unioned (alternatives.py)

    def text(self) -> str:
        """The whole encoding as plain egglog commands (one per node: fine for small graphs and debugging)."""
        lines = list(self.lines)
        lines += [f"(Contig {k})" for k in sorted(self.contig)] + [f"(NoMask {k})" for k in sorted(self.nomask)]
        lines += [f"(Extent {k} {a} {n})" for k, a, n in sorted(self.extent)]
        lines += [f"(Dims {k} {s})" for k, s in sorted(self.dims)]
        lines += [f"(ReducedKey {k} {a} {r})" for k, a, r in sorted(self.reduced)]
        lines += [f"(GemmKey {k} {a} {x} {y})" for k, a, x, y in sorted(self.gemm)]
        lines += [f"(SplitKey {k} {a} {s} {o})" for k, a, s, o in sorted(self.split)]
        lines += [f"(union (Node {n}) {term_text(t)})" for n, t in self.terms.items()]
        return "\n".join(lines)

    def rows(self) -> dict[str, list[str]]:
        """Tab-separated rows per relation: ``Row<Constructor>`` (node id first) plus the view facts
        ``Contig``/``NoMask``/``Extent``/``Dims``/``ReducedKey``/``GemmKey``/``SplitKey``."""
        out: dict[str, list[str]] = {"Contig": [str(k) for k in sorted(self.contig)],
                                     "NoMask": [str(k) for k in sorted(self.nomask)],
                                     "Extent": [f"{k}\t{a}\t{n}" for k, a, n in sorted(self.extent)],
                                     "Dims": [f"{k}\t{s}" for k, s in sorted(self.dims)],
                                     "ReducedKey": [f"{k}\t{a}\t{r}" for k, a, r in sorted(self.reduced)],
                                     "GemmKey": [f"{k}\t{a}\t{x}\t{y}" for k, a, x, y in sorted(self.gemm)],
                                     "SplitKey": [f"{k}\t{a}\t{s}\t{o}" for k, a, s, o in sorted(self.split)]}
        for n, t in self.terms.items():
            fields = [str(n)]
            for a in t[1:]:
                fields.append(float_literal(a) if isinstance(a, float) else str(a))
            out.setdefault("Row" + t[0], []).append("\t".join(fields))
        return out


def _full_contiguous(graph: Graph, src: int, view: ShapeTracker) -> bool:
    if not view.is_contiguous():
        return False
    src_dims = graph.nodes[src].dims
    n_src = ShapeTracker.contiguous_of(src_dims).n_elements()
    return view.n_elements() == n_src


def encode(graph: Graph, order: list[int] | None = None, split: bool = False) -> Encoding:
    """Encode every node of ``graph`` (in topological order) as egglog commands. ``split``: also offer the
    ``split-*`` rules a two-stage form of each long reduction with few outputs (:func:`split_choice`; for a
    backend whose cost model prices parallelism, the GPU's)."""
    enc = Encoding([], [], set(), set(), {}, {})
    order = list(graph.toposort()) if order is None else order
    nums: dict[int, tuple[str, float]] = {}  # node id -> (dtype, value) when the node is a Num
    # constants a Num cannot hold (inf, NaN, -0.0, huge integers): one opaque Leaf per (dtype, dims, value), so
    # equal ones share an e-class and whatever reads them is shared too (every layer's `where(pad, -inf, 0)`)
    opaque: dict[tuple, int] = {}

    full_cache: dict = {}

    def key_of(src: int, view: ShapeTracker) -> int:
        probe = (view, graph.nodes[src].dims)
        full = full_cache.get(probe)
        if full is None:
            full = full_cache[probe] = _full_contiguous(graph, src, view)
        return intern(view, full)

    def intern(view: ShapeTracker, full: bool) -> int:
        k = enc.view_keys.get((view, full))
        if k is None:
            k = len(enc.views)
            enc.view_keys[(view, full)] = k
            enc.views.append(view)
            if full:
                enc.contig.add(k)
            if not view.masks:
                enc.nomask.add(k)
            for axis, d in enumerate(view.dims):  # (Extent k axis n) for every axis of constant extent
                if d.is_constant():
                    enc.extent.add((k, axis, d.to_int()))
            dims = tuple(view.dims)
            enc.dims.add((k, enc.dims_ids.setdefault(dims, len(enc.dims_ids))))
        return k

    for dt in DType:
        if dt.is_float:
            enc.lines.append(f'(IsFloat "{dt.value}")')
        else:
            enc.lines.append(f'(IntLike "{dt.value}")')
    for nid in order:
        node = graph.nodes[nid]
        op, d = node.op, node.dtype.value
        ins = node.inputs
        args = [(e.src, key_of(e.src, e.shape)) for e in ins]
        term = None
        if isinstance(op, ops.Constant):
            v = num_value(op.value, node.dtype)
            if v is not None:
                term = ("Num", d, v)
                nums[nid] = (d, v)
            elif not isinstance(op.value, Expression):
                term = ("Leaf", opaque.setdefault((d, tuple(node.dims), _bits(op.value)), nid), d)
        elif isinstance(op, _FOLDABLE) and ins and all(e.src in nums and not e.shape.masks for e in ins) and \
                (type(op), d) not in _EGGLOG_FOLDS:
            value = _fold(op, [nums[e.src] for e in ins], node.dtype)
            if value is not None:
                term = ("Num", node.dtype.value, value)
                nums[nid] = (node.dtype.value, value)
                enc.folded[nid] = value
        if term is None:
            t = type(op)
            if t in UNARY:
                term = (UNARY[t], d, *args[0])
            elif t in BINARY:
                dd = graph.nodes[ins[0].src].dtype.value
                term = (BINARY[t], dd, *args[0], *args[1])
            elif t in REDUCE:
                term = (REDUCE[t], d, op.axis, *args[0])
                v = enc.views[args[0][1]]  # the key of the row-major read of the reduction's result
                reduced = ShapeTracker.contiguous_of(tuple(v.dims[:op.axis]) + tuple(v.dims[op.axis + 1:]))
                reduced_key = intern(reduced, True)
                enc.reduced.add((args[0][1], op.axis, reduced_key))
                inner = split_choice(v, op.axis) if split else None
                if inner is not None:  # (SplitKey v a s o): the axis split into (n / inner, inner), see split_choice
                    sv = v.split_dims(op.axis, inner)
                    s_key = key_of(ins[0].src, sv)
                    partial = ShapeTracker.contiguous_of(tuple(sv.dims[:op.axis + 1]) + tuple(sv.dims[op.axis + 2:]))
                    o_key = intern(partial, True)
                    enc.reduced.add((s_key, op.axis + 1, o_key))
                    enc.reduced.add((o_key, op.axis, reduced_key))
                    enc.split.add((args[0][1], op.axis, s_key, o_key))
                mul = graph.nodes[ins[0].src]
                if t is ops.SumReduce and isinstance(mul.op, ops.Mul) and node.dtype in (DType.float32, DType.float64) \
                        and enc.terms.get(ins[0].src, ("Leaf",))[0] == "Mul":
                    _gemm_fact(enc, graph, mul, args[0][1], op.axis, ins[0].shape)
            elif t is ops.Bitwise:
                term = ("Bit", d, op.kind, *args[0], *args[1])
            elif t is ops.Cast:
                term = ("Cast", op.dtype.value, *args[0])
            elif t is ops.BitCast:
                term = ("BitCast", op.dtype.value, *args[0])
            elif t is ops.Gather:
                term = ("Gather", d, op.axis, *args[0], *args[1])
            elif t is ops.ScatterAdd:  # no rules rewrite it; its operands are still rewritten and shared
                term = ("Scatter", d, nid, *args[0], *args[1])
            else:  # Input, Iota, symbolic or special constants, anything unknown: an opaque leaf
                term = ("Leaf", nid, d)
        enc.terms[nid] = term
    from .alternatives import offered  # the alternatives a front end offered: the same value (alternatives.py)
    enc.offered = offered(graph)
    for a, b, _ in enc.offered:
        enc.lines.append(f"(union (Node {a}) (Node {b}))")
    return enc


SPLIT_MIN_EXTENT = 8192   # a reduced axis at least this long may be split (split_choice)
SPLIT_ROWS = 4096         # outputs that fill a GPU (the cost model's PARALLEL_ROWS; a split's first stage aims here)
SPLIT_BELOW = (128, 1024)  # outputs below which a split is offered: a contiguous row's reduction, a strided one's
SPLIT_INNER = (256, 4096)  # the inner extent of a split: a divisor of the extent in this range


def split_choice(view: ShapeTracker, axis: int) -> int | None:
    """The inner extent ``q`` of the two-stage form of a reduction over ``axis`` of ``view`` (``sum_a x`` as
    ``sum_p (sum_q x split (p, q))``), or None when none is offered.

    Offered when the reduced extent ``n`` is a constant of at least :data:`SPLIT_MIN_EXTENT` and the reduction has
    a constant number ``r`` of outputs below :data:`SPLIT_BELOW`: then a GPU runs it on few programs, each looping
    over a long row (the Triton renderer gives a long contiguous row 2 programs' rows and a strided reduction 8,
    so 128 rows of the first kind already make 64 programs; a softmax over a vocabulary with a few hundred rows
    stays one looping row group). ``q`` is the largest divisor of ``n`` in :data:`SPLIT_INNER` that still gives the
    first stage at least ``SPLIT_ROWS`` outputs (``r * n / q``), else the smallest divisor in that range; None if
    ``n`` has no divisor there (a prime extent)."""
    n = view.dims[axis]
    if not n.is_constant() or n.to_int() < SPLIT_MIN_EXTENT:
        return None
    rows = 1
    for j, d in enumerate(view.dims):
        if j != axis:
            if not d.is_constant():
                return None
            rows *= d.to_int()
    n = n.to_int()
    contiguous = view.strides[axis] == 1
    if rows >= SPLIT_BELOW[0 if contiguous else 1] or rows == 0:
        return None
    lo, hi = SPLIT_INNER
    divisors = [q for q in range(lo, min(hi, n // 2) + 1) if n % q == 0]
    if not divisors:
        return None
    fits = [q for q in divisors if rows * (n // q) >= SPLIT_ROWS]
    return max(fits) if fits else min(divisors)


def _gemm_fact(enc: Encoding, graph: Graph, mul, sum_key: int, axis: int, sum_view: ShapeTracker) -> None:
    """(GemmKey ...) for a sum of a product that the CPU backend runs as a matrix product, in both operand orders
    (``mul-comm`` makes both)."""
    from ...codegen.kernel import gemm_views

    x, y = mul.inputs
    if gemm_views(sum_view, axis, mul.dims, x.shape, y.shape) is None:
        return
    kx = enc.view_keys[(x.shape, _full_contiguous(graph, x.src, x.shape))]
    ky = enc.view_keys[(y.shape, _full_contiguous(graph, y.src, y.shape))]
    enc.gemm.add((sum_key, axis, kx, ky))
    enc.gemm.add((sum_key, axis, ky, kx))


def _fold(op, values, dtype: DType):
    arrays = [np.asarray(v, dtype=np.dtype(DType(d).numpy)) for d, v in values]
    try:
        with np.errstate(all="ignore"):
            result = op.reference(arrays, {}, ())
    except (ZeroDivisionError, FloatingPointError, TypeError, ValueError):
        return None
    value = np.asarray(result, dtype=dtype.numpy).reshape(-1)[0].item()
    return num_value(value, dtype)


# positions of child (node id) arguments per constructor; the others are literals
CHILD_SLOTS = {"Log2": (1,), "Exp2": (1,), "Sin": (1,), "Sqrt": (1,), "Recip": (1,), "Copy": (1,), "Break": (1,),
               "Cast": (1,), "BitCast": (1,), "Add": (1, 3), "Mul": (1, 3), "Mod": (1, 3), "Less": (1, 3), "Bit": (2, 4), "Sum": (2,), "Max": (2,),
               "Gather": (2, 4), "Scatter": (2, 4), "MatMul": (2, 4), "Num": (), "Leaf": (), "Node": ()}
# positions of view-key arguments (the slot right after each child)
VIEW_SLOTS = {name: tuple(s + 1 for s in slots) for name, slots in CHILD_SLOTS.items()}


def term_text(term: tuple) -> str:
    name = term[0]
    parts = [name]
    children = CHILD_SLOTS[name]
    for i, a in enumerate(term[1:]):
        if i in children:
            parts.append(f"(Node {a})")
        elif isinstance(a, str):
            parts.append(f'"{a}"')
        elif isinstance(a, float):
            parts.append(float_literal(a))
        else:
            parts.append(str(int(a)))
    return "(" + " ".join(parts) + ")"


def loader_program(datatype_form, rows: dict[str, list[str]], folder: str) -> str:
    """egglog commands that load ``rows`` (already written as ``folder/<relation>.tsv``): one row relation per
    constructor of the ``Expr`` datatype and one ``load`` rule that unions each row's term with its node."""
    lines = ["(ruleset load)"]
    for ctor in datatype_form[2:]:
        name, types = str(ctor[0]), [str(t) for t in ctor[1:]]
        if name == "Node":
            continue
        row_types = ["i64"] + ["i64" if t == "Expr" else t for t in types]
        vars_ = [f"a{i}" for i in range(len(types))]
        args = " ".join(f"(Node {v})" if t == "Expr" else v for v, t in zip(vars_, types))
        lines.append(f"(relation Row{name} ({' '.join(row_types)}))")
        lines.append(f"(rule ((Row{name} n {' '.join(vars_)})) ((union (Node n) ({name} {args})) "
                     f"(delete (Row{name} n {' '.join(vars_)}))) :ruleset load :name \"load-{name}\")")
    for rel in sorted(rows):
        if rows[rel]:
            path = os.path.join(folder, rel + ".tsv")
            lines.append(f'(input {rel} "{path}")')
    lines.append("(run load 1)")
    return "\n".join(lines)


def write_rows(rows: dict[str, list[str]], folder: str) -> None:
    for rel, lines in rows.items():
        if lines:
            with open(os.path.join(folder, rel + ".tsv"), "w") as f:
                f.write("\n".join(lines) + "\n")
