"""Every rule of every rule file (luminal/compiler/rules/*.egg) is checked sound on random inputs.

For a ``rewrite``, both sides are instantiated as luminal graphs (pattern variables become random input
tensors, view variables random views: row-major (also over a reshaped buffer: flattened or with a unit axis),
flipped, broadcast, padded; constant variables random constants) and evaluated by the reference interpreter; the
two root buffers (row-major, flat) must agree within the rule's stated ``;; tolerance:`` (default exact: same
bits up to NaN payload, NaN positions equal, signed zeros equal). For an analysis ``rule`` deriving
``(NonNeg ?e)``, the pattern is evaluated and no element may be < 0.
Inputs mix special values (0, -0.0, +-inf, NaN, denormals, the largest and smallest normals; integer
minimum/maximum) with random ones, over several shapes (rank 0 to 2) including a symbolic dimension bound at
execute time. ``Sum``/``Max`` reduce a drawn axis of a drawn extent (0, 1, small, symbolic) of their operand;
``Cast`` operands get any dtype of DTYPES, ``BitCast`` operands any of the target's width; ``Gather`` indices are int32/int64 in range of the gathered axis.
``:when`` conditions are honoured (Contig/NoMask pick the views, NonNeg the inputs, Extent facts and comparisons
are satisfied by rejection sampling; a GemmKey's operands are read as matrices: each broadcast along the other's
output axis, stored in a random axis order, i.e. transposed, and luminal.codegen.kernel.gemm_views must agree; a
SplitKey's reduction gets an extent with divisors (SPLIT_EXTENTS), split at a random divisor);
``;; domain:`` restricts the inputs of approximate rules; ``;; tolerance: reorder`` (the same terms summed in
another order) is checked against ``2 n eps sum|terms|`` per output (:func:`_reorder_bound`). A rule the
harness cannot instantiate at least a few times fails.
"""

from __future__ import annotations

import functools
import operator

import numpy as np
import pytest

from luminal import ops
from luminal.ops import GraphError
from luminal.dtype import DType
from luminal.graph import Graph
from luminal.shape import ShapeTracker
from luminal.shape.expression import to_expr
from luminal.compiler.egraph.encode import CHILD_SLOTS
from luminal.compiler.egraph.match import dtype_fact, eval_prim, is_var
from luminal.compiler.egraph.sexpr import Str, Symbol, load_file, load_rules, rule_files, to_text
from luminal.compiler.rewrite import scalar_view
from luminal.codegen.kernel import find_gemm, gemm_views

PRELUDE, RULES = load_rules()
DTYPES = [DType.float32, DType.float64, DType.float16, DType.int32, DType.int64, DType.bool]
SHAPES = [((7,), {}), ((3, 5), {}), (("n", 4), {"n": 5}), (("n", 3), {"n": 1}), ((), {})]
TRIALS = 3
UNARY = {"Log2": ops.Log2, "Exp2": ops.Exp2, "Sin": ops.Sin, "Sqrt": ops.Sqrt, "Recip": ops.Recip,
         "Copy": ops.Contiguous, "Break": ops.GraphBreak}
BINARY = {"Add": ops.Add, "Mul": ops.Mul, "Mod": ops.Mod, "Less": ops.LessThan}
REDUCE = {"Sum": ops.SumReduce, "Max": ops.MaxReduce}
FAMILIES = ("contig", "flip", "bcast", "pad")
EXTENTS = (1, 1, 2, 3, 4, 37, "n", 0)  # of a reduced axis ("n": symbolic, so no Extent fact; 37: rounding adds up)
SPLIT_EXTENTS = (4, 6, 12, 36)  # of a reduced axis a SplitKey fact splits (a constant with divisors in [2, n/2])


class CannotInstantiate(Exception):
    pass


# ------------------------------------------------------------------------------------------ values
def float_specials(dt: np.dtype) -> list[float]:
    fi = np.finfo(dt)
    sub = float(fi.smallest_subnormal)
    return [0.0, -0.0, np.inf, -np.inf, np.nan, sub, -sub, 3 * sub, float(fi.tiny), -float(fi.tiny),
            float(fi.max), -float(fi.max), 1.0, -1.0, 0.5, 2.0]


def in_domain(domain: str, dt: np.dtype, v: np.ndarray) -> np.ndarray:
    """Mask of the values an approximate rule promises to handle."""
    if not domain:
        return np.ones(v.shape, bool)
    fi = np.finfo(dt)
    a = np.abs(v.astype(np.float64))
    special = (a == 0) | np.isinf(a) | np.isnan(a)
    if domain == "recip-safe":  # x and 1/x both normal
        return special | ((a >= 2 * float(fi.tiny)) & (a <= 1 / (2 * float(fi.tiny))))
    if domain == "exp2-safe":  # 2^x neither overflows nor leaves the normal range
        lim = min(np.log2(float(fi.max)), -np.log2(float(fi.tiny))) - 1
        return special | (a <= lim)
    if domain == "below-max":  # |x| <= max/4: rounding in between cannot overflow
        return special | (a <= float(fi.max) / 4)
    if domain == "sum-safe":  # no partial sum of the harness's reductions (at most 1024 terms) can overflow
        return special | (a <= float(fi.max) / 1024)
    raise AssertionError(f"unknown domain {domain!r} (the harness knows recip-safe, exp2-safe, below-max, sum-safe)")


def random_data(rng, dtype: DType, shape, nonneg: bool, domain: str) -> np.ndarray:
    dt = dtype.numpy
    n = int(np.prod(shape)) if shape else 1
    if dtype == DType.bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        info = np.iinfo(dt)
        specials = [0, 1, -1, int(info.min), int(info.max), int(info.min) + 1, int(info.max) - 1]
        vals = rng.integers(-1000, 1000, n).astype(np.int64)
        pick = rng.random(n) < 0.4
        vals[pick] = rng.choice(np.array(specials, dtype=np.int64), pick.sum())
        if nonneg:
            vals = np.where(vals < 0, -(vals + 1), vals)
        return vals.astype(dt).reshape(shape)
    specials = np.array(float_specials(dt), dtype=np.float64)
    vals = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)
    pick = rng.random(n) < 0.45
    vals[pick] = rng.choice(specials, pick.sum())
    with np.errstate(all="ignore"):
        vals = vals.astype(dt)
    if nonneg:
        vals = np.where(vals < 0, -vals, vals).astype(dt)
        if n > 1:
            vals[rng.integers(0, n)] = -0.0  # NonNeg allows -0.0
    ok = in_domain(domain, dt, vals)
    while not ok.all():
        repl = (rng.standard_normal(n) * 2.0).astype(dt)
        if nonneg:
            repl = np.abs(repl)
        vals = np.where(ok, vals, repl)
        ok = in_domain(domain, dt, vals)
    return vals.reshape(shape)


def random_literal(rng, dtype: DType) -> float:
    if dtype == DType.bool:
        return float(rng.integers(0, 2))
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        pool = [0, 1, -1, 2, 7, -100, 46341, 65536, int(info.max), int(info.min), int(info.max) // 2,
                2 ** 26, -(2 ** 27), 3 * 10 ** 9, 2 ** 40]
        pool = [v for v in pool if info.min <= v <= info.max and abs(v) < 2 ** 53]
        return float(pool[rng.integers(0, len(pool))])
    pool = [0.0, 1.0, -1.0, 2.0, 0.5, -3.25, 1e3, -1e-3, 1e30, 1e300, -2.5e-310, 7.0, 0.1]
    with np.errstate(all="ignore"):
        v = float(np.asarray(pool[rng.integers(0, len(pool))]).astype(dtype.numpy))
    return v if np.isfinite(v) and not (v == 0 and np.signbit(v)) else 1.0


