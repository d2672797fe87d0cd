"""ONNX ModelProto -> one luminal ``Graph``: inputs, parameters, nodes (folded or built), outputs.

Every ONNX value becomes a :class:`Value` holding what is known of it:

* ``static``: its value at import time (constants, initializers, shape computations). Integer shape values
  over symbolic dims are numpy *object* arrays of :class:`~luminal.shape.Expression`, so
  ``Shape -> Gather -> Concat -> Reshape`` with a symbolic batch folds to ``reshape(("batch", 16))``.
* ``tensor``: its ``GraphTensor`` in the graph (created on first use for static values).
* ``param``: the :class:`~luminal.module.Parameter` of an initializer (trainable when floating point).

A node whose inputs are all static (and none is a floating-point parameter, which stays trainable) is folded
at import time; any other node is built with its handler from :mod:`luminal.onnx.ops`.
"""

from __future__ import annotations

import re
from collections import ChainMap

import numpy as np
import onnx

from ..dtype import DType
from ..graph import Graph
from ..hl_ops.creation import constant
from ..module import NamedParameters, Parameter
from ..shape import Expression, to_expr
from ..tensor import GraphTensor
from . import dtypes
from .errors import NeedsStaticInputError, OnnxImportError, UnsupportedOperatorError
from .registry import REGISTRY, NodeContext, NotFoldable, Typed

MIN_OPSET = 13  # operator versions older than the ones current at opset 13 are refused
# names the code generator uses for its own index symbols (the flat index, loop and reduction variables)
_RESERVED_SYMBOLS = re.compile(r"^(z|j|r|i\d+|gather_index)$")


class Value:
    """What the importer knows about one ONNX value (see the module docstring)."""

    __slots__ = ("name", "onnx_type", "static", "tensor", "param", "sources")

    def __init__(self, name: str, onnx_type: int, static=None, tensor=None, param=None, sources=frozenset()):
        self.name = name
        self.onnx_type = onnx_type
        self.static = static
        self.tensor = tensor
        self.param = param
        self.sources = frozenset(sources)  # the model inputs a run-time value is computed from

    @property
    def foldable(self) -> bool:
        """Known at import time and not a trainable (floating-point) parameter."""
        return self.static is not None and not (self.param is not None and self.param.requires_grad)

    def __repr__(self) -> str:
        kind = "param" if self.param is not None else "static" if self.static is not None else "tensor"
        return f"Value({self.name!r}, {dtypes.name(self.onnx_type)}, {kind})"


class OnnxParameters(NamedParameters):
    """The model's initializers as a luminal ``Module``: floating-point ones are trainable parameters, the
    others buffers; names are the ONNX initializer names (``state_dict()`` keys)."""



