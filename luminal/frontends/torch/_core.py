"""Errors, dtypes, the state module, the op registry and the FX-graph converter."""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import torch

from ...dtype import DType
from ...graph import Graph
from ...module import NamedParameters, Parameter
from ...ops import GraphError
from ...shape import Expression, to_expr
from ...tensor import GraphTensor


# ---------------------------------------------------------------------------------------------------- errors
class TorchImportError(GraphError):
    """A PyTorch program could not be imported (unsupported op, dtype, mutation...)."""


class UnsupportedTorchOpError(TorchImportError):
    """An ATen operator without a luminal handler; ``op`` is its target name, ``node`` the FX node's name."""

    def __init__(self, op: str, node: str, message: str):
        super().__init__(message)
        self.op = op
        self.node = node


class _NeedsDecomposition(TorchImportError):
    """Raised by a handler for a form of its op it does not build (e.g. batch_norm updating running statistics
    in training mode); ``decompose="auto"`` then decomposes that op and imports again."""

    def __init__(self, op: str, message: str):
        super().__init__(message)
        self.op = op
        self.node = None


class TorchInputError(TorchImportError, ValueError):
    """A call's inputs do not match the imported program (count, rank, fixed dims, dtype kind)."""


# ---------------------------------------------------------------------------------------------------- dtypes
_DTYPES = {
    torch.float32: DType.float32, torch.float64: DType.float64, torch.float16: DType.float16,
    torch.int64: DType.int64, torch.int32: DType.int32, torch.bool: DType.bool,
    torch.int16: DType.int16, torch.int8: DType.int8, torch.uint8: DType.uint8, torch.uint16: DType.uint16,
    torch.uint32: DType.uint32, torch.uint64: DType.uint64, torch.bfloat16: DType.bfloat16,
}


def tensor_to_numpy(t: "torch.Tensor") -> np.ndarray:
    """A CPU copy of a torch tensor as a numpy array of luminal's host dtype: ``torch.bfloat16`` becomes an
    ``ml_dtypes.bfloat16`` array holding the same bits (``Tensor.numpy()`` refuses bfloat16)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(DType.bfloat16.numpy)
    return t.numpy()


def _ldtype(dt, where_: str = "") -> DType:
    if dt is None:
        return None
    try:
        return _DTYPES[dt]
    except KeyError:
        raise TorchImportError(f"{where_}: dtype {dt} is not supported by luminal (supported: "
                               f"{sorted(str(d) for d in _DTYPES)})") from None


def _torch_dtype_of(dtype: DType):
    return {DType.float32: torch.float32, DType.float64: torch.float64, DType.float16: torch.float16,
            DType.int64: torch.int64, DType.int32: torch.int32, DType.bool: torch.bool, DType.int16: torch.int16,
            DType.int8: torch.int8, DType.uint8: torch.uint8, DType.uint16: torch.uint16,
            DType.uint32: torch.uint32, DType.uint64: torch.uint64, DType.bfloat16: torch.bfloat16}[dtype]


# ---------------------------------------------------------------------------------------------------- parameters
class TorchParameters(NamedParameters):
    """The exported program's state as a luminal ``Module``: parameters (trainable ``Parameter`` s) and buffers
    and lifted constants (``requires_grad=False``), keyed by their ``state_dict`` names (``"0.weight"``,
    ``"bn.running_mean"``...); ``load_state_dict`` updates the graph."""



# names the code generator uses for its own index symbols (as in luminal.onnx.importer.sanitize_symbol)
_RESERVED_SYMBOLS = re.compile(r"^(z|j|r|i\d+|gather_index)$")


def _sanitize_symbol(name: str) -> str:
    out = re.sub(r"[^0-9A-Za-z_]", "_", name) or "dim"
    if out[0].isdigit() or _RESERVED_SYMBOLS.match(out):
        out = "d_" + out
    return out


# ---------------------------------------------------------------------------------------------------- registry
_OPS: dict[str, Callable] = {}
_PASSTHROUGH_MULTI = object()


def _reg(*names: str):
    """Register a handler ``f(cv, node, *args, **kwargs)`` for ATen overloads (``"aten.add.Tensor"``) or Python
    callables (``"<built-in function mul>"`` style names are written as ``"operator.mul"``)."""
    def deco(fn):
        for n in names:
            _OPS[n] = fn
        return fn
    return deco


def _target_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # aten.add.Tensor
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.__name__}"
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    if mod in ("_operator", "operator"):
        return f"operator.{name}"
    if mod.startswith("torch") and hasattr(target, "__name__"):
        return f"{mod}.{name}"
    return f"{mod}.{name}" if mod else name


def supported_ops() -> list[str]:
    """The ATen overloads (and Python operators on sizes) that have a luminal handler."""
    return sorted(_OPS)


# ---------------------------------------------------------------------------------------------------- helpers
def _is_t(x) -> bool:
    return isinstance(x, GraphTensor)


def _int(x, what="value") -> int:
    if isinstance(x, Expression):
        v = x.to_int()
        if v is None:
            raise TorchImportError(f"{what} must be a concrete integer, got the symbolic {x}")
        return v
    return int(x)


def _ax(axis, ndim: int) -> int:
    axis = int(axis)
    return axis + ndim if axis < 0 else axis


def _axes(dims, ndim: int):
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (int, np.integer)):
        dims = [dims]
    dims = [_ax(d, ndim) for d in dims]
    return tuple(dims) if dims else tuple(range(ndim))


def _size(x) -> Expression | int:
    if isinstance(x, Expression) and x.is_constant():
        return x.to_int()
    return x


def _sympy_to_expr(e, names: dict):
    """A torch symbolic size (a sympy expression over ``s0, s1...``) as a luminal Expression."""
    import sympy

    if isinstance(e, (int, np.integer)):
        return int(e)
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        key = str(e)
        if key not in names:
            names[key] = _sanitize_symbol(key)
        return to_expr(names[key])
    args = [_sympy_to_expr(a, names) for a in e.args]
    fname = type(e).__name__
    if isinstance(e, sympy.Add):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if isinstance(e, sympy.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if fname in ("FloorDiv", "floor_div"):
        return args[0] // args[1]
    if fname in ("Mod", "PythonMod"):
        return args[0] % args[1]
    if fname == "Max":
        return to_expr(args[0]).max(args[1])
    if fname == "Min":
        return to_expr(args[0]).min(args[1])
    raise TorchImportError(f"symbolic size {e} ({fname}) cannot be expressed as a luminal shape expression")


# ---------------------------------------------------------------------------------------------------- converter
class _Converter:
    """Builds one luminal graph from one ``torch.export.ExportedProgram``."""

    def __init__(self, ep, symbol_names: dict[str, str], decomposed: bool = False):
        from torch.export.graph_signature import InputKind, OutputKind

        self.ep = ep
        self.decomposed = decomposed
        self.graph = Graph()
        self.params = TorchParameters()
        self.symbol_names = dict(symbol_names)     # torch symbol (s0) -> luminal symbol
        self.env: dict[str, Any] = {}
        self.input_names: list[str] = []
        self.inputs: dict[str, GraphTensor] = {}
        self.input_dtypes: dict[str, Any] = {}
        self.constant_user_inputs: dict[str, Any] = {}
        self.sym_inputs: dict[str, Expression] = {}   # dynamic int inputs
        self.outputs: list = []                    # user outputs (GraphTensor / python value)
        self.output_names: list[str] = []
        self.buffer_mutations: list[tuple[str, str]] = []   # (buffer state_dict name, FX node name)
        sig = ep.graph_signature
        specs = {s.arg.name: s for s in sig.input_specs}
        state = ep.state_dict
        consts = getattr(ep, "constants", {}) or {}
        for node in ep.graph.nodes:
            if node.op == "placeholder":
                spec = specs.get(node.name)
                kind = spec.kind if spec is not None else InputKind.USER_INPUT
                if kind == InputKind.USER_INPUT:
                    self._user_input(node)
                elif kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                    value = state[spec.target] if spec.target in state else consts[spec.target]
                    if not isinstance(value, torch.Tensor):
                        raise TorchImportError(f"input '{node.name}' ({spec.target}) is a {type(value).__name__}, "
                                               "not a tensor")
                    trainable = kind == InputKind.PARAMETER and value.dtype.is_floating_point
                    data = value.detach().cpu()
                    lum = _ldtype(data.dtype, f"{kind.name.lower()} '{spec.target}'")
                    param = Parameter(tensor_to_numpy(data).astype(lum.numpy), dtype=lum, requires_grad=trainable)
                    self.params.add(spec.target, param)
                    self.env[node.name] = param.bind(self.graph)
                elif kind == InputKind.TOKEN:
                    self.env[node.name] = None
                else:
                    raise TorchImportError(f"input '{node.name}' of kind {kind.name} is not supported")
            elif node.op == "call_function":
                self.env[node.name] = self._call(node)
            elif node.op == "get_attr":
                value = getattr(ep.graph_module, node.target)
                if isinstance(value, torch.Tensor):
                    self.env[node.name] = self._const_tensor(value, node.name)
                else:
                    raise TorchImportError(f"node '{node.name}': get_attr of a {type(value).__name__} "
                                           f"({node.target}) is not supported (control flow? see the docs)")
            elif node.op == "output":
                outs = node.args[0]
                for spec, arg in zip(sig.output_specs, outs):
                    value = self._arg(arg)
                    if spec.kind == OutputKind.USER_OUTPUT:
                        self.outputs.append(value)
                        self.output_names.append(arg.name if hasattr(arg, "name") else str(arg))
                    elif spec.kind == OutputKind.BUFFER_MUTATION:
                        self.buffer_mutations.append((spec.target, value))
                    elif spec.kind == OutputKind.TOKEN:
                        continue
                    else:
                        raise TorchImportError(f"output '{spec.arg.name}' of kind {spec.kind.name} is not "
                                               "supported (the program mutates a user input?)")
            else:
                raise TorchImportError(f"node '{node.name}': FX op {node.op} is not supported")

    # ------------------------------------------------------------------ inputs, constants
    def _user_input(self, node) -> None:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            dims = []
            for k, d in enumerate(val.shape):
                if isinstance(d, torch.SymInt):
                    expr = d.node.expr
                    dims.append(_sympy_to_expr(expr, self.symbol_names))
                else:
                    dims.append(int(d))
            lum = _ldtype(val.dtype, f"input '{node.name}'")
            t = self.graph.tensor(tuple(dims), lum, node.name)
            self.inputs[node.name] = t
            self.input_dtypes[node.name] = val.dtype
            self.input_names.append(node.name)
            self.env[node.name] = t
        elif isinstance(val, torch.SymInt):
            # a dynamic integer input (torch.compile passes sizes so): a luminal symbol bound at each call
            expr = to_expr(_sympy_to_expr(val.node.expr, self.symbol_names))
            self.sym_inputs[node.name] = expr
            self.input_names.append(node.name)
            self.env[node.name] = _size(expr)
        else:
            # a Python scalar / None input: export specialized the program to its value
            self.constant_user_inputs[node.name] = val
            self.input_names.append(node.name)
            self.env[node.name] = val

    def _const_tensor(self, value: "torch.Tensor", name: str) -> GraphTensor:
        data = value.detach().cpu()
        lum = _ldtype(data.dtype, f"constant '{name}'")
        arr = np.ascontiguousarray(tensor_to_numpy(data).astype(lum.numpy))
        if arr.ndim == 0:
            return self.graph.constant(arr.item(), lum)
        return self.graph.tensor(arr.shape, lum, f"const:{name}").set(arr).keep()

    # ------------------------------------------------------------------ nodes
    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self._arg(v) for k, v in a.items()}
        if isinstance(a, torch.Tensor):
            return self._const_tensor(a, "inline")
        return a

    def _call(self, node):
        name = _target_name(node.target)
        handler = _OPS.get(name)
        if handler is None:
            raise UnsupportedTorchOpError(name, node.name, _unsupported_message(name, node, self.decomposed))
        args = self._arg(node.args)
        kwargs = self._arg(node.kwargs)
        if name not in _KEEPS_HALF and _has_half(args, kwargs):
            # PyTorch's CPU kernels compute float16/bfloat16 in float32 ("opmath") and round each op's result once;
            # the handler builds the op in float32 and _match_meta rounds the result to torch's dtype
            args, kwargs = _widen_half(args), _widen_half(kwargs)
        try:
            out = handler(self, node, *args, **kwargs)
        except _NeedsDecomposition as err:
            err.node = node.name
            raise
        except UnsupportedTorchOpError:
            raise
        except TorchImportError as err:
            raise TorchImportError(f"node '{node.name}' ({name}): {err}") from err
        except Exception as err:
            raise TorchImportError(f"node '{node.name}' ({name}) failed to convert: {type(err).__name__}: "
                                   f"{err}") from err
        return self._match_meta(node, out)

    def _match_meta(self, node, out):
        """Cast results to the dtype torch computed (``node.meta['val']``), element-wise for tuples."""
        val = node.meta.get("val")
        if _is_t(out) and isinstance(val, torch.Tensor):
            want = _DTYPES.get(val.dtype)
            if want is not None and out.dtype != want:
                out = out.cast(want)
            if out.ndim != val.ndim:
                raise TorchImportError(f"node '{node.name}' ({_target_name(node.target)}): luminal built a rank-"
                                       f"{out.ndim} result {[str(d) for d in out.dims]}, torch expects shape "
                                       f"{tuple(val.shape)}")
        elif isinstance(out, (tuple, list)) and isinstance(val, (tuple, list)) and len(out) == len(val):
            fixed = []
            for o, v in zip(out, val):
                if _is_t(o) and isinstance(v, torch.Tensor):
                    want = _DTYPES.get(v.dtype)
                    if want is not None and o.dtype != want:
                        o = o.cast(want)
                fixed.append(o)
            out = type(out)(fixed) if isinstance(out, tuple) else fixed
        return out

    # helpers used by handlers
    def meta_dims(self, node):
        """Torch's output dims of ``node`` as luminal expressions (None when unknown)."""
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        try:
            return tuple(_sympy_to_expr(d.node.expr, self.symbol_names) if isinstance(d, torch.SymInt) else int(d)
                         for d in val.shape)
        except TorchImportError:
            return None

    def tensor(self, x, like: GraphTensor | None = None, dtype: DType | None = None) -> GraphTensor:
        """``x`` as a GraphTensor (Python scalars and expressions become constants)."""
        if _is_t(x):
            return x if dtype is None or x.dtype == dtype else x.cast(dtype)
        if dtype is None:
            dtype = (DType.bool if isinstance(x, bool) else DType.float32 if isinstance(x, float)
                     else DType.int64)
        return self.graph.constant(x, dtype)