def representable(value: float, dtype: DType) -> bool:
    if dtype.is_float:
        return True  # a folded constant may overflow to inf, exactly as the reference does
    if not np.isfinite(value):
        return False
    if dtype == DType.bool:
        return value in (0.0, 1.0)
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        return float(value).is_integer() and info.min <= value <= info.max
    return True


def constant_value(value: float, dtype: DType):
    return bool(value) if dtype == DType.bool else int(value) if dtype.is_int else float(value)


# ------------------------------------------------------------------------------------------ views
def _count(dims, binding) -> int:
    return int(np.prod([to_expr(d).evaluate(binding) for d in dims], dtype=np.int64)) if dims else 1


def _concrete(dims, binding) -> tuple[int, ...]:
    return tuple(to_expr(d).evaluate(binding) for d in dims)


class View:
    """A view variable's choice: the tracker, the dims of the buffer it reads (``()`` for a constant) and whether
    it was chosen over a constant."""

    def __init__(self, tracker: ShapeTracker, src: tuple, over_constant: bool, family: str):
        self.tracker, self.src, self.over_constant, self.family = tracker, src, over_constant, family

    def __repr__(self) -> str:
        return f"{self.family}{list(self.src)}->{self.tracker}"


def _axes(dims, low: int, symbolic: bool) -> list[int]:
    """Axes a view family can act on: constant extent >= ``low`` (or symbolic when allowed)."""
    return [i for i, d in enumerate(dims)
            if (d.is_constant() and d.to_int() >= low) or (symbolic and not d.is_constant())]


def _reshapes(rng, dims) -> tuple:
    """Source dims of a whole row-major view of ``dims`` over a buffer of another shape: flattened or with a unit
    axis inserted (the loader's ``Contig`` holds for both: reduction rules must not confuse them)."""
    options = []
    if len(dims) >= 2:
        options.append((functools.reduce(operator.mul, dims),))
    pos = int(rng.integers(0, len(dims) + 1))
    options.append(dims[:pos] + (to_expr(1),) + dims[pos:])
    return options[int(rng.integers(0, len(options)))]


def choose_view(rng, fams: list[str], dims: tuple, over_constant: bool, hint) -> View:
    """A random view of logical ``dims`` from the allowed families. ``hint``: the dims of the buffer it must read
    (a variable already placed), else the harness picks them (the dims themselves, or a reshape for ``contig``)."""
    if over_constant:
        if dims:
            fams = [f for f in fams if f != "contig"]  # a scalar is read broadcast (or padded)
        pad_axes = _axes(dims, 1, False)
        if not pad_axes:
            fams = [f for f in fams if f != "pad"]
        if not fams:
            raise Reject("a constant read through a whole row-major view")
        fam = fams[int(rng.integers(0, len(fams)))]
        if fam == "pad":
            ax = pad_axes[int(rng.integers(0, len(pad_axes)))]
            inner = dims[:ax] + (dims[ax] - 1,) + dims[ax + 1:]
            return View(ShapeTracker.fake(inner).pad(ax, 0, 1), (), True, fam)
        return View(ShapeTracker.fake(dims), (), True, "bcast" if dims else "contig")
    base = ShapeTracker.contiguous_of(dims)
    if hint is not None and tuple(hint) != tuple(dims):
        return View(base, tuple(hint), False, "reshape")  # the caller checked the element counts
    usable = {"contig": [0], "flip": _axes(dims, 2, True), "bcast": _axes(dims, 2, True), "pad": _axes(dims, 1, False)}
    fams = [f for f in fams if usable[f]]
    fam = fams[int(rng.integers(0, len(fams)))]
    if fam == "contig":
        if hint is None and rng.random() < 1 / 3:
            return View(base, _reshapes(rng, dims), False, "reshape")
        return View(base, dims, False, fam)
    ax = usable[fam][int(rng.integers(0, len(usable[fam])))]
    if fam == "flip":
        tracker = base.flip(ax)
    elif fam == "bcast":
        tracker = base.slice(ax, 0, 1).expand(ax, dims[ax])
    else:
        tracker = base.slice(ax, 0, dims[ax] - 1).pad(ax, 0, 1)
    return View(tracker, dims, False, fam)


def gemm_view(rng, dims: tuple, b: int) -> View:
    """A matrix operand of a product of logical ``dims``: broadcast along axis ``b`` (the other operand's output
    axis), its buffer stored in a random axis order (a transposed read)."""
    order = [int(i) for i in rng.permutation(len(dims))]
    stored = tuple(dims[i] for i in order)
    tracker = ShapeTracker.contiguous_of(stored).permute([int(i) for i in np.argsort(order)])
    return View(tracker.slice(b, 0, 1).expand(b, dims[b]), stored, False, "gemm")


# ------------------------------------------------------------------------------------------ instantiation
class Reject(Exception):
    """This attempt's random choices do not satisfy the rule (its conditions or its shapes): try another."""


def _vars(expr) -> set:
    if isinstance(expr, list):
        return {v for e in expr for v in _vars(e)}
    return {expr} if is_var(expr) else set()