def sanitize_symbol(name: str) -> str:
    """A luminal symbol name for an ONNX ``dim_param`` (identifier characters; names the code generator uses
    for its own loop indices, and names starting with a digit, get a ``d_`` prefix)."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", name) or "dim"
    if out[0].isdigit() or _RESERVED_SYMBOLS.match(out):
        out = "d_" + out
    return out


def _value_type(vi: onnx.ValueInfoProto):
    t = vi.type
    if t.HasField("tensor_type"):
        return t.tensor_type.elem_type, (t.tensor_type.shape if t.tensor_type.HasField("shape") else None)
    return None, None


class Importer:
    """Builds the graph of one model; see :func:`luminal.onnx.load` for the options."""

    def __init__(self, model: onnx.ModelProto, source: str = "<model>", input_shapes=None, constant_inputs=None):
        from . import ops  # noqa: F401 - registers the operator handlers

        self.model = model
        self.source = source
        self.graph = Graph()
        self.params = OnnxParameters()
        self.symbols: dict[str, str] = {}          # ONNX dim_param -> luminal symbol
        self.input_names: list[str] = []           # run-time model inputs, in order
        self.input_tensors: dict[str, GraphTensor] = {}
        self.input_types: dict[str, int] = {}
        self.frozen_inputs: dict[str, np.ndarray] = {}
        self.output_names: list[str] = []
        self.values: dict[str, Value] = {}
        self.inferred_types: dict[str, int] = {}
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.assumptions: list[tuple[Expression, int, str]] = []   # (symbolic size, its maximum, node) checked per call
        self._scratch: dict[int, GraphTensor] = {}
        self._producers: dict[str, tuple] = {}  # value name -> (node, Value) that made it (luminal.onnx.fusion)
        self._check_model()
        self._infer_types()
        self._add_initializers()
        self._add_inputs(dict(input_shapes or {}), dict(constant_inputs or {}))
        self.run_nodes(model.graph.node, self.values)
        self._add_outputs()

    # ------------------------------------------------------------------ model-level checks
    def _check_model(self) -> None:
        m = self.model
        if not isinstance(m, onnx.ModelProto):
            raise OnnxImportError(f"{self.source}: expected an onnx.ModelProto, got {type(m).__name__}")
        if m.ir_version <= 0 or not m.HasField("graph") or (not m.graph.node and not m.graph.output):
            raise OnnxImportError(f"{self.source}: not an ONNX model (no IR version or empty graph)")
        self.opsets: dict[str, int] = {}
        for o in m.opset_import:
            self.opsets["" if o.domain == "ai.onnx" else o.domain] = o.version
        if "" not in self.opsets:
            self.opsets[""] = 1 if m.ir_version < 3 else onnx.defs.onnx_opset_version()
        newest = onnx.defs.onnx_opset_version()
        if self.opsets[""] > newest:
            raise OnnxImportError(f"{self.source}: the model uses opset {self.opsets['']} of the default domain, "
                                  f"newer than this onnx package knows ({newest}); supported: opsets "
                                  f"{MIN_OPSET}..{newest}")

    def _infer_types(self) -> None:
        g = self.model.graph
        try:
            inferred = onnx.shape_inference.infer_shapes(_skeleton(self.model), strict_mode=False).graph
            infos = list(inferred.value_info) + list(inferred.output) + list(inferred.input)
        except Exception:  # inference is a hint only (it fails on >2 GB models and some custom ops)
            infos = []
        for vi in infos + list(g.value_info) + list(g.output) + list(g.input):
            t, _ = _value_type(vi)
            if t:
                self.inferred_types[vi.name] = t

    # ------------------------------------------------------------------ initializers and inputs
    def _add_initializers(self) -> None:
        for init in self.model.graph.initializer:
            arr = self._initializer_array(init)
            t = init.data_type
            if t in dtypes.SUPPORTED:
                trainable = t in dtypes.FLOATS
                lum = dtypes.luminal(t)
                param = Parameter(arr.astype(lum.numpy), dtype=lum, requires_grad=trainable)
                self.params.add(init.name, param)
                self.values[init.name] = Value(init.name, t, static=arr, param=param)
            else:  # usable as an import-time constant only; materializing it raises
                self.values[init.name] = Value(init.name, t, static=arr)
        for sp in self.model.graph.sparse_initializer:
            arr = _sparse_to_dense(sp)
            name = sp.values.name
            t = sp.values.data_type
            self.values[name] = Value(name, t, static=arr)

    def _initializer_array(self, init) -> np.ndarray:
        try:
            return onnx.numpy_helper.to_array(init)
        except Exception as err:
            raise OnnxImportError(f"{self.source}: initializer '{init.name}' cannot be read ({err}); external "
                                  "data must sit beside the model file") from None

    def _add_inputs(self, input_shapes: dict, constant_inputs: dict) -> None:
        init_names = {i.name for i in self.model.graph.initializer}
        for vi in self.model.graph.input:
            if vi.name in init_names:
                continue
            t, shape = _value_type(vi)
            if t is None:
                raise OnnxImportError(f"{self.source}: input '{vi.name}' is a "
                                      f"{vi.type.WhichOneof('value') or 'untyped'} value; only tensors are supported")
            if vi.name in constant_inputs:
                arr = np.asarray(constant_inputs.pop(vi.name))
                if t in dtypes.NUMPY_OF:
                    arr = arr.astype(dtypes.numpy(t))
                self.frozen_inputs[vi.name] = arr
                self.values[vi.name] = Value(vi.name, t, static=arr)
                continue
            if t not in dtypes.SUPPORTED:
                raise OnnxImportError(f"{self.source}: input '{vi.name}' has element type {dtypes.name(t)}, which "
                                      f"luminal does not support (supported: {dtypes.supported_names()})")
            dims = self._input_dims(vi.name, shape, input_shapes.pop(vi.name, None))
            tensor = self.graph.tensor(dims, dtypes.luminal(t), vi.name)
            self.input_names.append(vi.name)
            self.input_tensors[vi.name] = tensor
            self.input_types[vi.name] = t
            self.values[vi.name] = Value(vi.name, t, tensor=tensor, sources={vi.name})
        for leftover, what in ((input_shapes, "input_shapes"), (constant_inputs, "constant_inputs")):
            if leftover:
                raise OnnxImportError(f"{self.source}: {what} names {sorted(leftover)}, which are not inputs of "
                                      f"the model (inputs: {[i.name for i in self.model.graph.input]})")

    def _input_dims(self, name: str, shape, override) -> tuple:
        if override is not None:
            out = []
            for k, d in enumerate(override):
                if isinstance(d, str):
                    out.append(self._symbol(d))
                elif d is None or (isinstance(d, (int, np.integer)) and d < 0):
                    out.append(self._symbol(f"{name}_{k}"))
                else:
                    out.append(to_expr(d))
            return tuple(out)
        if shape is None:
            raise OnnxImportError(f"{self.source}: input '{name}' has no shape in the model; give one with "
                                  f"load(..., input_shapes={{'{name}': (...)}}) (ints or symbol names)")
        dims = []
        for k, d in enumerate(shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(to_expr(int(d.dim_value)))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(self._symbol(d.dim_param))
            else:
                dims.append(self._symbol(f"{name}_dim{k}"))
        return tuple(dims)

    def _symbol(self, dim_param: str) -> Expression:
        if dim_param not in self.symbols:
            name = sanitize_symbol(dim_param)
            taken = set(self.symbols.values())
            base, k = name, 1
            while name in taken:
                k += 1
                name = f"{base}_{k}"
            self.symbols[dim_param] = name
        return Expression.symbol(self.symbols[dim_param])

    def assume(self, size: Expression, maximum: int, where: str) -> None:
        """Record that the symbolic ``size`` is at most ``maximum`` (a slice of a constant-length table by a
        symbolic length); :class:`~luminal.onnx.model.OnnxModel` checks it when inputs bind the symbols."""
        if not any(size == s and maximum == m for s, m, _ in self.assumptions):
            self.assumptions.append((size, maximum, where))

    # ------------------------------------------------------------------ outputs
    def _add_outputs(self) -> None:
        for vi in self.model.graph.output:
            v = self.values.get(vi.name)
            if v is None:
                raise OnnxImportError(f"{self.source}: graph output '{vi.name}' is not produced by any node")
            if v.static is None and v.tensor is not None:
                v.tensor.retrieve()
            self.output_names.append(vi.name)

    # ------------------------------------------------------------------ materialization
    def materialize(self, v: Value, graph: Graph) -> GraphTensor:
        """``v`` as a tensor of ``graph`` (the model's graph, or a scratch graph while folding)."""
        if graph is self.graph:
            if v.tensor is None:
                if v.param is not None:
                    v.tensor = v.param.bind(graph)
                else:
                    v.tensor = self.tensor_of_array(v.static, graph, v.onnx_type, v.name)
            return v.tensor
        if v.static is None:
            raise OnnxImportError(f"internal: value '{v.name}' is not known at import time")
        hit = self._scratch.get(id(v))
        if hit is None or hit.graph is not graph:
            hit = self._scratch[id(v)] = self.tensor_of_array(v.static, graph, v.onnx_type, v.name)
        return hit

    def tensor_of_array(self, arr: np.ndarray, graph: Graph, onnx_type: int | None = None,
                        name: str = "constant") -> GraphTensor:
        """An import-time array as a tensor: a broadcast constant when all its elements are equal, otherwise a
        kept graph input holding the data; object arrays of symbolic dims become ``Constant(expression)``s."""
        arr = np.asarray(arr)
        if arr.dtype == object:
            flat = [to_expr(x) for x in arr.reshape(-1)]
            if all(e.is_constant() for e in flat):
                arr = np.array([e.to_int() for e in flat], dtype=np.int64).reshape(arr.shape)
            else:
                parts = [constant(graph, e, dtypes.luminal(onnx_type or onnx.TensorProto.INT64), ()) for e in flat]
                if arr.ndim == 0:
                    return parts[0]
                from ..hl_ops import stack
                return stack(parts, 0).reshape(arr.shape)
        if onnx_type is None:
            onnx_type = dtypes.of_numpy(arr.dtype)
        if onnx_type not in dtypes.SUPPORTED:
            raise OnnxImportError(f"value '{name}' has element type {dtypes.name(onnx_type)}, which luminal does not "
                                  f"support (supported: {dtypes.supported_names()})")
        lum = dtypes.luminal(onnx_type)
        data = arr.astype(lum.numpy)
        if data.size == 0:
            return constant(graph, 0, lum, data.shape)
        first = data.reshape(-1)[0]
        uniform = (np.all(np.isnan(data)) if lum.is_float and np.isnan(first) else bool(np.all(data == first)))
        if uniform and not (lum.is_float and first == 0 and np.signbit(data).any() != np.signbit(first)):
            return constant(graph, first.item(), lum, data.shape)
        return graph.tensor(data.shape, lum, f"const:{name}").set(data).keep()

    # ------------------------------------------------------------------ nodes
    def run_nodes(self, nodes, scope) -> None:
        """Import ``nodes`` in order, reading and writing values in ``scope`` (a dict or ChainMap)."""
        for index, node in enumerate(nodes):
            self.run_node(node, index, scope)

    def run_node(self, node: onnx.NodeProto, index: int, scope) -> None:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(None)
                continue
            if name not in scope:
                raise OnnxImportError(f"{self._where(node, index)}: input '{name}' is not defined before the node "
                                      "(the graph is not topologically sorted, or the value is missing)")
            inputs.append(scope[name])
        if (domain, node.op_type) in self.functions:
            return self._inline_function(node, index, inputs, scope)
        version = self._check_supported(node, index, domain)
        if domain == "" and node.op_type == "Mul" and self._fused_gelu(node, scope):
            return
        spec = REGISTRY[(domain, node.op_type)]
        try:
            results, static = self._build(spec, node, index, inputs, version, scope)
        except NeedsStaticInputError as err:
            raise NeedsStaticInputError(f"{self._where(node, index, version)}: {err}", err.graph_inputs) from None
        except OnnxImportError as err:
            if str(err).startswith(("node #", self.source)):
                raise
            raise type(err)(f"{self._where(node, index, version)}: {err}") from None
        except (ValueError, TypeError, IndexError, NotImplementedError, KeyError, ZeroDivisionError) as err:
            raise OnnxImportError(f"{self._where(node, index, version)}: {type(err).__name__}: {err}") from err
        sources = frozenset().union(*(v.sources for v in inputs if v is not None and v.static is None))
        for k, name in enumerate(node.output):
            if not name:
                continue
            if k >= len(results) or results[k] is None:
                raise OnnxImportError(f"{self._where(node, index, version)}: output {k} ('{name}') is not "
                                      "produced by luminal.onnx's implementation of this operator")
            item = results[k]
            if isinstance(item, Value):
                scope[name] = item
            elif static:
                scope[name] = Value(name, item[1], static=item[0])
            else:
                tensor, onnx_type = item
                scope[name] = Value(name, onnx_type, tensor=tensor, sources=sources)
            self._producers[name] = (node, scope[name])

    def _fused_gelu(self, node, scope) -> bool:
        """Import ``node`` as ``x.gelu()`` where it ends a written-out exact GELU of a run-time float tensor
        (:mod:`luminal.onnx.fusion`); False (nothing done) elsewhere."""
        from .fusion import match_gelu

        name = match_gelu(node, scope, self._producers)
        x = scope.get(name) if name is not None else None
        if x is None or x.static is not None or x.tensor is None or not x.tensor.dtype.is_float or \
                not x.tensor.dims or len(node.output) != 1 or not node.output[0]:
            return False
        out = node.output[0]
        scope[out] = Value(out, x.onnx_type, tensor=x.tensor.gelu(), sources=x.sources)
        self._producers[out] = (node, scope[out])
        return True

    def _where(self, node, index, version=None) -> str:
        name = f" '{node.name}'" if node.name else ""
        ver = f", opset version {version}" if version is not None else ""
        dom = f" of domain '{node.domain}'" if node.domain not in ("", "ai.onnx") else ""
        return f"node #{index}{name} ({node.op_type}{dom}{ver})"

    def _check_supported(self, node, index, domain) -> int:
        if domain not in self.opsets:
            raise UnsupportedOperatorError(f"{self._where(node, index)}: domain '{domain}' is not imported by the "
                                           "model (opset_import)")
        opset = self.opsets[domain]
        version, problem = check_operator(node.op_type, domain, opset)
        if problem:
            raise UnsupportedOperatorError(f"{self._where(node, index, version)}: {problem}")
        return version

    def _build(self, spec, node, index, inputs, version, scope=None):
        """Run the handler (folding when every input is known); returns (results, all_static)."""
        has_subgraph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
        foldable = spec.pure and not has_subgraph and all(v is None or v.foldable for v in inputs) and any(
            v is not None for v in inputs)
        if foldable:
            ctx = NodeContext(self, node, index, inputs, version, self.graph, self.materialize)
            if spec.fold is not None:
                try:
                    out = spec.fold(ctx)
                    return [None if o is None else self._static_result(ctx, k, o) for k, o in enumerate(out)], True
                except NotFoldable:
                    pass
            if not any(v is not None and v.static.dtype == object for v in inputs):
                return self._fold_on_scratch(spec, node, index, inputs, version), True
        ctx = NodeContext(self, node, index, inputs, version, self.graph, self.materialize)
        ctx.scope = scope
        out = spec.handler(ctx)
        results = []
        for k, o in enumerate(out):
            if o is None:
                results.append(None)
            elif isinstance(o, Value):
                results.append(o)
            elif isinstance(o, (np.ndarray, np.generic)) or (isinstance(o, Typed) and not isinstance(o.value, GraphTensor)):
                arr, t = self._static_result(ctx, k, o)
                results.append(Value(node.output[k] if k < len(node.output) else "", t, static=arr))
            else:
                results.append(self._tensor_result(ctx, k, o))
        return results, False

    def _fold_on_scratch(self, spec, node, index, inputs, version):
        scratch = Graph()
        ctx = NodeContext(self, node, index, inputs, version, scratch, self.materialize)
        out = spec.handler(ctx)
        pending, results = [], []
        for k, o in enumerate(out):
            if isinstance(o, Value):
                o = Typed(o.static, o.onnx_type) if o.static is not None else self.materialize(o, scratch)
            if o is None:
                results.append(None)
            elif isinstance(o, (np.ndarray, np.generic)) or (isinstance(o, Typed) and not isinstance(o.value, GraphTensor)):
                results.append(self._static_result(ctx, k, o))
            else:
                tensor, t = self._tensor_result(ctx, k, o)
                tensor = tensor.retrieve()
                pending.append((len(results), tensor, t))
                results.append(None)
        if pending:
            scratch.execute()
            for k, tensor, t in pending:
                results[k] = (tensor.data().astype(dtypes.numpy(t)), t)
        self._scratch.clear()
        return results

    def _static_result(self, ctx, k, o):
        t = None
        if isinstance(o, Typed):
            o, t = o.value, o.onnx_type
        arr = np.asarray(o)
        if t is None:
            t = ctx.out_type(k)
        if t is None:
            t = onnx.TensorProto.INT64 if arr.dtype == object else dtypes.of_numpy(arr.dtype)
        if arr.dtype != object and t in dtypes.NUMPY_OF and arr.dtype != dtypes.numpy(t):
            arr = arr.astype(dtypes.numpy(t))
        return arr, t

    def _tensor_result(self, ctx, k, o):
        t = None
        if isinstance(o, Typed):
            o, t = o.value, o.onnx_type
        if not isinstance(o, GraphTensor):
            raise OnnxImportError(f"internal: handler returned {type(o).__name__} for output {k}")
        if t is None:
            t = ctx.out_type(k)
        if t is None:  # a narrow input type whose luminal dtype the result shares is the result's type
            in_types = [v.onnx_type for v in ctx.inputs if v is not None and v.onnx_type in dtypes.SUPPORTED]
            halves = [u for u in in_types if u in dtypes.HALF]
            if o.dtype == DType.float32 and halves and onnx.TensorProto.FLOAT not in in_types:
                t = halves[0]  # computed in float32 from float16/bfloat16 inputs (NodeContext.t)
            else:
                t = next((u for u in in_types if dtypes.luminal(u) == o.dtype), None) or dtypes.of_luminal(o.dtype)
        if t not in dtypes.SUPPORTED:
            raise OnnxImportError(f"output {k} ('{ctx.node.output[k]}') has element type {dtypes.name(t)}, which "
                                  f"luminal does not support (supported: {dtypes.supported_names()})")
        want = dtypes.luminal(t)
        if o.dtype != want:
            o = o.cast(want)
        return o, t

    # ------------------------------------------------------------------ functions and subgraphs
    def _inline_function(self, node, index, inputs, scope) -> None:
        fn = self.functions[(node.domain, node.op_type)]
        inner = ChainMap({}, {k: v for k, v in zip(fn.input, inputs) if v is not None})
        attrs = {a.name: a for a in node.attribute}
        for a in fn.attribute_proto:
            attrs.setdefault(a.name, a)
        body = []
        for n in fn.node:
            n2 = onnx.NodeProto()
            n2.CopyFrom(n)
            del n2.attribute[:]
            for a in n.attribute:
                if a.ref_attr_name:
                    if a.ref_attr_name in attrs:
                        a2 = onnx.AttributeProto()
                        a2.CopyFrom(attrs[a.ref_attr_name])
                        a2.name = a.name
                        n2.attribute.append(a2)
                else:
                    n2.attribute.append(a)
            body.append(n2)
        saved = dict(self.opsets)
        for o in fn.opset_import:
            self.opsets.setdefault("" if o.domain == "ai.onnx" else o.domain, o.version)
        try:
            self.run_nodes(body, inner)
        except OnnxImportError as err:
            raise type(err)(f"{self._where(node, index)} (local function {fn.name}): {err}") from None
        finally:
            self.opsets = saved
        for out_name, inner_name in zip(node.output, fn.output):
            if out_name:
                scope[out_name] = inner.maps[0].get(inner_name) or inner[inner_name]

    def inline_graph(self, graph: onnx.GraphProto, scope, bound: dict | None = None) -> list[Value]:
        """Import a subgraph (an ``If`` branch, an unrolled ``Loop`` body) in a child scope of ``scope``;
        ``bound`` maps its formal inputs to Values. Returns its output Values."""
        inner = ChainMap(dict(bound or {}), scope)
        for init in graph.initializer:
            arr = self._initializer_array(init)
            inner.maps[0][init.name] = Value(init.name, init.data_type, static=arr)
        self.run_nodes(graph.node, inner)
        return [inner[o.name] for o in graph.output]


def check_operator(op_type: str, domain: str, opset: int) -> tuple[int, str | None]:
    """``(operator version, problem)`` for an operator of ``domain`` imported at ``opset``: the problem is
    ``None`` when luminal.onnx implements that version, else a sentence saying what is supported."""
    from . import ops  # noqa: F401 - registers the handlers
    from .registry import supported_ops
    domain = "" if domain == "ai.onnx" else domain
    try:
        version = onnx.defs.get_schema(op_type, opset, domain).since_version
    except Exception:
        version = opset
    spec = REGISTRY.get((domain, op_type))
    if spec is None:
        known = supported_ops()
        if domain:
            what = f"domain '{domain}' is not supported (only the default ONNX domain is)"
        else:
            import difflib
            close = difflib.get_close_matches(op_type, known, n=3)
            what = f"operator {op_type} is not supported by luminal.onnx" + (f" (did you mean {close}?)" if close else "")
        return version, f"{what}; opset {opset}; {len(known)} operators are supported, see luminal.onnx.supported_ops()"
    oldest = spec.min_version
    if oldest is None:
        try:
            oldest = onnx.defs.get_schema(op_type, MIN_OPSET, domain).since_version
        except Exception:
            oldest = 1
    if version < oldest:
        return version, (f"version {version} of {op_type} (model opset {opset}) predates the versions luminal.onnx "
                         f"implements ({op_type}-{oldest} and later; the importer targets opset {MIN_OPSET}+); convert the model with "
                         f"onnx.version_converter.convert_version(model, {MIN_OPSET})")
    return version, None


_SKELETON_BYTES = 4096  # initializers larger than this are replaced by typed inputs for type inference


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without its large initializers' data, for ONNX type inference: each becomes a graph input of the
    same element type and shape. The importer only reads inferred *element types*, which never depend on
    weight values, and inference would otherwise serialize every weight (half of a 90 MB BERT's import time)."""
    g = model.graph
    big = [init for init in g.initializer if init.ByteSize() > _SKELETON_BYTES]
    if not big:
        return model
    skel = onnx.ModelProto()
    skel.ir_version = model.ir_version
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    sg = skel.graph
    sg.name = g.name
    sg.node.extend(g.node)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    big_names = {init.name for init in big}
    sg.initializer.extend(init for init in g.initializer if init.name not in big_names)
    sg.sparse_initializer.extend(g.sparse_initializer)
    sg.input.extend(vi for vi in g.input if vi.name not in big_names)
    sg.input.extend(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)) for init in big)
    return skel


def _sparse_to_dense(sp) -> np.ndarray:
    values = onnx.numpy_helper.to_array(sp.values)
    indices = onnx.numpy_helper.to_array(sp.indices)
    dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense
