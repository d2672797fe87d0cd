"""``TorchModel`` (the callable imported program), ``from_torch`` and ``import_exported``."""

from __future__ import annotations

import numpy as np
import torch
import torch.utils._pytree as pytree

from ...dtype import BFLOAT16_NUMPY, to_host
from ...graph import Graph
from ...module import CompiledModel
from ...shape import Expression, to_expr
from ...tensor import GraphTensor
from ._core import (_OPS, TorchImportError, TorchInputError, TorchParameters, UnsupportedTorchOpError, _Converter,
                    _is_t, _NeedsDecomposition, _sanitize_symbol, _target_name, tensor_to_numpy)


# ---------------------------------------------------------------------------------------------------- the model
def _flatten_inputs(args, kwargs):
    leaves, _ = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return leaves


class TorchModel(CompiledModel):
    """An imported PyTorch program: call it with numpy arrays or torch tensors (the example's structure), get
    numpy arrays back (in the structure the module returns). The graph, parameters and values stay reachable.

    Attributes:
        graph: the luminal :class:`~luminal.graph.Graph`.
        module: the state as a :class:`TorchParameters` module (``parameters()`` are the torch parameters,
            trainable; buffers and lifted constants are non-trainable; ``state_dict()`` keys as torch's).
        inputs: user input name (the FX placeholder name: ``x``, ``input_ids``...) -> input ``GraphTensor``.
        outputs: the user outputs, flat, as ``GraphTensor`` s (or Python values known at import time).
        symbols: torch symbol (``s0``...) -> luminal symbol (the ``Dim``'s name when it has one).
        exported: the ``torch.export.ExportedProgram`` that was imported (after decomposition if any).
        device: ``"reference"`` or ``"cpu"``.

    Example::

        >>> batch = torch.export.Dim("batch")
        >>> model = from_torch(net.eval(), (torch.randn(2, 8),), dynamic_shapes=({0: batch},), device="cpu")
        >>> model(np.random.rand(5, 8).astype(np.float32))     # batch 5: same compiled program
    """

    def __init__(self, cv: _Converter, exported, out_spec, device=None, retrieve=()):
        self._cv = cv
        self.exported = exported
        self.graph: Graph = cv.graph
        self.module: TorchParameters = cv.params
        self.input_names: list[str] = list(cv.input_names)
        self.inputs: dict[str, GraphTensor] = dict(cv.inputs)
        self.outputs: list = list(cv.outputs)
        self.output_names: list[str] = list(cv.output_names)
        self.symbols: dict[str, str] = dict(cv.symbol_names)
        self.device = device
        self._out_spec = out_spec
        self._compiled = False
        self._mutations = list(cv.buffer_mutations)
        for o in self.outputs:
            if _is_t(o):
                o.retrieve()
        for _, t in self._mutations:
            if _is_t(t):
                t.retrieve()
        for name in retrieve:
            self.retrieve(name)

    # ------------------------------------------------------------------ graph access
    def value(self, name: str):
        """The luminal value of an FX node by name (``model.exported.graph`` lists them): a ``GraphTensor``,
        a tuple of them, or a Python value/shape expression."""
        if name not in self._cv.env:
            raise KeyError(f"'{name}' is not a node of the exported graph")
        return self._cv.env[name]

    def value_names(self) -> list[str]:
        return list(self._cv.env)

    def parameters(self):
        """The trainable parameters (the torch module's floating-point parameters)."""
        return self.module.parameters()

    def retrieve(self, *names: str) -> "TorchModel":
        """Keep FX node values for :meth:`intermediate` (on a compiled device, before the first call)."""
        for name in names:
            t = self.value(name)
            if _is_t(t):
                if self._compiled and self.device not in (None, "reference"):
                    raise TorchImportError(f"retrieve('{name}'): the model is already compiled for {self.device};"
                                           " pass retrieve=[...] to from_torch instead")
                t.retrieve()
        return self

    def intermediate(self, name: str) -> np.ndarray:
        """The value of FX node ``name`` from the last run (mark it with :meth:`retrieve` first)."""
        return self._read(self.value(name))

    # ------------------------------------------------------------------ compile and run
    def set_inputs(self, *args, **kwargs) -> None:
        """Bind the inputs (as for a call) without running; for graphs extended by hand (losses...)."""
        leaves = _flatten_inputs(args, kwargs)
        if len(leaves) != len(self.input_names):
            raise TorchInputError(f"expected {len(self.input_names)} inputs {self.input_names} (flattened as the "
                                  f"example arguments), got {len(leaves)}")
        late = []
        for name, value in zip(self.input_names, leaves):
            if name in self.inputs:
                self._set_input(name, value)
            elif name in self._cv.sym_inputs:
                late.append((name, int(value)))
            elif name in self._cv.constant_user_inputs:
                want = self._cv.constant_user_inputs[name]
                if value != want:
                    raise TorchInputError(f"input '{name}': the program was exported for the value {want!r}, "
                                          f"got {value!r}; re-export to change it")
        for name, value in late:  # integer inputs: bind their symbol, or check them against the tensors' sizes
            expr = self._cv.sym_inputs[name]
            syms = expr.symbols()
            if len(syms) == 1 and expr == to_expr(next(iter(syms))):
                sym = next(iter(syms))
                bound = self.graph.dyn_map.get(sym) if any(
                    sym in {str(x) for d in t.dims for x in to_expr(d).symbols()} for t in self.inputs.values()) \
                    else None
                if bound is not None and bound != value:
                    raise TorchInputError(f"input '{name}' = {value} but the tensors give {sym} = {bound}")
                self.graph.set_dim(sym, value)
            elif expr.evaluate(self.graph.dyn_map) != value:
                raise TorchInputError(f"input '{name}' = {value}, expected {expr} = "
                                      f"{expr.evaluate(self.graph.dyn_map)}")

    def run(self, *args, **kwargs) -> list:
        """Run and return the user outputs as a flat list of numpy arrays (and Python values)."""
        self.set_inputs(*args, **kwargs)
        if not self._compiled:
            self.compile()
        self.graph.execute()
        for name, t in self._mutations:  # buffers updated by the program (batch-norm running statistics)
            if _is_t(t):
                self.module[name].copy_(self._read(t))
        return [self._read(o) for o in self.outputs]

    def __call__(self, *args, **kwargs):
        """Run with the example's argument structure; returns numpy arrays in the module's output structure
        (a single array for a module returning one tensor)."""
        flat = self.run(*args, **kwargs)
        if self._out_spec is None:
            return flat[0] if len(flat) == 1 else flat
        return pytree.tree_unflatten(flat, self._out_spec)

    def _set_input(self, name: str, data) -> None:
        tensor = self.inputs[name]
        if isinstance(data, torch.Tensor):
            data = tensor_to_numpy(data)
        arr = np.asarray(data)
        want = self._cv.input_dtypes[name]
        expected = f"{want} of shape {[str(d) for d in tensor.dims]}"
        got_kind = "f" if arr.dtype == BFLOAT16_NUMPY else arr.dtype.kind
        if got_kind not in "biuf":
            raise TorchInputError(f"input '{name}': expected {expected}, got an array of {arr.dtype}")
        kind = "b" if want == torch.bool else "f" if want.is_floating_point else "iu"
        if got_kind not in kind:
            raise TorchInputError(f"input '{name}': expected {expected}, got dtype {arr.dtype}")
        if arr.ndim != tensor.ndim:
            raise TorchInputError(f"input '{name}': expected rank {tensor.ndim} ({expected}), got shape {arr.shape}")
        for k, (d, n) in enumerate(zip(tensor.dims, arr.shape)):
            if d.is_constant() and d.to_int() != n:
                raise TorchInputError(f"input '{name}': expected {expected}, got shape {arr.shape} (dim {k} must "
                                      f"be {d.to_int()}; export with a torch.export.Dim to make it dynamic)")
        try:
            tensor.set(to_host(arr, tensor.dtype))
        except ValueError as err:
            raise TorchInputError(f"input '{name}': {err}") from None

    def _read(self, v):
        if _is_t(v):
            return v.data()
        if isinstance(v, Expression):
            return v.evaluate(self.graph.dyn_map)
        if isinstance(v, (list, tuple)):
            return type(v)(self._read(x) for x in v)
        return v

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {[str(d) for d in t.dims]}" for n, t in self.inputs.items())
        return (f"TorchModel(inputs [{ins}], {len(self.outputs)} outputs, {len(self.module)} tensors of state, "
                f"{len(self.graph.nodes)} graph nodes, device {self.device})")


