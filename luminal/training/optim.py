"""Optimizers as graph builders, with PyTorch's update rules and hyperparameter names.

An optimizer turns a loss into a whole training step inside the loss's graph::

    opt = Adam(model.parameters(), lr=1e-3)
    opt.minimize(loss)            # gradients + clipping + update nodes, added once
    cx.compile(device="cpu")
    for xb, yb in loader:
        x.set(xb); y.set(yb)
        cx.execute()              # forward, backward and update in one compiled call
        scheduler.step()          # changes group["lr"]: read at the next execute, no recompilation

State crosses steps through the graph: each parameter and each moment buffer is a graph *input*; the
updated value is a graph *output* carried back into that input after every ``execute()``
(:meth:`luminal.graph.Graph.add_carry`, no copies). Hyperparameters that may change between steps (the
learning rate, momentum, betas, weight decay, Adam's bias corrections from the step count) enter as one
small input per parameter group, refreshed from ``param_groups`` at every execute. Structural options
(``momentum`` switched on or off, ``nesterov``, ``amsgrad``, ``centered``) are fixed when ``minimize`` runs.

After each step ``Parameter.data`` is the new value (the array is swapped, not copied: copy it if you need
a snapshot). ``state_dict()`` / ``load_state_dict()`` round-trip everything, so training resumes exactly.
"""

from __future__ import annotations

import math
import numpy as np

from ..graph import Graph, GraphError
from ..module import DeviceValue, Module, Parameter, resolve
from ..tensor import GraphTensor
from .autograd import grad as _grad

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "clip_grad_norm", "clip_grad_value"]


def clip_grad_norm(grads: list, max_norm: float, norm_type: float = 2.0, eps: float = 1e-6):
    """Scale gradient tensors so their joint ``norm_type``-norm is at most ``max_norm`` (``torch.nn.utils.
    clip_grad_norm_``: ``coef = min(1, max_norm / (norm + 1e-6))``). Returns ``(clipped grads, total norm)``."""
    if max_norm <= 0:
        raise ValueError(f"clip_grad_norm: max_norm must be positive, got {max_norm}")
    live = [g for g in grads if g is not None]
    if not live:
        return list(grads), None
    if norm_type == math.inf:
        total = None
        for g in live:
            m = g.abs().max().cast("float32")
            total = m if total is None else total.maximum(m)
    else:
        acc = None
        for g in live:
            s = (g.abs() ** norm_type).sum().cast("float32") if norm_type != 2 else (g * g).sum().cast("float32")
            acc = s if acc is None else acc + s
        total = acc.sqrt() if norm_type == 2 else acc ** (1.0 / norm_type)
    coef = (max_norm / (total + eps)).minimum(1.0)
    return [None if g is None else g * coef.cast(g.dtype) for g in grads], total


def clip_grad_value(grads: list, clip_value: float) -> list:
    """Clamp every gradient element to ``[-clip_value, clip_value]`` (``torch.nn.utils.clip_grad_value_``)."""
    if clip_value <= 0:
        raise ValueError(f"clip_grad_value: clip_value must be positive, got {clip_value}")
    return [None if g is None else g.clamp(-clip_value, clip_value) for g in grads]


