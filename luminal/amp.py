"""Mixed precision: :class:`autocast` and :class:`GradScaler` (``torch.autocast`` / ``torch.amp.GradScaler``).

``autocast`` is read when a graph is *built*: with the lazy ``Graph`` API the context must be active while the
model's forward is traced; eager tensors remember the autocast state of each recorded operation (so the op is
built the same way when the pending work is realized later, outside the ``with``). What it changes follows
PyTorch's CPU autocast (``torch.autocast("cpu", dtype=...)``, torch 2.x):

* **lower precision** (float32 / float16 / bfloat16 inputs are rounded to the autocast dtype, the products are
  summed in float32 and the result is rounded once to the autocast dtype): ``matmul``/``@`` (and ``mm``,
  ``bmm``, ``tensordot``), ``addmm``, ``baddbmm``, ``inner``, ``nn.Linear`` / ``F.linear`` (the bias is added
  before the one rounding), ``conv1d/2d/3d`` (and ``conv4d``) and the transposed convolutions, ``prelu``, the
  contraction steps of ``einsum`` (torch's ``bmm`` steps), ``scaled_dot_product_attention`` (one op: float32
  inside), and therefore ``MultiheadAttention``, whose products go through ``linear`` and ``matmul``.
  ``mv``, ``addmv``, ``dot``, ``outer``, ``kron`` and einsum steps without a summed letter are left alone, as
  torch leaves them on the CPU.
* **float32** (float16 / bfloat16 inputs are cast to float32 first; the result is float32): the losses
  ``mse_loss``, ``l1_loss``, ``huber_loss``, ``smooth_l1_loss``, ``nll_loss``, ``cross_entropy``,
  ``binary_cross_entropy``, ``binary_cross_entropy_with_logits``, ``kl_div``, ``margin_ranking_loss``,
  ``hinge_embedding_loss``, ``soft_margin_loss``, ``cosine_embedding_loss``, ``poisson_nll_loss``,
  ``triplet_margin_loss``, and ``cdist``, ``prod``.
* everything else runs in the dtype of its inputs (as in torch on the CPU: ``softmax``, ``layer_norm``,
  ``sum``, activations... of a bfloat16 tensor give bfloat16; of a float32 tensor float32; mixed inputs
  promote, so ``bf16 + f32 -> f32``).

float64 tensors are never cast (as in torch). Gradients flow back through the casts: parameters stay float32
and receive float32 gradients (the master weights of an optimizer never change dtype).

``GradScaler`` scales a float16 loss so small gradients do not flush to zero, and skips the optimizer step
when a gradient is inf/NaN (then shrinks the scale); see its docstring. Use it in an eager loop
(``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``) or give it to a graph-built step:
``opt.minimize(loss, scaler=scaler)`` / ``Trainer(..., scaler=scaler)`` (the scaling, unscaling, the inf
check and the skip are part of the compiled step; the scale is an input read at every execute).
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from .dtype import DType, as_dtype

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype"]

_LOW = (DType.bfloat16, DType.float16)


class _State(threading.local):
    def __init__(self):
        self.dtype = None  # the active autocast dtype of this thread, or None
        self.saved: list = []  # the dtypes active before the enclosing autocast regions of this thread


_state = _State()


def get_autocast_dtype():
    """The active autocast dtype of this thread (``luminal.bfloat16`` / ``luminal.float16``) or None."""
    return _state.dtype


def is_autocast_enabled() -> bool:
    """Whether an :class:`autocast` region is active in this thread."""
    return _state.dtype is not None


def _check_dtype(dtype) -> DType:
    try:
        dt = as_dtype(dtype)
    except TypeError:
        dt = None
        if type(dtype).__module__ == "torch":  # torch.bfloat16 / torch.float16
            try:
                dt = as_dtype(str(dtype).split(".")[-1])
            except TypeError:
                dt = None
        if dt is None:
            raise TypeError(f"autocast: dtype {dtype!r} is not a dtype; expected luminal.bfloat16 or "
                            "luminal.float16") from None
    if dt not in _LOW:
        raise ValueError(f"autocast: dtype {dt.value} is not supported; expected luminal.bfloat16 or "
                         "luminal.float16 (a lower-precision float type)")
    return dt


class autocast:
    """Run matmul / linear / convolution / einsum in a lower-precision float type with float32 accumulation
    (``torch.autocast``): ``with lm.autocast(dtype=lm.bfloat16): y = model(x)``.

    Args:
        device_type: optional, accepted for PyTorch familiarity (``lm.autocast("cpu", dtype=...)``): ``"cpu"``,
            ``"cuda"``, ``"reference"`` or ``"gpu-interpret"``; the autocast rules do not depend on it.
        dtype: ``luminal.bfloat16`` (the default, as torch's CPU autocast) or ``luminal.float16``; names and
            numpy / ml_dtypes / torch dtypes of these two are accepted. Anything else raises.
        enabled: ``False`` turns autocast off inside the region (also inside an outer autocast).

    Works as a context manager and as a decorator (``@lm.autocast(dtype=lm.bfloat16)``). The state is per
    thread and nests. See the module docstring (``luminal.amp``) and ``docs/mixed_precision.md`` for which ops
    are cast.
    """

    _DEVICES = ("cpu", "cuda", "reference", "gpu-interpret")

    def __init__(self, device_type=None, dtype=None, enabled: bool = True, cache_enabled=None):
        if device_type is not None and not isinstance(device_type, str):
            if dtype is not None:
                raise TypeError("autocast: pass the dtype once (autocast(dtype=...) or autocast('cpu', dtype=...))")
            device_type, dtype = None, device_type  # lm.autocast(lm.bfloat16)
        if device_type is not None and device_type not in self._DEVICES:
            raise ValueError(f"autocast: unknown device_type {device_type!r}; expected one of {list(self._DEVICES)}")
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"autocast: enabled must be a bool, got {type(enabled).__name__}")
        self.device_type = device_type
        self.fast_dtype = _check_dtype(DType.bfloat16 if dtype is None else dtype)
        self.enabled = bool(enabled)

    def __enter__(self):
        _state.saved.append(_state.dtype)  # per thread: one autocast object may be entered by several threads
        _state.dtype = self.fast_dtype if self.enabled else None
        if self.enabled:
            _install_eager_hook()
        return self

    def __exit__(self, *exc):
        _state.dtype = _state.saved.pop()
        return False

    def __call__(self, fn):
        args = (self.device_type, self.fast_dtype, self.enabled)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with autocast(args[0], dtype=args[1], enabled=args[2]):
                return fn(*a, **k)
        return wrapper

    def __repr__(self) -> str:
        return f"autocast(dtype={self.fast_dtype.value}, enabled={self.enabled})"


class _Region:
    """Sets the autocast dtype of this thread for a block (None switches it off)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.prev = _state.dtype
        _state.dtype = self.dtype

    def __exit__(self, *exc):
        _state.dtype = self.prev
        return False


# ---------------------------------------------------------------------------------------------- op helpers
def autocast_off() -> _Region:
    """A block with autocast switched off in this thread (the float32 body of an autocast op)."""
    return _Region(None)


def _is_graph_tensor(t) -> bool:
    from .tensor import GraphTensor
    return isinstance(t, GraphTensor)


def lower_precision_dtype(*tensors):
    """The autocast dtype if an autocast region is active and every given tensor is a float32 / float16 /
    bfloat16 graph tensor (``None`` entries are ignored); else None. Used by the GEMM-shaped ops."""
    low = _state.dtype
    if low is None:
        return None
    for t in tensors:
        if t is None:
            continue
        if not _is_graph_tensor(t) or not t.dtype.is_float or t.dtype == DType.float64:
            return None
    return low


def round_to(t, low):
    """``t`` rounded to ``low`` and seen again as float32 (the input of a GEMM computed in float32)."""
    return t.cast(low).cast(DType.float32)


def linear(x, weight, bias, low):
    """``F.linear`` under autocast: ``round(x) @ round(weight).T + round(bias)`` summed in float32, rounded once
    to ``low`` (torch's CPU autocast adds the bias before its single rounding)."""
    with autocast_off():
        y = round_to(x, low) @ round_to(weight, low).T
        if bias is not None:
            y = y + round_to(bias, low)
        return y.cast(low)


def autocast_lower_precision(fn):
    """Decorator for composite GEMM-shaped ops that PyTorch's autocast runs in low precision as a whole
    (``addmm``, ``baddbmm``, ``inner``): inside an autocast region with float (not float64) graph-tensor
    arguments, those are rounded to the autocast dtype, ``fn`` runs in float32 with autocast off, and its float
    result is rounded once to the autocast dtype."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if _is_graph_tensor(a)]
        low = lower_precision_dtype(*tensors) if tensors else None
        if low is None:
            return fn(*args, **kwargs)

        def down(a):
            return round_to(a, low) if _is_graph_tensor(a) else a
        with autocast_off():
            out = fn(*[down(a) for a in args], **{k: down(v) for k, v in kwargs.items()})
        return out.cast(low) if _is_graph_tensor(out) and out.dtype.is_float else out
    wrapper._luminal_autocast = "lower"
    return wrapper


def autocast_disabled(fn):
    """Decorator for ops that PyTorch's CPU autocast leaves alone although they multiply matrices (``mv``,
    ``addmv``): ``fn`` runs with autocast off, in its inputs' dtypes."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _state.dtype is None:
            return fn(*args, **kwargs)
        with autocast_off():
            return fn(*args, **kwargs)
    wrapper._luminal_autocast = "off"
    return wrapper


