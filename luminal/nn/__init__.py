"""Neural-network layers with PyTorch's constructor arguments, parameter names and layouts.

Modules own their parameters as host arrays and bind them to a graph when called (see :mod:`luminal.module`).
"""

from ..module import Module, ModuleDict, ModuleList, Parameter, Sequential
from . import functional, init
from .activation import (CELU, ELU, GELU, SELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid,
                         LogSoftmax, Mish, PReLU, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softplus, Softsign, Tanh)
from .linear import Flatten, Identity, Linear

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "Parameter", "functional", "init", "Linear",
           "Identity", "Flatten", "ReLU", "ReLU6", "LeakyReLU", "PReLU", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid",
           "Softplus", "ELU", "SELU", "CELU", "Hardswish", "Hardsigmoid", "Hardtanh", "Softsign", "LogSigmoid",
           "Softmax", "LogSoftmax"]