class ParamState(dict):
    """One parameter's optimizer state (``optimizer.state[p]``, as in PyTorch: ``"step"`` and named arrays). A
    value a compiled GPU step kept on the device (a :class:`~luminal.module.DeviceValue`) is copied to the host
    when read, so reading the state gives numpy arrays on every device."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if isinstance(value, DeviceValue):
            value = value.resolve()
            super().__setitem__(key, value)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def values(self):
        return [self[k] for k in self]

    def items(self):
        return [(k, self[k]) for k in self]


class Optimizer:
    """Base class: parameter groups, per-parameter state, graph building, state dicts.

    Subclasses define ``_hyper(group, step) -> list[float]`` (the per-step scalars), ``_state_names(group)``
    (the moment buffers) and ``_update(p, g, h, state) -> (new p, {name: new buffer})`` on graph tensors,
    where ``h[i]`` is the i-th hyper scalar.
    """

    defaults: dict = {}

    def __init__(self, params, defaults: dict):
        if isinstance(params, Module):
            params = list(params.parameters())
        elif isinstance(params, Parameter):
            raise TypeError("optimizer params should be an iterable of Parameters (or dicts of groups), got a "
                            "single Parameter; wrap it in a list")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict[Parameter, dict] = {}
        self._graphs: list[Graph] = []
        for g in groups:
            self.add_param_group(g)

    # ------------------------------------------------------------------ groups
    def add_param_group(self, group: dict) -> None:
        """Add ``{"params": [...], **hyperparameters}``; missing hyperparameters take the defaults."""
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError("a parameter group must be a dict with a 'params' entry")
        params = group["params"]
        params = [params] if isinstance(params, Parameter) else list(params)
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"optimizer parameters must be luminal Parameters, got {type(p).__name__}")
            if not p.dtype.is_float:
                raise TypeError(f"parameter '{p.name}' has dtype {p.dtype}; only floating-point parameters can be "
                                "optimized")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown hyperparameter(s) {sorted(unknown)}; expected some of "
                            f"{sorted(self.defaults)}")
        new = dict(self.defaults)
        new.update(group)
        new["params"] = params
        self._validate(new)
        self.param_groups.append(new)

    def _validate(self, group: dict) -> None:
        lr = group.get("lr")
        if lr is None or not isinstance(lr, (int, float)) or lr < 0:
            raise ValueError(f"invalid learning rate {lr!r}: expected a number >= 0")
        wd = group.get("weight_decay", 0.0)
        if wd < 0:
            raise ValueError(f"invalid weight_decay {wd}: expected >= 0")

    def _params(self) -> list[Parameter]:
        return [p for g in self.param_groups for p in g["params"]]

    # ------------------------------------------------------------------ subclass interface
    def _hyper(self, group: dict, step: int) -> list[float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _state_names(self, group: dict) -> list[str]:
        return []

    def _update(self, p: GraphTensor, g: GraphTensor, h, state: dict, group: dict):  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ graph building
    def minimize(self, loss: GraphTensor, max_grad_norm: float | None = None,
                 max_grad_value: float | None = None, scaler=None) -> dict:
        """Add the backward pass and the update of every parameter to ``loss``'s graph.

        Each later ``execute()`` of that graph is one optimizer step. Parameters the loss does not depend on
        are left unchanged (as PyTorch skips parameters whose ``.grad`` is None). Optional clipping by global
        norm (``max_grad_norm``) or by value (``max_grad_value``) is applied to the gradients first.

        ``scaler`` (a :class:`luminal.GradScaler`, for float16 autocast): the gradients are those of ``loss *
        scale``, unscaled (times ``1/scale``) before clipping; a step whose gradients hold an inf/NaN leaves the
        parameters, the buffers and the step count unchanged, and after every execute the scaler updates its
        scale from that step's flag (``torch.amp.GradScaler``'s skip-and-shrink, inside the compiled step).

        Returns ``{Parameter: gradient tensor}`` (lazy tensors; ``retrieve()`` them to inspect gradients).
        """
        if not isinstance(loss, GraphTensor):
            raise TypeError(f"minimize: loss must be a GraphTensor, got {type(loss).__name__}")
        graph = loss.graph
        if any(g is graph for g in self._graphs):
            raise GraphError("minimize: this optimizer already updates this graph")
        params = [p for p in self._params() if p.requires_grad]
        found_inf = None
        if scaler is not None and scaler.is_enabled():
            grads, found_inf = scaler._build(loss, params, lambda l, ps: _grad(l, ps, allow_unused=True))
        else:
            grads = _grad(loss, params, allow_unused=True)
        if max_grad_value is not None:
            grads = clip_grad_value(grads, max_grad_value)
        if max_grad_norm is not None:
            grads, _ = clip_grad_norm(grads, max_grad_norm)
        by_param = dict(zip(params, grads))
        self.apply_gradients(graph, by_param, skip=found_inf)
        if found_inf is not None:
            graph.post_execute_hooks.append(lambda g, t=found_inf: scaler._after_execute(t))
        return by_param

    def apply_gradients(self, graph: Graph, grads: dict, skip: GraphTensor | None = None) -> None:
        """Add update nodes for ``{Parameter: gradient tensor}`` to ``graph`` (gradients computed any way).

        ``skip``: an optional 0-d bool tensor of the graph; where it is True at an execute, that step keeps the
        parameters, buffers and step counts unchanged (used by :class:`luminal.GradScaler`)."""
        if skip is not None:
            from ..hl_ops import where
            skip = skip.retrieve()
        updated: list[Parameter] = []
        for gi, group in enumerate(self.param_groups):
            live = [p for p in group["params"] if grads.get(p) is not None]
            if not live:
                continue
            hyper_len = len(self._hyper(group, 1))
            hypers: dict = {}  # one hyperparameter input per parameter dtype (no casts in the update)
            for p in live:
                if p.dtype not in hypers:
                    h_in = graph.tensor((hyper_len,), p.dtype, f"hyper{gi}")
                    h_in.set_deferred(lambda b, group=group, live=live, dt=p.dtype.numpy: np.asarray(
                        self._hyper(group, self._next_step(live)), np.float64).astype(dt))
                    hypers[p.dtype] = _Hyper(h_in, p.dtype)
            for p in live:
                pt = p.bind(graph)
                g = grads[p]
                h = hypers[p.dtype]
                st = self.state.setdefault(p, ParamState(step=0))
                bufs = {}
                for name in self._state_names(group):
                    arr = resolve(st.get(name))
                    if arr is None:
                        arr = st[name] = self._init_state(name, p, group)
                    t = graph.tensor(p.shape, p.dtype, f"{p.name}.{name}").set(arr).keep()
                    bufs[name] = t
                new_p, new_bufs = self._update(pt, g, h, bufs, group)
                if skip is not None:
                    new_p = where(skip, pt, new_p.cast(p.dtype))
                    new_bufs = {name: where(skip, t, new_bufs[name].cast(p.dtype)) for name, t in bufs.items()}
                graph.add_carry(_node_value(new_p.cast(p.dtype), pt.id), pt.id)
                for name, t in bufs.items():
                    graph.add_carry(_node_value(new_bufs[name].cast(p.dtype), t.id), t.id)
                st["_inputs"] = {"param": pt, **bufs}
                updated.append(p)
        self._graphs.append(graph)
        graph.post_execute_hooks.append(lambda g, updated=updated: self._after_step(g, updated, skip))

    def _init_state(self, name: str, p: Parameter, group: dict) -> np.ndarray:
        return np.zeros(p.shape, p.dtype.numpy)

    def _next_step(self, params: list[Parameter]) -> int:
        return int(self.state[params[0]]["step"]) + 1 if params[0] in self.state else 1

    def _after_step(self, graph: Graph, updated: list[Parameter], skip: GraphTensor | None = None) -> None:
        # GradScaler: an inf/NaN gradient skipped this step (no step count, as torch skips optimizer.step())
        skipped = skip is not None and bool(np.asarray(skip.data()))
        for p in updated:
            st = self.state[p]
            st["step"] += 0 if skipped else 1
            inputs = st["_inputs"]
            new = graph.tensors.get((inputs["param"].id, 0))
            # None: the runtime kept the new value on its device (cuda: carried state); read on first use
            p.data = new if new is not None else DeviceValue(graph, inputs["param"].id)
            for other in p.bound_tensors():  # other graphs using this parameter see the new value
                if other.graph is not graph:
                    other.graph.tensors[(other.id, 0)] = p.data
            for name, t in inputs.items():
                if name != "param":
                    value = graph.tensors.get((t.id, 0))
                    st[name] = value if value is not None else DeviceValue(graph, t.id)

    # ------------------------------------------------------------------ state dicts
    def state_dict(self) -> dict:
        """``{"state": {index: {"step": n, buffer: array}}, "param_groups": [...]}`` (copies; PyTorch layout)."""
        index = {p: i for i, p in enumerate(self._params())}
        state = {}
        for p, st in self.state.items():
            if p in index:
                state[index[p]] = {k: (np.array(resolve(v)) if isinstance(v, (np.ndarray, DeviceValue)) else v)
                                   for k, v in st.items() if not k.startswith("_")}
        groups = []
        for g in self.param_groups:
            d = {k: v for k, v in g.items() if k != "params"}
            d["params"] = [index[p] for p in g["params"]]
            groups.append(d)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters, step counts and buffers (also into graphs already built).

        Raises ``ValueError`` (before changing anything) when the state does not fit this optimizer: other
        group or parameter counts, hyperparameters or moment buffers of another optimizer type (an ``Adam``
        state loaded into ``SGD``), or buffers of the wrong shape."""
        groups = state_dict.get("param_groups")
        if groups is None or "state" not in state_dict:
            raise ValueError("optimizer state dict must have 'state' and 'param_groups' entries")
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise ValueError("loaded optimizer state has a different number of parameter groups or parameters "
                             f"per group ({[len(g['params']) for g in groups]} vs "
                             f"{[len(g['params']) for g in self.param_groups]})")
        params = self._params()
        name = type(self).__name__
        group_of = {}  # parameter index -> the group's hyperparameters after loading
        for gi, (saved, group) in enumerate(zip(groups, self.param_groups)):
            unknown = set(saved) - set(self.defaults) - {"params", "initial_lr"}
            if unknown:
                raise ValueError(f"{name}.load_state_dict: parameter group {gi} has hyperparameter(s) "
                                 f"{sorted(unknown)}, which {name} does not take (expected some of "
                                 f"{sorted(self.defaults)}); was the state saved from another optimizer type?")
            merged = {**group, **{k: v for k, v in saved.items() if k != "params"}}
            group_of.update({int(i): merged for i in saved["params"]})
        for key, saved in state_dict["state"].items():
            if not 0 <= int(key) < len(params):
                raise ValueError(f"{name}.load_state_dict: state for parameter index {key}, but the optimizer has "
                                 f"{len(params)} parameters")
            expected = self._state_names(group_of.get(int(key), self.param_groups[0]))
            extra = sorted(set(saved) - set(expected) - {"step"})
            if extra:
                raise ValueError(f"{name}.load_state_dict: parameter {key} ('{params[int(key)].name}') has state "
                                 f"buffer(s) {extra}, but {name} keeps {expected or 'none'}; was the state saved "
                                 "from another optimizer type (or other settings)?")
            p = params[int(key)]
            for k, v in saved.items():
                if k != "step" and np.shape(v) != tuple(p.shape):
                    raise ValueError(f"optimizer state '{k}' for parameter '{p.name}' has shape {np.shape(v)}, "
                                     f"expected {tuple(p.shape)}")
        for saved, group in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    group[k] = v
        for key, saved in state_dict["state"].items():
            p = params[int(key)]
            st = self.state.setdefault(p, ParamState(step=0))
            for k, v in saved.items():
                if k == "step":
                    st["step"] = int(v)
                    continue
                arr = np.asarray(v)
                if arr.shape != p.shape:
                    raise ValueError(f"optimizer state '{k}' for parameter '{p.name}' has shape {arr.shape}, "
                                     f"expected {p.shape}")
                arr = np.array(arr, dtype=p.dtype.numpy, order="C")
                st[k] = arr
                t = st.get("_inputs", {}).get(k)
                if t is not None:
                    t.set(arr)

    def __repr__(self) -> str:
        groups = ", ".join(str({k: v for k, v in g.items() if k != "params"}) for g in self.param_groups)
        return f"{type(self).__name__}({groups})"


