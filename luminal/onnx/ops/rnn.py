"""Recurrent layers: RNN, GRU, LSTM (forward, reverse, bidirectional; layout 0/1; sequence_lens; peepholes;
clip; input_forget; the activation functions of the ONNX spec). The sequence is unrolled at import time (its
length must be a constant); each step is two matrix products and the gate arithmetic."""

from __future__ import annotations

from ...dtype import DType
from ...hl_ops import stack, where
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register


def _activation(name: str, alpha, beta):
    name = name.lower()
    table = {
        "relu": lambda x: x.relu(),
        "tanh": lambda x: x.tanh(),
        "sigmoid": lambda x: x.sigmoid(),
        "affine": lambda x: x * alpha + beta,
        "leakyrelu": lambda x: where(x < 0, x * alpha, x),
        "thresholdedrelu": lambda x: where(x > alpha, x, 0.0),
        "scaledtanh": lambda x: (x * beta).tanh() * alpha,
        "hardsigmoid": lambda x: (x * alpha + beta).clip(0.0, 1.0),
        "elu": lambda x: where(x > 0, x, (x.minimum(0.0).exp() - 1.0) * alpha),
        "softsign": lambda x: x / (x.abs() + 1.0),
        "softplus": lambda x: x.softplus(),
    }
    if name not in table:
        raise OnnxImportError(f"unknown RNN activation {name!r}")
    return table[name]


_DEFAULT_ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0,
                  "hardsigmoid": 0.2, "elu": 1.0}
_DEFAULT_BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}
_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _activations(ctx, defaults, n_dir):
    names = ctx.attr("activations") or defaults * n_dir
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    out = []
    for name in names:
        low = name.lower()
        a = alphas.pop(0) if low in _TAKES_ALPHA and alphas else _DEFAULT_ALPHA.get(low, 0.0)
        b = betas.pop(0) if low in _TAKES_BETA and betas else _DEFAULT_BETA.get(low, 0.0)
        out.append(_activation(name, a, b))
    k = len(defaults)
    return [out[i * k:(i + 1) * k] for i in range(n_dir)]


def _setup(ctx, gates: int):
    x = ctx.t(0)
    layout = ctx.attr("layout", 0)
    if layout:
        x = x.permute(1, 0, 2)                                           # (seq, batch, input)
    seq, batch = dim(x.dims[0]), x.dims[1]
    if is_symbolic(seq):
        raise OnnxImportError(f"{ctx.op_type}: the sequence length must be a constant to unroll, got {seq}")
    direction = ctx.attr("direction", "forward")
    n_dir = 2 if direction == "bidirectional" else 1
    hidden = ctx.attr("hidden_size") or dim(ctx.t(2).dims[2])
    w, r = ctx.t(1), ctx.t(2)
    b = ctx.t(3) if ctx.has(3) else None
    lens = ctx.t(4).cast(DType.int64) if ctx.has(4) else None

    def initial(i):
        if ctx.has(i):
            v = ctx.t(i)
            return v.permute(1, 0, 2) if layout else v                   # (dir, batch, hidden)
        return None

    return x, layout, seq, batch, direction, n_dir, hidden, w, r, b, lens, initial


def _time_major(x, lens, reverse, seq):
    """Per step inputs (batch, input); reversed within each sequence length for a reverse direction."""
    if not reverse:
        return [x.slice_axis(0, t, t + 1).squeeze(0) for t in range(seq)]
    if lens is None:
        return [x.slice_axis(0, seq - 1 - t, seq - t).squeeze(0) for t in range(seq)]
    steps = []
    for t in range(seq):
        src = where(lens - 1 - t >= 0, lens - 1 - t, 0)                  # (batch,)
        idx = src.reshape((1, -1, 1)).expand((1,) + tuple(x.dims[1:]))
        steps.append(x.gather(0, idx).squeeze(0))
    return steps


