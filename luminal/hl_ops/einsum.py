"""``einsum`` (``torch.einsum``), lowered to views, ``Mul`` and ``SumReduce``.

The general form: explicit (``"ij,jk->ik"``) or implicit (``"ij,jk"``: the letters seen once, alphabetically)
output, ``...`` (broadcast batch dims), repeated letters inside one operand (``"ii->i"`` takes the diagonal,
``"ii"`` the trace), outer products (``"i,j->ij"``), letters summed away.

Lowering: each operand takes the diagonal of its repeated letters (:meth:`diagonal`, a strided view), sums the
letters no one else needs, and is permuted/unsqueezed (views) onto a common letter order. Operands are then
combined left to right: ``sum(a * b)`` over the letters that neither the output nor a later operand uses, so a
two-operand contraction is exactly the broadcast-multiply-and-sum pattern the compilers recognize as a matmul.

Under :class:`luminal.autocast` (two or more float operands) each pairwise step that sums a shared letter is a
``bmm`` in torch's einsum, which autocast runs in low precision: both sides are rounded to the autocast dtype, the
sum runs in float32 and the result is rounded to the autocast dtype. A step that sums nothing (an outer or
elementwise product) is a plain multiplication in the operands' dtypes, as in torch (so ``"i,j->ij"`` stays
float32, and ``"ij,j,k->ik"`` gives float32: a bf16 contraction times a float32 operand).
"""

from __future__ import annotations

import string

from ..amp import autocast_off, lower_precision_dtype, round_to
from ..graph import GraphError

_LETTERS = set(string.ascii_letters)


def _parse(equation: str, operands):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
        explicit = True
    else:
        lhs, out, explicit = eq, None, False
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: the equation has {len(terms)} operands, {len(operands)} tensors were given")
    ell_ndim = 0
    parsed = []
    for term, t in zip(terms, operands):
        if term.count("...") > 1 or (term.replace("...", "") and not set(term.replace("...", "")) <= _LETTERS):
            raise ValueError(f"einsum: invalid subscripts {term!r} in {equation!r}")
        if "..." in term:
            n_ell = t.ndim - (len(term) - 3)
            if n_ell < 0:
                raise ValueError(f"einsum: operand {term!r} has {t.ndim} dims, fewer than its subscripts")
            ell_ndim = max(ell_ndim, n_ell)
        elif len(term) != t.ndim:
            raise ValueError(f"einsum: subscripts {term!r} name {len(term)} dims, the operand has {t.ndim}")
        parsed.append(term)
    ell = [f"\0{k}" for k in range(ell_ndim)]   # ellipsis dims as pseudo-letters, aligned to the right
    labels = []
    for term, t in zip(parsed, operands):
        if "..." in term:
            pre, post = term.split("...")
            n_ell = t.ndim - len(pre) - len(post)
            labels.append(list(pre) + ell[ell_ndim - n_ell:] + list(post))
        else:
            labels.append(list(term))
    if explicit:
        if out.count("...") > 1 or (out.replace("...", "") and not set(out.replace("...", "")) <= _LETTERS):
            raise ValueError(f"einsum: invalid output subscripts {out!r}")
        if "..." in out:
            pre, post = out.split("...")
            out_labels = list(pre) + ell + list(post)
        else:
            out_labels = list(out)  # ellipsis dims, if any, are summed away (as torch)
        seen = [c for lab in labels for c in lab]
        for c in out_labels:
            if c not in seen:
                raise ValueError(f"einsum: output letter {c!r} does not appear in the inputs of {equation!r}")
        if len(set(out_labels)) != len(out_labels):
            raise ValueError(f"einsum: output subscripts {out!r} repeat a letter")
    else:
        counts = {}
        for lab in labels:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out_labels = ell + sorted(c for c, k in counts.items() if k == 1 and not c.startswith("\0"))
    return labels, out_labels