def _node_value(t: GraphTensor, avoid: int) -> int:
    """A node whose whole output is ``t``'s value (adding a copy when ``t`` is a view or the node ``avoid``)."""
    from .. import ops
    from ..shape import ShapeTracker

    node = t.graph.nodes[t.id]
    if t.id != avoid and t.tracker == ShapeTracker.contiguous_of(node.dims):
        return t.id
    return t._apply(ops.Contiguous()).id


class _Hyper:
    """Scalars of a group's hyperparameter input, as broadcastable 0-d tensors in the parameter's dtype."""

    def __init__(self, tensor: GraphTensor, dtype):
        self.tensor = tensor
        self.dtype = dtype
        self._cache = {}

    def __getitem__(self, i: int) -> GraphTensor:
        if i not in self._cache:
            self._cache[i] = self.tensor[i]  # a zero-copy view of the input
        return self._cache[i]


def _check_range(name: str, value, lo: float = 0.0, hi: float | None = None, hi_open: bool = False) -> None:
    if value < lo or (hi is not None and (value >= hi if hi_open else value > hi)):
        bound = f"[{lo}, {hi})" if hi_open else f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"invalid {name} {value}: expected a value in {bound}")


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (``torch.optim.SGD``)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_range("momentum", group["momentum"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum > 0 and zero dampening")

    def _state_names(self, group):
        return ["momentum_buffer"] if group["momentum"] != 0 else []

    def _hyper(self, group, step):
        # the first step initializes the buffer with the gradient itself (no dampening), as PyTorch does
        first = step == 1
        return [group["lr"], group["weight_decay"], group["momentum"], 1.0 if first else 1.0 - group["dampening"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + h[1] * p
        new = {}
        if "momentum_buffer" in bufs:
            buf = h[2] * bufs["momentum_buffer"] + h[3] * g
            new["momentum_buffer"] = buf
            g = g + h[2] * buf if group["nesterov"] else buf
        return p - h[0] * g, new


def weight_decay(p, g, group, decoupled: bool, coef, keep):
    """PyTorch's two weight decays: L2 (``g + coef * p``, coupled) or decoupled (``p * keep`` with ``keep = 1 -
    lr * weight_decay``, AdamW's); nothing when the group's ``weight_decay`` is 0. Returns ``(p, g)``."""
    if group["weight_decay"] == 0:
        return p, g
    if decoupled:
        return p * keep, g
    return p, g + coef * p


class Adam(Optimizer):
    """Adam with bias correction, L2 weight decay and AMSGrad (``torch.optim.Adam``)."""

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        b1, b2 = group["betas"]
        _check_range("beta1", b1, 0.0, 1.0, hi_open=True)
        _check_range("beta2", b2, 0.0, 1.0, hi_open=True)
        _check_range("eps", group["eps"])

    def _state_names(self, group):
        return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"] else [])

    def _hyper(self, group, step):
        b1, b2 = group["betas"]
        lr = group["lr"]
        bc1 = 1.0 - b1 ** step
        bc2 = 1.0 - b2 ** step
        return [lr / bc1, 1.0 / math.sqrt(bc2), b1, 1.0 - b1, b2, 1.0 - b2, group["eps"],
                group["weight_decay"], 1.0 - lr * group["weight_decay"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        p, g = weight_decay(p, g, group, self.decoupled, h[7], h[8])
        m = h[2] * bufs["exp_avg"] + h[3] * g
        v = h[4] * bufs["exp_avg_sq"] + h[5] * (g * g)
        new = {"exp_avg": m, "exp_avg_sq": v}
        if group["amsgrad"]:
            v = bufs["max_exp_avg_sq"].maximum(v)
            new["max_exp_avg_sq"] = v
        denom = v.sqrt() * h[1] + h[6]
        return p - h[0] * m / denom, new


class AdamW(Adam):
    """Adam with decoupled weight decay ``p *= 1 - lr * weight_decay`` (``torch.optim.AdamW``)."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


class RMSprop(Optimizer):
    """RMSprop with smoothing ``alpha``, momentum and the centered variant (``torch.optim.RMSprop``)."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, maximize: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_range("alpha", group["alpha"])
        _check_range("momentum", group["momentum"])
        _check_range("eps", group["eps"])

    def _state_names(self, group):
        return (["square_avg"] + (["momentum_buffer"] if group["momentum"] > 0 else [])
                + (["grad_avg"] if group["centered"] else []))

    def _hyper(self, group, step):
        a = group["alpha"]
        return [group["lr"], a, 1.0 - a, group["eps"], group["weight_decay"], group["momentum"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + h[4] * p
        sq = h[1] * bufs["square_avg"] + h[2] * (g * g)
        new = {"square_avg": sq}
        if group["centered"]:
            ga = h[1] * bufs["grad_avg"] + h[2] * g
            new["grad_avg"] = ga
            avg = (sq - ga * ga).sqrt() + h[3]
        else:
            avg = sq.sqrt() + h[3]
        if group["momentum"] > 0:
            buf = h[5] * bufs["momentum_buffer"] + g / avg
            new["momentum_buffer"] = buf
            return p - h[0] * buf, new
        return p - h[0] * g / avg, new


class Adagrad(Optimizer):
    """Adagrad with learning-rate decay and an initial accumulator value (``torch.optim.Adagrad``)."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, maximize: bool = False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_range("lr_decay", group["lr_decay"])
        _check_range("initial_accumulator_value", group["initial_accumulator_value"])
        _check_range("eps", group["eps"])

    def _state_names(self, group):
        return ["sum"]

    def _init_state(self, name, p, group):
        return np.full(p.shape, group["initial_accumulator_value"], p.dtype.numpy)

    def _hyper(self, group, step):
        return [group["lr"] / (1.0 + (step - 1) * group["lr_decay"]), group["weight_decay"], group["eps"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + h[1] * p
        s = bufs["sum"] + g * g
        return p - h[0] * g / (s.sqrt() + h[2]), {"sum": s}

