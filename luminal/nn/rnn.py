"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and the cells ``RNNCell``, ``LSTMCell``, ``GRUCell``.

Constructor arguments, parameter names, shapes and order (so ``load_state_dict(torch_module.state_dict())``
works), default initialization (every weight and bias ``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``), gate
order (LSTM ``i, f, g, o``; GRU ``r, z, n`` with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``), inputs and
return values follow ``torch.nn``.

The recurrence is **unrolled** when the graph is built: one step per time index. Each layer and direction first
projects the sequence in one matmul per chunk of steps (``x W_ih^T + b``, a (B*N, I) x (I, G) GEMM; the whole
sequence up to 8 steps, else about sqrt(L) chunks: see "time axis" below); each step then does only
``h W_hh^T`` and the gate arithmetic. Unrolling needs a concrete sequence length: a symbolic one raises a
``GraphError`` naming the dim (the graph has no loop construct; see docs/nn.md, "Recurrent layers"). The batch
dim may be symbolic. Gradients flow through the unrolled steps (backpropagation through time) with
``luminal.training``'s autograd.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import GraphError
from ..hl_ops import concat, stack
from ..module import Module, Parameter, bind, check_graph_tensor
from . import init

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _dims(t) -> str:
    return "(" + ", ".join(str(d) for d in t.dims) + ")"


def _check_shape(t, expected, what: str, where: str) -> None:
    """``t``'s dims must equal ``expected`` (ints or expressions); a GraphError naming both otherwise."""
    if t.ndim != len(expected) or any(d != e for d, e in zip(t.dims, expected)):
        want = "(" + ", ".join(str(e) for e in expected) + ")"
        raise GraphError(f"{where}: expected {what} of shape {want}, got {_dims(t)}")


def _check_dtype(t, dtype, what: str, where: str) -> None:
    """PyTorch's rule: inputs and states have the parameters' dtype (no silent promotion)."""
    if t.dtype != dtype:
        raise GraphError(f"{where}: {what} must have the parameters' dtype {dtype.value}, got {t.dtype.value} "
                         "(cast it, or build the module with dtype=...)")


def _uniform_init(module: Module, hidden_size: int) -> None:
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


# ------------------------------------------------------------------------------------------------ time axis
# The backends evaluate a sum of padded tensors (how ``stack``/``concat`` are built, and how the gradient of L
# step views of one tensor accumulates) as one fused loop reading every term at every element (the compilers
# flatten nested sums of pads): stacking L step outputs, or differentiating L slices of one (L, N, G) input
# projection, costs O(L) per element, O(L^2) in all. So the time axis is cut into about sqrt(L) chunks of about
# sqrt(L) steps: each chunk gets its own input-projection GEMM (x_chunk W_ih^T: (B*N, I) x (I, G), still one
# large GEMM per chunk) and its outputs are stacked into one chunk tensor behind a ``GraphBreak``, which the next
# layer's GEMM reads directly; only the layer's final output is a concatenation of the chunks. Every sum then has
# about sqrt(L) terms (64 steps: 8 chunks of 8).
_FLAT_STEPS = 8
"""Up to this many steps the sequence is one chunk."""


