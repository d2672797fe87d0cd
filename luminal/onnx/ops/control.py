"""Control flow, resolved at import time: If (a constant condition inlines one branch; a run-time condition
builds both and selects with ``where``), Loop and Scan (unrolled: the trip count and the sequence length
must be known at import time, and a Loop's condition must fold to a constant each iteration)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from ...hl_ops import stack, where
from ..errors import NeedsStaticInputError, OnnxImportError
from ..importer import Value
from ..registry import dim, register
from ._common import axis as norm_axis

MAX_UNROLL = 4096


def _static_bool(v) -> bool | None:
    if v is None or v.static is None:
        return None
    return bool(np.asarray(v.static).reshape(-1)[0])


@register("If")
def _if(ctx):
    cond = _static_bool(ctx.value(0))
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    if cond is not None:
        return ctx.importer.inline_graph(then_g if cond else else_g, ctx.scope)
    then_out = ctx.importer.inline_graph(then_g, ctx.scope)
    else_out = ctx.importer.inline_graph(else_g, ctx.scope)
    c = ctx.t(0).reshape(())
    out = []
    for k, (a, b) in enumerate(zip(then_out, else_out)):
        ta, tb = ctx.importer.materialize(a, ctx.graph), ctx.importer.materialize(b, ctx.graph)
        if ta.dims != tb.dims:
            raise NeedsStaticInputError(
                f"If: output {k} has shape {[str(d) for d in ta.dims]} in one branch and "
                f"{[str(d) for d in tb.dims]} in the other, so the condition must be known at import time",
                ctx.value(0).sources)
        out.append(where(c, ta, tb))
    return out


def _stack_values(ctx, values, axis):
    if all(v.static is not None for v in values):
        return np.stack([np.asarray(v.static) for v in values], axis)
    return stack([ctx.importer.materialize(v, ctx.graph) for v in values], axis)


@register("Loop")
def _loop(ctx):
    body = ctx.attr("body")
    trip = None
    if ctx.has(0):
        trip = int(ctx.scalar(0, "input 'M' (the trip count; the loop is unrolled)"))
    cond = ctx.value(1) if ctx.has(1) else None
    if cond is not None and _static_bool(cond) is None:
        raise NeedsStaticInputError("Loop: the initial condition must be known at import time (the loop is "
                                    "unrolled)", cond.sources)
    carried = [ctx.value(i) for i in range(2, len(ctx))]
    n_carried = len(carried)
    scans: list[list[Value]] = [[] for _ in range(len(body.output) - 1 - n_carried)]
    i = 0
    keep_going = cond is None or _static_bool(cond)
    while keep_going and (trip is None or i < trip):
        if i >= MAX_UNROLL:
            raise OnnxImportError(f"Loop: more than {MAX_UNROLL} iterations; unrolling stops here")
        bound = {body.input[0].name: Value(body.input[0].name, TP.INT64, static=np.array(i, dtype=np.int64))}
        if len(body.input) > 1:
            bound[body.input[1].name] = Value(body.input[1].name, TP.BOOL, static=np.array(True))
        for formal, v in zip(body.input[2:], carried):
            bound[formal.name] = v
        outs = ctx.importer.inline_graph(body, ctx.scope, bound)
        c = _static_bool(outs[0])
        if c is None:
            raise NeedsStaticInputError("Loop: the body's condition output must be known at import time "
                                        "(the loop is unrolled)", outs[0].sources)
        carried = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            scans[k].append(v)
        keep_going = c
        i += 1
    result = list(carried)
    for k, seq in enumerate(scans):
        if not seq:
            raise OnnxImportError(f"Loop: scan output {k} is empty (zero iterations); its shape is unknown")
        result.append(_stack_values(ctx, seq, 0))
    return result


@register("Scan", min_version=9)
def _scan(ctx):
    body = ctx.attr("body")
    m = ctx.attr("num_scan_inputs")
    n_inputs = len(ctx)
    n_state = n_inputs - m
    states = [ctx.value(i) for i in range(n_state)]
    xs = [ctx.t(i) for i in range(n_state, n_inputs)]
    in_axes = ctx.attr_ints("scan_input_axes", [0] * m)
    in_dirs = ctx.attr_ints("scan_input_directions", [0] * m)
    n_scan_out = len(body.output) - n_state
    out_axes = ctx.attr_ints("scan_output_axes", [0] * n_scan_out)
    out_dirs = ctx.attr_ints("scan_output_directions", [0] * n_scan_out)
    in_axes = [norm_axis(a, x.ndim) for a, x in zip(in_axes, xs)]
    lengths = {dim(x.dims[a]) for x, a in zip(xs, in_axes)}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        raise OnnxImportError(f"Scan: the scanned axes must have one concrete length, got {lengths}")
    steps = lengths.pop()
    if steps > MAX_UNROLL:
        raise OnnxImportError(f"Scan: {steps} steps is more than the {MAX_UNROLL} unrolled at import time")
    collected: list[list[Value]] = [[] for _ in range(n_scan_out)]
    for t in range(steps):
        bound = {}
        for formal, v in zip(body.input[:n_state], states):
            bound[formal.name] = v
        for j, (formal, x, a, d) in enumerate(zip(body.input[n_state:], xs, in_axes, in_dirs)):
            pos = steps - 1 - t if d else t
            sl = x.slice_axis(a, pos, pos + 1).squeeze(a)
            bound[formal.name] = Value(formal.name, ctx.type(n_state + j), tensor=sl, sources=ctx.value(n_state + j).sources)
        outs = ctx.importer.inline_graph(body, ctx.scope, bound)
        states = outs[:n_state]
        for k, v in enumerate(outs[n_state:]):
            collected[k].append(v)
    result = list(states)
    for k, seq in enumerate(collected):
        if out_dirs[k]:
            seq = seq[::-1]
        rank = len(ctx.importer.materialize(seq[0], ctx.graph).dims) + 1
        result.append(_stack_values(ctx, seq, norm_axis(out_axes[k], rank)))
    return result