def autocast_float32(fn):
    """Decorator for ops that PyTorch's autocast runs in float32 (the losses): inside an autocast region the
    float16 / bfloat16 graph-tensor arguments are cast to float32 and ``fn`` runs with autocast off."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _state.dtype is None:
            return fn(*args, **kwargs)

        def up(a):
            if _is_graph_tensor(a) and a.dtype in _LOW:
                return a.cast(DType.float32)
            return a
        with _Region(None):
            return fn(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()})
    wrapper._luminal_autocast = "float32"
    return wrapper


# ---------------------------------------------------------------------------------------------- eager tensors
_hook = {"installed": False}
_hook_lock = threading.Lock()


def _install_eager_hook() -> None:
    """Eager tensors record operations and build them later: register a recording context with the eager engine
    (:data:`luminal.eager._core.record_contexts`) so that an operation recorded inside an autocast region carries
    that dtype in its structural key and is built under it. Operations recorded outside any region are unchanged
    (same keys, same builds)."""
    if _hook["installed"]:
        return
    import sys
    core = sys.modules.get("luminal.eager._core")
    if core is None:  # import it now: eager tensors first created inside this region must see the region
        import importlib
        core = importlib.import_module("luminal.eager._core")
    with _hook_lock:
        if _hook["installed"]:
            return
        core.record_contexts.append(_autocast_context)
        _hook["installed"] = True


def _autocast_context(key, build):
    """The recording context of autocast: inside a region, the key gains the region's dtype and the build runs
    under it."""
    low = _state.dtype
    if low is None:
        return key, build

    def build_autocast(graph, gts, build=build, low=low):
        with _Region(low):
            return build(graph, gts)
    return key + (("autocast", low.value),), build_autocast


# ---------------------------------------------------------------------------------------------- GradScaler
class GradScaler:
    """Dynamic loss scaling for float16 training (``torch.amp.GradScaler``).

    ``scale(loss)`` multiplies the loss by the current scale; ``step(optimizer)`` unscales the gradients
    (multiplies them by ``1/scale``), and updates the parameters only when every gradient is finite;
    ``update()`` then multiplies the scale by ``backoff_factor`` if that step found an inf/NaN, or by
    ``growth_factor`` after ``growth_interval`` consecutive finite steps.

    Eager loop::

        scaler = lm.GradScaler()
        with lm.autocast(dtype=lm.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)          # skipped when a gradient is inf/NaN
        scaler.update()

    Graph-built step: ``opt.minimize(loss, scaler=scaler)`` (or ``Trainer(..., scaler=scaler)``) puts the
    scaling, the unscaling, the inf/NaN check and the skip into the compiled step; after every ``execute()``
    the scaler reads the step's inf flag and updates itself (``found_inf`` / ``skipped_steps``).

    ``enabled=False`` makes every method a pass-through (``scale`` returns the loss, ``step`` just steps).
    ``state_dict()`` / ``load_state_dict()`` hold the scale, the growth tracker and the factors.
    """

    def __init__(self, device=None, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if not init_scale > 0 or not math.isfinite(init_scale):
            raise ValueError(f"GradScaler: init_scale must be a positive finite number, got {init_scale}")
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if int(growth_interval) != growth_interval or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive integer, got {growth_interval}")
        self.device = device
        self._enabled = bool(enabled)
        self._scale = np.float32(init_scale)   # torch keeps the scale in a float32 tensor
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._found_inf = None      # eager: the inf flag of the current step (None: not unscaled yet)
        self._unscaled: set = set()  # eager: ids of optimizers unscaled since the last update()
        self._stepped = False
        self.skipped_steps = 0      # steps skipped because of inf/NaN gradients (eager and graph)
        self.found_inf = False      # whether the last step found an inf/NaN gradient

    # ------------------------------------------------------------------ public state
    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return float(self._scale) if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, value: float) -> None:
        self._growth_factor = float(value)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, value: float) -> None:
        self._backoff_factor = float(value)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, value: int) -> None:
        self._growth_interval = int(value)

    def _inv_scale(self) -> np.float32:
        return np.float32(1.0 / np.float64(self._scale))  # as torch: reciprocal in double, then float32

    # ------------------------------------------------------------------ eager loop
    def scale(self, outputs):
        """``outputs * scale`` (an eager tensor, or a list/tuple/dict of them). The scale enters as a tensor, so
        a changing scale never recompiles."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if isinstance(outputs, dict):
            return {k: self.scale(v) for k, v in outputs.items()}
        if _is_graph_tensor(outputs):
            raise TypeError("GradScaler.scale: for a graph-built step pass the scaler to opt.minimize(loss, "
                            "scaler=...) (or Trainer(..., scaler=...)), which scales, unscales and skips inside "
                            "the compiled step; scale() is for eager tensors")
        from .eager.tensor import Tensor
        if not isinstance(outputs, Tensor):
            raise TypeError(f"GradScaler.scale: expected a luminal tensor, got {type(outputs).__name__}")
        from .eager import tensor as _t
        # the scale stays float32 (2**16 does not fit float16); the product is rounded to the loss's dtype
        return (outputs * _t(np.asarray(self._scale, np.float32))).cast(outputs.dtype)

    def _eager_grads(self, optimizer):
        from .eager import param_tensor
        out = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                t = param_tensor(p)
                if t.grad is not None:
                    out.append(t)
        return out

    def unscale_(self, optimizer) -> None:
        """Divide the ``.grad`` of ``optimizer``'s parameters by the scale (in place, once per step) and record
        whether any is inf/NaN (``torch.amp.GradScaler.unscale_``; call it before clipping gradients)."""
        if not self._enabled:
            return
        if not hasattr(optimizer, "zero_grad"):
            raise TypeError("GradScaler.unscale_/step need an eager optimizer (lm.optim.*); for a graph-built step "
                            "pass the scaler to opt.minimize(loss, scaler=...) or Trainer(..., scaler=...)")
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if self._stepped:
            raise RuntimeError("unscale_() is being called after step().")
        from .eager import tensor as _t
        ts = self._eager_grads(optimizer)
        inv = _t(self._inv_scale())
        found = False
        if ts:
            flags = []
            for t in ts:
                g = t.grad * inv.cast(t.grad.dtype)
                t.grad = g
                flags.append(g.isfinite().logical_not().any())
            any_bad = flags[0]
            for f in flags[1:]:
                any_bad = any_bad.logical_or(f)
            found = bool(any_bad)   # realizes the unscaling with the pending backward (one graph)
        self._found_inf = bool(found) or bool(self._found_inf)
        self._unscaled.add(id(optimizer))

    def step(self, optimizer, *args, **kwargs):
        """Unscale the gradients (unless :meth:`unscale_` already did) and call ``optimizer.step()`` only if they
        are all finite; returns its result, or None when the step was skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if kwargs.get("closure") is not None or args:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if self._stepped:
            raise RuntimeError("step() has already been called since the last update().")
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        self._stepped = True
        if self._found_inf:
            return None
        return optimizer.step()

    def update(self, new_scale=None) -> None:
        """Adjust the scale after a step: ``* backoff_factor`` if it found inf/NaN (the growth tracker resets),
        else count a good step and ``* growth_factor`` every ``growth_interval`` good steps. ``new_scale``
        (a number) sets the scale directly."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = np.float32(float(new_scale))
        else:
            if self._found_inf is None:
                raise RuntimeError("update(): no inf checks were recorded prior to update (call "
                                   "scaler.step(optimizer) first).")
            self._record_step(bool(self._found_inf))
        self._found_inf = None
        self._unscaled.clear()
        self._stepped = False

    def _record_step(self, found_inf: bool) -> None:
        """The scale update of ``torch._amp_update_scale_`` for one step's inf flag."""
        self.found_inf = found_inf
        if found_inf:
            self.skipped_steps += 1
            self._scale = np.float32(self._scale * np.float32(self._backoff_factor))
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = np.float32(self._scale * np.float32(self._growth_factor))
                if np.isfinite(grown):
                    self._scale = grown
                self._growth_tracker = 0

    # ------------------------------------------------------------------ graph-built steps
    def _build(self, loss, params, grad_fn):
        """(gradients, found_inf tensor) of ``loss`` for ``params``: the gradients of ``loss * scale``,
        multiplied by ``1/scale`` (both graph inputs read at every execute), and a bool flag of any inf/NaN."""
        graph = loss.graph
        dt = loss.dtype
        s = graph.tensor((), DType.float32, "loss_scale")  # float32: 2**16 does not fit float16
        s.set_deferred(lambda b: np.asarray(self.get_scale(), np.float32))
        inv = graph.tensor((), DType.float32, "inv_loss_scale")
        inv.set_deferred(lambda b: np.asarray(self._inv_scale() if self._enabled else 1.0, np.float32))
        grads = grad_fn((loss * s).cast(dt), params)
        out, flags = [], []
        for g in grads:
            if g is None:
                out.append(None)
                continue
            g = g * inv.cast(g.dtype)
            out.append(g)
            flags.append(g.isfinite().logical_not().any())
        found = None
        for f in flags:
            found = f if found is None else found.logical_or(f)
        return out, found  # found is None when no parameter gets a gradient

    def _after_execute(self, found) -> None:
        """After an execute of a graph-built step: update the scale from the step's inf flag (a bool tensor)."""
        if self._enabled:
            self._record_step(bool(np.asarray(found.data())))

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """``{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}`` (torch's
        keys); empty when disabled."""
        if not self._enabled:
            return {}
        return {"scale": float(self._scale), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": int(self._growth_tracker)}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} - set(state_dict)
        if missing:
            raise ValueError(f"GradScaler.load_state_dict: missing key(s) {sorted(missing)}")
        self._scale = np.float32(float(state_dict["scale"]))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])

    def __repr__(self) -> str:
        return (f"GradScaler(scale={self.get_scale()}, growth_factor={self._growth_factor}, "
                f"backoff_factor={self._backoff_factor}, growth_interval={self._growth_interval}, "
                f"enabled={self._enabled})")
