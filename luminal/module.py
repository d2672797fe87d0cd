"""Modules: PyTorch-style containers of parameters that build graph nodes when called.

Design (one rule, used by every layer): **a module owns its parameters as host
arrays and binds them to a graph lazily.** ``nn.Linear(784, 128)`` initializes
its weights in numpy right away (seeded, PyTorch's default init) without any
graph; the first time the module is called on a ``GraphTensor``, each parameter
becomes an input of that tensor's graph (``keep()``-ed, data set). The same
module can be used in several graphs; ``load_state_dict`` updates the host
arrays *and* every graph the parameters are bound to.

Example::

    >>> import luminal as lm, luminal.nn as nn, numpy as np
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> cx = lm.Graph()
    >>> y = model(cx.tensor(("batch", 4))).retrieve()
    >>> sorted(model.state_dict())
    ['0.bias', '0.weight', '2.bias', '2.weight']
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterator

import numpy as np

from .dtype import DType, as_dtype
from .graph import Graph, GraphError
from . import module_hooks
from .tensor import GraphTensor


class DeviceValue:
    """A value that a compiled device kept in its own memory (``device="cuda"``: training state that stays on
    the GPU between steps): copied to the host on first use."""

    __slots__ = ("graph", "node_id")

    def __init__(self, graph: Graph, node_id: int):
        self.graph, self.node_id = graph, node_id

    def resolve(self) -> np.ndarray:
        key = (self.node_id, 0)
        value = self.graph.tensors.get(key)
        if value is None:
            fetch = getattr(self.graph.runtime, "fetch", None)
            if fetch is not None and fetch(self.graph, self.node_id):
                value = self.graph.tensors.get(key)
        if value is None:
            raise GraphError(f"the device value of node {self.node_id} is no longer available (its graph was "
                             "recompiled); read training state before changing the graph")
        return value


def resolve(value):
    """``value``, or the host copy of a :class:`DeviceValue`."""
    return value.resolve() if isinstance(value, DeviceValue) else value


class Parameter:
    """A named host array bound lazily to graphs as a kept input (see the module docstring).

    Attributes:
        data: the current value (numpy, the parameter's dtype).
        requires_grad: whether training should update it.
    """

    def __init__(self, data, dtype=None, requires_grad: bool = True):
        arr = np.asarray(data)
        self.dtype = as_dtype(dtype) if dtype is not None else (
            as_dtype(arr.dtype) if arr.dtype.kind in "biu" else DType.float32)
        self.data = np.array(arr, dtype=self.dtype.numpy, order="C")  # keeps 0-d shapes (unlike ascontiguousarray)
        self.requires_grad = requires_grad
        self._bound: dict[int, tuple[Graph, GraphTensor]] = {}
        self.name = "param"

    @property
    def data(self) -> np.ndarray:
        """The current value (a host array; state kept on a GPU is copied over on first read)."""
        value = self.__dict__["_data"]
        if isinstance(value, DeviceValue):
            value = self.__dict__["_data"] = value.resolve()
        return value

    @data.setter
    def data(self, value) -> None:
        self.__dict__["_data"] = value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def bind(self, graph: Graph) -> GraphTensor:
        """This parameter as an input tensor of ``graph`` (created once per graph)."""
        hit = self._bound.get(id(graph))
        if hit is not None and hit[0] is graph:
            return hit[1]
        tensor = graph.tensor(self.data.shape, self.dtype, self.name).set(self.data).keep()
        self._bound[id(graph)] = (graph, tensor)
        return tensor

    @property
    def grad(self):
        """The gradient accumulated by eager ``backward()`` (a ``luminal.eager.Tensor``), or None."""
        t = self.__dict__.get("_eager")
        return None if t is None else t.grad

    @grad.setter
    def grad(self, value) -> None:
        if value is None and "_eager" not in self.__dict__:
            return
        from .eager import param_tensor
        param_tensor(self).grad = value

    def register_hook(self, hook):
        """``hook(grad)`` runs on this parameter's gradient in eager ``backward()`` before it is accumulated into
        ``.grad`` (a non-None result replaces it); returns a removable handle (``torch.Tensor.register_hook``)."""
        from .eager import param_tensor
        return param_tensor(self).register_hook(hook)

    def bound_tensors(self) -> list[GraphTensor]:
        return [t for _, t in self._bound.values()]

    def copy_(self, value) -> None:
        """Replace the value (same shape; cast to the parameter's dtype) everywhere it is bound."""
        arr = np.asarray(value)
        if arr.shape != self.data.shape:
            raise ValueError(f"parameter '{self.name}': shape {arr.shape} does not match {self.data.shape}")
        self.data = np.array(arr, dtype=self.dtype.numpy, order="C")
        for tensor in self.bound_tensors():
            tensor.set(self.data)

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape}, dtype={self.dtype.value})"

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_data"] = self.data  # a value kept on a device is copied to the host
        state.pop("_eager", None)  # the eager handle (and its gradient) is per process
        return state

    def __deepcopy__(self, memo) -> "Parameter":
        """A copy of the value that is bound to no graph (``copy.deepcopy(module)`` clones layers)."""
        out = type(self)(self.data.copy(), self.dtype, self.requires_grad)
        out.name = self.name
        memo[id(self)] = out
        return out


