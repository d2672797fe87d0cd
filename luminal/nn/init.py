"""Parameter initializers (``torch.nn.init`` names and semantics), seeded and reproducible.

All draw from :data:`luminal.rng.default_generator` (``lm.manual_seed``; default seed 0), or from the
``generator`` argument (an ``lm.Generator`` or a numpy ``Generator``). The same seed and the same construction order give bit-identical weights.
Functions modify the :class:`~luminal.module.Parameter` in place and return it.
"""

from __future__ import annotations

import math

import numpy as np

from ..module import Parameter

def manual_seed(seed: int) -> None:
    """Reseed the default generator (the same as ``lm.manual_seed``: initializers, eager random tensors and eager
    dropout share one stream)."""
    from ..rng import manual_seed as _seed
    _seed(seed)


def _rng(generator):
    """The numpy Generator to draw from: ``generator`` (an ``lm.Generator`` or numpy Generator) or the default."""
    from ..rng import numpy_generator
    return numpy_generator(generator)


def _fill(param: Parameter, values: np.ndarray) -> Parameter:
    """Write ``values`` into ``param`` (a Parameter, or an eager tensor: rebound without gradient, as torch's
    initializers run under ``no_grad``)."""
    if isinstance(param, Parameter):
        param.copy_(np.asarray(values).reshape(param.shape))
        return param
    from ..eager import no_grad
    with no_grad():
        param.copy_(np.asarray(values).reshape(param.shape))
    return param


def calculate_fan_in_and_fan_out(shape) -> tuple[int, int]:
    """PyTorch's fans: dim 1 x receptive field is fan_in, dim 0 x receptive field is fan_out."""
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need at least 2 dims, got shape {tuple(shape)}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param=None) -> float:
    """``torch.nn.init.calculate_gain``."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def uniform_(param: Parameter, a: float = 0.0, b: float = 1.0, generator=None) -> Parameter:
    return _fill(param, _rng(generator).uniform(a, b, param.shape))


def normal_(param: Parameter, mean: float = 0.0, std: float = 1.0, generator=None) -> Parameter:
    return _fill(param, _rng(generator).normal(mean, std, param.shape))


def constant_(param: Parameter, value: float) -> Parameter:
    return _fill(param, np.full(param.shape, value))


def zeros_(param: Parameter) -> Parameter:
    return constant_(param, 0.0)


def ones_(param: Parameter) -> Parameter:
    return constant_(param, 1.0)


def xavier_uniform_(param: Parameter, gain: float = 1.0, generator=None) -> Parameter:
    fan_in, fan_out = calculate_fan_in_and_fan_out(param.shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(param, -bound, bound, generator)


def xavier_normal_(param: Parameter, gain: float = 1.0, generator=None) -> Parameter:
    fan_in, fan_out = calculate_fan_in_and_fan_out(param.shape)
    return normal_(param, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _fan(param, mode):
    fan_in, fan_out = calculate_fan_in_and_fan_out(param.shape)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(param: Parameter, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Parameter:
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(param, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(param, -bound, bound, generator)


def kaiming_normal_(param: Parameter, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Parameter:
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(param, mode))
    return normal_(param, 0.0, std, generator)


def orthogonal_(param: Parameter, gain: float = 1.0, generator=None) -> Parameter:
    """A (semi-)orthogonal matrix from the QR decomposition of a normal sample (PyTorch's construction)."""
    if len(param.shape) < 2:
        raise ValueError("orthogonal_ needs at least 2 dims")
    rows = param.shape[0]
    cols = int(np.prod(param.shape[1:]))
    flat = _rng(generator).normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(param, gain * q)


def default_bound_uniform_(param: Parameter, fan_in: int, generator=None) -> Parameter:
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's default for biases (and, via kaiming a=sqrt(5),
    the resulting bound for Linear/Conv weights)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return uniform_(param, -bound, bound, generator)


def trunc_normal_(param: Parameter, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Parameter:
    """``torch.nn.init.trunc_normal_``: normal ``N(mean, std^2)`` values restricted to ``[a, b]`` (absolute
    bounds, as in PyTorch). Drawn by rejection: values outside are redrawn (the exact truncated distribution; a
    different generator from PyTorch's, so not the same numbers); after 1000 rounds any left are clipped."""
    if std <= 0:
        raise ValueError(f"trunc_normal_: std must be positive, got {std}")
    if not a < b:
        raise ValueError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    rng = _rng(generator)
    values = rng.normal(mean, std, param.shape)
    for _ in range(1000):
        bad = (values < a) | (values > b)
        if not bad.any():
            break
        values[bad] = rng.normal(mean, std, int(bad.sum()))
    return _fill(param, np.clip(values, a, b))


def eye_(param: Parameter) -> Parameter:
    """``torch.nn.init.eye_``: the identity matrix in a 2-D parameter (ones on the main diagonal)."""
    if len(param.shape) != 2:
        raise ValueError(f"eye_ needs a 2-D parameter, got shape {tuple(param.shape)}")
    return _fill(param, np.eye(*param.shape))


def dirac_(param: Parameter, groups: int = 1) -> Parameter:
    """``torch.nn.init.dirac_``: a 3/4/5-D convolution weight that passes its input through (per group: output
    channel ``i`` has a 1 at input channel ``i`` and the kernel centre)."""
    shape = tuple(param.shape)
    if len(shape) not in (3, 4, 5):
        raise ValueError(f"dirac_ needs a 3, 4 or 5-D parameter, got shape {shape}")
    if groups < 1 or shape[0] % groups:
        raise ValueError(f"dirac_: dim 0 ({shape[0]}) must be divisible by groups ({groups})")
    out_per_group = shape[0] // groups
    w = np.zeros(shape)
    centre = tuple(k // 2 for k in shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, shape[1])):
            w[(g * out_per_group + d, d) + centre] = 1.0
    return _fill(param, w)