# ---------------------------------------------------------------------------------------------------- entry point
def _dim_names(module, example_args, example_kwargs, dynamic_shapes) -> list[list]:
    """For each flattened user input, the Dim name per axis (or None) from the ``dynamic_shapes`` spec."""
    if dynamic_shapes is None:
        return []
    if isinstance(dynamic_shapes, dict):
        import inspect
        try:
            params = list(inspect.signature(module.forward).parameters)
        except (TypeError, ValueError):
            params = []
        spec_args = []
        for i, _ in enumerate(example_args):
            spec_args.append(dynamic_shapes.get(params[i]) if i < len(params) else None)
        spec_kwargs = {k: dynamic_shapes.get(k) for k in (example_kwargs or {})}
    else:
        spec_args = list(dynamic_shapes) + [None] * (len(example_args) - len(dynamic_shapes))
        spec_kwargs = {}
    out = []

    def per_tensor(spec, t):
        if not isinstance(t, torch.Tensor):
            return
        names = [None] * t.ndim
        if isinstance(spec, dict):
            items = spec.items()
        elif isinstance(spec, (list, tuple)):
            items = enumerate(spec)
        else:
            items = ()
        for k, d in items:
            if d is not None and 0 <= int(k) < t.ndim:
                names[int(k)] = getattr(d, "__name__", None)
        out.append(names)

    for spec, a in zip(spec_args, example_args):
        if isinstance(a, torch.Tensor):
            per_tensor(spec, a)
        else:  # nested structures: no names
            for leaf in pytree.tree_leaves(a):
                per_tensor(None, leaf)
    for k, a in (example_kwargs or {}).items():
        for leaf in pytree.tree_leaves(a):
            per_tensor(spec_kwargs.get(k) if isinstance(a, torch.Tensor) else None, leaf)
    return out


