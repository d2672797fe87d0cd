"""Evaluation, rendering (Python/C) and parsing of :class:`~luminal.shape.expression.Expression` trees."""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .expression import (ADD, AND, DIV, GE, LT, MAX, MIN, MOD, MUL, NUM, OR, VAR, Expression,
                         UnboundSymbolError, _num)


C_PRELUDE = """\
#define LUMINAL_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) && (((a) < 0) != ((b) < 0))))
#define LUMINAL_FLOORMOD(a, b) ((((a) % (b)) + (b)) % (b))
#define LUMINAL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LUMINAL_MAX(a, b) ((a) > (b) ? (a) : (b))
"""


# ====================================================================== evaluation
def _eval(e: Expression, env: Mapping[str, int]) -> int:
    op = e.op
    if op == NUM:
        return e.args[0]
    if op == VAR:
        try:
            v = int(env[e.args[0]])
        except KeyError:
            raise UnboundSymbolError(f"no value bound for symbol '{e.args[0]}'") from None
        if len(e.args) > 2 and v < e.args[2]:  # a declared minimum (Expression.symbol(name, lower=...))
            raise ValueError(f"symbol '{e.args[0]}' is declared >= {e.args[2]}, but is bound to {v}")
        return v
    if op == ADD:
        return sum(_eval(t, env) for t in e.args)
    if op == MUL:
        out = 1
        for t in e.args:
            out *= _eval(t, env)
        return out
    a, b = (_eval(x, env) for x in e.args)
    if op == DIV:
        if b == 0:
            raise ZeroDivisionError(f"division by zero evaluating {e}")
        return a // b
    if op == MOD:
        if b == 0:
            raise ZeroDivisionError(f"modulo by zero evaluating {e}")
        return a % b
    if op == MIN:
        return min(a, b)
    if op == MAX:
        return max(a, b)
    if op == LT:
        return int(a < b)
    if op == GE:
        return int(a >= b)
    if op == AND:
        return int(bool(a) and bool(b))
    if op == OR:
        return int(bool(a) or bool(b))
    raise AssertionError(op)


_COMPILED: dict[Expression, Callable] = {}


def _compile_numpy(e: Expression) -> Callable:
    names: dict[str, str] = {}

    def go(x: Expression) -> str:
        op = x.op
        if op == NUM:
            return repr(x.args[0])
        if op == VAR:
            return names.setdefault(x.args[0], f"v{len(names)}")
        parts = [go(a) for a in x.args]
        if op == ADD:
            return "(" + " + ".join(parts) + ")"
        if op == MUL:
            return "(" + " * ".join(parts) + ")"
        a, b = parts
        # "* 1" turns numpy bools into integers: bool + bool would otherwise be a logical or.
        return {DIV: f"({a} // {b})", MOD: f"({a} % {b})", MIN: f"_np.minimum({a}, {b})",
                MAX: f"_np.maximum({a}, {b})", LT: f"((({a}) < ({b})) * 1)", GE: f"((({a}) >= ({b})) * 1)",
                AND: f"(_np.logical_and({a}, {b}) * 1)", OR: f"(_np.logical_or({a}, {b}) * 1)"}[op]

    body = go(e)
    binds = "; ".join(f"{v} = env[{k!r}]" for k, v in names.items())
    src = f"def _f(env):\n    {binds or 'pass'}\n    return {body}\n"
    scope = {"_np": np}
    exec(src, scope)  # noqa: S102 - source generated from our own tree
    return scope["_f"]


# ====================================================================== rendering
_PY_SYMBOL = {ADD: " + ", MUL: "*", DIV: " // ", MOD: " % ", LT: " < ", GE: " >= ", AND: " & ", OR: " | "}


def _render(e: Expression, style) -> str:
    if e.op == NUM:
        return str(e.args[0])
    if e.op == VAR:
        return style(e, None)
    return style(e, [_render(a, style) for a in e.args])


def _py_style(e: Expression, parts):
    if parts is None:
        return e.args[0]
    if e.op in (MIN, MAX):
        return f"{e.op}({parts[0]}, {parts[1]})"
    if e.op == MUL:
        return "*".join(parts)
    if e.op in (DIV, MOD) and e.args[1].op == MUL:  # (a // (4*b)), not (a // 4*b)
        parts = [parts[0], f"({parts[1]})"]
    return "(" + _PY_SYMBOL[e.op].join(parts) + ")"


def _c_style(e: Expression, parts, names):
    if parts is None:
        return names.get(e.args[0], e.args[0])
    op = e.op
    if op == ADD:
        return "(" + " + ".join(parts) + ")"
    if op == MUL:
        return "(" + " * ".join(parts) + ")"
    a, b = parts
    if op in (DIV, MOD):
        alo = e.args[0].bounds()[0]
        blo = e.args[1].bounds()[0]
        # a non-negative dividend over a non-negative divisor: C's truncation is the floor (a zero divisor is
        # undefined either way, and a loop over a zero extent runs no iteration)
        if alo is not None and alo >= 0 and blo is not None and blo >= 0:
            return f"({a} {'/' if op == DIV else '%'} {b})"
        return f"{'LUMINAL_FLOORDIV' if op == DIV else 'LUMINAL_FLOORMOD'}({a}, {b})"
    if op == MIN:
        return f"LUMINAL_MIN({a}, {b})"
    if op == MAX:
        return f"LUMINAL_MAX({a}, {b})"
    return {LT: f"({a} < {b})", GE: f"({a} >= {b})", AND: f"({a} && {b})", OR: f"({a} || {b})"}[op]


def parse(text: str) -> Expression:
    """An Expression from text such as ``"z*2 + 1"``: ints, symbol names, ``+ - * / // %`` (``/`` is floor
    division), ``< <= > >=`` and ``min(a, b)``/``max(a, b)``. A plain name is a symbol."""
    import ast
    import operator

    if text.isidentifier():
        return Expression.symbol(text)
    binops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
    cmps = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}

    def conv(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return _num(node.value)
        if isinstance(node, ast.Name):
            return Expression.symbol(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in binops:
            return binops[type(node.op)](conv(node.left), conv(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -conv(node.operand) if isinstance(node.op, ast.USub) else conv(node.operand)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in cmps:
            return cmps[type(node.ops[0])](conv(node.left), conv(node.comparators[0]))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
                and len(node.args) == 2 and not node.keywords):
            a, b = conv(node.args[0]), conv(node.args[1])
            return a.min(b) if node.func.id == "min" else a.max(b)
        raise ValueError(f"cannot parse {text!r} as a symbolic integer expression")

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse {text!r} as a symbolic integer expression") from None
    result = conv(tree.body)
    return result if isinstance(result, Expression) else _num(int(result))
