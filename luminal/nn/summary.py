"""``summary(module)``: a table of a model's submodules with their parameter counts (like ``torchinfo`` /
Keras' ``model.summary()``, without running the model)."""

from __future__ import annotations

import numpy as np


def parameter_count(module, trainable_only: bool = False) -> int:
    """Number of parameter elements of ``module`` (each shared Parameter counted once); ``trainable_only`` counts
    those with ``requires_grad``."""
    seen, total = set(), 0
    for _, p in module.named_parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += int(np.prod(p.shape, dtype=np.int64))
    return total


def summary(module, max_depth: int | None = None) -> str:
    """A text table: each submodule (dotted name, indented by depth, up to ``max_depth``), its type, the parameters
    it owns directly and in total (with children); then the totals (all, trainable, non-trainable) and the size
    of the parameters in bytes. Buffers are not counted as parameters."""
    rows = []
    for name, mod in module.named_modules():
        depth = 0 if not name else name.count(".") + 1
        if max_depth is not None and depth > max_depth:
            continue
        own = sum(int(np.prod(p.shape, dtype=np.int64)) for n, p in mod.named_parameters() if "." not in n)
        rows.append(("  " * depth + (name.rsplit(".", 1)[-1] if name else "(root)"), type(mod).__name__, own,
                     parameter_count(mod)))
    w0 = max(len("module"), *(len(r[0]) for r in rows))
    w1 = max(len("type"), *(len(r[1]) for r in rows))
    lines = [f"{'module':<{w0}}  {'type':<{w1}}  {'own params':>12}  {'total params':>13}",
             "-" * (w0 + w1 + 31)]
    for n, t, own, tot in rows:
        lines.append(f"{n:<{w0}}  {t:<{w1}}  {own:>12,}  {tot:>13,}")
    total = parameter_count(module)
    trainable = parameter_count(module, trainable_only=True)
    seen, nbytes = set(), 0
    for _, p in module.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            nbytes += int(np.asarray(p.data).nbytes)
    lines += ["-" * (w0 + w1 + 31), f"total params: {total:,}", f"trainable params: {trainable:,}",
              f"non-trainable params: {total - trainable:,}", f"params size: {nbytes / 2 ** 20:.2f} MiB"]
    return "\n".join(lines)