def _needs_decomposition(ep) -> list[str]:
    missing = []
    for node in ep.graph.nodes:
        if node.op == "call_function":
            name = _target_name(node.target)
            if name not in _OPS and name not in missing:
                missing.append(name)
    return missing


def _decompose(ep, also=()):
    """``run_decompositions`` with PyTorch's core-ATen table, keeping the operators handled here (except the
    ones in ``also``, decomposed anyway)."""
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if str(op) in _OPS and str(op) not in also:
            del table[op]
    return ep.run_decompositions(table)


def import_exported(ep, *, device: str | None = None, decompose: bool | str = "auto", retrieve=(),
                    compile: bool = False, dim_names=None) -> TorchModel:
    """Import an existing ``torch.export.ExportedProgram`` (see :func:`from_torch` for the options)."""
    if decompose not in (True, False, "auto"):
        raise ValueError(f"decompose must be True, False or 'auto', got {decompose!r}")
    decomposed = False
    if decompose is True or (decompose == "auto" and _needs_decomposition(ep)):
        ep, decomposed = _decompose(ep), True
    also: set[str] = set()
    while True:
        try:
            return _import_once(ep, device, retrieve, compile, dim_names, decomposed)
        except _NeedsDecomposition as err:
            if decompose is False or err.op in also:
                raise UnsupportedTorchOpError(err.op, err.node, f"node '{err.node}': {err}, but decompose="
                                              f"{decompose!r}; use decompose='auto' (the default)") from err
            also.add(err.op)
            ep, decomposed = _decompose(ep, also), True


def _import_once(ep, device, retrieve, compile, dim_names, decomposed) -> TorchModel:
    symbol_names: dict[str, str] = {}
    # name symbols after the Dims: match each user input's symbolic dims with the spec's names
    if dim_names:
        from torch.export.graph_signature import InputKind
        users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        tensor_users = [u for u in users if isinstance(placeholders[u].meta.get("val"), torch.Tensor)]
        taken = set()
        for u, names in zip(tensor_users, dim_names):
            val = placeholders[u].meta["val"]
            for d, nm in zip(val.shape, names):
                if nm and isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                    key = str(d.node.expr)
                    if key not in symbol_names:
                        cand = _sanitize_symbol(nm)
                        while cand in taken:
                            cand = cand + "_"
                        symbol_names[key] = cand
                        taken.add(cand)
    cv = _Converter(ep, symbol_names, decomposed)
    out_spec = None
    try:
        out_spec = ep.call_spec.out_spec
    except AttributeError:  # pragma: no cover - older torch
        pass
    model = TorchModel(cv, ep, out_spec, device=device, retrieve=retrieve)
    if compile:
        model.compile()
    return model


def from_torch(module, example_args=(), example_kwargs=None, *, dynamic_shapes=None, device: str | None = None,
               decompose: bool | str = "auto", strict: bool = False, retrieve=(),
               compile: bool = False) -> TorchModel:
    """Import a PyTorch module through ``torch.export`` into a luminal graph.

    Args:
        module: a ``torch.nn.Module`` (call ``.eval()`` first for inference: dropout and batch-norm statistics
            follow the module's mode at export time), or an ``ExportedProgram``.
        example_args / example_kwargs: example inputs (torch tensors; numpy arrays are converted).
        dynamic_shapes: as ``torch.export.export``'s (``({0: Dim("batch")},)``): each ``Dim`` becomes a luminal
            symbol of the same name, bound from the data at each call (no recompile for a new size).
        device: ``"reference"`` (numpy interpreter) or ``"cpu"`` (generated C); compiled on the first call.
        decompose: ``"auto"`` (default) imports the exported graph as is and runs PyTorch's core-ATen
            decompositions only when it holds an operator without a handler; ``True`` always decomposes
            (slower to export); ``False`` never does.
        strict: passed to ``torch.export.export``.
        retrieve: FX node names to keep for :meth:`TorchModel.intermediate`.
        compile: compile at import instead of at the first call.

    Returns:
        a :class:`TorchModel`. Unsupported operators raise :class:`UnsupportedTorchOpError` naming the ATen
        op and the node.
    """
    from torch.export import ExportedProgram

    example_kwargs = dict(example_kwargs or {})
    if isinstance(module, ExportedProgram):
        return import_exported(module, device=device, decompose=decompose, retrieve=retrieve, compile=compile)
    conv = (lambda a: torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a)
    if not isinstance(example_args, (tuple, list)):
        example_args = (example_args,)
    example_args = tuple(pytree.tree_map(conv, tuple(example_args)))
    example_kwargs = pytree.tree_map(conv, example_kwargs)
    with torch.no_grad():
        ep = torch.export.export(module, example_args, example_kwargs or None, dynamic_shapes=dynamic_shapes,
                                 strict=strict)
    names = _dim_names(module, example_args, example_kwargs, dynamic_shapes)
    return import_exported(ep, device=device, decompose=decompose, retrieve=retrieve, compile=compile,
                           dim_names=names)
