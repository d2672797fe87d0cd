"""More of ``torch.nn``'s stateless layers: padding (``ZeroPad2d``, ``ConstantPad*``, ``ReflectionPad*``,
``ReplicationPad*``, ``CircularPad*``), patches (``PixelShuffle``, ``PixelUnshuffle``, ``ChannelShuffle``,
``Unfold``, ``Fold``), shape (``Unflatten``), activations (``GLU``, ``Hardshrink``, ``Softshrink``,
``Tanhshrink``, ``Threshold``, ``RReLU`` (evaluation mode), ``Softmin``, ``Softmax2d``), similarities
(``CosineSimilarity``, ``PairwiseDistance``), the losses of :mod:`luminal.nn.functional_extra`, and the
parameter containers ``ParameterList`` / ``ParameterDict``. Constructor arguments and behaviour are PyTorch's.
"""

from __future__ import annotations

from ..module import Module, Parameter, bind
from . import functional_extra as FX
from .functional import pad as _pad


def _stateless(name: str, fn, doc: str, argnames: tuple, defaults: dict):
    """A module class whose ``forward(*inputs)`` is ``fn(*inputs, **args)`` with its constructor's arguments."""
    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        params = dict(defaults)
        if len(args) > len(argnames):
            raise TypeError(f"{name}() takes at most {len(argnames)} positional arguments, got {len(args)}")
        params.update(zip(argnames, args))
        for k, v in kwargs.items():
            if k == "inplace":
                continue
            if k not in argnames:
                raise TypeError(f"{name}() got an unexpected keyword argument '{k}'")
            params[k] = v
        missing = [a for a in argnames if a not in params]
        if missing:
            raise TypeError(f"{name}() missing required arguments: {missing}")
        object.__setattr__(self, "_args", params)

    def forward(self, *inputs):
        return fn(*inputs, **self._args)

    def extra_repr(self):
        return ", ".join(f"{k}={v}" for k, v in self._args.items())

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc})


# ---------------------------------------------------------------------------------------------- padding
class _PadNd(Module):
    """Padding of the last ``_n`` dims in ``_mode`` (``padding`` as F.pad's: last dim first; an int pads every
    side); only the ``ConstantPad`` classes take a ``value``."""

    _mode, _n, _takes_value = "constant", 1, False

    def __init__(self, padding, value: float | None = None):
        super().__init__()
        name, n = type(self).__name__, self._n
        if value is not None and not self._takes_value:
            raise TypeError(f"{name}() takes no value argument")
        if isinstance(padding, int):
            padding = (padding,) * (2 * n)
        padding = tuple(padding)
        if len(padding) != 2 * n:
            raise ValueError(f"{name} expects an int or {2 * n} ints, got {padding}")
        object.__setattr__(self, "padding", padding)
        object.__setattr__(self, "value", (0.0 if value is None else float(value)) if self._mode == "constant"
                           else None)

    def forward(self, x):
        n = self._n
        if x.ndim not in (n + 1, n + 2):
            raise ValueError(f"{type(self).__name__} expects a {n + 1}-D or {n + 2}-D input, got {x.ndim}-D")
        if self._mode == "constant":
            return _pad(x, self.padding, "constant", self.value)
        return _pad(x, self.padding, self._mode)

    def extra_repr(self):
        return f"padding={self.padding}" + (f", value={self.value}" if self._mode == "constant" else "")


def _padding_class(name: str, mode: str, n: int, takes_value: bool):
    return type(name, (_PadNd,), {"_mode": mode, "_n": n, "_takes_value": takes_value,
                                  "__doc__": f"``torch.nn.{name}``: {mode} padding of the last {n} dims."})


ZeroPad1d = _padding_class("ZeroPad1d", "constant", 1, False)
ZeroPad2d = _padding_class("ZeroPad2d", "constant", 2, False)
ZeroPad3d = _padding_class("ZeroPad3d", "constant", 3, False)
ConstantPad1d = _padding_class("ConstantPad1d", "constant", 1, True)
ConstantPad2d = _padding_class("ConstantPad2d", "constant", 2, True)
ConstantPad3d = _padding_class("ConstantPad3d", "constant", 3, True)
ReflectionPad1d = _padding_class("ReflectionPad1d", "reflect", 1, False)
ReflectionPad2d = _padding_class("ReflectionPad2d", "reflect", 2, False)
ReflectionPad3d = _padding_class("ReflectionPad3d", "reflect", 3, False)
ReplicationPad1d = _padding_class("ReplicationPad1d", "replicate", 1, False)
ReplicationPad2d = _padding_class("ReplicationPad2d", "replicate", 2, False)
ReplicationPad3d = _padding_class("ReplicationPad3d", "replicate", 3, False)
CircularPad1d = _padding_class("CircularPad1d", "circular", 1, False)
CircularPad2d = _padding_class("CircularPad2d", "circular", 2, False)
CircularPad3d = _padding_class("CircularPad3d", "circular", 3, False)


