"""Eager tensors over luminal's lazy graphs: PyTorch's programming model with compiled, cached replay.

``lm.tensor([[1., 2.], [3., 4.]])`` and the other creation functions make :class:`Tensor`s; every operation
records; reading a value compiles the pending work into one graph (cached by structure: ops, dtypes, shapes,
edges -- never values) and runs it. A training loop whose step has the same structure each iteration compiles
once and replays. See ``docs/eager.md``.
"""

from __future__ import annotations

from ._core import (JitTraceError, clear_cache, enable_grad, get_default_device, is_grad_enabled, no_grad,
                    param_tensor, realize, set_default_device, set_grad_enabled, stats)
from .creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full, full_like, linspace, logspace,
                       manual_seed, bernoulli, normal, ones, ones_like, rand, rand_like, randint, randn, randn_like,
                       randperm, tensor, zeros, zeros_like)
from .functional import eager_dispatch
from .tensor import MaxResult, MinResult, Tensor


__all__ = ["Tensor", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "arange", "linspace", "logspace",
           "eye", "rand", "randn", "randint", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like",
           "randn_like", "manual_seed", "randperm", "normal", "bernoulli", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
           "set_default_device", "get_default_device", "stats", "clear_cache", "JitTraceError", "realize",
           "eager_dispatch", "param_tensor", "MaxResult", "MinResult"]