class Instance:
    """One instantiation of a rule: literal bindings, a dtype per tensor variable, dims per term (top-down from the
    root), a view per view variable; then a graph holding both sides.

    Typing: a constructor's first argument is its dtype (operand dtype for Add/Mul/Mod/Less, target for Cast); the
    root's is the dtype under test, other dtype variables are drawn from DTYPES, a tensor variable takes the dtype
    its consumers require (a Cast's operand is free: drawn from DTYPES; a Gather's index is int32 or int64).
    Shapes: the left-hand side is laid out top-down from the root dims: an elementwise op's operands are read at its
    dims, a Sum/Max's operand has one more axis (at the axis variable, drawn; extent drawn from EXTENTS, 0 and 1
    included), a Gather's data has the index dims with the gathered axis resized. The right-hand side reuses these
    choices and is built bottom-up as the rebuild would (a constant read through any key is read as a scalar).
    """

    def __init__(self, rule, dtype: DType, dims, binding, rng, conditions):
        self.rule, self.dtype, self.rng = rule, dtype, rng
        self.binding = dict(binding)
        self.root_dims = tuple(to_expr(d) for d in dims)
        self.env: dict = {}
        self.contig, self.nomask, self.nonneg, self.facts = set(), set(), set(), []
        for c in conditions:
            head = c[0]
            if head in ("Contig", "NoMask", "NonNeg"):
                {"Contig": self.contig, "NoMask": self.nomask, "NonNeg": self.nonneg}[head].add(c[1])
            else:
                self.facts.append(c)
        self.views: dict = {}  # view variable -> View
        self.tdims: dict = {}  # tensor variable -> dims
        self.tdtype: dict = {}  # tensor variable -> DType
        self.index_hi: dict = {}  # tensor variable read as a Gather index -> exclusive bound of its values
        self.nonzero: set = set()  # tensor variables read as a Mod divisor (integer zeros become 1)
        self.gemm_bcast: dict = {}  # view variable of a GemmKey operand -> the product axis it broadcasts
        self.inputs: dict = {}
        self.graph: Graph | None = None

    # ---------------------------------------------------------------- literals and dtypes
    def literal(self, pat, kind: str, dtype: DType | None = None):
        if is_var(pat):
            if pat not in self.env:
                if kind == "dtype":
                    self.env[pat] = DTYPES[int(self.rng.integers(0, len(DTYPES)))].value
                elif kind == "value":
                    self.env[pat] = random_literal(self.rng, dtype or self.dtype)
                else:
                    raise CannotInstantiate(f"the harness cannot choose a value for {pat} ({kind})")
            return self.env[pat]
        if isinstance(pat, list):
            return eval_prim(pat, self.env)
        return str(pat) if isinstance(pat, Str) else pat

    def dtype_of(self, pat) -> DType:
        """The dtype of the buffer a term computes."""
        if is_var(pat):
            return self.tdtype[pat]
        if pat[0] == "Less":
            return DType.bool
        return DType(self.literal(pat[1], "dtype"))

    def bind_literals(self, pattern, rhs) -> None:
        """Bind the dtype and constant variables (axes and extents come with the shapes) and type the tensor
        variables over both sides."""
        root = pattern[1]
        if is_var(root):
            self.env[root] = self.dtype.value
        elif str(root) != self.dtype.value:
            raise CannotInstantiate("the rule's root has another dtype")
        self._bind(pattern)
        wants: dict = {}
        for side in (pattern, rhs):
            self._collect(side, wants)
        for var, ws in wants.items():
            widths = {w[1] for w in ws if isinstance(w, tuple)}  # ("bits", n): a BitCast operand
            fixed = {w for w in ws if w not in (None, "index") and not isinstance(w, tuple)}
            if len(fixed) > 1 or len(widths) > 1:
                raise Reject(f"{var} would need dtypes {sorted(fixed)} / widths {sorted(widths)}")
            if fixed:
                dt = DType(fixed.pop())
                if "index" in ws and dt not in (DType.int32, DType.int64):
                    raise Reject(f"{var} is a Gather index of dtype {dt}")
                if widths and dt.bits not in widths:
                    raise Reject(f"{var} is a BitCast operand of {dt.bits} bits, not {widths}")
            elif widths:
                same = [d for d in DTYPES if d.bits in widths and d != DType.bool]
                if not same:
                    raise CannotInstantiate(f"no dtype of {widths} bits to bit cast")
                dt = same[int(self.rng.integers(0, len(same)))]
            elif "index" in ws:
                dt = (DType.int32, DType.int64)[int(self.rng.integers(0, 2))]
            else:
                dt = DTYPES[int(self.rng.integers(0, len(DTYPES)))]
            self.tdtype[var] = dt

    def _bind(self, pat) -> None:
        if not isinstance(pat, list):
            return
        if pat[0] in CHILD_SLOTS and pat[0] not in ("Leaf", "Node"):
            self.literal(pat[1], "dtype")
        if pat[0] == "Num" and not isinstance(pat[2], list):
            self.literal(pat[2], "value", DType(self.literal(pat[1], "dtype")))
        for p in pat[1:]:
            self._bind(p)

    def operand_dtype(self, pat, slot: int):
        """What a term requires of the operand in ``slot`` (a dtype value; ``None``: anything; ``"index"``)."""
        head = pat[0]
        if head == "Cast":
            return None
        if head == "BitCast":  # any dtype of the target's width
            return ("bits", DType(self.literal(pat[1], "dtype")).bits)
        if head == "Gather" and slot == 4:
            return "index"
        return self.literal(pat[1], "dtype")

    def _collect(self, pat, wants: dict) -> None:
        if not isinstance(pat, list) or pat[0] not in CHILD_SLOTS:
            return
        for slot in CHILD_SLOTS[pat[0]]:
            child = pat[slot + 1]
            if is_var(child):
                wants.setdefault(child, set()).add(self.operand_dtype(pat, slot))
            else:
                self._collect(child, wants)

    # ---------------------------------------------------------------- facts
    def facts_hold(self, final: bool) -> bool:
        """Check the conditions that are bound (all of them when ``final``; Extent facts bind their extent)."""
        for c in sorted(self.facts, key=lambda c: ("Extent", "Dims", "ReducedKey").index(c[0])
                        if c[0] in ("Extent", "Dims", "ReducedKey") else 3):
            head = c[0]
            if head in ("Dims", "ReducedKey"):
                if not final:
                    continue
                view = self.views.get(c[1])
                if view is None:
                    raise CannotInstantiate(f"{head} of {c[1]}, which no operand reads through")
                dims = tuple(view.tracker.dims)
                if head == "Dims":  # the loader interns dims tuples: equal ids <=> equal (symbolic) dims
                    if is_var(c[2]) and c[2] not in self.env:
                        self.env[c[2]] = dims
                    elif self.env.get(c[2]) != dims:
                        return False
                    continue
                a = self.literal(c[2], "axis")  # (ReducedKey v a k): k reads the reduced dims row-major, whole
                reduced = dims[:a] + dims[a + 1:]
                if c[3] in self.views:
                    raise CannotInstantiate(f"the left-hand side reads through the reduced key {c[3]}")
                self.views[c[3]] = View(ShapeTracker.contiguous_of(reduced), reduced, False, "reduced")
                continue
            if head == "GemmKey":  # asserted by the loader for float32/float64 sums of products only
                if self.dtype not in (DType.float32, DType.float64):
                    raise CannotInstantiate(f"GemmKey is never asserted for {self.dtype}")
                if not final:
                    continue
                vs, vx, vy = (self.views.get(c[i]) for i in (1, 3, 4))
                if vs is None or vx is None or vy is None:
                    raise CannotInstantiate(f"{to_text(c)} names a key no operand reads through")
                if gemm_views(vs.tracker, self.literal(c[2], "axis"), vx.tracker.dims, vx.tracker,
                              vy.tracker) is None:
                    return False
                continue
            if head == "SplitKey":  # (SplitKey v a s o): s is v with axis a split, o the read of s summed over a+1
                if not final:
                    continue
                view = self.views.get(c[1])
                if view is None:
                    raise CannotInstantiate(f"SplitKey of {c[1]}, which no operand reads through")
                if c[3] in self.views or c[4] in self.views:
                    raise CannotInstantiate(f"the left-hand side reads through the split keys {c[3]} / {c[4]}")
                a = self.literal(c[2], "axis")
                d = view.tracker.dims[a]
                if not d.is_constant():  # the loader splits constant extents only
                    return False
                n = d.to_int()
                divisors = [q for q in range(2, n // 2 + 1) if n % q == 0]
                if not divisors:
                    return False
                split = view.tracker.split_dims(a, divisors[int(self.rng.integers(0, len(divisors)))])
                partial = tuple(split.dims[:a + 1]) + tuple(split.dims[a + 2:])
                self.views[c[3]] = View(split, view.src, False, "split")
                self.views[c[4]] = View(ShapeTracker.contiguous_of(partial), partial, False, "reduced")
                continue
            if head == "Extent":
                if not final:
                    continue
                view = self.views.get(c[1])
                if view is None:
                    raise CannotInstantiate(f"Extent of {c[1]}, which no operand reads through")
                d = view.tracker.dims[self.literal(c[2], "axis")]
                if not d.is_constant():  # the loader asserts no Extent for a symbolic extent
                    return False
                if is_var(c[3]) and c[3] not in self.env:
                    self.env[c[3]] = d.to_int()
                elif self.literal(c[3], "extent") != d.to_int():
                    return False
                continue
            if not final and not _vars(c[1:]) <= self.env.keys():
                continue
            if head in ("IsFloat", "IntLike"):
                ok = dtype_fact(head, self.literal(c[1], "dtype"))
            else:
                try:
                    ok = eval_prim(c, self.env)
                except KeyError as err:
                    raise CannotInstantiate(f"condition {c} uses an unbound variable {err}") from None
            if not ok:
                return False
        return True

    # ---------------------------------------------------------------- shapes (left-hand side, top-down)
    def axis(self, pat, candidates: list[int]) -> int:
        if is_var(pat) and pat not in self.env:
            if not candidates:
                raise Reject("no axis fits")
            self.env[pat] = candidates[int(self.rng.integers(0, len(candidates)))]
        a = self.literal(pat, "axis")
        if a not in candidates:
            raise Reject(f"axis {a} does not fit")
        return a

    def extent(self):
        k = EXTENTS[int(self.rng.integers(0, len(EXTENTS)))]
        if k == "n" and "n" not in self.binding:
            self.binding["n"] = int(self.rng.integers(1, 5))
        return to_expr(k)

    def plan(self, pat, want: tuple) -> None:
        """Lay out ``pat`` so that it computes a buffer of dims ``want``."""
        if is_var(pat):
            have = self.tdims.setdefault(pat, want)
            if _count(have, self.binding) != _count(want, self.binding):
                raise Reject(f"{pat} is read as {want} and as {have}")
            return
        if not isinstance(pat, list):
            raise CannotInstantiate(f"unsupported pattern atom {pat!r}")
        head = pat[0]
        if head == "Num":
            return
        if head in UNARY or head in BINARY or head in ("Cast", "BitCast"):
            for slot in CHILD_SLOTS[head]:
                self.operand(pat, slot, want)
            if head == "Mod":  # an integer divisor must not be 0 (the reference raises; padding still reads 0)
                divisor = pat[3]
                while isinstance(divisor, list) and divisor[0] in ("Copy", "Break"):
                    divisor = divisor[2]
                if is_var(divisor):
                    self.nonzero.add(divisor)
        elif head in REDUCE:
            view = self.views.get(pat[4])
            if view is not None:
                d = view.tracker.dims
                a = self.axis(pat[2], [a for a in range(len(d)) if d[:a] + d[a + 1:] == want])
            else:
                a = self.axis(pat[2], list(range(len(want) + 1)))
                if any(c[0] == "SplitKey" and c[1] == pat[4] for c in self.facts):  # an extent with divisors
                    extent = to_expr(SPLIT_EXTENTS[int(self.rng.integers(0, len(SPLIT_EXTENTS)))])
                else:
                    extent = self.extent()
                d = want[:a] + (extent,) + want[a:]
            rest = [j for j in range(len(d)) if j != a]
            for c in self.facts:  # a GemmKey on this sum: its operands are read as matrices (see gemm_view)
                if c[0] == "GemmKey" and c[1] == pat[4] and len(rest) >= 2 and pat[4] not in self.views:
                    self.views[pat[4]] = View(ShapeTracker.contiguous_of(d), d, False, "contig")
                    self.gemm_bcast[c[3]], self.gemm_bcast[c[4]] = rest[-1], rest[-2]
            self.operand(pat, 2, d)
        elif head == "Gather":
            if not want:
                raise CannotInstantiate("a Gather needs at least one axis")
            a = self.axis(pat[2], list(range(len(want))))
            sizes = [1, 2, 3, 4] + ([want[a]] if _count(want[a:a + 1], self.binding) > 0 else [])
            m = to_expr(sizes[int(self.rng.integers(0, len(sizes)))])
            self.operand(pat, 2, want[:a] + (m,) + want[a + 1:])
            self.operand(pat, 4, want)
            index = pat[5]
            while isinstance(index, list) and index[0] in ("Copy", "Break"):  # the same values, another layout
                index = index[2]
            if is_var(index):
                hi = _count((m,), self.binding)
                self.index_hi[index] = min(hi, self.index_hi.get(index, hi))
        else:
            raise CannotInstantiate(f"the harness does not know how to instantiate {head}")

    def operand(self, pat, slot: int, dims: tuple) -> None:
        """Choose (or check) the view through which ``pat`` reads its operand ``slot`` at ``dims``; lay it out."""
        child, var = pat[slot + 1], pat[slot + 2]
        const = isinstance(child, list) and child[0] == "Num"
        need = self.operand_dtype(pat, slot)
        if isinstance(child, list) and isinstance(need, tuple):  # a BitCast operand: any dtype of that width
            if self.dtype_of(child).bits != need[1] or self.dtype_of(child) == DType.bool:
                raise Reject(f"{to_text(child)} is not of {need[1]} bits")
        elif isinstance(child, list) and need not in (None, "index") and self.dtype_of(child).value != need:
            raise Reject(f"{to_text(child)} is not {need}")
        view = self.views.get(var)
        if view is None:
            hint = self.tdims.get(child) if is_var(child) else None
            if hint is not None and _count(hint, self.binding) != _count(dims, self.binding):
                raise Reject(f"{child} cannot be read at {dims}")
            if var in self.gemm_bcast and not const and hint is None:
                view = self.views[var] = gemm_view(self.rng, dims, self.gemm_bcast[var])
                self.plan(child, view.src)
                return
            if var in self.contig:
                fams = ["contig"]
            elif var in self.nomask:
                fams = ["contig", "flip", "bcast"]
            else:
                fams = list(FAMILIES)
            view = self.views[var] = choose_view(self.rng, fams, dims, const, hint)
        elif view.tracker.dims != tuple(dims) or view.over_constant != const:
            raise Reject(f"{var} is used at two shapes")
        if not const:
            self.plan(child, view.src)

    # ---------------------------------------------------------------- graph (both sides, bottom-up)
    def start_graph(self) -> None:
        self.graph = Graph()
        for name, value in self.binding.items():
            self.graph.set_dim(name, value)

    def build(self, pat) -> tuple[int, tuple, bool]:
        """Add the nodes of ``pat``; returns (node id, dims, is a scalar constant)."""
        g = self.graph
        if is_var(pat):
            if pat not in self.inputs:
                if pat not in self.tdims:
                    raise AssertionError(f"{self.rule.name}: {pat} is not bound by the left-hand side")
                dims, dtype = self.tdims[pat], self.tdtype[pat]
                shape = _concrete(dims, self.binding)
                if pat in self.index_hi:
                    data = self.rng.integers(0, max(self.index_hi[pat], 1), shape).astype(dtype.numpy)
                else:
                    data = random_data(self.rng, dtype, shape, pat in self.nonneg, self.rule.domain)
                    if pat in self.nonzero and not dtype.is_float:
                        data[data == 0] = 1
                t = g.tensor(dims, dtype, name=str(pat)).set(data)
                self.inputs[pat] = (t.id, data)
            return self.inputs[pat][0], self.tdims[pat], False
        head = pat[0]
        if head == "Num":
            dtype = DType(self.literal(pat[1], "dtype"))
            value = self.literal(pat[2], "value", dtype)
            if not representable(value, dtype):
                raise CannotInstantiate(f"{value} is not a {dtype} constant")
            return g.add_op(ops.Constant(constant_value(value, dtype), dtype), (), (), dtype), (), True
        if head not in UNARY and head not in BINARY and head not in REDUCE and \
                head not in ("Cast", "BitCast", "Gather", "MatMul"):
            raise CannotInstantiate(f"the harness does not know how to instantiate {head}")
        inputs = []
        for slot in CHILD_SLOTS[head]:
            nid, dims, scalar = self.build(pat[slot + 1])
            view = self.views[pat[slot + 2]]
            if scalar:  # the rebuild reads a constant through any key as a scalar (stride 0, masks kept)
                tracker = scalar_view(view.tracker)
            else:
                if _count(dims, self.binding) != _count(view.src, self.binding):
                    raise AssertionError(f"{self.rule.name}: view {pat[slot + 2]} reads a buffer of dims {view.src} "
                                         f"on the left but of dims {dims} on the right")
                tracker = view.tracker
            inputs.append((nid, tracker))
        dtype = self.dtype_of(pat)
        first = inputs[0][1].dims
        if head in UNARY:
            op, dims = UNARY[head](), first
        elif head in BINARY:
            op, dims = BINARY[head](), first
        elif head in REDUCE:
            a = self.literal(pat[2], "axis")
            op, dims = REDUCE[head](a), first[:a] + first[a + 1:]
        elif head == "Cast":
            op, dims = ops.Cast(dtype), first
        elif head == "BitCast":
            op, dims = ops.BitCast(dtype), first
        elif head == "MatMul":  # (Sum d a (Mul d x vx y vy) vs), as the rebuild makes it
            mul = g.add_op(ops.Mul(), inputs, first, dtype)
            vs, a = self.views[pat[7]].tracker, self.literal(pat[2], "axis")
            op, inputs, dims = ops.SumReduce(a), [(mul, vs)], vs.dims[:a] + vs.dims[a + 1:]
        else:
            op, dims = ops.Gather(self.literal(pat[2], "axis")), inputs[1][1].dims
        try:
            nid = g.add_op(op, inputs, dims, dtype)
        except TypeError as err:  # an op that does not take this dtype (Log2 on int32, Sum on bool...)
            raise CannotInstantiate(str(err)) from None
        return nid, tuple(dims), False

    def value(self, nid: int) -> np.ndarray:
        return np.asarray(self.graph.tensors[(nid, 0)]).reshape(-1)

    def describe(self) -> str:
        inputs = ", ".join(f"{v}: {self.tdtype[v].value}{list(self.tdims[v])}" for v in self.tdims)
        return f"literals {self.env}, inputs {{{inputs}}}, symbols {self.binding}, views {self.views}"


def _tolerance(text: str, dtype: DType):
    """(kind, rtol, atol) from a ``;; tolerance:`` line (``reorder``: see :func:`_reorder_bound`)."""
    text = text.strip() or "exact"
    if text in ("exact", "signed-zero", "reorder"):
        return text, 0.0, 0.0
    rtol = atol = 0.0
    dt = dtype.numpy
    for part in text.split():
        key, _, val = part.partition("=")
        scale = 1.0
        if dtype.is_float:
            for unit, s in (("eps", float(np.finfo(dt).eps)), ("sub", float(np.finfo(dt).smallest_subnormal))):
                if val.endswith(unit):
                    val, scale = val[: -len(unit)], s
        number = float(val) * scale
        if key == "rtol":
            rtol = number
        elif key == "atol":
            atol = number
        else:
            raise AssertionError(f"unknown tolerance {part!r}")
    return "close", rtol, atol


def _reorder_bound(inst, pattern, dtype: DType) -> np.ndarray:
    """The ``reorder`` tolerance of a rule whose two sides sum the same terms in another order: per output element
    ``2 * n * eps * sum |terms|`` (any summation order of ``n`` terms is within ``(n - 1) * eps / 2 * sum |terms|``
    of the exact sum). The left-hand side must be a reduction of a variable; its terms are that variable read
    through the reduction's view."""
    if not (isinstance(pattern, list) and pattern[0] in REDUCE and is_var(pattern[3])):
        raise AssertionError(f"{inst.rule.name}: the reorder tolerance needs a Sum/Max of a variable at the root")
    a = inst.literal(pattern[2], "axis")
    data = inst.inputs[pattern[3]][1]
    terms = inst.views[pattern[4]].tracker.gather_numpy(np.asarray(data).reshape(-1), inst.binding)
    terms = np.abs(terms.astype(np.float64))
    n = terms.shape[a]
    with np.errstate(all="ignore"):
        bound = (2.0 * n * float(np.finfo(dtype.numpy).eps) * terms.sum(axis=a)).reshape(-1)
    return np.where(np.isfinite(bound), bound, 0.0)  # an infinite term: both sides must give the same inf / NaN


def assert_agree(lhs: np.ndarray, rhs: np.ndarray, rule, dtype: DType, context: str, bound=None) -> None:
    assert lhs.shape == rhs.shape, f"{rule.name}: the two sides have {lhs.size} and {rhs.size} elements"
    kind, rtol, atol = _tolerance(rule.tolerance, dtype)
    if kind == "reorder":
        kind, atol = "close", bound
    if not dtype.is_float:
        assert np.array_equal(lhs, rhs), f"{rule.name} {context}: {lhs} != {rhs}"
        return
    a, b = lhs.astype(np.float64), rhs.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    bad = nan_a != nan_b
    both = ~nan_a & ~nan_b
    if kind == "close":
        with np.errstate(all="ignore"):
            ok = (a == b) | (np.abs(a - b) <= atol + rtol * np.abs(b))
    else:
        ok = a == b
        if kind == "exact":
            ok &= np.signbit(a) == np.signbit(b)
    bad |= both & ~ok
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{rule.name} {context}: element {i}: lhs {lhs[i]!r} vs rhs {rhs[i]!r} "
                             f"(tolerance {rule.tolerance})")


def _rule_parts(rule):
    """(pattern, rhs or None, conditions, derived relation or None) of a rule."""
    if rule.kind == "rewrite":
        return rule.lhs, rule.rhs, rule.conditions, None
    query, actions = rule.form[1], rule.form[2]
    pattern, root, conds = None, None, []
    for fact in query:
        if fact[0] == "=" and is_var(fact[1]) and isinstance(fact[2], list):
            root, pattern = fact[1], fact[2]
        else:
            conds.append(fact)
    if pattern is None or len(actions) != 1 or actions[0] != [Symbol("NonNeg"), root]:
        raise CannotInstantiate("the harness checks analysis rules of the form ((= ?e PAT) ...) ((NonNeg ?e))")
    return pattern, None, conds, "NonNeg"


def instantiate(rule, dtype, dims, binding, rng) -> Instance:
    """An instance satisfying the rule's conditions (rejection sampling: literals first, then shapes and views)."""
    pattern, rhs, conds, _ = _rule_parts(rule)
    laid_out = 0
    for _ in range(200):
        inst = Instance(rule, dtype, dims, binding, rng, conds)
        try:
            inst.bind_literals(pattern, rhs)
            for c in inst.facts:  # a condition on the root's dtype alone fails every time: give up at once
                if c[0] in ("IsFloat", "IntLike") and _vars(c[1:]) <= {pattern[1]} and \
                        not dtype_fact(c[0], inst.literal(c[1], "dtype")):
                    raise CannotInstantiate(f"{to_text(c)} does not hold for {dtype}")
            if not inst.facts_hold(final=False):
                continue
            laid_out += 1
            if laid_out > 60:
                break
            inst.plan(pattern, inst.root_dims)
            if inst.facts_hold(final=True):
                return inst
        except Reject:
            continue
    raise CannotInstantiate("no instantiation satisfies the conditions")


def check_once(rule, dtype, dims, binding, rng) -> bool:
    pattern, rhs, _, derived = _rule_parts(rule)
    inst = instantiate(rule, dtype, dims, binding, rng)
    inst.start_graph()
    lhs, _, lhs_scalar = inst.build(pattern)
    roots = [lhs]
    if rhs is not None:
        try:
            r, _, r_scalar = inst.build(rhs)
        except GraphError as err:  # e.g. an axis out of range, operand shapes that differ
            raise AssertionError(f"{rule.name}: the right-hand side is ill-formed here: {err} "
                                 f"[{dtype.value}, dims {dims}, {inst.describe()}]") from None
        roots.append(r)
    for nid in roots:
        inst.graph.to_retrieve.add(nid)
    try:
        inst.graph.execute()
    except ZeroDivisionError as err:  # an integer Mod reading a 0 divisor through padding: not a case to check
        raise CannotInstantiate(str(err)) from None
    lv = inst.value(lhs)
    out = inst.graph.nodes[lhs].dtype
    context = f"[{dtype.value}, dims {dims}, {inst.describe()}]"
    if derived == "NonNeg":
        assert not np.any(lv < 0), f"{rule.name} {context}: negative element in {lv}"
        return True
    assert inst.graph.nodes[r].dtype == out, f"{rule.name}: the left side is {out}, the right side " \
                                             f"{inst.graph.nodes[r].dtype}"
    rv = inst.value(r)
    if lhs_scalar:
        lv = np.broadcast_to(lv, rv.shape)
    if r_scalar:
        rv = np.broadcast_to(rv, lv.shape)
    bound = _reorder_bound(inst, pattern, out) if rule.tolerance.strip() == "reorder" and out.is_float else None
    assert_agree(lv, rv, rule, out, context, bound)
    return True


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_rule_is_sound(rule):
    rng = np.random.default_rng(sum(map(ord, rule.name)))  # a fixed seed per rule (no hash())
    checked = 0
    for dtype in DTYPES:
        for dims, binding in SHAPES:
            for _ in range(TRIALS):
                try:
                    check_once(rule, dtype, dims, binding, rng)
                except CannotInstantiate:
                    continue
                except TypeError as err:  # an op that does not take this dtype (Log2 on int32...)
                    if "float" in str(err) or "dtype" in str(err):
                        continue
                    raise
                checked += 1
    assert checked >= len(SHAPES) * TRIALS // 2, (
        f"rule {rule.name} ({rule.file}) was instantiated only {checked} times: extend the harness "
        "(tests/test_rule_soundness.py) so it can check this rule")


