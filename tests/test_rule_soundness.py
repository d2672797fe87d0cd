"""Every rule of every rule file (luminal/compiler/rules/*.egg) is checked sound on random inputs.

For a ``rewrite``, both sides are instantiated as luminal graphs (pattern variables become random input
tensors, view variables random views: row-major, flipped, broadcast, padded; constant variables random
constants) and evaluated by the reference interpreter; the results must agree within the rule's stated
``;; tolerance:`` (default exact: same bits up to NaN payload, NaN positions equal, signed zeros equal).
For an analysis ``rule`` deriving ``(NonNeg ?e)``, the pattern is evaluated and no element may be < 0.
Inputs mix special values (0, -0.0, +-inf, NaN, denormals, the largest and smallest normals; integer
minimum/maximum) with random ones, over several shapes including a symbolic dimension bound at execute time.
``:when`` conditions are honoured (Contig/NoMask pick the views, NonNeg the inputs, comparisons are satisfied
by rejection sampling); ``;; domain:`` restricts the inputs of approximate rules. A rule the harness cannot
instantiate at least a few times fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Graph
from luminal.shape import ShapeTracker
from luminal.compiler.egraph.match import dtype_fact, eval_prim, is_var
from luminal.compiler.egraph.sexpr import Str, Symbol, load_file, load_rules, rule_files

PRELUDE, RULES = load_rules()
DTYPES = [DType.float32, DType.float64, DType.float16, DType.int32, DType.int64, DType.bool]
SHAPES = [((7,), {}), ((3, 5), {}), (("n", 4), {"n": 5}), (("n", 3), {"n": 1})]
TRIALS = 3
UNARY = {"Log2": ops.Log2, "Exp2": ops.Exp2, "Sin": ops.Sin, "Sqrt": ops.Sqrt, "Recip": ops.Recip,
         "Copy": ops.Contiguous, "Break": ops.GraphBreak}
BINARY = {"Add": ops.Add, "Mul": ops.Mul, "Mod": ops.Mod, "Less": ops.LessThan}
FAMILIES = ("contig", "flip", "bcast", "pad")


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
    raise AssertionError(f"unknown domain {domain!r} (the harness knows recip-safe, exp2-safe, below-max)")


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
    pool = [0.0, 1.0, -1.0, 2.0, 0.5, -3.25, 1e3, -1e-3, 1e30, 1e300, -2.5e-310, 7.0]
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
def view_for(family: str, dims, over_constant: bool) -> ShapeTracker:
    last = len(dims) - 1
    if over_constant:
        if family == "pad":
            inner = dims[:-1] + (dims[-1] - 1,)
            return ShapeTracker.fake(inner).pad(last, 0, 1)
        if family == "contig":
            raise CannotInstantiate("a constant read through a whole row-major view")
        return ShapeTracker.fake(dims)
    base = ShapeTracker.contiguous_of(dims)
    if family == "contig":
        return base
    if family == "flip":
        return base.flip(last)
    if family == "bcast":
        return base.slice(last, 0, 1).expand(last, dims[-1])
    if family == "pad":
        return base.slice(last, 0, dims[-1] - 1).pad(last, 0, 1)
    raise AssertionError(family)


# ------------------------------------------------------------------------------------------ instantiation
class Instance:
    """One instantiation: a graph holding input tensors, plus bindings for every pattern variable."""

    def __init__(self, rule, dtype: DType, dims, binding, rng, conditions):
        self.rule, self.dtype, self.dims, self.rng = rule, dtype, dims, rng
        self.graph = Graph()
        for name, value in binding.items():
            self.graph.set_dim(name, value)
        self.concrete = tuple(binding.get(str(d), d) if isinstance(d, str) else d for d in dims)
        self.env: dict = {}
        self.contig, self.nomask, self.nonneg, self.facts = set(), set(), set(), []
        for c in conditions:
            head = c[0]
            if head in ("Contig", "NoMask", "NonNeg"):
                {"Contig": self.contig, "NoMask": self.nomask, "NonNeg": self.nonneg}[head].add(c[1])
            elif head in ("IsFloat", "IntLike"):
                if not dtype_fact(head, dtype.value):
                    raise CannotInstantiate(f"{head} does not hold for {dtype}")
            else:
                self.facts.append(c)
        self.views: dict = {}
        self.inputs: dict = {}

    def view(self, var, over_constant: bool) -> ShapeTracker:
        key = (var, over_constant)
        if key not in self.views:
            if var in self.contig:
                fams = ["contig"]
            elif var in self.nomask:
                fams = ["contig", "flip", "bcast"]
            else:
                fams = list(FAMILIES)
            if over_constant and fams != ["contig"]:
                fams = [f for f in fams if f != "contig"]  # a scalar is read broadcast (or padded)
            self.views[key] = view_for(fams[self.rng.integers(0, len(fams))], self.dims, over_constant)
        return self.views[key]

    def literal(self, pat, kind: str):
        if is_var(pat):
            if pat not in self.env:
                if kind == "dtype":
                    self.env[pat] = self.dtype.value
                elif kind == "value":
                    self.env[pat] = random_literal(self.rng, self.dtype)
                else:
                    raise CannotInstantiate(f"the harness cannot choose a value for {pat} ({kind})")
            return self.env[pat]
        if isinstance(pat, list):
            return eval_prim(pat, self.env)
        return str(pat) if isinstance(pat, Str) else pat

    def bind_literals(self, pat) -> None:
        """Bind the literal variables of a pattern first (so conditions can be checked before building)."""
        if not isinstance(pat, list):
            return
        head = pat[0]
        if head == "Num":
            if self.literal(pat[1], "dtype") != self.dtype.value:
                raise CannotInstantiate("constant dtype differs")
            if not isinstance(pat[2], list):
                self.literal(pat[2], "value")
            return
        if head in UNARY or head in BINARY:
            if self.literal(pat[1], "dtype") != self.dtype.value:
                raise CannotInstantiate("dtype literal differs")
        for p in pat[1:]:
            self.bind_literals(p)

    def build(self, pat, operand_of=None) -> tuple[int, bool]:
        """Add the nodes of ``pat``; returns (node id, is a scalar constant)."""
        g = self.graph
        if is_var(pat):
            if pat not in self.inputs:
                data = random_data(self.rng, self.dtype, self.concrete, pat in self.nonneg, self.rule.domain)
                t = g.tensor(self.dims, self.dtype, name=str(pat)).set(data)
                self.inputs[pat] = (t.id, data)
            return self.inputs[pat][0], False
        if not isinstance(pat, list):
            raise CannotInstantiate(f"unsupported pattern atom {pat!r}")
        head = pat[0]
        if head == "Num":
            value = self.literal(pat[2], "value")
            if not representable(value, self.dtype):
                raise CannotInstantiate(f"{value} is not a {self.dtype} constant")
            nid = g.add_op(ops.Constant(constant_value(value, self.dtype), self.dtype), (), (), self.dtype)
            return nid, True
        if head in UNARY:
            x, xc = self.build(pat[2])
            nid = g.add_op(UNARY[head](), [(x, self.view(pat[3], xc))], self.dims, self.dtype)
            return nid, False
        if head in BINARY:
            a, ac = self.build(pat[2])
            b, bc = self.build(pat[4])
            out = DType.bool if head == "Less" else self.dtype
            nid = g.add_op(BINARY[head](), [(a, self.view(pat[3], ac)), (b, self.view(pat[5], bc))], self.dims, out)
            return nid, False
        raise CannotInstantiate(f"the harness does not know how to instantiate {head}")

    def value(self, nid: int, scalar: bool) -> np.ndarray:
        out = self.graph.tensors[(nid, 0)]
        n = int(np.prod(self.concrete))
        return np.broadcast_to(out.reshape(-1), (n,)) if scalar else out.reshape(-1)


def _tolerance(text: str, dtype: DType):
    """(kind, rtol, atol) from a ``;; tolerance:`` line."""
    text = text.strip() or "exact"
    if text in ("exact", "signed-zero"):
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


def assert_agree(lhs: np.ndarray, rhs: np.ndarray, rule, dtype: DType, context: str) -> None:
    assert lhs.shape == rhs.shape, f"{rule.name}: the two sides have {lhs.size} and {rhs.size} elements"
    kind, rtol, atol = _tolerance(rule.tolerance, dtype)
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


def check_once(rule, dtype, dims, binding, rng) -> bool:
    pattern, rhs, conds, derived = _rule_parts(rule)
    inst = Instance(rule, dtype, dims, binding, rng, conds)
    for _ in range(200):  # rejection sampling of the literal variables against the comparisons
        inst.env = {}
        inst.bind_literals(pattern)
        if all(eval_prim(f, inst.env) for f in inst.facts):
            break
    else:
        raise CannotInstantiate("no literal values satisfy the conditions")
    lhs, lhs_scalar = inst.build(pattern)
    roots = [lhs]
    if rhs is not None:
        r, r_scalar = inst.build(rhs)
        roots.append(r)
    for nid in roots:
        inst.graph.to_retrieve.add(nid)
    inst.graph.execute()
    lv = inst.value(lhs, lhs_scalar)
    context = f"[{dtype.value}, dims {dims} {binding}, literals {inst.env}, views {inst.views}]"
    if derived == "NonNeg":
        assert not np.any(lv < 0), f"{rule.name} {context}: negative element in {lv}"
        return True
    rv = inst.value(r, r_scalar)
    assert_agree(lv, rv, rule, dtype, context)
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
