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


def _conditions_env(conds, env: dict, eg: EGraphData) -> dict | None:
    """``env`` extended by the variables the conditions bind (an Extent's extent, a Dims id, a ReducedKey's key,
    a SplitKey's keys) when they all hold, else None."""
    env = dict(env)
    binding = ("Extent", "Dims", "ReducedKey", "SplitKey")
    for c in sorted(conds, key=lambda c: c[0] not in binding):  # facts that may bind a variable first
        head = c[0]
        if head == "SplitKey":  # (SplitKey v a s o): binds the split key and the outer key
            keys = eg.split.get((eval_prim(c[1], env), eval_prim(c[2], env)))
            if keys is None:
                return None
            for var, value in zip(c[3:5], keys):
                if is_var(var) and var not in env:
                    env[var] = value
                elif eval_prim(var, env) != value:
                    return None
        elif head in ("Dims", "ReducedKey"):
            key = tuple(eval_prim(a, env) for a in c[1:-1])
            value = eg.dims.get(key[0]) if head == "Dims" else eg.reduced.get(key)
            if value is None:
                return None
            if is_var(c[-1]) and c[-1] not in env:
                env[c[-1]] = value
            elif eval_prim(c[-1], env) != value:
                return None
        elif head == "Extent":
            n = eg.extent.get((eval_prim(c[1], env), eval_prim(c[2], env)))
            if n is None:
                return None
            if is_var(c[3]) and c[3] not in env:
                env[c[3]] = n
            elif eval_prim(c[3], env) != n:
                return None
        elif head == "GemmKey":
            if tuple(eval_prim(a, env) for a in c[1:]) not in eg.gemm:
                return None
        elif head in ("Contig", "NoMask"):
            if env[c[1]] not in (eg.contig if head == "Contig" else eg.nomask):
                return None
        elif head in ("IsFloat", "IntLike"):
            if not dtype_fact(head, eval_prim(c[1], env)):
                return None
        elif head == "NonNeg":
            if env[c[1]] not in eg.nonneg:
                return None
        elif not eval_prim(c, env):
            return None
    return env


def _conditions_hold(conds, env: dict, eg: EGraphData) -> bool:
    return _conditions_env(conds, env, eg) is not None


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


# ---------------------------------------------------------------------------------------------- derivations
def _signature_index(eg: EGraphData) -> dict:
    index = eg.__dict__.get("_signature_index")
    if index is None:
        index = eg.__dict__["_signature_index"] = {e.signature: cls for cls, nodes in eg.classes.items()
                                                   for e in nodes}
    return index


def _instantiate(rhs, env: dict, index: dict):
    """What a rewrite's right-hand side denotes under ``env``: ``("class", id)`` for a bare variable (the rewrite
    unions the matched e-class with that one), ``("node", signature)`` for a term (its compound children looked up
    in the e-graph), or None when a child term is not in it."""
    if is_var(rhs):
        return ("class", env[rhs])
    op = str(rhs[0])
    slots = CHILD_SLOTS.get(op)
    if slots is None:
        return None
    args = []
    for i, a in enumerate(rhs[1:]):
        if i in slots:
            if is_var(a):
                args.append(env[a])
                continue
            sub = _instantiate(a, env, index)
            if sub is None or sub[0] != "node" or sub[1] not in index:
                return None
            args.append(index[sub[1]])
        elif is_var(a) or isinstance(a, list):
            args.append(eval_prim(a, env))
        else:
            args.append(str(a) if isinstance(a, Str) else a)
    return ("node", (op, tuple(args)))


def derivation(rules, eg: EGraphData, cls: str, start: tuple, target: tuple, max_steps: int = 6,
               max_enodes: int = 64) -> list[str] | None:
    """The rewrites that turned e-node ``start`` into e-node ``target`` (signatures, both in e-class ``cls``): a
    shortest chain found by replaying each rule's left-hand side on the e-nodes derived so far and looking up its
    right-hand side. A rule whose right-hand side is a bare variable (``copy-contig``) merges the class with its
    operand's and so explains any member; it is used only when no chain of terms reaches ``target``. None when
    neither is found within ``max_steps`` rewrites and ``max_enodes`` visited e-nodes (a member that came from
    elsewhere: another original node hash-consed into the class, or a union made by a rule matched elsewhere)."""
    if start == target:
        return []
    index = _signature_index(eg)
    by_head: dict = {}  # the rewrites by the constructor at the top of their left-hand side
    for r in rules:
        if r.kind == "rewrite" and isinstance(r.lhs, list):
            by_head.setdefault(str(r.lhs[0]), []).append(r)
    parent: dict = {start: None}

    def path(sig) -> list[str]:
        out = []
        while parent[sig] is not None:
            sig, name = parent[sig]
            out.append(name)
        return out[::-1]

    merged = None
    frontier = [start]
    for _ in range(max_steps):
        following = []
        for sig in frontier:
            for r in by_head.get(sig[0], ()):
                try:
                    envs = list(_match(r.lhs, cls, eg, {}, True, sig))
                except (KeyError, ValueError):
                    continue
                for env in envs:
                    try:
                        env = _conditions_env(r.conditions, env, eg)
                        result = None if env is None else _instantiate(r.rhs, env, index)
                    except (KeyError, ValueError, TypeError):
                        continue
                    if result is None:
                        continue
                    kind, value = result
                    if kind == "class":
                        if value == cls and merged is None:
                            merged = path(sig) + [r.name]
                        continue
                    if value in parent or index.get(value) != cls:
                        continue
                    parent[value] = (sig, r.name)
                    if value == target:
                        return path(value)
                    following.append(value)
                    if len(parent) > max_enodes:
                        return merged
        if not following:
            break
        frontier = following
    return merged