def _run(ctx, gates, step_fn, defaults, n_states):
    x, layout, seq, batch, direction, n_dir, hidden, w, r, b, lens, initial = _setup(ctx, gates)
    acts = _activations(ctx, defaults, n_dir)
    clip = ctx.attr("clip")
    ys, finals = [], [[] for _ in range(n_states)]
    for d in range(n_dir):
        reverse = direction == "reverse" or d == 1
        wd, rd = w.slice_axis(0, d, d + 1).squeeze(0), r.slice_axis(0, d, d + 1).squeeze(0)
        bias = None
        if b is not None:
            bd = b.slice_axis(0, d, d + 1).squeeze(0)
            bias = bd.slice_axis(0, 0, gates * hidden), bd.slice_axis(0, gates * hidden, 2 * gates * hidden)
        states = []
        for k, idx in enumerate((5, 6)[:n_states]):
            v = initial(idx)
            states.append(v.slice_axis(0, d, d + 1).squeeze(0) if v is not None else
                          ctx.const(0.0, x.dtype, (batch, hidden)))
        outs = [None] * seq
        for t, xt in enumerate(_time_major(x, lens, reverse, seq)):
            new_states = step_fn(ctx, xt, states, wd, rd, bias, hidden, acts[d], clip, d)
            if lens is not None:
                alive = (lens > t).reshape((-1, 1))
                new_states = [where(alive, n, s) for n, s in zip(new_states, states)]
                h_out = where(alive, new_states[0], 0.0)
            else:
                h_out = new_states[0]
            states = new_states
            outs[t] = h_out
        if reverse:
            if lens is None:
                outs = outs[::-1]
            else:
                seq_out = stack(outs, 0)                                 # reversed within each length
                reordered = []
                for t in range(seq):
                    src = where(lens - 1 - t >= 0, lens - 1 - t, 0).reshape((1, -1, 1)).expand(
                        (1,) + tuple(seq_out.dims[1:]))
                    valid = (lens > t).reshape((-1, 1))
                    reordered.append(where(valid, seq_out.gather(0, src).squeeze(0), 0.0))
                outs = reordered
        ys.append(stack(outs, 0))                                         # (seq, batch, hidden)
        for k in range(n_states):
            finals[k].append(states[k])
    y = stack(ys, 1)                                                      # (seq, dir, batch, hidden)
    final = [stack(f, 0) for f in finals]                                 # (dir, batch, hidden)
    if layout:
        y = y.permute(2, 0, 1, 3)
        final = [f.permute(1, 0, 2) for f in final]
    return [y] + final


def _gate_inputs(xt, h, wd, rd, bias, gates, hidden, clip):
    pre = xt @ wd.permute(1, 0) + h @ rd.permute(1, 0)                    # (batch, gates*hidden)
    if bias is not None:
        pre = pre + bias[0] + bias[1]
    parts = [pre.slice_axis(1, k * hidden, (k + 1) * hidden) for k in range(gates)]
    return parts


def _clip(v, clip):
    return v if clip is None else v.clip(-clip, clip)


def _rnn_step(ctx, xt, states, wd, rd, bias, hidden, acts, clip, d):
    (pre,) = _gate_inputs(xt, states[0], wd, rd, bias, 1, hidden, clip)
    return [acts[0](_clip(pre, clip))]


def _gru_step(ctx, xt, states, wd, rd, bias, hidden, acts, clip, d):
    h = states[0]
    f, g = acts
    xw = xt @ wd.permute(1, 0)
    if bias is not None:
        xw = xw + bias[0]
    rz = rd.slice_axis(0, 0, 2 * hidden)
    rh = rd.slice_axis(0, 2 * hidden, 3 * hidden)
    hr = h @ rz.permute(1, 0)
    if bias is not None:
        hr = hr + bias[1].slice_axis(0, 0, 2 * hidden)
    z = f(_clip(xw.slice_axis(1, 0, hidden) + hr.slice_axis(1, 0, hidden), clip))
    r = f(_clip(xw.slice_axis(1, hidden, 2 * hidden) + hr.slice_axis(1, hidden, 2 * hidden), clip))
    rbh = bias[1].slice_axis(0, 2 * hidden, 3 * hidden) if bias is not None else 0.0
    if ctx.attr("linear_before_reset", 0):
        cand = xw.slice_axis(1, 2 * hidden, 3 * hidden) + r * (h @ rh.permute(1, 0) + rbh)
    else:
        cand = xw.slice_axis(1, 2 * hidden, 3 * hidden) + (r * h) @ rh.permute(1, 0) + rbh
    ht = g(_clip(cand, clip))
    return [(1.0 - z) * ht + z * h]


def _lstm_step(ctx, xt, states, wd, rd, bias, hidden, acts, clip, d):
    h, c = states
    f, g, hf = acts
    i_pre, o_pre, f_pre, c_pre = _gate_inputs(xt, h, wd, rd, bias, 4, hidden, clip)
    if ctx.has(7):
        p = ctx.t(7).slice_axis(0, d, d + 1).squeeze(0)
        pi, po, pf = (p.slice_axis(0, k * hidden, (k + 1) * hidden) for k in range(3))
        i_pre, f_pre = i_pre + pi * c, f_pre + pf * c
    else:
        po = None
    i = f(_clip(i_pre, clip))
    fg = 1.0 - i if ctx.attr("input_forget", 0) else f(_clip(f_pre, clip))
    ct = g(_clip(c_pre, clip))
    c_new = fg * c + i * ct
    if po is not None:
        o_pre = o_pre + po * c_new
    o = f(_clip(o_pre, clip))
    return [o * hf(c_new), c_new]


@register("RNN")
def _rnn(ctx):
    return _run(ctx, 1, _rnn_step, ["Tanh"], 1)


@register("GRU")
def _gru(ctx):
    return _run(ctx, 3, _gru_step, ["Sigmoid", "Tanh"], 1)


@register("LSTM")
def _lstm(ctx):
    return _run(ctx, 4, _lstm_step, ["Sigmoid", "Tanh", "Tanh"], 2)