def test_every_rule_file_is_enumerated():
    """Each rule file loads, names its rules, and all of them are among the parametrized cases above."""
    files = rule_files()
    assert any(f.endswith("schema.egg") for f in files)
    names = {r.name for r in RULES}
    seen = set()
    for path in files:
        rf = load_file(path)
        if not path.endswith("schema.egg"):
            assert rf.rules, f"{path} has no rules"
        for r in rf.rules:
            assert r.reason, f"{r.name} has no reason"
            assert r.name in names
            seen.add(r.name)
    assert seen == names


def test_harness_rejects_an_unsound_rule(tmp_path):
    """The harness is not vacuous: unsound variants of real rules (and sqrt(x)*sqrt(x) -> x) are caught."""
    path = tmp_path / "bad.egg"
    path.write_text(
        ";; sqrt-square: sqrt(x)^2 == x (false: rounding, negatives give NaN)\n"
        "(rewrite (Mul ?d (Sqrt ?d ?x ?v) ?w (Sqrt ?d ?x ?v) ?w) ?x :when ((Contig ?v) (Contig ?w)) :ruleset algebra)\n"
        "\n"
        ";; float-mul-zero: x * 0 == 0 (false for inf and NaN)\n"
        "(rewrite (Mul ?d ?x ?vx (Num ?d 0.0) ?vc) (Num ?d 0.0) :when ((IsFloat ?d)) :ruleset algebra)\n"
        "\n"
        ";; add-zero-exact: x + 0 == x bit for bit (false: -0.0 + 0.0 is +0.0)\n"
        "(rewrite (Add ?d ?x ?vx (Num ?d 0.0) ?vc) (Copy ?d ?x ?vx) :ruleset algebra)\n"
        "\n"
        ";; recip-recip-everywhere: 1/(1/x) == x (false for denormals: 1/x overflows)\n"
        ";; tolerance: rtol=2eps\n"
        "(rewrite (Recip ?d (Recip ?d ?x ?vx) ?v) (Copy ?d ?x ?vx) :when ((Contig ?v)) :ruleset approx)\n"
        "\n"
        ";; add-zero-masked-one: x * 1 == x even through padding (false: padding reads 0)\n"
        "(rewrite (Mul ?d ?x ?vx (Num ?d 1.0) ?vc) (Copy ?d ?x ?vx) :ruleset algebra)\n"
        "\n"
        ";; neg-neg-any-view: (-1)*((-1)*x) == x whatever view reads the inner product (false: flip)\n"
        "(rewrite (Mul ?d (Mul ?d ?x ?vx (Num ?d -1.0) ?vc1) ?vm (Num ?d -1.0) ?vc2) (Copy ?d ?x ?vx)\n"
        "         :when ((NoMask ?vc1) (NoMask ?vc2)) :ruleset algebra)\n")
    bad = load_file(str(path)).rules
    assert len(bad) == 6
    for rule in bad:
        with pytest.raises(AssertionError, match=r"element \d+: lhs"):  # a wrong value, not "could not check"
            test_rule_is_sound(rule)
    path.write_text(  # the former ArithmeticElimination pass made this inference; 1/(-0.0) is -inf
        ";; nonneg-recip: 1/x of a non-negative x is non-negative (false for x = -0.0)\n"
        "(rule ((= ?e (Recip ?d ?x ?v)) (NonNeg ?x)) ((NonNeg ?e)) :ruleset analysis)\n")
    (rule,) = load_file(str(path)).rules
    with pytest.raises(AssertionError, match="negative element"):
        test_rule_is_sound(rule)