class Module:
    """Base class of layers: assign ``Parameter``s and sub-modules as attributes; implement ``forward``."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning "
                                 f"attribute '{name}'")
        for registry in (self._parameters, self._buffers, self._modules):
            registry.pop(name, None)
        if isinstance(value, Parameter):
            value.name = name
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, value) -> Parameter:
        """A non-trainable state array (e.g. BatchNorm's running mean), saved in the state dict."""
        buf = value if isinstance(value, Parameter) else Parameter(value, requires_grad=False)
        buf.requires_grad = False
        buf.name = name
        object.__setattr__(self, name, buf)
        self._buffers[name] = buf
        return buf

    # ------------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args, **kwargs):
        if module_hooks.used() and (module_hooks.has_hooks(self) or (
                self._modules and _eager_args(args, kwargs) and module_hooks.any_below(self))):
            return module_hooks.call(self, args, kwargs, lambda a, k: self._call_plain(*a, **k))
        return self._call_plain(*args, **kwargs)

    def _call_plain(self, *args, **kwargs):
        """The call without hooks: an eager call is recorded as one operation; graph tensors run ``forward``."""
        if args and type(args[0]) is not GraphTensor and _eager_args(args, kwargs):
            from .eager import _core  # eager tensors (or numpy arrays): record the call as one operation
            args = tuple(_core.Tensor(a) if isinstance(a, np.ndarray) else a for a in args)
            return _core.call_module(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ hooks (luminal/module_hooks.py)
    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """``hook(module, args)`` (``hook(module, args, kwargs)`` with ``with_kwargs``) runs before every call; a
        non-None result replaces the positional args (a tuple, or one value) -- or ``(args, kwargs)`` with
        ``with_kwargs``. Returns a handle whose ``remove()`` unregisters it (``torch.nn.Module``'s)."""
        return module_hooks.register(self, "_forward_pre_hooks", hook, with_kwargs, prepend)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """``hook(module, args, output)`` (``hook(module, args, kwargs, output)`` with ``with_kwargs``) runs after
        every call; a non-None result replaces the output. Returns a removable handle."""
        return module_hooks.register(self, "_forward_hooks", hook, with_kwargs, prepend)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_output)`` runs when the gradients of the outputs of a call are computed (eager
        tensors); a non-None result replaces ``grad_output``. Returns a removable handle."""
        return module_hooks.register(self, "_backward_pre_hooks", hook, False, prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_input, grad_output)`` runs when the gradients of a call's positional tensor inputs are
        computed (eager tensors; tuples, None for an input that does not require grad); a non-None result replaces
        ``grad_input``. Returns a removable handle."""
        return module_hooks.register(self, "_backward_hooks", hook, False, prepend)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the ``.grad`` of every parameter (eager training; ``set_to_none=False`` keeps zero tensors)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = np.zeros(p.shape, p.dtype.numpy)

    # ------------------------------------------------------------------ traversal
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def children(self) -> Iterator["Module"]:
        return iter(self._modules.values())

    def modules(self) -> Iterator["Module"]:
        return (m for _, m in self.named_modules())

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, Parameter)`` in PyTorch's order: own parameters first, then each child's."""
        seen = set()
        for mod_prefix, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), p

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for mod_prefix, module in self.named_modules(prefix):
            for name, b in module._buffers.items():
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), b

    # ------------------------------------------------------------------ state
    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Parameters and buffers by dotted name (copies of the host arrays), in PyTorch's order: module by
        module (depth first, children in registration order), each module's parameters, then its buffers."""
        out = OrderedDict()
        seen = set()
        for mod_prefix, module in self.named_modules():
            for name, p in module._parameters.items():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                out[f"{mod_prefix}.{name}" if mod_prefix else name] = p.data.copy()
            for name, b in module._buffers.items():
                out[f"{mod_prefix}.{name}" if mod_prefix else name] = b.data.copy()
        return out

    def load_state_dict(self, state, strict: bool = True) -> tuple[list[str], list[str]]:
        """Load arrays by name (numpy arrays, torch tensors, anything ``np.asarray`` takes).

        With ``strict``, missing or unexpected keys raise ``KeyError`` listing them; a shape mismatch always
        raises ``ValueError`` naming the key and both shapes. Returns ``(missing, unexpected)``.
        """
        own = OrderedDict(self.named_parameters())
        own.update(self.named_buffers())
        state = {k: _to_numpy(v) for k, v in state.items()}
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        mismatched = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {own[k].shape}" for k in own
                      if k in state and tuple(state[k].shape) != own[k].shape]
        if mismatched:
            raise ValueError("load_state_dict: shape mismatch for " + "; ".join(mismatched))
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for k, p in own.items():
            if k in state:
                p.copy_(state[k])
        return missing, unexpected

    # ------------------------------------------------------------------ modes
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (affects graphs built afterwards: Dropout, BatchNorm)."""
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    # ------------------------------------------------------------------ dtypes
    def to(self, dtype) -> "Module":
        """Convert every floating-point parameter and buffer to ``dtype`` (``torch.nn.Module.to(dtype)``; integer
        and bool ones are left alone), in place; returns the module. Values are rounded to nearest even.

        Graphs built afterwards see the new dtype. A module with bfloat16 / float16 weights and float32 inputs
        computes in float32 (type promotion), and its matrix products read the weights as stored (2 bytes per
        parameter; see ``luminal.codegen.gemm_lowp``). Converting a parameter that a graph already uses raises
        RuntimeError: that graph's input has the old dtype (convert first, then build)."""
        dtype = as_dtype(dtype)
        if not dtype.is_float:
            raise TypeError(f"Module.to: expected a floating dtype, got {dtype.value}")
        params = [p for _, p in self.named_parameters()] + [b for _, b in self.named_buffers()]
        todo = [p for p in dict.fromkeys(params) if p.dtype.is_float and p.dtype != dtype]
        for p in todo:
            if p.bound_tensors():
                raise RuntimeError(f"Module.to({dtype.value}): parameter {p.name!r} is already used by a graph; "
                                   "convert the module before building graphs with it")
        for p in todo:
            p.dtype = dtype
            p.data = np.array(p.data, dtype=dtype.numpy, order="C")
        return self

    def float(self) -> "Module":
        """``to(float32)``."""
        return self.to(DType.float32)

    def double(self) -> "Module":
        """``to(float64)``."""
        return self.to(DType.float64)

    def half(self) -> "Module":
        """``to(float16)``."""
        return self.to(DType.float16)

    def bfloat16(self) -> "Module":
        """``to(bfloat16)``."""
        return self.to(DType.bfloat16)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            child_repr = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {child_repr}")
        return lines[0] + (")" if len(lines) == 1 else "\n" + "\n".join(lines[1:]) + "\n)")


def _eager_args(args, kwargs) -> bool:
    """Whether a module call gets eager tensors or numpy arrays (and no GraphTensor)."""
    eager = False
    for a in (*args, *kwargs.values()):
        if isinstance(a, GraphTensor):
            return False
        if isinstance(a, np.ndarray) or type(a).__name__ == "Tensor" and type(a).__module__ == "luminal.eager.tensor":
            eager = True
    return eager


def _to_numpy(value) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def bind(param: Parameter, like: GraphTensor) -> GraphTensor:
    """``param`` as a tensor in ``like``'s graph (what layers call inside ``forward``)."""
    if type(like).__module__ == "luminal.eager.tensor":  # a forward run on eager tensors (module hooks)
        from .eager._core import param_tensor
        return param_tensor(param)
    if not isinstance(like, GraphTensor):
        raise TypeError(f"modules are called on GraphTensors, got {type(like).__name__}")
    return param.bind(like.graph)


class NamedParameters(Module):
    """A flat ``Module`` of named tensors, as importers build them (ONNX initializers, an exported torch
    program's state): ``add(name, param)`` files a trainable ``Parameter`` under ``parameters()`` and one with
    ``requires_grad=False`` under the buffers; ``params[name]``, ``name in params`` and ``len(params)`` see both."""

    def add(self, name: str, param: Parameter) -> None:
        param.name = name
        if param.requires_grad:
            self._parameters[name] = param
        else:
            self._buffers[name] = param

    def __getitem__(self, name: str) -> Parameter:
        if name in self._parameters:
            return self._parameters[name]
        return self._buffers[name]

    def __contains__(self, name: str) -> bool:
        return name in self._parameters or name in self._buffers

    def __len__(self) -> int:
        return len(self._parameters) + len(self._buffers)