def _chunks(L: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the chunks of a length-L time axis (see above)."""
    if L <= _FLAT_STEPS:
        return [(0, L)]
    size = math.ceil(math.sqrt(L))
    return [(s, min(s + size, L)) for s in range(0, L, size)]


def _join_chunks(chunks: list):
    return chunks[0] if len(chunks) == 1 else concat(chunks, 0)


# ------------------------------------------------------------------------------------------------ one step
# Every tanh is computed as ``2 sigmoid(2 x) - 1``, and the factor 2 is folded into the weight rows that feed it
# (exact: a power of two), so that each step evaluates one or two sigmoids over whole gate blocks instead of a
# sigmoid or tanh per gate. The graph (forward and, above all, its gradient) is about half the size, which
# halves compile times; the result differs from tanh by at most a few float32 ulp of 1 (absolute).
def _tanh_via_sigmoid(s):
    """``2 s - 1`` for ``s = sigmoid(2 x)``: ``tanh(x)``."""
    return s * 2.0 - 1.0


def _row_scale(graph, dtype, H: int, blocks):
    """A (len(blocks) * H,) tensor holding ``blocks[k]`` over rows ``k*H .. (k+1)*H`` (constants, no input)."""
    parts = [graph.constant(float(v), dtype, (H,)) for v in blocks]
    return parts[0] if len(parts) == 1 else concat(parts, 0)


_SCALES = {"RNN_TANH": (2.0,), "RNN_RELU": None, "LSTM": (1.0, 1.0, 2.0, 1.0), "GRU": (1.0, 1.0, 2.0)}


def _prepared_weights(mode: str, H: int, w_ih, w_hh, b_ih, b_hh):
    """``(w_ih, w_hh, bias, b_hn)`` as the steps use them: rows feeding a tanh doubled (see above); ``bias`` is
    what is added to ``x W_ih^T`` before the recurrence (``b_ih + b_hh``; for the GRU ``b_ih + [b_hr, b_hz, 0]``);
    ``b_hn`` the GRU's bias inside ``r * (W_hn h + b_hn)`` (None for the others or without bias)."""
    blocks = _SCALES[mode]
    if blocks is not None:
        scale = _row_scale(w_ih.graph, w_ih.dtype, H, blocks)
        w_ih, w_hh = w_ih * scale.unsqueeze(-1), w_hh * scale.unsqueeze(-1)
        if b_ih is not None:
            b_ih, b_hh = b_ih * scale, b_hh * scale
    if b_ih is None:
        return w_ih, w_hh, None, None
    if mode == "GRU":
        return w_ih, w_hh, b_ih + b_hh.slice_axis(0, 0, 2 * H).pad_axis(0, 0, H), b_hh.slice_axis(0, 2 * H, 3 * H)
    return w_ih, w_hh, b_ih + b_hh, None


def _rnn_step(gi, h, w_hh, act):
    """``act(gi + h W_hh^T)`` (both biases are in ``gi``; for tanh the weights are doubled); ``h=None`` is a
    zero state."""
    pre = gi if h is None else gi + h @ w_hh.T
    return _tanh_via_sigmoid(pre.sigmoid()) if act == "tanh" else pre.relu()


def _lstm_step(gi, h, c, w_hh, w_hr, H: int):
    """One LSTM step: ``gi`` holds ``x W_ih^T + b_ih + b_hh`` for this time index (the g rows doubled);
    ``h``/``c`` None are zero states."""
    gates = gi if h is None else gi + h @ w_hh.T
    s = gates.sigmoid()  # i, f, o, and sigmoid(2 g_pre) for g = tanh(g_pre)
    i, f, o = s.slice_axis(-1, 0, H), s.slice_axis(-1, H, 2 * H), s.slice_axis(-1, 3 * H, 4 * H)
    g = _tanh_via_sigmoid(s.slice_axis(-1, 2 * H, 3 * H))
    c_new = i * g if c is None else f * c + i * g
    h_new = o * _tanh_via_sigmoid((c_new * 2.0).sigmoid())
    if w_hr is not None:
        h_new = h_new @ w_hr.T
    return h_new, c_new


def _gru_step(gi, h, w_hh, b_hn, H: int):
    """One GRU step: ``gi`` holds ``x W_ih^T + b_ih`` plus ``b_hr, b_hz`` on the r and z gates; ``b_hn`` (or
    None without bias) is added to ``W_hn h`` inside ``r * (...)`` as PyTorch does (the n rows doubled)."""
    if h is None:
        rz = gi.slice_axis(-1, 0, 2 * H).sigmoid()
        hn = b_hn
    else:
        gh = h @ w_hh.T
        rz = (gi.slice_axis(-1, 0, 2 * H) + gh.slice_axis(-1, 0, 2 * H)).sigmoid()
        hn = gh.slice_axis(-1, 2 * H, 3 * H)
        if b_hn is not None:
            hn = hn + b_hn
    r, z = rz.slice_axis(-1, 0, H), rz.slice_axis(-1, H, 2 * H)
    gin = gi.slice_axis(-1, 2 * H, 3 * H)
    n = _tanh_via_sigmoid((gin if hn is None else gin + r * hn).sigmoid())
    if h is None:
        return (1.0 - z) * n
    return n + z * (h - n)  # (1 - z) n + z h


# ------------------------------------------------------------------------------------------------ sequence layers
class RNNBase(Module):
    """Shared implementation of ``RNN``, ``LSTM`` and ``GRU`` (``mode``: ``RNN_TANH``, ``RNN_RELU``, ``LSTM``,
    ``GRU``, as ``torch.nn.RNNBase``).

    ``seed`` (luminal's addition) fixes the stream of the dropout masks between layers (see
    :mod:`luminal.nn.dropout`); by default it is drawn from :mod:`luminal.nn.init`'s generator when
    ``dropout > 0``.
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, dtype=None, seed: int | None = None):
        super().__init__()
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             f"element being zeroed, got {dropout!r}")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers),
                            ("proj_size", proj_size)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if input_size < 0:
            raise ValueError("input_size must be non-negative")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode = mode
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bool(bias), bool(batch_first)
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bool(bidirectional), int(proj_size)
        self.nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}.get(mode)
        gate_size = _GATES[mode] * self.hidden_size
        real_hidden = self.proj_size or self.hidden_size
        directions = 2 if self.bidirectional else 1
        names = []
        for layer in range(self.num_layers):
            layer_input = self.input_size if layer == 0 else real_hidden * directions
            for direction in range(directions):
                sfx = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                shapes = [("weight_ih" + sfx, (gate_size, layer_input)), ("weight_hh" + sfx, (gate_size, real_hidden))]
                if self.bias:
                    shapes += [("bias_ih" + sfx, (gate_size,)), ("bias_hh" + sfx, (gate_size,))]
                if self.proj_size:
                    shapes.append(("weight_hr" + sfx, (self.proj_size, self.hidden_size)))
                for name, shape in shapes:
                    setattr(self, name, Parameter(np.zeros(shape), dtype))
                names.append([name for name, _ in shapes])
        object.__setattr__(self, "_all_weights", names)
        _uniform_init(self, self.hidden_size)
        seed = (int(init._rng(None).integers(0, 2 ** 63 - 1)) if self.dropout > 0 and self.num_layers > 1
                else 0) if seed is None else int(seed)
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "_calls", 0)
        object.__setattr__(self, "_steps", {})

    # -------------------------------------------------------------------------------- torch compatibility
    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters per layer and direction (``torch.nn.RNNBase.all_weights``)."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """Accepted for compatibility (cuDNN weight packing in PyTorch); nothing to do here."""

    def rng_state(self) -> dict:
        """The position of the dropout mask stream (as :meth:`luminal.nn.Dropout.rng_state`)."""
        return {"seed": self.seed, "steps": dict(self._steps)}

    def load_rng_state(self, state: dict) -> None:
        object.__setattr__(self, "seed", int(state["seed"]))
        self._steps.clear()
        self._steps.update({int(k): int(v) for k, v in dict(state["steps"]).items()})

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.nonlinearity == "relu":
            s += ", nonlinearity='relu'"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

    # -------------------------------------------------------------------------------- forward
    def _check_input(self, x):
        name = type(self).__name__
        x = check_graph_tensor(x, name)
        if x.ndim not in (2, 3):
            raise GraphError(f"{name}: Expected input to be 2D (seq, features) or 3D "
                             f"({'batch, seq' if self.batch_first else 'seq, batch'}, features), got {x.ndim}D "
                             f"input of shape {_dims(x)}")
        if x.dims[-1] != self.input_size:
            raise GraphError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                             f"got {x.dims[-1]} (input shape {_dims(x)})")
        _check_dtype(x, self.weight_ih_l0.dtype, "input", name)
        return x

    def _check_state(self, t, batched: bool, batch, size: int, what: str):
        name = type(self).__name__
        t = check_graph_tensor(t, f"{name} {what}")
        rows = self.num_layers * (2 if self.bidirectional else 1)
        if not batched and t.ndim != 2:
            raise GraphError(f"{name}: for unbatched 2-D input, {what} should also be 2-D "
                             f"({rows}, {size}) but got a {t.ndim}-D tensor of shape {_dims(t)}")
        if batched and t.ndim != 3:
            raise GraphError(f"{name}: for batched 3-D input, {what} should also be 3-D "
                             f"({rows}, {batch}, {size}) but got a {t.ndim}-D tensor of shape {_dims(t)}")
        _check_shape(t, (rows, batch, size) if batched else (rows, size), what, name)
        _check_dtype(t, self.weight_ih_l0.dtype, what, name)
        return t if batched else t.unsqueeze(1)

    def forward(self, input, hx=None):
        """``input``: (L, N, input_size) (``batch_first``: (N, L, input_size)) or unbatched (L, input_size).
        ``hx``: ``h_0`` (RNN, GRU) or ``(h_0, c_0)`` (LSTM), each (D * num_layers, N, size) or, unbatched,
        (D * num_layers, size); None is zeros. Returns ``(output, h_n)`` or ``(output, (h_n, c_n))``."""
        name = type(self).__name__
        x = self._check_input(input)
        batched = x.ndim == 3
        if not batched:
            x = x.unsqueeze(1)  # (L, 1, I)
        elif self.batch_first:
            x = x.permute((1, 0, 2))  # time-major: the per-step slices are contiguous rows
        L = x.dims[0].to_int()
        if L is None:
            seq_dim = "dim 1 (batch_first)" if batched and self.batch_first else "dim 0"
            raise GraphError(f"{name}: the sequence length ({seq_dim} of the input, {x.dims[0]}) must be concrete: "
                             "the recurrence is unrolled when the graph is built. Bind it to a fixed length "
                             "(build one graph per length, or pad the sequences to a maximum length).")
        if L == 0:
            raise GraphError(f"{name}: expected a sequence length larger than 0, got input of shape {_dims(input)}")
        batch = x.dims[1]
        directions = 2 if self.bidirectional else 1
        real_hidden = self.proj_size or self.hidden_size
        lstm = self.mode == "LSTM"
        h0 = c0 = None
        if hx is not None:
            if lstm:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise GraphError(f"{name}: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
                h0 = self._check_state(hx[0], batched, batch, real_hidden, "h_0")
                c0 = self._check_state(hx[1], batched, batch, self.hidden_size, "c_0")
            else:
                if isinstance(hx, (tuple, list)):
                    raise GraphError(f"{name}: hx must be a tensor h_0, got a {type(hx).__name__}")
                h0 = self._check_state(hx, batched, batch, real_hidden, "h_0")

        h_n, c_n = [], []
        spans = _chunks(L)
        layer_input = [x if len(spans) == 1 else x.slice_axis(0, start, stop) for start, stop in spans]
        for layer in range(self.num_layers):
            if layer > 0 and self.training and self.dropout > 0:
                layer_input = [self._dropout(chunk) for chunk in layer_input]
            outs = []
            for direction in range(directions):
                k = layer * directions + direction
                params = [bind(p, x) for p in self.all_weights[k]]
                h_init = None if h0 is None else h0.slice_axis(0, k, k + 1).squeeze(0)
                c_init = None if c0 is None else c0.slice_axis(0, k, k + 1).squeeze(0)
                out, h_last, c_last = self._run_direction(layer_input, params, h_init, c_init, direction == 1)
                outs.append(out)
                h_n.append(h_last)
                c_n.append(c_last)
            layer_input = outs[0] if directions == 1 else [concat(pair, -1) for pair in zip(*outs)]

        output = _join_chunks(layer_input)
        hn = stack(h_n, 0)
        cn = stack(c_n, 0) if lstm else None
        if not batched:
            output, hn = output.squeeze(1), hn.squeeze(1)
            cn = cn.squeeze(1) if lstm else None
        elif self.batch_first:
            output = output.permute((1, 0, 2))
        return (output, (hn, cn)) if lstm else (output, hn)

    def _dropout(self, x):
        from .dropout import _apply
        call = self._calls
        object.__setattr__(self, "_calls", call + 1)
        return _apply(x, self.dropout, True, self.seed, call, None, self._steps)

    def _run_direction(self, chunks, params, h, c, reverse: bool):
        """One layer in one direction over the time-major chunks (B_k, N, I) of its input (see "time axis"
        above): ``(output chunks (B_k, N, H_out), h_L, c_L)``."""
        H = self.hidden_size
        b_ih, b_hh = (params[2], params[3]) if self.bias else (None, None)
        w_hr = params[-1] if self.proj_size else None
        w_ih, w_hh, bias, b_hn = _prepared_weights(self.mode, H, params[0], params[1], b_ih, b_hh)
        steps = []
        for chunk in chunks:
            gi = chunk @ w_ih.T  # every step of the chunk in one GEMM: (B, N, I) x (I, G)
            if bias is not None:
                gi = gi + bias
            steps += [gi.slice_axis(0, j, j + 1).squeeze(0) for j in range(chunk.dims[0].to_int())]
        L = len(steps)
        outs = [None] * L
        for t in (range(L - 1, -1, -1) if reverse else range(L)):
            g = steps[t]
            if self.mode == "LSTM":
                h, c = _lstm_step(g, h, c, w_hh, w_hr, H)
            elif self.mode == "GRU":
                h = _gru_step(g, h, w_hh, b_hn, H)
            else:
                h = _rnn_step(g, h, w_hh, self.nonlinearity)
            outs[t] = h
        out_chunks, start = [], 0
        for chunk in chunks:
            stop = start + chunk.dims[0].to_int()
            stacked = stack(outs[start:stop], 0)
            out_chunks.append(stacked if len(chunks) == 1 else stacked.graph_break())
            start = stop
        return out_chunks, h, c


class RNN(RNNBase):
    """``torch.nn.RNN``: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with ``act`` tanh or relu.

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True, batch_first=False,
    dropout=0.0, bidirectional=False)`` (positional arguments in that order, as PyTorch)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype=None, seed: int | None = None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, 0, dtype, seed)


