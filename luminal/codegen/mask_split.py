"""Splitting a vector loop at the edges of its masked reads (the C renderer's innermost loops).

A read through a padded view is rendered as ``(valid) ? b0[i] : (float)0``: inside a convolution's im2col copy,
a pad or a shifted window, every element of the innermost loop evaluates the mask, and GCC vectorizes such a
conditional load poorly (the 2 x 16^3 x 27-window im2col of a padded Conv3d: 3.4 ms against 0.8 ms for the
same copy split at its edges, one process, 2 cores). When every such mask is a conjunction of range checks whose
only use of the loop variable is a ``+ i`` term -- ``((-1 + i7 + i3) < 16) && ((-1 + i7 + i3) >= 0) && ((-1 +
i6 + i2) < 16) ...`` -- the loop runs as three: the masked body below ``lo``, the body with the masks dropped on
``[lo, hi)`` where every check holds (a plain vectorizable copy), and the masked body from ``hi``. Checks that do
not involve the loop variable are tested once for the row; when one fails, the whole row takes the masked body.
Anything else (another form of condition, a select that is not a masked read) leaves the loop as it is.
"""

from __future__ import annotations

import re

# a range check as the emitter renders it: ((a + b + c) < 16) / ((a + b + c) >= 0), a sum without parentheses,
# or (i4 < 15) / (i4 >= 1) on one variable
_ATOM = re.compile(r"\((?:\(([^()]*)\)|(\w+)) (<|>=) (-?\d+)\)")
_ZERO = re.compile(r" : \((?:float|double|_Float16|long long|int|short|signed char|unsigned char|unsigned short|"
                   r"unsigned int|unsigned long long)\)0(?![\w.])")


def _open_paren(text: str, close: int) -> int:
    """The index of the ``(`` matching the ``)`` at ``close`` (-1 when unbalanced)."""
    depth = 0
    for k in range(close, -1, -1):
        if text[k] == ")":
            depth += 1
        elif text[k] == "(":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _ternaries(text: str):
    """``(start, end, condition, value)`` of every ``(cond) ? value : (type)0`` in ``text``, or None when a
    ``?`` is found that is not of that form."""
    out = []
    for m in re.finditer(r"\) \? ", text):
        close = m.start()
        start = _open_paren(text, close)
        if start < 0:
            return None
        zero = _ZERO.search(text, m.end())
        if zero is None or ";" in text[m.end():zero.start()] or "?" in text[m.end():zero.start()]:
            return None
        value = text[m.end():zero.start()]
        if " : " in value or value.count("(") != value.count(")"):
            return None  # a nested select: not the emitter's masked read
        out.append((start, zero.end(), text[start + 1:close], value))
    return out


def _bounds(cond: str, var: str):
    """``(lower bounds, upper bounds, row checks)`` of ``var`` implied by ``cond`` (a pure conjunction of range
    checks over loop indices only; ``var`` only as a ``+ var`` term), or None when ``cond`` has another form."""
    lows, highs, row = [], [], []
    rest = _ATOM.sub("", cond)
    if rest.replace("(", "").replace(")", "").replace("&&", "").strip():
        return None
    for m in _ATOM.finditer(cond):
        if any(not re.fullmatch(r"i\d+", name) for name in re.findall(r"[A-Za-z_]\w*", m.group(0))):
            return None  # a value computed in the body (a gathered index): not known outside the loop
        terms = [t.strip() for t in (m.group(1) or m.group(2)).split(" + ")]
        with_var = [t for t in terms if re.search(rf"\b{var}\b", t)]
        if not with_var:
            row.append(m.group(0))
            continue
        if with_var != [var] or terms.count(var) != 1:
            return None
        others = " + ".join(t for t in terms if t != var) or "0"
        bound = f"({m.group(4)} - ({others}))"
        (highs if m.group(3) == "<" else lows).append(bound)
    return lows, highs, row


def split_masked(body: list[str], var: str, extent: int) -> list[str] | None:
    """The lines replacing ``for (var = 0; var < extent; var++) { body }`` (see the module docstring), or None
    when the body has no masked read of this form."""
    text = "\n".join(body)
    found = _ternaries(text)
    if not found:
        return None
    lows, highs, row = [], [], []
    for _, _, cond, _ in found:
        got = _bounds(cond, var)
        if got is None:
            return None
        lows += got[0]
        highs += got[1]
        row += got[2]
    if not lows and not highs:
        return None
    middle, pos = [], 0
    for start, end, _, value in found:
        middle.append(text[pos:start] + f"({value})")
        pos = end
    middle.append(text[pos:])
    middle = "".join(middle).split("\n")
    lines = ["{", "    long long lm_lo = 0, lm_hi = 0;"]
    checks = " && ".join(dict.fromkeys(row)) or "1"
    lines.append(f"    if ({checks}) {{")
    lines.append("        lm_hi = %d;" % extent)
    for b in dict.fromkeys(lows):
        lines.append(f"        if ({b} > lm_lo) lm_lo = {b};")
    for b in dict.fromkeys(highs):
        lines.append(f"        if ({b} < lm_hi) lm_hi = {b};")
    lines.append(f"        if (lm_lo > {extent}) lm_lo = {extent};")
    lines.append("        if (lm_hi < lm_lo) lm_hi = lm_lo;")
    lines.append("    }")
    lines.append(f"    for (long long {var} = 0; {var} < lm_lo; {var}++) {{")
    lines += ["        " + b for b in body]
    lines.append("    }")
    lines.append("    #pragma omp simd")
    lines.append(f"    for (long long {var} = lm_lo; {var} < lm_hi; {var}++) {{")
    lines += ["        " + b for b in middle]
    lines.append("    }")
    lines.append(f"    for (long long {var} = lm_hi; {var} < {extent}; {var}++) {{")
    lines += ["        " + b for b in body]
    lines.append("    }")
    lines.append("}")
    return lines