class CompiledModel:
    """What the importers' callable models share (:class:`luminal.onnx.OnnxModel`,
    :class:`luminal.frontends.torch.TorchModel`): a ``graph`` compiled on demand for ``device``; subclasses set
    ``self.graph``, ``self.device`` and ``self._compiled = False``."""

    def compile(self, device: str | None = None, **options):
        """Compile the graph for ``device`` (default: the device given at import, else ``$LUMINAL_DEVICE`` or the
        reference interpreter); ``options`` go to :meth:`luminal.Graph.compile` (``search=``, ``budget_s=``...)."""
        if device is not None:
            self.device = device
        self.graph.compile(device=self.device, **options)
        self.device = self.graph.device
        self._compiled = True
        return self

    @property
    def runtime(self):
        """The compiled runtime object (``None`` before the first compile of a graph on the reference device)."""
        return self.graph.runtime


class ModuleList(Module):
    """A list of modules registered as children ``"0"``, ``"1"``...; calling it chains them in order."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module) -> "ModuleList":
        setattr(self, str(len(self._modules)), _as_module(module))
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index):
        return list(self._modules.values())[index]

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class Sequential(ModuleList):
    """Apply modules in order; children are named ``"0"``, ``"1"``... (or by an ordered dict's keys)."""

    def __init__(self, *modules):
        if len(modules) == 1 and isinstance(modules[0], (dict, OrderedDict)):
            super().__init__()
            for name, m in modules[0].items():
                setattr(self, name, _as_module(m))
        else:
            super().__init__(modules)


class ModuleDict(Module):
    """A dict of named child modules."""

    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            self[name] = m

    def __setitem__(self, name: str, module) -> None:
        setattr(self, name, _as_module(module))

    def __getitem__(self, name: str) -> Module:
        return self._modules[name]

    def __contains__(self, name: str) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class _Lambda(Module):
    def __init__(self, fn):
        super().__init__()
        object.__setattr__(self, "fn", fn)

    def forward(self, *args):
        return self.fn(*args)


def _as_module(value) -> Module:
    if isinstance(value, Module):
        return value
    if isinstance(value, (tuple, list)):
        return ModuleList(value)  # tuples/lists of modules chain, as in the seed
    if callable(value):
        return _Lambda(value)
    raise TypeError(f"expected a Module (or a tuple/list of them), got {type(value).__name__}")


def check_graph_tensor(x, where: str) -> GraphTensor:
    if not isinstance(x, GraphTensor):
        raise GraphError(f"{where} expects a GraphTensor input, got {type(x).__name__}")
    return x