class LSTM(RNNBase):
    """``torch.nn.LSTM`` (gates ``i, f, g, o``; ``proj_size > 0`` projects ``h`` by ``weight_hr``).
    ``forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n))``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 dtype=None, seed: int | None = None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, dtype, seed)


class GRU(RNNBase):
    """``torch.nn.GRU`` (gates ``r, z, n``; ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``,
    ``h' = (1 - z) * n + z * h``)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype=None, seed: int | None = None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, dtype, seed)


# ------------------------------------------------------------------------------------------------ cells
class RNNCellBase(Module):
    """Shared parameters of the cells: ``weight_ih`` (G, input_size), ``weight_hh`` (G, hidden_size),
    ``bias_ih``/``bias_hh`` (G,), with G = gates x hidden_size; PyTorch's default init."""

    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=None):
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        G = self._gates * self.hidden_size
        self.weight_ih = Parameter(np.zeros((G, self.input_size)), dtype)
        self.weight_hh = Parameter(np.zeros((G, self.hidden_size)), dtype)
        if self.bias:
            self.bias_ih = Parameter(np.zeros(G), dtype)
            self.bias_hh = Parameter(np.zeros(G), dtype)
        else:
            self.bias_ih = self.bias_hh = None
        _uniform_init(self, self.hidden_size)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _prepare(self, input, states):
        """Checks; returns ``(x (N, I), [states as (N, size) or None], batched)``."""
        name = type(self).__name__
        x = check_graph_tensor(input, name)
        if x.ndim not in (1, 2):
            raise GraphError(f"{name}: Expected input to be 1D (features) or 2D (batch, features), got {x.ndim}D "
                             f"input of shape {_dims(x)}")
        if x.dims[-1] != self.input_size:
            raise GraphError(f"{name}: input has inconsistent input_size: got {x.dims[-1]} expected "
                             f"{self.input_size} (input shape {_dims(x)})")
        _check_dtype(x, self.weight_ih.dtype, "input", name)
        batched = x.ndim == 2
        if not batched:
            x = x.unsqueeze(0)
        out = []
        for what, t in states:
            if t is None:
                out.append(None)
                continue
            t = check_graph_tensor(t, f"{name} {what}")
            expected = (x.dims[0], self.hidden_size) if batched else (self.hidden_size,)
            if t.ndim != len(expected):
                raise GraphError(f"{name}: {what} should be {len(expected)}-D for a {x.ndim if batched else 1}-D "
                                 f"input, expected shape ({', '.join(map(str, expected))}), got {_dims(t)}")
            _check_shape(t, expected, what, name)
            _check_dtype(t, self.weight_ih.dtype, what, name)
            out.append(t if batched else t.unsqueeze(0))
        return x, out, batched

    def _params(self, x, mode: str):
        """``(w_ih, w_hh, bias, b_hn)`` prepared as the steps use them (see :func:`_prepared_weights`)."""
        w_ih, w_hh = bind(self.weight_ih, x), bind(self.weight_hh, x)
        b_ih, b_hh = (bind(self.bias_ih, x), bind(self.bias_hh, x)) if self.bias else (None, None)
        return _prepared_weights(mode, self.hidden_size, w_ih, w_hh, b_ih, b_hh)

    def _input_gates(self, x, w_ih, bias):
        gi = x @ w_ih.T
        return gi if bias is None else gi + bias


class RNNCell(RNNCellBase):
    """``torch.nn.RNNCell(input_size, hidden_size, bias=True, nonlinearity='tanh')``:
    ``forward(input, hx=None) -> h'``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, [("hx", hx)])
        w_ih, w_hh, bias, _ = self._params(x, "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU")
        out = _rnn_step(self._input_gates(x, w_ih, bias), h, w_hh, self.nonlinearity)
        return out if batched else out.squeeze(0)


class LSTMCell(RNNCellBase):
    """``torch.nn.LSTMCell``: ``forward(input, (h, c)=None) -> (h', c')``."""

    _gates = 4

    def forward(self, input, hx=None):
        name = type(self).__name__
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise GraphError(f"{name}: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        h0, c0 = (None, None) if hx is None else hx
        x, (h, c), batched = self._prepare(input, [("h_0", h0), ("c_0", c0)])
        w_ih, w_hh, bias, _ = self._params(x, "LSTM")
        h_new, c_new = _lstm_step(self._input_gates(x, w_ih, bias), h, c, w_hh, None, self.hidden_size)
        return (h_new, c_new) if batched else (h_new.squeeze(0), c_new.squeeze(0))


class GRUCell(RNNCellBase):
    """``torch.nn.GRUCell``: ``forward(input, hx=None) -> h'``."""

    _gates = 3

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, [("hx", hx)])
        w_ih, w_hh, bias, b_hn = self._params(x, "GRU")
        out = _gru_step(self._input_gates(x, w_ih, bias), h, w_hh, b_hn, self.hidden_size)
        return out if batched else out.squeeze(0)