def einsum(equation: str, *operands):
    """Einstein summation over ``operands`` (``torch.einsum``; the operands may also be passed as one list)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum needs at least one operand")
    low = lower_precision_dtype(*operands) if len(operands) >= 2 else None
    with autocast_off():
        return _einsum(equation, operands, low)


def _einsum(equation: str, operands, low):
    labels, out_labels = _parse(equation, operands)
    sizes = {}
    prepared = []
    for lab, t in zip(labels, operands):
        t, lab = _take_diagonals(t, lab)
        for c, d in zip(lab, t.dims):
            if c in sizes and sizes[c] != d and d != 1 and sizes[c] != 1:
                raise GraphError(f"einsum: letter {c!r} has sizes {sizes[c]} and {d} in {equation!r}")
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
        prepared.append((t, lab))
    # letters in order of first appearance (output first, so the final permute is cheap)
    order = list(out_labels) + [c for lab in labels for c in lab if c not in out_labels]
    order = list(dict.fromkeys(order))
    # sum letters that appear in a single operand and not in the output early
    count = {c: sum(c in lab for _, lab in prepared) for c in order}
    reduced = []
    for t, lab in prepared:
        own = [k for k, c in enumerate(lab) if count[c] == 1 and c not in out_labels]
        if own:
            t = t.sum(tuple(own))
            lab = [c for k, c in enumerate(lab) if k not in own]
        reduced.append((t, lab))
    acc, acc_lab = reduced[0]
    for i in range(1, len(reduced)):
        t, lab = reduced[i]
        later = set(c for _, ll in reduced[i + 1:] for c in ll)
        union = [c for c in order if c in acc_lab or c in lab]
        drop = [k for k, c in enumerate(union) if c not in out_labels and c not in later]
        if low is not None and drop:  # autocast: a contraction (torch's bmm) on rounded inputs, rounded once
            acc, t = round_to(acc, low), round_to(t, low)
        a = _align(acc, acc_lab, union)
        b = _align(t, lab, union)
        prod = a * b
        acc = prod.sum(tuple(drop)) if drop else prod
        if low is not None and drop:
            acc = acc.cast(low)
        acc_lab = [c for k, c in enumerate(union) if k not in drop]
    drop = [k for k, c in enumerate(acc_lab) if c not in out_labels]
    if drop:
        acc = acc.sum(tuple(drop))
        acc_lab = [c for k, c in enumerate(acc_lab) if k not in drop]
    missing = [c for c in out_labels if c not in acc_lab]
    for c in missing:  # an output letter of size 1 broadcast away (cannot happen otherwise)
        acc = acc.unsqueeze(-1)
        acc_lab.append(c)
    if acc_lab != list(out_labels):
        acc = acc.permute([acc_lab.index(c) for c in out_labels])
    target = [sizes[c] for c in out_labels]
    if list(acc.dims) != target:
        acc = acc.expand(target)
    return acc


def _take_diagonals(t, lab):
    """Collapse letters repeated within one operand to their diagonal (the letter kept at its first place)."""
    lab = list(lab)
    while True:
        dup = next((c for c in lab if lab.count(c) > 1), None)
        if dup is None:
            return t, lab
        i = lab.index(dup)
        j = lab.index(dup, i + 1)
        t = t.diagonal(0, i, j)                      # removes i and j, appends the diagonal last
        lab = [c for k, c in enumerate(lab) if k not in (i, j)] + [dup]
        last = t.ndim - 1
        perm = list(range(last))
        perm.insert(i, last)
        t = t.permute(perm)
        lab = lab[:-1]
        lab.insert(i, dup)


def _align(t, lab, union):
    """``t`` (letters ``lab``) permuted into ``union``'s order with size-1 axes for the letters it lacks."""
    present = [c for c in union if c in lab]
    if present != lab:
        t = t.permute([lab.index(c) for c in present])
    for k, c in enumerate(union):
        if c not in lab:
            t = t.unsqueeze(k)
    return t