# ops that only move, select or copy elements: they run in the half type itself (no rounding is involved)
_KEEPS_HALF = frozenset(
    f"aten.{op}" for op in (
        "view.default _unsafe_view.default reshape.default view_copy.default view_as.default reshape_as.default "
        "permute.default permute_copy.default transpose.int swapaxes.default transpose_copy.int expand.default "
        "expand_copy.default expand_as.default unsqueeze.default unsqueeze_copy.default squeeze.dim squeeze.dims "
        "squeeze.default squeeze_copy.dims flatten.using_ints unflatten.int slice.Tensor slice_copy.Tensor "
        "select.int select_copy.int narrow.default cat.default concat.default concatenate.default stack.default "
        "split.Tensor split_with_sizes.default split_with_sizes_copy.default chunk.default unbind.int flip.default "
        "roll.default repeat.default tile.default t.default numpy_T.default clone.default contiguous.default "
        "alias.default detach.default lift_fresh_copy.default embedding.default index_select.default "
        "gather.default index.Tensor _to_copy.default to.dtype to.dtype_layout type_as.default"
    ).split())


def _has_half(*trees) -> bool:
    for x in trees:
        if _is_t(x):
            if x.dtype.is_half:
                return True
        elif isinstance(x, (list, tuple)):
            if _has_half(*x):
                return True
        elif isinstance(x, dict):
            if _has_half(*x.values()):
                return True
    return False