# ---------------------------------------------------------------------------------------------- stateless layers
PixelShuffle = _stateless("PixelShuffle", FX.pixel_shuffle, "``torch.nn.PixelShuffle``.", ("upscale_factor",), {})
PixelUnshuffle = _stateless("PixelUnshuffle", FX.pixel_unshuffle, "``torch.nn.PixelUnshuffle``.",
                            ("downscale_factor",), {})
ChannelShuffle = _stateless("ChannelShuffle", FX.channel_shuffle, "``torch.nn.ChannelShuffle``.", ("groups",), {})
Unfold = _stateless("Unfold", FX.unfold, "``torch.nn.Unfold`` (im2col).", ("kernel_size", "dilation", "padding",
                                                                          "stride"),
                    {"dilation": 1, "padding": 0, "stride": 1})
Fold = _stateless("Fold", FX.fold, "``torch.nn.Fold`` (col2im).", ("output_size", "kernel_size", "dilation",
                                                                   "padding", "stride"),
                  {"dilation": 1, "padding": 0, "stride": 1})
GLU = _stateless("GLU", FX.glu, "``torch.nn.GLU``.", ("dim",), {"dim": -1})
Hardshrink = _stateless("Hardshrink", FX.hardshrink, "``torch.nn.Hardshrink``.", ("lambd",), {"lambd": 0.5})
Softshrink = _stateless("Softshrink", FX.softshrink, "``torch.nn.Softshrink``.", ("lambd",), {"lambd": 0.5})
Tanhshrink = _stateless("Tanhshrink", FX.tanhshrink, "``torch.nn.Tanhshrink``.", (), {})
Threshold = _stateless("Threshold", FX.threshold, "``torch.nn.Threshold``.", ("threshold", "value"), {})
RReLU = _stateless("RReLU", FX.rrelu, "``torch.nn.RReLU`` (evaluation mode: the mean slope).", ("lower", "upper"),
                   {"lower": 1.0 / 8, "upper": 1.0 / 3})
CosineSimilarity = _stateless("CosineSimilarity", FX.cosine_similarity, "``torch.nn.CosineSimilarity``.",
                              ("dim", "eps"), {"dim": 1, "eps": 1e-8})
PairwiseDistance = _stateless("PairwiseDistance", FX.pairwise_distance, "``torch.nn.PairwiseDistance``.",
                              ("p", "eps", "keepdim"), {"p": 2.0, "eps": 1e-6, "keepdim": False})
MarginRankingLoss = _stateless("MarginRankingLoss", FX.margin_ranking_loss, "``torch.nn.MarginRankingLoss``.",
                               ("margin", "reduction"), {"margin": 0.0, "reduction": "mean"})
HingeEmbeddingLoss = _stateless("HingeEmbeddingLoss", FX.hinge_embedding_loss, "``torch.nn.HingeEmbeddingLoss``.",
                                ("margin", "reduction"), {"margin": 1.0, "reduction": "mean"})
SoftMarginLoss = _stateless("SoftMarginLoss", FX.soft_margin_loss, "``torch.nn.SoftMarginLoss``.", ("reduction",),
                            {"reduction": "mean"})
CosineEmbeddingLoss = _stateless("CosineEmbeddingLoss", FX.cosine_embedding_loss,
                                 "``torch.nn.CosineEmbeddingLoss``.", ("margin", "reduction"),
                                 {"margin": 0.0, "reduction": "mean"})
PoissonNLLLoss = _stateless("PoissonNLLLoss", FX.poisson_nll_loss, "``torch.nn.PoissonNLLLoss``.",
                            ("log_input", "full", "eps", "reduction"),
                            {"log_input": True, "full": False, "eps": 1e-8, "reduction": "mean"})
GaussianNLLLoss = _stateless("GaussianNLLLoss", FX.gaussian_nll_loss, "``torch.nn.GaussianNLLLoss``.",
                             ("full", "eps", "reduction"), {"full": False, "eps": 1e-6, "reduction": "mean"})
