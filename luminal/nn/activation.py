"""Activation modules (each also a ``GraphTensor`` method)."""

from __future__ import annotations

import numpy as np

from ..module import Module, Parameter, bind


def _simple(name: str, method: str, doc: str, **defaults):
    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        params = dict(defaults)
        params.update(zip(defaults, args))
        for k, v in kwargs.items():
            if k == "inplace":
                continue
            if k not in defaults:
                raise TypeError(f"{name}() got an unexpected keyword argument '{k}'")
            params[k] = v
        object.__setattr__(self, "_args", params)

    def forward(self, x):
        return getattr(x, method)(**self._args)

    def extra_repr(self):
        return ", ".join(f"{k}={v}" for k, v in self._args.items())

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc})


ReLU = _simple("ReLU", "relu", "``max(x, 0)``.")
ReLU6 = _simple("ReLU6", "relu6", "``min(max(x, 0), 6)``.")
LeakyReLU = _simple("LeakyReLU", "leaky_relu", "Leaky ReLU.", negative_slope=0.01)
GELU = _simple("GELU", "gelu", "GELU (``approximate='none'`` exact, ``'tanh'`` approximation).", approximate="none")
SiLU = _simple("SiLU", "silu", "``x * sigmoid(x)``.")
Mish = _simple("Mish", "mish", "``x * tanh(softplus(x))``.")
Tanh = _simple("Tanh", "tanh", "Hyperbolic tangent.")
Sigmoid = _simple("Sigmoid", "sigmoid", "Logistic sigmoid.")
Softplus = _simple("Softplus", "softplus", "``log(1 + exp(beta x)) / beta``.", beta=1.0, threshold=20.0)
ELU = _simple("ELU", "elu", "ELU.", alpha=1.0)
SELU = _simple("SELU", "selu", "SELU.")
CELU = _simple("CELU", "celu", "CELU.", alpha=1.0)
Hardswish = _simple("Hardswish", "hardswish", "``x * relu6(x + 3) / 6``.")
Hardsigmoid = _simple("Hardsigmoid", "hardsigmoid", "``relu6(x + 3) / 6``.")
Hardtanh = _simple("Hardtanh", "hardtanh", "Clamp to [min_val, max_val].", min_val=-1.0, max_val=1.0)
Softsign = _simple("Softsign", "softsign", "``x / (1 + |x|)``.")
LogSigmoid = _simple("LogSigmoid", "logsigmoid", "``log(sigmoid(x))``.")
Softmax = _simple("Softmax", "softmax", "Softmax along ``axis`` (PyTorch's ``dim``).", axis=-1)
LogSoftmax = _simple("LogSoftmax", "log_softmax", "Log-softmax along ``axis``.", axis=-1)


def _dim_alias(cls):
    base_init = cls.__init__

    def __init__(self, *args, dim=None, **kwargs):
        if dim is not None:
            kwargs["axis"] = dim
        base_init(self, *args, **kwargs)
    cls.__init__ = __init__
    return cls


Softmax = _dim_alias(Softmax)
LogSoftmax = _dim_alias(LogSoftmax)


class PReLU(Module):
    """``max(0, x) + a * min(0, x)`` with a learnable ``a`` (one, or one per channel = dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(np.full(num_parameters, init))

    def forward(self, x):
        from .functional import prelu
        return prelu(x, bind(self.weight, x))
