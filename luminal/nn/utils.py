"""``torch.nn.utils`` for eager training loops: gradient clipping on the parameters' ``.grad`` and flattening
parameters to one vector. (Lazy-graph training clips inside the compiled step instead:
``opt.minimize(loss, max_grad_norm=...)`` or :func:`luminal.training.clip_grad_norm` on gradient tensors.)
"""

from __future__ import annotations

import math

import numpy as np

from ..module import Parameter


def _params(parameters) -> list:
    if isinstance(parameters, Parameter):
        return [parameters]
    out = list(parameters)
    for p in out:
        if not isinstance(p, Parameter):
            raise TypeError(f"expected luminal Parameters (model.parameters()), got {type(p).__name__}")
    return out


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None):
    """``torch.nn.utils.clip_grad_norm_``: scale every ``p.grad`` by ``min(1, max_norm / (total + 1e-6))``, where
    ``total`` is the ``norm_type``-norm of all the gradients together; returns ``total`` (an eager tensor).
    ``error_if_nonfinite=True`` raises ``RuntimeError`` when ``total`` is NaN or infinite (this reads it)."""
    import luminal as eager
    params = _params(parameters)
    if max_norm < 0:
        raise ValueError(f"clip_grad_norm_: max_norm must be >= 0, got {max_norm}")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return eager.tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == math.inf:
        total = eager.stack([g.abs().max() for g in grads]).max()
    else:
        total = eager.stack([g.norm(norm_type) for g in grads]).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite ({float(total)}), "
                           "so they cannot be clipped; pass error_if_nonfinite=False to scale them anyway")
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad = p.grad * coef
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """``torch.nn.utils.clip_grad_value_``: clamp every ``p.grad`` element into ``[-clip_value, clip_value]``."""
    params = _params(parameters)
    for p in params:
        if p.grad is not None:
            p.grad = p.grad.clamp(-float(clip_value), float(clip_value))


def parameters_to_vector(parameters):
    """``torch.nn.utils.parameters_to_vector``: the parameters flattened and concatenated (an eager tensor that
    carries their gradients)."""
    import luminal as eager
    from ..eager._core import param_tensor
    params = _params(parameters)
    return eager.cat([param_tensor(p).reshape(-1) for p in params])


def vector_to_parameters(vec, parameters) -> None:
    """``torch.nn.utils.vector_to_parameters``: copy consecutive slices of ``vec`` into the parameters."""
    params = _params(parameters)
    values = np.asarray(vec.numpy() if hasattr(vec, "numpy") else vec).reshape(-1)
    total = sum(int(np.prod(p.data.shape)) for p in params)
    if values.size != total:
        raise ValueError(f"vector_to_parameters: the vector has {values.size} elements, the parameters {total}")
    offset = 0
    for p in params:
        n = int(np.prod(p.data.shape))
        p.copy_(values[offset:offset + n].reshape(p.data.shape).astype(p.dtype.numpy))
        offset += n