TripletMarginLoss = _stateless("TripletMarginLoss", FX.triplet_margin_loss, "``torch.nn.TripletMarginLoss``.",
                               ("margin", "p", "eps", "swap", "reduction"),
                               {"margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False, "reduction": "mean"})


class MultiLabelSoftMarginLoss(Module):
    """``torch.nn.MultiLabelSoftMarginLoss(weight=None, reduction='mean')``."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        object.__setattr__(self, "_weight", weight)
        object.__setattr__(self, "reduction", reduction)

    def forward(self, input, target):  # noqa: A002
        w = self._weight
        if w is not None and not hasattr(w, "graph"):
            import numpy as np
            from ..hl_ops.resample import const_array
            w = const_array(input.graph, np.asarray(w, dtype=input.dtype.numpy))
        return FX.multilabel_soft_margin_loss(input, target, w, self.reduction)


class Unflatten(Module):
    """``torch.nn.Unflatten(dim, unflattened_size)``: split axis ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        object.__setattr__(self, "dim", dim)
        object.__setattr__(self, "unflattened_size", tuple(unflattened_size))

    def forward(self, x):
        d = self.dim % x.ndim
        return x.reshape(tuple(x.dims[:d]) + self.unflattened_size + tuple(x.dims[d + 1:]))

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Bilinear(Module):
    """``torch.nn.Bilinear(in1_features, in2_features, out_features, bias=True)``: ``y = x1^T A x2 + b`` with
    ``weight`` ``(out, in1, in2)`` and ``bias`` ``(out,)``, both initialized uniform in ``+-1/sqrt(in1_features)``
    (PyTorch's default)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, dtype=None):
        super().__init__()
        import numpy as np

        from . import init

        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(np.zeros((out_features, in1_features, in2_features)), dtype)
        init.default_bound_uniform_(self.weight, in1_features)
        self.bias = Parameter(np.zeros(out_features), dtype) if bias else None
        if bias:
            init.default_bound_uniform_(self.bias, in1_features)

    def forward(self, input1, input2):
        return FX.bilinear(input1, input2, bind(self.weight, input1),
                           None if self.bias is None else bind(self.bias, input1))

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """``torch.nn.LocalResponseNorm(size, alpha=1e-4, beta=0.75, k=1.0)`` over the channels of ``(N, C, *)``."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        for name, value in (("size", size), ("alpha", alpha), ("beta", beta), ("k", k)):
            object.__setattr__(self, name, value)

    def forward(self, x):
        return FX.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class Softmin(Module):
    """``torch.nn.Softmin(dim)``: ``softmax(-x)``."""

    def __init__(self, dim: int = -1):
        super().__init__()
        object.__setattr__(self, "dim", dim)

    def forward(self, x):
        return x.softmin(self.dim)


class Softmax2d(Module):
    """``torch.nn.Softmax2d``: softmax over the channels of a ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    def forward(self, x):
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d expects a 3-D or 4-D input, got {x.ndim}-D")
        return x.softmax(-3)


# ---------------------------------------------------------------------------------------------- containers
class ParameterList(Module):
    """``torch.nn.ParameterList``: parameters registered as ``"0"``, ``"1"``... (numpy arrays are wrapped)."""

    def __init__(self, values=()):
        super().__init__()
        for v in values:
            self.append(v)

    def append(self, value) -> "ParameterList":
        p = value if isinstance(value, Parameter) else Parameter(value)
        setattr(self, str(len(self._parameters)), p)
        return self

    def extend(self, values) -> "ParameterList":
        for v in values:
            self.append(v)
        return self

    def __len__(self) -> int:
        return len(self._parameters)

    def __getitem__(self, index):
        return list(self._parameters.values())[index]

    def __iter__(self):
        return iter(self._parameters.values())

    def bind(self, like) -> list:
        """Every parameter as a tensor of ``like``'s graph."""
        return [bind(p, like) for p in self]


class ParameterDict(Module):
    """``torch.nn.ParameterDict``: named parameters (numpy arrays are wrapped). As in PyTorch, a plain ``dict``
    is registered in sorted key order; an ``OrderedDict``, a ``ParameterDict`` or a sequence of pairs keeps its
    order."""

    def __init__(self, values=None):
        super().__init__()
        self.update(values or {})

    def update(self, values) -> None:
        from collections import OrderedDict
        if isinstance(values, (OrderedDict, ParameterDict)):
            pairs = list(values.items())
        elif hasattr(values, "items"):
            pairs = sorted(values.items())
        else:
            pairs = list(values)
        for k, v in pairs:
            self[k] = v

    def __setitem__(self, name: str, value) -> None:
        setattr(self, name, value if isinstance(value, Parameter) else Parameter(value))

    def __getitem__(self, name: str) -> Parameter:
        return self._parameters[name]

    def __contains__(self, name: str) -> bool:
        return name in self._parameters

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()
