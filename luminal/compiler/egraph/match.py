"""E-matching of rule patterns on a serialized e-graph (for :func:`explain`) and the evaluator of egglog's
primitive conditions (``+ - * abs to-f64 < <= > >= = !=`` on literals), shared with the rule-soundness test."""

from __future__ import annotations

from ...dtype import DType
from .encode import CHILD_SLOTS
from .extract import EGraphData
from .sexpr import Str, Symbol


def is_var(x) -> bool:
    return isinstance(x, Symbol) and x.startswith("?")


def eval_prim(expr, env: dict):
    """Evaluate a primitive expression over literal bindings (floats are IEEE doubles, as egglog's f64)."""
    if is_var(expr):
        return env[expr]
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return expr
    if isinstance(expr, Str):
        return str(expr)
    if isinstance(expr, list):
        head, args = expr[0], [eval_prim(a, env) for a in expr[1:]]
        if head == "+":
            return args[0] + args[1]
        if head == "-":
            return args[0] - args[1] if len(args) == 2 else -args[0]
        if head == "*":
            return args[0] * args[1]
        if head == "abs":
            return abs(args[0])
        if head == "to-f64":
            return float(args[0])
        if head == "<":
            return args[0] < args[1]
        if head == "<=":
            return args[0] <= args[1]
        if head == ">":
            return args[0] > args[1]
        if head == ">=":
            return args[0] >= args[1]
        if head == "=":
            return args[0] == args[1]
        if head == "!=":
            return args[0] != args[1]
    raise ValueError(f"cannot evaluate primitive expression {expr!r}")


def dtype_fact(rel: str, value: str) -> bool:
    d = DType(value)
    return d.is_float if rel == "IsFloat" else not d.is_float


def _match(pat, cls_or_lit, eg: EGraphData, env: dict, is_class: bool, only=None):
    """Yield extended environments where ``pat`` matches an e-class (``is_class``) or a literal; ``only``
    restricts the e-nodes tried at the top to the one with that signature."""
    if is_var(pat):
        if pat in env:
            if env[pat] == cls_or_lit:
                yield env
        else:
            yield {**env, pat: cls_or_lit}
        return
    if not isinstance(pat, list):
        if not is_class and type(pat) is not bool and pat == cls_or_lit and \
                isinstance(pat, str) == isinstance(cls_or_lit, str):
            yield env
        return
    if not is_class:
        return
    for e in eg.classes.get(cls_or_lit, ()):
        if e.op != pat[0] or len(e.args) != len(pat) - 1 or (only is not None and e.signature != only):
            continue
        envs = [env]
        for i, (p, a) in enumerate(zip(pat[1:], e.args)):
            child = i in CHILD_SLOTS[e.op]
            envs = [x for en in envs for x in _match(p, a, eg, en, child)]
            if not envs:
                break
        yield from envs


def _conditions_hold(conds, env: dict, eg: EGraphData) -> bool:
    env = dict(env)
    for c in sorted(conds, key=lambda c: c[0] != "Extent"):  # Extent facts first: they may bind an extent
        head = c[0]
        if head == "Extent":
            n = eg.extent.get((eval_prim(c[1], env), eval_prim(c[2], env)))
            if n is None:
                return False
            if is_var(c[3]) and c[3] not in env:
                env[c[3]] = n
            elif eval_prim(c[3], env) != n:
                return False
        elif head in ("Contig", "NoMask"):
            if env[c[1]] not in (eg.contig if head == "Contig" else eg.nomask):
                return False
        elif head in ("IsFloat", "IntLike"):
            if not dtype_fact(head, eval_prim(c[1], env)):
                return False
        elif head == "NonNeg":
            if env[c[1]] not in eg.nonneg:
                return False
        elif not eval_prim(c, env):
            return False
    return True


def _tokens(expr) -> list[str]:
    if isinstance(expr, list):
        return [t for x in expr for t in _tokens(x)]
    return [repr(expr)]


def rules_matching(rules, eg: EGraphData, cls: str, signature=None) -> list[str]:
    """Names of the rewrites whose left-hand side (and ``:when``) matches in e-class ``cls`` (at its e-node
    with ``signature`` when given); pure reorderings (commutativity) are listed only when nothing else
    matches."""
    real, structural = [], []
    for r in rules:
        if r.kind != "rewrite":
            continue
        try:
            ok = any(_conditions_hold(r.conditions, env, eg) for env in _match(r.lhs, cls, eg, {}, True, signature))
        except (KeyError, ValueError):
            ok = False
        if ok:
            (structural if sorted(_tokens(r.lhs)) == sorted(_tokens(r.rhs)) else real).append(r.name)
    return real or structural
