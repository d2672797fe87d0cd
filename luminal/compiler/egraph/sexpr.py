"""A small s-expression reader and the loader of the ``.egg`` rule files (shared by egglog and the tests).

Rule file format (``luminal/compiler/rules/*.egg``)::

    ;; add-zero: x + 0 == x (the operand read through its own view)
    ;; when: none
    ;; tolerance: signed-zero
    (rewrite (Add ?d ?x ?vx (Num ?d 0.0) ?vc) (Copy ?d ?x ?vx) :ruleset algebra)

The comment line ``;; NAME: reason`` right before a ``rewrite`` or ``rule`` names it (required); the optional
metadata lines ``;; when: ...`` (the condition in words; the machine-readable condition is the ``:when``
clause), ``;; tolerance: ...`` and ``;; domain: ...`` (see ``docs/compiler.md``) belong to the same block.
Every other top-level form (``datatype``, ``relation``, ``ruleset``, facts) is passed to egglog unchanged.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Union

Atom = Union[str, int, float]
SExpr = Union[Atom, "list[SExpr]"]


class Symbol(str):
    """A bare identifier (``Add``, ``?x``, ``:ruleset``) as opposed to a string literal."""


class Str(str):
    """A string literal (``"float32"``)."""


_TOKEN = re.compile(r'\s+|;[^\n]*|(\()|(\))|("(?:[^"\\]|\\.)*")|([^\s()";]+)')


def parse(text: str) -> list[SExpr]:
    """Parse ``text`` into a list of top-level s-expressions (comments dropped)."""
    stack: list[list] = [[]]
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"s-expression syntax error at offset {pos}: {text[pos:pos + 20]!r}")
        pos = m.end()
        lp, rp, string, atom = m.groups()
        if lp:
            stack.append([])
        elif rp:
            if len(stack) == 1:
                raise ValueError(f"unbalanced ')' at offset {pos}")
            done = stack.pop()
            stack[-1].append(done)
        elif string is not None:
            stack[-1].append(Str(string[1:-1]))
        elif atom is not None:
            stack[-1].append(_atom(atom))
    if len(stack) != 1:
        raise ValueError("unbalanced '(' at end of input")
    return stack[0]


def _atom(token: str) -> Atom:
    if re.fullmatch(r"[-+]?\d+", token):
        return int(token)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+", token):
        return float(token)
    return Symbol(token)


def to_text(expr: SExpr) -> str:
    """Print an s-expression back (floats keep a decimal point: egglog's ``f64`` literal syntax)."""
    if isinstance(expr, list):
        return "(" + " ".join(to_text(e) for e in expr) + ")"
    if isinstance(expr, Str):
        return '"' + expr + '"'
    if isinstance(expr, bool):
        return "true" if expr else "false"
    if isinstance(expr, float):
        return float_literal(expr)
    return str(expr)


def float_literal(value: float) -> str:
    """An egglog ``f64`` literal for a finite float that reads back exactly."""
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text


@dataclass
class Rule:
    """One named rewrite or analysis rule read from a rule file."""

    name: str
    reason: str
    kind: str  # "rewrite" or "rule"
    ruleset: str
    form: list  # the parsed top-level form
    file: str
    when_text: str = ""
    tolerance: str = "exact"
    domain: str = ""
    options: dict = field(default_factory=dict)

    @property
    def lhs(self):
        """The left-hand side of a ``rewrite`` (the query list of a ``rule``)."""
        return self.form[1]

    @property
    def rhs(self):
        """The right-hand side of a ``rewrite`` (the action list of a ``rule``)."""
        return self.form[2]

    @property
    def conditions(self) -> list:
        """The ``:when`` facts of a rewrite (empty when unconditional)."""
        return list(self.options.get(":when", []))

    def egglog_text(self) -> str:
        """The form as egglog reads it, with ``:name`` set to the rule's name."""
        form = [f for f in self.form]
        if ":name" not in self.options:
            form = form + [Symbol(":name"), Str(self.name)]
        return to_text(form)


@dataclass
class RuleFile:
    path: str
    prelude: list  # non-rule top-level forms, in order
    rules: list[Rule]


RULES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rules")
_META_KEYS = ("when", "tolerance", "domain")
_HEADER = re.compile(r"^\s*;;\s*([A-Za-z0-9_.+\-]+)\s*:\s*(.*?)\s*$")


def rule_files(folder: str = RULES_DIR) -> list[str]:
    """The ``.egg`` rule files, ``schema.egg`` first, the rest sorted by name."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(".egg"))
    names.sort(key=lambda n: (n != "schema.egg", n))
    return [os.path.join(folder, n) for n in names]


_FILE_CACHE: dict[tuple, RuleFile] = {}


def load_file(path: str) -> RuleFile:
    """Read one rule file: its prelude forms and its named rules (with their metadata comments).

    Parsed files are cached by path, size and modification time (every compile reads the rule files; the
    parse costs ~10 ms). Treat the result as read-only."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    cached = _FILE_CACHE.get(key)
    if cached is None:
        cached = _FILE_CACHE[key] = _parse_file(path)
    return cached


def _parse_file(path: str) -> RuleFile:
    with open(path) as f:
        text = f.read()
    prelude, rules = [], []
    meta: dict[str, str] = {}
    header: tuple[str, str] | None = None
    depth, buffer, start_line = 0, [], 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if depth == 0:
            m = _HEADER.match(line)
            if m:
                key, value = m.group(1), m.group(2)
                if key in _META_KEYS:
                    meta[key] = value
                else:
                    header, meta = (key, value), {}
                continue
            stripped = line.strip()
            if not stripped:
                header, meta = None, {}
                continue
            if stripped.startswith(";"):
                continue
            start_line = lineno
        code = line.split(";", 1)[0]
        depth += code.count("(") - code.count(")")
        buffer.append(line)
        if depth == 0 and buffer:
            for form in parse("\n".join(buffer)):
                _add_form(form, header, meta, path, start_line, prelude, rules)
            buffer, header, meta = [], None, {}
    if depth != 0:
        raise ValueError(f"{path}: unbalanced parentheses at end of file")
    names = [r.name for r in rules]
    dups = {n for n in names if names.count(n) > 1}
    if dups:
        raise ValueError(f"{path}: duplicate rule names {sorted(dups)}")
    return RuleFile(path, prelude, rules)


def _add_form(form, header, meta, path, line, prelude, rules) -> None:
    head = form[0] if isinstance(form, list) and form else None
    if head not in ("rewrite", "rule", "birewrite"):
        prelude.append(form)
        return
    if head == "birewrite":
        raise ValueError(f"{path}:{line}: birewrite is not supported; write two named rewrites")
    if header is None:
        raise ValueError(f"{path}:{line}: a {head} needs a ';; name: reason' comment line right before it")
    options, k = {}, 3
    while k < len(form):
        key = form[k]
        if not (isinstance(key, Symbol) and key.startswith(":")) or k + 1 >= len(form):
            raise ValueError(f"{path}:{line}: malformed option {to_text(key)} in rule {header[0]}")
        options[str(key)] = form[k + 1]
        k += 2
    if ":ruleset" not in options:
        raise ValueError(f"{path}:{line}: rule {header[0]} has no :ruleset")
    rules.append(Rule(header[0], header[1], head, str(options[":ruleset"]), form, os.path.basename(path),
                      meta.get("when", ""), meta.get("tolerance", "exact"), meta.get("domain", ""), options))


def load_rules(paths=None) -> tuple[list, list[Rule]]:
    """Every prelude form and every rule of ``paths`` (default: all rule files), in file order."""
    prelude, rules = [], []
    for p in paths or rule_files():
        rf = load_file(p)
        prelude.extend(rf.prelude)
        rules.extend(rf.rules)
    names = [r.name for r in rules]
    dups = {n for n in names if names.count(n) > 1}
    if dups:
        raise ValueError(f"duplicate rule names across rule files: {sorted(dups)}")
    return prelude, rules