VALUE_MISMATCH = r"element \d+: lhs|negative element"  # a wrong value, not "could not check"


def _rules_from(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.egg"  # one file per text: load_file caches by path, size and mtime
    path.write_text(text)
    return {r.name: r for r in load_file(str(path)).rules}


def test_harness_rejects_unsound_reduction_rules(tmp_path):
    """Sum/Max patterns are instantiated for real (axis, extent, views): wrong reduction rules are caught."""
    bad = _rules_from(tmp_path, "bad_reductions", (
        ";; max-is-sum: max over an axis == sum over it (false)\n"
        "(rewrite (Max ?d ?a ?x ?v) (Sum ?d ?a ?x ?v) :ruleset reductions)\n"
        "\n"
        ";; sum-unit-axis-exact: sum-unit-axis claimed bit-exact (false: the sum of one -0.0 is +0.0)\n"
        "(rewrite (Sum ?d ?a ?x ?v) (Copy ?d ?x ?v) :when ((Extent ?v ?a 1)) :ruleset reductions)\n"
        "\n"
        ";; max-const-padded: max of a constant == the constant even through padding (false: padding reads 0)\n"
        "(rewrite (Max ?d ?a (Num ?d ?c) ?v) (Num ?d ?c) :when ((Extent ?v ?a ?k) (>= ?k 1)) :ruleset reductions)\n"
        "\n"
        ";; nonneg-max-empty: the max of non-negative values is non-negative (false over an empty axis: -inf)\n"
        "(rule ((= ?e (Max ?d ?a ?x ?v)) (NonNeg ?x)) ((NonNeg ?e)) :ruleset analysis)\n"
        "\n"
        ";; sum-const-float: k copies of a float constant sum to c * k (false: k roundings against one, e.g. 0.1)\n"
        "(rewrite (Sum ?d ?a (Num ?d ?c) ?v) (Num ?d (* ?c (to-f64 ?k)))\n"
        "         :when ((IsFloat ?d) (NoMask ?v) (Extent ?v ?a ?k) (>= ?k 1)) :ruleset reductions)\n"))
    for rule in bad.values():
        with pytest.raises(AssertionError, match=VALUE_MISMATCH):
            test_rule_is_sound(rule)
    # a view key whose source is read row-major whole (Contig) may still be a reshape: a reduction's axis then
    # means something else, so pulling a Copy into a reduction needs the two views' dims to agree
    (rule,) = _rules_from(tmp_path, "bad_sum_copy", (
        ";; sum-copy-any-dims: sum(copy(x)) == sum(x through the copy's view) (false when the copy is reshaped)\n"
        "(rewrite (Sum ?d ?a (Copy ?d ?x ?vx) ?vm) (Sum ?d ?a ?x ?vx) :when ((Contig ?vm)) :ruleset reductions)\n"
    )).values()
    with pytest.raises(AssertionError, match=VALUE_MISMATCH + r"|ill-formed|the two sides have"):
        test_rule_is_sound(rule)


def _all_rejected(tmp_path, name: str, text: str, match: str = VALUE_MISMATCH) -> None:
    """Every rule of ``text`` (a rule file's contents) fails the soundness check with a message matching ``match``."""
    for rule in _rules_from(tmp_path, name, text).values():
        with pytest.raises(AssertionError, match=match):
            test_rule_is_sound(rule)


def test_harness_rejects_unsound_split_rules(tmp_path):
    """SplitKey instances split the reduced axis for real, and the ``reorder`` tolerance (any summation order of the
    same terms) is not loose enough to pass other values: wrong two-stage forms are caught."""
    _all_rejected(tmp_path, "bad_split", (
        ";; split-sum-exact: the two-stage sum claimed bit-exact (false: the terms are added in another order)\n"
        "(rewrite (Sum ?d ?a ?x ?v) (Sum ?d ?a (Sum ?d (+ ?a 1) ?x ?s) ?o) :when ((SplitKey ?v ?a ?s ?o))\n"
        "         :ruleset reductions)\n"
        "\n"
        ";; split-sum-of-max: the sum of the partial maxima (false)\n"
        ";; tolerance: reorder\n"
        ";; domain: sum-safe\n"
        "(rewrite (Sum ?d ?a ?x ?v) (Sum ?d ?a (Max ?d (+ ?a 1) ?x ?s) ?o) :when ((SplitKey ?v ?a ?s ?o))\n"
        "         :ruleset reductions)\n"
        "\n"
        ";; split-max-of-sums: the maximum of the partial sums (false)\n"
        ";; tolerance: reorder\n"
        ";; domain: sum-safe\n"
        "(rewrite (Sum ?d ?a ?x ?v) (Max ?d ?a (Sum ?d (+ ?a 1) ?x ?s) ?o) :when ((SplitKey ?v ?a ?s ?o))\n"
        "         :ruleset reductions)\n"))
    _all_rejected(tmp_path, "bad_split_key", (
        ";; split-read-wrong: the second stage reads the partial sums through the original view (ill-formed)\n"
        ";; tolerance: reorder\n"
        "(rewrite (Sum ?d ?a ?x ?v) (Sum ?d ?a (Sum ?d (+ ?a 1) ?x ?s) ?v) :when ((SplitKey ?v ?a ?s ?o))\n"
        "         :ruleset reductions)\n"), match=r"reads a buffer of dims|ill-formed")


def test_harness_rejects_unsound_cast_rules(tmp_path):
    """Cast operands get every dtype (free in the pattern): wrong conversions are caught, sound ones pass."""
    bad = _rules_from(tmp_path, "bad_casts", (
        ";; cast-roundtrip: casting to t and back is the identity (false for narrowing casts)\n"
        "(rewrite (Cast ?s (Cast ?t ?x ?vx) ?w) (Copy ?s ?x ?vx) :when ((Contig ?w)) :ruleset algebra)\n"
        "\n"
        ";; cast-cast-skip: casting through t then to s == casting to s (false: float -> int -> float truncates)\n"
        "(rewrite (Cast ?s (Cast ?t ?x ?vx) ?w) (Cast ?s ?x ?vx) :when ((Contig ?w)) :ruleset algebra)\n"
        "\n"
        ";; nonneg-cast-any: a cast of non-negative values is non-negative (false to int: NaN, inf -> minimum)\n"
        "(rule ((= ?e (Cast ?t ?x ?v)) (NonNeg ?x)) ((NonNeg ?e)) :ruleset analysis)\n"))
    for rule in bad.values():
        with pytest.raises(AssertionError, match=VALUE_MISMATCH):
            test_rule_is_sound(rule)
    good = _rules_from(tmp_path, "good_casts", (
        ";; cast-cast-same: casting twice to the same dtype == casting once\n"
        "(rewrite (Cast ?d (Cast ?d ?x ?vx) ?w) (Cast ?d ?x ?vx) :when ((Contig ?w)) :ruleset algebra)\n"))
    test_rule_is_sound(good["cast-cast-same"])


def test_harness_rejects_unsound_bitcast_rules(tmp_path):
    """BitCast operands get every dtype of the target's width: reading bits as a conversion is caught, the
    round trip through another type of the same width passes."""
    bad = _rules_from(tmp_path, "bad_bitcasts", (
        ";; bitcast-is-cast: a bit cast is a conversion (false: the bits of 1.0 are 0x3f800000)\n"
        "(rewrite (BitCast ?t ?x ?v) (Cast ?t ?x ?v) :ruleset algebra)\n"
        "\n"
        ";; nonneg-bitcast: a bit cast of non-negative values is non-negative (false: uint32 0xffffffff -> NaN / -1)\n"
        "(rule ((= ?e (BitCast ?t ?x ?v)) (NonNeg ?x)) ((NonNeg ?e)) :ruleset analysis)\n"))
    for rule in bad.values():
        with pytest.raises(AssertionError, match=VALUE_MISMATCH + r"|negative element"):
            test_rule_is_sound(rule)
    good = _rules_from(tmp_path, "good_bitcasts", (
        ";; bitcast-roundtrip: reinterpreting the bits as t and back is the identity\n"
        "(rewrite (BitCast ?d (BitCast ?t ?x ?vx) ?w) (Copy ?d ?x ?vx) :when ((Contig ?w)) :ruleset algebra)\n"))
    test_rule_is_sound(good["bitcast-roundtrip"])


def test_harness_rejects_unsound_gather_rules(tmp_path):
    """Gather indices are in range of the gathered axis (drawn), through any view: wrong rules are caught."""
    bad = _rules_from(tmp_path, "bad_gathers", (
        ";; gather-const-padded: gathering from a constant gives the constant, even through padding (false)\n"
        "(rewrite (Gather ?d ?a (Num ?d ?c) ?vd ?i ?vi) (Num ?d ?c) :ruleset reductions)\n"))
    with pytest.raises(AssertionError, match=VALUE_MISMATCH):
        test_rule_is_sound(bad["gather-const-padded"])
    # the index's layout decides the output's: reading it through its copy's view is wrong for a flipped copy
    # and, even when the copy is read row-major whole (Contig), for a reshaped one
    bad = _rules_from(tmp_path, "bad_gather_index", (
        ";; gather-index-view-ignored: the index read through its copy's own view (false unless Contig)\n"
        "(rewrite (Gather ?d ?a ?x ?vx (Copy ?t ?i ?vi) ?vc) (Gather ?d ?a ?x ?vx ?i ?vi) :ruleset reductions)\n"
        "\n"
        ";; gather-index-copy-reshaped: the same when the copy is read row-major whole (false: reshapes)\n"
        "(rewrite (Gather ?d ?a ?x ?vx (Copy ?t ?i ?vi) ?vc) (Gather ?d ?a ?x ?vx ?i ?vi)\n"
        "         :when ((Contig ?vc)) :ruleset reductions)\n"))
    for rule in bad.values():
        with pytest.raises(AssertionError, match=VALUE_MISMATCH + r"|ill-formed|the two sides have"):
            test_rule_is_sound(rule)
    good = _rules_from(tmp_path, "good_gathers", (
        ";; gather-const: gathering from a constant (no padding) gives the constant\n"
        "(rewrite (Gather ?d ?a (Num ?d ?c) ?vd ?i ?vi) (Num ?d ?c) :when ((NoMask ?vd)) :ruleset reductions)\n"))
    test_rule_is_sound(good["gather-const"])


def test_harness_rejects_unsound_layout_and_pullout_rules(tmp_path):
    """Copy elimination needs the consumer to read the copy in its own dims (a reshaped read is caught), and
    pulling an op out of a reduction needs monotone, non-wrapping arithmetic (integer max, a negative factor and a
    float sum are caught)."""
    bad = _rules_from(tmp_path, "bad_layout", (
        ";; copy-into-sum-reshaped: Dims not required (false: a reshaped read changes what the axis means)\n"
        "(rewrite (Sum ?d ?a (Copy ?d ?x ?vx) ?v) (Sum ?d ?a ?x ?vx) :when ((Contig ?v)) :ruleset layout)\n"
        "\n"
        ";; copy-into-exp2-any-view: any consumer view (false: a flipped read of the copy)\n"
        "(rewrite (Exp2 ?d (Copy ?d ?x ?vx) ?v) (Exp2 ?d ?x ?vx) :when ((Dims ?v ?s) (Dims ?vx ?s)) :ruleset layout)\n"
        "\n"
        ";; max-add-const-int: max(x + c) == max(x) + c for integers (false: x + c wraps around)\n"
        "(rewrite (Max ?d ?a (Add ?d ?x ?vx (Num ?d ?c) ?vc) ?v) (Add ?d (Max ?d ?a ?x ?vx) ?k (Num ?d ?c) ?k)\n"
        "         :when ((IntLike ?d) (!= ?d \"bool\") (NoMask ?vc) (Contig ?v) (Dims ?v ?s) (Dims ?vx ?s)\n"
        "                (ReducedKey ?v ?a ?k)) :ruleset reductions)\n"
        "\n"
        ";; max-mul-any-const: max(x * c) == max(x) * c for any c (false for c < 0: the order reverses)\n"
        "(rewrite (Max ?d ?a (Mul ?d ?x ?vx (Num ?d ?c) ?vc) ?v) (Mul ?d (Max ?d ?a ?x ?vx) ?k (Num ?d ?c) ?k)\n"
        "         :when ((IsFloat ?d) (NoMask ?vc) (Contig ?v) (Dims ?v ?s) (Dims ?vx ?s) (ReducedKey ?v ?a ?k))\n"
        "         :ruleset reductions)\n"
        "\n"
        ";; sum-mul-const-float: sum(x * c) == sum(x) * c for floats (false: rounding, overflow)\n"
        "(rewrite (Sum ?d ?a (Mul ?d ?x ?vx (Num ?d ?c) ?vc) ?v) (Mul ?d (Sum ?d ?a ?x ?vx) ?k (Num ?d ?c) ?k)\n"
        "         :when ((IsFloat ?d) (NoMask ?vc) (Contig ?v) (Dims ?v ?s) (Dims ?vx ?s) (ReducedKey ?v ?a ?k))\n"
        "         :ruleset reductions)\n"))
    assert len(bad) == 5
    for rule in bad.values():  # integer results are compared whole: "lhs != rhs"
        with pytest.raises(AssertionError, match=VALUE_MISMATCH + r"|\] != \[|ill-formed|the two sides have"):
            test_rule_is_sound(rule)


def test_harness_checks_gemm_rules_on_matrix_instances(tmp_path):
    """GemmKey instances are real matrix products (transposed, broadcast operands): a MatMul that names a different
    product is caught, and the loader's key test (gemm_views) agrees with the lowering's (find_gemm) on them."""
    bad = _rules_from(tmp_path, "bad_gemm", (
        ";; gemm-square-x: the product of x with itself (false)\n"
        "(rewrite (Sum ?d ?a (Mul ?d ?x ?vx ?y ?vy) ?vs) (MatMul ?d ?a ?x ?vx ?x ?vx ?vs)\n"
        "         :when ((GemmKey ?vs ?a ?vx ?vy)) :ruleset gemm)\n"
        "\n"
        ";; gemm-y-through-x-view: y read through x's view (false: another matrix)\n"
        "(rewrite (Sum ?d ?a (Mul ?d ?x ?vx ?y ?vy) ?vs) (MatMul ?d ?a ?x ?vx ?y ?vx ?vs)\n"
        "         :when ((GemmKey ?vs ?a ?vx ?vy)) :ruleset gemm)\n"))
    for rule in bad.values():
        with pytest.raises(AssertionError, match=VALUE_MISMATCH + r"|ill-formed"):
            test_rule_is_sound(rule)
    (good,) = [r for r in RULES if r.name == "gemm-recognize"]
    rng = np.random.default_rng(7)
    kinds = set()
    for _ in range(12):
        inst = instantiate(good, DType.float32, (3, 5), {}, rng)
        inst.start_graph()
        root = inst.build(good.lhs)[0]
        found = find_gemm(inst.graph, inst.graph.nodes[root])
        assert found is not None, inst.describe()
        kinds.add(tuple(inst.views[v].tracker.strides[-1] == 0 for v in ("?vx", "?vy")))
    assert len(kinds) >= 2, kinds  # broadcast on either side, not one fixed layout