def _widen_half(x):
    if _is_t(x):
        return x.cast(DType.float32) if x.dtype.is_half else x
    if isinstance(x, (list, tuple)):
        return type(x)(_widen_half(v) for v in x)
    if isinstance(x, dict):
        return {k: _widen_half(v) for k, v in x.items()}
    return x


def _unsupported_message(name: str, node, decomposed: bool) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(_OPS), n=3, cutoff=0.6)
    hint = f" Close supported ops: {close}." if close else ""
    stack = node.meta.get("stack_trace") or ""
    where_ = ""
    if stack:
        lines = [ln.strip() for ln in stack.strip().splitlines() if ln.strip().startswith("File")]
        if lines:
            where_ = f" (traced from {lines[-1]})"
    after = ("even after run_decompositions()" if decomposed else
             "(decompose=False: decompose='auto' may lower it to supported ops)")
    return (f"ATen operator {name} (node '{node.name}'){where_} has no luminal handler, {after}. Rewrite that "
            f"part of the model with supported operators (see luminal.frontends.torch.supported_ops(), "
            f"{len(_OPS)} of them), split the model so that part runs in torch, or add a handler with "
            f"luminal.frontends.torch.register_op('{name}').{hint}")


def register_op(*names: str):
    """Decorator adding a handler ``fn(converter, node, *args, **kwargs) -> GraphTensor | tuple`` for ATen
    overload names such as ``"aten.erfinv.default"`` (args arrive converted: GraphTensors, ints or
    Expressions for sizes)."""
    return _reg(*names)
