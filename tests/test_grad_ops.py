"""Gradient checks of every primitive and every differentiable high-level op, against finite differences.

Each case runs :func:`luminal.testing.gradcheck`: the autograd gradient of ``sum(fn(*inputs) * R)`` (``R`` a fixed
random projection) against central finite differences in float64, with the defaults ``eps=1e-6, atol=1e-5,
rtol=1e-3`` unless a case says otherwise (only the float32 cast round trips loosen ``eps``, see there). Float inputs
are checked, int/bool inputs (indices, masks) pass through undifferentiated.

Inputs are small (at most ~40 elements), seeded, and kept away from kinks, ties and domain edges (``abs``/``relu``
away from 0, ``clip`` away from its bounds, ``max`` with distinct values, ``log``/``sqrt`` on positive inputs,
``remainder`` away from multiples of the divisor), where finite differences and the analytic rule may disagree.

All cases run on the reference interpreter; a representative subset also runs compiled to C (``device="cpu"``).
Further sections: the non-differentiable parts of autograd (integer tensors, comparisons, ``allow_unused``,
gather indices), and the gradients of the saturating functions at extreme inputs (+-100, +-1000) against the
analytic derivative computed stably in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
import torch
from luminal.graph import GraphError
from luminal.testing import analytic_grad, gradcheck
from luminal.training import grad


# ---------------------------------------------------------------------------- input helpers
def normal(*shape, seed, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def uniform(lo, hi, *shape, seed):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def signed(lo, hi, *shape, seed):
    """Magnitudes in ``[lo, hi]`` with random signs (away from 0)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)


def spread(*shape, seed, scale=0.3, offset=0.0):
    """Distinct values ``scale`` apart, none within ``scale / 2`` of ``offset``, in random order (no ties)."""
    n = int(np.prod(shape))
    vals = (np.arange(n) - n // 2 + 0.5) * scale
    return np.random.default_rng(seed).permutation(vals).reshape(shape) + offset


def away(x, kinks, margin=0.1):
    """Push values within ``margin`` of any kink to ``margin`` from it."""
    x = np.array(x, dtype=np.float64)
    for p in kinks:
        near = np.abs(x - p) < margin
        x[near] = p + margin * np.where(x[near] >= p, 1.0, -1.0)
    return x


def ints(lo, hi, *shape, seed):
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(np.int64)


def mod_pair(*shape, seed):
    """``(a, b)`` with ``a / b`` at least 0.2 from an integer (remainder and fmod are smooth there)."""
    rng = np.random.default_rng(seed)
    b = rng.uniform(0.5, 2.0, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    q = rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape)
    return b * q, b


def mask(*shape, seed):
    return np.random.default_rng(seed).random(shape) < 0.5


# ---------------------------------------------------------------------------- the cases
class Case:
    def __init__(self, id, fn, inputs, **kw):  # noqa: A002
        self.id, self.fn, self.inputs, self.kw = id, fn, inputs, kw


def c(id, fn, *inputs, **kw):  # noqa: A002
    return Case(id, fn, list(inputs), **kw)


MA, MB = mod_pair(3, 4, seed=40)

PRIMITIVES = [
    c("prim-log2", lambda x: x.log2(), uniform(0.5, 3, 3, 4, seed=1)),
    c("prim-exp2", lambda x: x.exp2(), normal(3, 4, seed=2)),
    c("prim-sin", lambda x: x.sin(), normal(3, 4, seed=3, scale=2)),
    c("prim-sqrt", lambda x: x.sqrt(), uniform(0.5, 3, 3, 4, seed=4)),
    c("prim-recip", lambda x: x.recip(), signed(0.5, 2, 3, 4, seed=5)),
    c("prim-add", lambda a, b: a + b, normal(3, 4, seed=6), normal(3, 4, seed=7)),
    c("prim-add-broadcast", lambda a, b: a + b, normal(3, 1, 4, seed=8), normal(5, 4, seed=9)),
    c("prim-add-self", lambda x: x + x, normal(3, 4, seed=10)),
    c("prim-mul", lambda a, b: a * b, normal(3, 4, seed=11), normal(3, 4, seed=12)),
    c("prim-mul-broadcast", lambda a, b: a * b, normal(2, 1, 4, seed=13), normal(3, 1, seed=14)),
    c("prim-mul-self", lambda x: x * x, normal(3, 4, seed=15)),
    c("prim-mul-scalar-constant", lambda x: x * 2.5 + 1.0, normal(3, 4, seed=16)),
    c("prim-mod", lambda a, b: a.remainder(b), MA, MB),
    c("prim-mod-scalar", lambda a: a % 1.5, away(normal(3, 4, seed=17, scale=3), np.arange(-9, 10) * 1.5, 0.2)),
    c("prim-sum", lambda x: x.sum(1), normal(3, 4, 2, seed=18)),
    c("prim-max", lambda x: x.max(1), spread(3, 4, 2, seed=19)),
    c("prim-contiguous", lambda x: x.T.contiguous() * x.T, normal(3, 4, seed=20)),
    c("prim-contiguous-windows", lambda x: x.pool_last_dim(3).contiguous(), normal(2, 6, seed=21)),
    c("prim-gather", lambda x, i: x.gather(1, i), normal(3, 5, seed=22), ints(0, 5, 3, 4, seed=23)),
    # float32 round trips: eps 1e-6 is below float32 resolution, so these use eps=1e-3 (the functions are
    # linear / smooth, so the truncation error stays far below rtol; the float32 rounding error ~1e-4 relative)
    c("prim-cast-f32-roundtrip", lambda x: x.cast("float32").cast("float64"), normal(3, 4, seed=24), eps=1e-3),
    c("prim-cast-f32-sin", lambda x: x.cast("float32").sin(), normal(3, 4, seed=25), eps=1e-3),
    c("prim-iota", lambda x: x * x.graph.iota("z", (4,), "float64"), normal(3, 4, seed=26)),
]

UNARY = [
    c("unary-exp", lambda x: x.exp(), normal(3, 4, seed=101)),
    c("unary-log", lambda x: x.log(), uniform(0.3, 3, 3, 4, seed=102)),
    c("unary-log10", lambda x: x.log10(), uniform(0.3, 3, 3, 4, seed=103)),
    c("unary-log1p", lambda x: x.log1p(), uniform(-0.5, 2, 3, 4, seed=104)),
    c("unary-expm1", lambda x: x.expm1(), normal(3, 4, seed=105)),
    c("unary-cos", lambda x: x.cos(), normal(3, 4, seed=106, scale=2)),
    c("unary-tan", lambda x: x.tan(), uniform(-1.2, 1.2, 3, 4, seed=107)),
    c("unary-abs", lambda x: x.abs(), spread(3, 4, seed=108)),
    c("unary-square", lambda x: x.square(), normal(3, 4, seed=109)),
    c("unary-rsqrt", lambda x: x.rsqrt(), uniform(0.5, 3, 3, 4, seed=110)),
    c("unary-erf", lambda x: x.erf(), away(normal(3, 4, seed=111, scale=1.5), [0])),
    c("unary-relu", lambda x: x.relu(), spread(3, 4, seed=112)),
    c("unary-relu6", lambda x: x.relu6(), away(uniform(-2, 8, 3, 4, seed=113), [0, 6])),
    c("unary-leaky_relu", lambda x: x.leaky_relu(), spread(3, 4, seed=114)),
    c("unary-leaky_relu-0.2", lambda x: x.leaky_relu(0.2), spread(3, 4, seed=115)),
    c("unary-elu", lambda x: x.elu(), spread(3, 4, seed=116)),
    c("unary-elu-0.5", lambda x: x.elu(0.5), spread(3, 4, seed=117)),
    c("unary-selu", lambda x: x.selu(), spread(3, 4, seed=118)),
    c("unary-celu", lambda x: x.celu(), spread(3, 4, seed=119)),
    c("unary-celu-0.7", lambda x: x.celu(0.7), spread(3, 4, seed=120)),
    c("unary-sigmoid", lambda x: x.sigmoid(), normal(3, 4, seed=121, scale=2)),
    c("unary-logsigmoid", lambda x: x.logsigmoid(), normal(3, 4, seed=122, scale=2)),
    c("unary-hardsigmoid", lambda x: x.hardsigmoid(), away(uniform(-5, 5, 3, 4, seed=123), [-3, 3])),
    c("unary-hardswish", lambda x: x.hardswish(), away(uniform(-5, 5, 3, 4, seed=124), [-3, 3])),
    c("unary-hardtanh", lambda x: x.hardtanh(), away(uniform(-2, 2, 3, 4, seed=125), [-1, 1])),
    c("unary-hardtanh-range", lambda x: x.hardtanh(-0.5, 2.0), away(uniform(-2, 3, 3, 4, seed=126), [-0.5, 2])),
    c("unary-tanh", lambda x: x.tanh(), normal(3, 4, seed=127, scale=1.5)),
    c("unary-silu", lambda x: x.silu(), normal(3, 4, seed=128, scale=2)),
    c("unary-mish", lambda x: x.mish(), normal(3, 4, seed=129, scale=2)),
    c("unary-softsign", lambda x: x.softsign(), spread(3, 4, seed=130)),
    c("unary-softplus", lambda x: x.softplus(), normal(3, 4, seed=131, scale=3)),
    c("unary-softplus-beta-threshold", lambda x: x.softplus(beta=2.0, threshold=3.0),
      away(normal(3, 4, seed=132, scale=2), [1.5])),
    c("unary-gelu", lambda x: x.gelu(), away(normal(3, 4, seed=133, scale=2), [0])),
    c("unary-gelu-tanh", lambda x: x.gelu(approximate="tanh"), normal(3, 4, seed=134, scale=2)),
    c("unary-quick_gelu", lambda x: x.quick_gelu(), normal(3, 4, seed=135, scale=2)),
    # piecewise constant: the gradient is 0 away from the jumps
    c("unary-sign", lambda x: x.sign() * x, spread(3, 4, seed=136)),
    c("unary-floor", lambda x: x.floor() + x, away(normal(3, 4, seed=137, scale=3), range(-10, 11))),
    c("unary-ceil", lambda x: x.ceil() + x, away(normal(3, 4, seed=138, scale=3), range(-10, 11))),
    c("unary-round", lambda x: x.round() + x, away(normal(3, 4, seed=139, scale=3), np.arange(-10, 11) + 0.5)),
    c("unary-trunc", lambda x: x.trunc() + x, away(normal(3, 4, seed=140, scale=3), range(-10, 11))),
]

BINARY = [
    c("binary-sub", lambda a, b: a - b, normal(3, 4, seed=201), normal(4, seed=202)),
    c("binary-div", lambda a, b: a / b, normal(3, 4, seed=203), signed(0.5, 2, 3, 4, seed=204)),
    c("binary-div-broadcast", lambda a, b: a / b, normal(2, 3, 1, seed=205), signed(0.5, 2, 4, seed=206)),
    c("binary-rsub", lambda x: 2.0 - x, normal(3, 4, seed=207)),
    c("binary-rsub-method", lambda x: x.rsub(3.0), normal(3, 4, seed=208)),
    c("binary-rdiv", lambda x: 3.0 / x, signed(0.5, 2, 3, 4, seed=209)),
    c("binary-rdiv-method", lambda x: x.rdiv(-1.5), signed(0.5, 2, 3, 4, seed=210)),
    c("binary-neg", lambda x: -x, normal(3, 4, seed=211)),
    c("binary-pow-tensor", lambda x, y: x.pow(y), uniform(0.5, 2, 3, 4, seed=212), normal(3, 4, seed=213)),
    c("binary-pow-broadcast", lambda x, y: x ** y, uniform(0.5, 2, 3, 4, seed=214), normal(4, seed=215)),
    c("binary-pow-int2", lambda x: x ** 2, normal(3, 4, seed=216)),
    c("binary-pow-int3-negative-base", lambda x: x ** 3, normal(3, 4, seed=217)),
    c("binary-pow-int-neg2", lambda x: x ** -2, signed(0.5, 2, 3, 4, seed=218)),
    c("binary-pow-0.5", lambda x: x ** 0.5, uniform(0.5, 3, 3, 4, seed=219)),
    c("binary-pow--0.5", lambda x: x ** -0.5, uniform(0.5, 3, 3, 4, seed=220)),
    c("binary-pow-2.5", lambda x: x ** 2.5, uniform(0.5, 3, 3, 4, seed=221)),
    c("binary-pow-0", lambda x: x ** 0 * x, normal(3, 4, seed=222)),
    c("binary-rpow", lambda x: 2.0 ** x, normal(3, 4, seed=223)),
    c("binary-maximum", lambda a, b: a.maximum(b), spread(3, 4, seed=224), spread(3, 4, seed=225, offset=0.15)),
    c("binary-maximum-scalar", lambda x: x.maximum(0.0), spread(3, 4, seed=226)),
    c("binary-minimum", lambda a, b: a.minimum(b), spread(3, 4, seed=227), spread(3, 4, seed=228, offset=0.15)),
    c("binary-minimum-broadcast", lambda a, b: a.minimum(b), spread(3, 4, seed=229), spread(4, seed=230, offset=0.1)),
    c("binary-clip", lambda x: x.clip(-0.5, 0.7), away(uniform(-2, 2, 3, 4, seed=231), [-0.5, 0.7])),
    c("binary-clip-min", lambda x: x.clip(min=0.2), away(uniform(-2, 2, 3, 4, seed=232), [0.2])),
    c("binary-clamp-max", lambda x: x.clamp(max=0.3), away(uniform(-2, 2, 3, 4, seed=233), [0.3])),
    c("binary-clip-tensor-bounds", lambda x, lo, hi: x.clip(lo, hi), spread(3, 4, seed=234),
      spread(3, 4, seed=235, offset=-1.05), spread(3, 4, seed=236, offset=1.05)),
    c("binary-where", lambda m, a, b: lm.where(m, a, b), mask(3, 4, seed=237), normal(3, 4, seed=238),
      normal(3, 4, seed=239)),
    c("binary-where-broadcast", lambda m, a, b: lm.where(m, a, b), mask(3, 1, seed=240), normal(4, seed=241),
      normal(3, 4, seed=242)),
    c("binary-where-scalar", lambda m, a: lm.where(m, a * 2.0, 0.5), mask(3, 4, seed=243), normal(3, 4, seed=244)),
    c("binary-where-same-tensor", lambda m, a: lm.where(m, a.sin(), a), mask(3, 4, seed=245), normal(3, 4, seed=246)),
    c("binary-where-method", lambda m, a, b: a.where(m, b), mask(3, 4, seed=247), normal(3, 4, seed=248),
      normal(3, 4, seed=249)),
    c("binary-remainder", lambda a, b: a % b, MA, MB),
    c("binary-fmod", lambda a, b: a.fmod(b), MA, MB),
    c("binary-floor_divide", lambda a, b: (a // b) * a + b, MA, MB),
    c("binary-int-operand", lambda x, n: x * n + n, normal(3, 4, seed=250), ints(-3, 4, 3, 4, seed=251)),
]

MOVEMENT = [
    c("move-permute", lambda x: x.permute(2, 0, 1), normal(2, 3, 4, seed=301)),
    c("move-permute-negative", lambda x: x.permute((-1, 0, -2)), normal(2, 3, 4, seed=302)),
    c("move-transpose", lambda x: x.transpose(0, -1), normal(2, 3, 4, seed=303)),
    c("move-mT", lambda x: x.mT, normal(2, 3, 4, seed=304)),
    c("move-T", lambda x: x.T, normal(2, 3, 4, seed=305)),
    c("move-unsqueeze", lambda x: x.unsqueeze(1) * x.unsqueeze(-1).unsqueeze(0), normal(3, 4, seed=306)),
    c("move-squeeze-axis", lambda x: x.squeeze(1), normal(3, 1, 4, seed=307)),
    c("move-squeeze-all", lambda x: x.squeeze(), normal(1, 3, 1, 4, seed=308)),
    c("move-reshape", lambda x: x.reshape(4, 6), normal(2, 3, 4, seed=309)),
    c("move-reshape-infer", lambda x: x.reshape((-1, 2)), normal(2, 3, 4, seed=310)),
    c("move-permute-reshape", lambda x: x.permute(1, 0, 2).reshape(3, 8) * 1.5, normal(2, 3, 4, seed=311)),
    c("move-view", lambda x: x.view(6, 4), normal(2, 3, 4, seed=312)),
    c("move-flatten", lambda x: x.flatten(), normal(2, 3, 4, seed=313)),
    c("move-flatten-range", lambda x: x.flatten(1, 2), normal(2, 3, 4, seed=314)),
    c("move-unflatten", lambda x: x.unflatten(1, (2, 3)), normal(4, 6, seed=315)),
    c("move-unflatten-infer", lambda x: x.unflatten(-1, (-1, 2)), normal(4, 6, seed=316)),
    c("move-merge-split-dims", lambda x: x.merge_dims(0, 1).split_dims(0, 4), normal(2, 6, 3, seed=317)),
    c("move-expand", lambda x: x.expand(3, 4), normal(3, 1, seed=318)),
    c("move-expand-leading", lambda x: x.expand(2, 3, 4), normal(4, seed=319)),
    c("move-expand_dim", lambda x: x.expand_dim(1, 3), normal(2, 4, seed=320)),
    c("move-expand-transposed", lambda x: x.T.expand(2, 4, 3), normal(3, 4, seed=321)),
    c("move-slice", lambda x: x.slice_axis(1, 1, 4), normal(3, 5, seed=322)),
    c("move-slice-step", lambda x: x.slice_axis(-1, 0, None, 2), normal(3, 7, seed=323)),
    c("move-slice-negative-step", lambda x: x.slice_axis(0, None, None, -2), normal(5, 3, seed=324)),
    c("move-narrow", lambda x: x.narrow(0, 1, 2), normal(4, 3, seed=325)),
    c("move-getitem", lambda x: x[1:, ::2, -1], normal(3, 5, 2, seed=326)),
    c("move-getitem-none-ellipsis", lambda x: x[None, ..., 1:3], normal(3, 4, seed=327)),
    c("move-getitem-tensor", lambda x, i: x[:, i], normal(3, 5, seed=328), np.array([4, 0, -1, 2, 0])),
    c("move-pad_axis", lambda x: x.pad_axis(1, 2, 1), normal(3, 4, seed=329)),
    c("move-pad-zero", lambda x: x.pad([(1, 0), (2, 3)]), normal(3, 4, seed=330)),
    c("move-pad-value", lambda x: x.pad([(1, 2), (0, 1)], value=1.5) * 2.0, normal(3, 4, seed=331)),
    c("move-pad-crop", lambda x: x.pad([(-1, 1), (1, -2)]), normal(3, 5, seed=332)),
    c("move-flip", lambda x: x.flip(1), normal(3, 4, seed=333)),
    c("move-flip-all", lambda x: x.flip(), normal(2, 3, 4, seed=334)),
    c("move-roll", lambda x: x.roll(2, 1), normal(3, 5, seed=335)),
    c("move-roll-negative", lambda x: x.roll(-1, -2), normal(4, 3, seed=336)),
    c("move-pool_last_dim", lambda x: x.pool_last_dim(3), normal(2, 7, seed=337)),
    c("move-pool-stride", lambda x: x.pool_last_dim(3, stride=2), normal(2, 9, seed=338)),
    c("move-pool-stride-dilation", lambda x: x.pool_last_dim(2, stride=2, dilation=3), normal(2, 11, seed=339)),
    c("move-pool-gaps", lambda x: x.pool_last_dim(2, stride=3), normal(2, 10, seed=340)),
    c("move-pool-axis0", lambda x: x.pool(0, 3, stride=1, dilation=2), normal(8, 3, seed=341)),
    c("move-pool-2d", lambda x: x.pool(0, 2).pool(2, 3, stride=2), normal(4, 7, seed=342)),
    c("move-concat", lambda a, b: a.concat(b, 1), normal(3, 2, seed=343), normal(3, 4, seed=344)),
    c("move-concat-three", lambda a, b, d: lm.concat([a, b, d], axis=-1), normal(2, 1, seed=345),
      normal(2, 3, seed=346), normal(2, 2, seed=347)),
    c("move-concat-self", lambda a: lm.cat([a, a.flip(0), a], 0), normal(3, 4, seed=348)),
    c("move-stack", lambda a, b: lm.stack([a, b], 0), normal(3, 4, seed=349), normal(3, 4, seed=350)),
    c("move-stack-last", lambda a, b: lm.stack([a, b, a], -1), normal(3, 4, seed=351), normal(3, 4, seed=352)),
    c("move-repeat", lambda x: x.repeat(2, 3), normal(2, 3, seed=353)),
    c("move-repeat-lead", lambda x: x.repeat(2, 1, 2), normal(3, 2, seed=354)),
    c("move-chunk", lambda x: lm.concat([t * (k + 1.0) for k, t in enumerate(x.chunk(3, 1))], 1),
      normal(2, 7, seed=355)),
    c("move-split", lambda x: lm.concat([t.sin() if k == 1 else t * 2.0
                                         for k, t in enumerate(x.split([1, 3, 2], 0))], 0), normal(6, 3, seed=356)),
    c("move-split-int", lambda x: lm.stack([t * (k + 1.0) for k, t in enumerate(x.split(2, -1))], 0),
      normal(3, 6, seed=357)),
    c("move-gather-dup", lambda x, i: x.gather(0, i), normal(4, 3, seed=358),
      np.array([[0, 1, 0], [3, 3, 3], [0, 2, 1], [1, 0, 0], [2, 2, 3]])),
    c("move-gather-partial", lambda x, i: x.gather(1, i), normal(4, 5, seed=359), ints(0, 5, 2, 3, seed=360)),
    c("move-gather-neg-axis", lambda x, i: x.gather(-1, i), normal(2, 3, 4, seed=361), ints(0, 4, 2, 3, 6, seed=362)),
    c("move-index_select", lambda x, i: x.index_select(0, i), normal(4, 3, seed=363), np.array([3, 0, 3, 1])),
    c("move-index_select-axis1", lambda x, i: x.index_select(1, i), normal(2, 5, 3, seed=364), np.array([4, 4, 0])),
    c("move-index_select-2d-index", lambda x, i: x.index_select(0, i), normal(5, 3, seed=365),
      np.array([[1, 4], [1, 0], [2, 2]])),
    c("move-take_along_dim", lambda x, i: x.take_along_dim(i, 1), normal(3, 4, seed=366), ints(0, 4, 3, 2, seed=367)),
]

REDUCTION = [
    c("reduce-sum-all", lambda x: x.sum(), normal(2, 3, 4, seed=401)),
    c("reduce-sum-axis", lambda x: x.sum(1), normal(2, 3, 4, seed=402)),
    c("reduce-sum-axes", lambda x: x.sum((0, 2)), normal(2, 3, 4, seed=403)),
    c("reduce-sum-neg-keepdim", lambda x: x.sum(-1, keepdim=True), normal(2, 3, 4, seed=404)),
    c("reduce-sum-of-view", lambda x: x.T.sum(0), normal(3, 4, seed=405)),
    c("reduce-max-all", lambda x: x.max(), spread(2, 3, 4, seed=406)),
    c("reduce-max-axis-neg", lambda x: x.max(-1), spread(2, 3, 4, seed=407)),
    c("reduce-max-axes-keepdim", lambda x: x.max((0, 1), keepdim=True), spread(2, 3, 4, seed=408)),
    c("reduce-amax", lambda x: x.amax(0), spread(3, 4, seed=409)),
    c("reduce-min-all", lambda x: x.min(), spread(2, 3, 4, seed=410)),
    c("reduce-min-axis", lambda x: x.min(1, keepdim=True), spread(2, 3, 4, seed=411)),
    c("reduce-min-axes", lambda x: x.amin((-1, 0)), spread(2, 3, 4, seed=412)),
    c("reduce-mean-all", lambda x: x.mean(), normal(2, 3, 4, seed=413)),
    c("reduce-mean-axes-keepdim", lambda x: x.mean((0, -1), keepdim=True), normal(2, 3, 4, seed=414)),
    c("reduce-var", lambda x: x.var(-1), normal(3, 5, seed=415)),
    c("reduce-var-correction0", lambda x: x.var(0, correction=0), normal(4, 3, seed=416)),
    c("reduce-var-correction2-keepdim", lambda x: x.var((1, 2), correction=2, keepdim=True), normal(2, 3, 4, seed=417)),
    c("reduce-var-unbiased-false", lambda x: x.var(unbiased=False), normal(3, 4, seed=418)),
    c("reduce-var-all", lambda x: x.var(), normal(3, 4, seed=419)),
    c("reduce-std", lambda x: x.std(1), normal(3, 5, seed=420)),
    c("reduce-std-correction0-keepdim", lambda x: x.std(-1, correction=0, keepdim=True), normal(2, 3, 4, seed=421)),
    c("reduce-logsumexp", lambda x: x.logsumexp(-1), normal(3, 5, seed=422, scale=2)),
    c("reduce-logsumexp-axes-keepdim", lambda x: x.logsumexp((0, 2), keepdim=True), normal(2, 3, 4, seed=423)),
    c("reduce-logsumexp-all", lambda x: x.logsumexp(), normal(3, 4, seed=424)),
    c("reduce-prod-odd", lambda x: x.prod(1), signed(0.5, 1.5, 3, 5, seed=425)),
    c("reduce-prod-even-keepdim", lambda x: x.prod(-1, keepdim=True), signed(0.5, 1.5, 3, 4, seed=426)),
    c("reduce-prod-all", lambda x: x.prod(), signed(0.7, 1.3, 2, 3, 3, seed=427)),
]

NORM = [
    c("norm-softmax", lambda x: x.softmax(-1), normal(3, 5, seed=501)),
    c("norm-softmax-axis0", lambda x: x.softmax(0), normal(3, 5, seed=502)),
    c("norm-softmax-axes", lambda x: x.softmax((0, 2)), normal(2, 3, 4, seed=503)),
    c("norm-log_softmax", lambda x: x.log_softmax(-1), normal(3, 5, seed=504, scale=2)),
    c("norm-log_softmax-axis1", lambda x: x.log_softmax(1), normal(2, 3, 4, seed=505)),
    c("norm-layer_norm", lambda x: x.layer_norm(-1), normal(3, 5, seed=506)),
    c("norm-layer_norm-axes", lambda x: x.layer_norm((1, 2)), normal(2, 3, 4, seed=507)),
    c("norm-layer_norm-eps", lambda x: x.layer_norm(0, epsilon=0.1), normal(4, 3, seed=508)),
    c("norm-mean_norm", lambda x: x.mean_norm(-1), normal(3, 5, seed=509)),
    c("norm-mean_norm-axes", lambda x: x.mean_norm((0, 1)), normal(3, 4, seed=510)),
    c("norm-std_norm", lambda x: x.std_norm(-1), normal(3, 5, seed=511)),
    c("norm-std_norm-axis0", lambda x: x.std_norm(0, epsilon=1e-3), normal(4, 3, seed=512)),
    c("norm-normalize", lambda x: x.normalize(), normal(3, 5, seed=513)),
    c("norm-normalize-p1", lambda x: x.normalize(p=1, axis=0), spread(4, 3, seed=514)),
    c("norm-normalize-pinf", lambda x: x.normalize(p=float("inf"), axis=-1), spread(3, 5, seed=515)),
    c("norm-normalize-p3", lambda x: x.normalize(p=3.0, axis=(0, 1)), spread(3, 4, seed=516)),
]

SCAN = [
    c("scan-cumsum", lambda x: x.cumsum(-1), normal(3, 5, seed=601)),
    c("scan-cumsum-axis0", lambda x: x.cumsum(0), normal(4, 3, seed=602)),
    c("scan-cummax", lambda x: x.cummax(-1), spread(3, 6, seed=603)),
    c("scan-cummax-axis0", lambda x: x.cummax(0), spread(5, 3, seed=604)),
    c("scan-cummin", lambda x: x.cummin(1), spread(3, 6, seed=605)),
    c("scan-cumprod", lambda x: x.cumprod(-1), signed(0.5, 1.5, 3, 5, seed=606)),
    c("scan-cumprod-axis0", lambda x: x.cumprod(0), signed(0.5, 1.5, 6, 2, seed=607)),
    c("scan-tril", lambda x: x.tril(), normal(4, 4, seed=608)),
    c("scan-tril-diag", lambda x: x.tril(-1), normal(2, 3, 5, seed=609)),
    c("scan-triu", lambda x: x.triu(), normal(4, 4, seed=610)),
    c("scan-triu-diag", lambda x: x.triu(2), normal(3, 5, seed=611)),
]

MATMUL = [
    c("matmul-2d", lambda a, b: a @ b, normal(3, 4, seed=701), normal(4, 5, seed=702)),
    c("matmul-batched", lambda a, b: a.matmul(b), normal(2, 3, 4, seed=703), normal(2, 4, 3, seed=704)),
    c("matmul-broadcast-batch", lambda a, b: a @ b, normal(2, 1, 3, 4, seed=705), normal(3, 4, 2, seed=706)),
    c("matmul-batched-2d", lambda a, b: a @ b, normal(2, 3, 4, seed=707), normal(4, 5, seed=708)),
    c("matmul-2d-batched", lambda a, b: a @ b, normal(3, 4, seed=709), normal(2, 4, 5, seed=710)),
    c("matmul-vec-mat", lambda a, b: a @ b, normal(4, seed=711), normal(4, 5, seed=712)),
    c("matmul-mat-vec", lambda a, b: a @ b, normal(3, 4, seed=713), normal(4, seed=714)),
    c("matmul-vec-batched", lambda a, b: a @ b, normal(4, seed=715), normal(2, 4, 3, seed=716)),
    c("matmul-batched-vec", lambda a, b: a @ b, normal(2, 3, 4, seed=717), normal(4, seed=718)),
    c("matmul-vec-vec", lambda a, b: a @ b, normal(5, seed=719), normal(5, seed=720)),
    c("matmul-transposed", lambda a, b: a.T @ b.mT, normal(4, 3, seed=721), normal(5, 4, seed=722)),
    c("matmul-self", lambda a: a @ a.T, normal(3, 4, seed=723)),
    c("matmul-dot", lambda a, b: a.dot(b), normal(6, seed=724), normal(6, seed=725)),
    c("matmul-dot-self", lambda a: a.dot(a), normal(6, seed=726)),
]

# compositions that mix the families (several consumers, views of views, chains)
COMPOSITE = [
    c("mix-mlp", lambda x, w1, w2: ((x @ w1).tanh() @ w2).log_softmax(-1), normal(3, 4, seed=801),
      normal(4, 5, seed=802), normal(5, 2, seed=803)),
    c("mix-attention", lambda q, k, v: ((q @ k.mT) * 0.5).softmax(-1) @ v, normal(2, 3, 4, seed=804),
      normal(2, 3, 4, seed=805), normal(2, 3, 2, seed=806)),
    c("mix-conv1d", lambda x, w: (x.pool_last_dim(3, stride=2).unsqueeze(1) * w.unsqueeze(-2)).sum(-1),
      normal(2, 1, 9, seed=807), normal(3, 1, 3, seed=808)),
    c("mix-maxpool", lambda x: x.pool_last_dim(2, stride=2).max(-1), spread(2, 8, seed=809)),
    c("mix-causal-softmax", lambda x: lm.where(lm.Graph.tril(x.graph, 4) > 0, x, -1e9).softmax(-1),
      normal(4, 4, seed=810)),
]

def _attend_fused(qkv):
    q, k, v = qkv[..., 0:2], qkv[..., 2:4], qkv[..., 4:6]  # q/k/v sliced from one fused projection
    return (q @ k.mT).softmax(-1) @ v


# views of views: exercise each path of autograd's view transposition (unview)
VIEWS = [
    c("view-gather-on-transposed", lambda x, i: x.T.gather(0, i), normal(3, 4, seed=850), ints(0, 4, 2, 3, seed=851)),
    c("view-index_select-on-slice", lambda x, i: x[1:, ::2].index_select(1, i), normal(4, 5, seed=852),
      np.array([2, 0, 2])),
    c("view-padded-strided-windows", lambda x: x.pad_axis(-1, 1, 2).pool_last_dim(3, stride=2), normal(2, 7, seed=853)),
    c("view-flipped-windows", lambda x: x.flip(-1).pool_last_dim(3, dilation=2), normal(2, 8, seed=854)),
    c("view-windows-middle-axis", lambda x: x.pool(1, 2, stride=2, dilation=2), normal(2, 7, 2, seed=855)),
    c("view-expand-then-reshape", lambda x: x[:, 1:].expand(2, 3, 2).reshape(6, 2), normal(3, 3, seed=856)),
    c("view-strided-slice-of-transposed", lambda x: x.mT[:, ::-2, 1:], normal(2, 5, 3, seed=857)),
    c("view-split-heads", lambda x: x.reshape(2, 3, 2, 2).permute(0, 2, 1, 3) * 1.0, normal(2, 3, 4, seed=858)),
    c("view-fused-qkv", lambda x, w: _attend_fused(x @ w), normal(3, 4, seed=859), normal(4, 6, seed=860)),
    c("view-broadcast-sliced", lambda x: x[:, 1:2].expand(3, 4) * x, normal(3, 4, seed=861)),
    # more window terms than autograd enumerates (MAX_WINDOW_TERMS = 64): the general gather transpose
    c("view-long-cumsum", lambda x: x.cumsum(0), normal(70, seed=862)),
    c("view-pool-2d-large-kernel", lambda x: x.pool(0, 9).pool(2, 9), normal(10, 10, seed=863)),
]

ALL_CASES = PRIMITIVES + UNARY + BINARY + MOVEMENT + REDUCTION + NORM + SCAN + MATMUL + COMPOSITE + VIEWS
BY_ID = {case.id: case for case in ALL_CASES}
assert len(BY_ID) == len(ALL_CASES), "duplicate case ids"

CPU_SUBSET = [
    "prim-exp2", "prim-mul-broadcast", "prim-gather", "unary-sigmoid", "unary-gelu-tanh", "binary-pow-tensor",
    "binary-where", "move-permute-reshape", "move-pool-stride-dilation", "move-pad-value", "move-concat-three",
    "move-index_select-2d-index", "reduce-sum-axes", "reduce-max-axis-neg", "reduce-logsumexp", "reduce-var",
    "norm-softmax", "norm-layer_norm", "scan-cumsum", "matmul-broadcast-batch", "matmul-mat-vec",
    "view-padded-strided-windows", "view-long-cumsum",
]


@pytest.mark.parametrize("case", ALL_CASES, ids=[case.id for case in ALL_CASES])
def test_gradcheck_reference(case):
    assert gradcheck(case.fn, case.inputs, device="reference", **case.kw)


@pytest.mark.parametrize("case_id", CPU_SUBSET)
def test_gradcheck_cpu(case_id):
    case = BY_ID[case_id]
    assert gradcheck(case.fn, case.inputs, device="cpu", **case.kw)


def test_gradcheck_default_device():
    """``device=None`` runs the default device (the reference interpreter here)."""
    case = BY_ID["mix-mlp"]
    assert gradcheck(case.fn, case.inputs)


# ---------------------------------------------------------------------------- exact local rules
def _grads(fn, *arrays, grad_output=None, device="reference"):
    """Analytic gradients of ``sum(fn(*xs) * grad_output)`` (``grad_output`` defaults to ones) for float arrays."""
    cx = lm.Graph()
    xs = [cx.tensor(a.shape, a.dtype.name if a.dtype != np.bool_ else "bool", f"x{k}").set(a)
          for k, a in enumerate(arrays)]
    out = fn(*xs)
    wanted = [x for x, a in zip(xs, arrays) if a.dtype.kind == "f"]
    if grad_output is None:
        grad_output = np.ones(out.concrete_shape(), out.dtype.numpy)
    gs = grad(out, wanted, grad_output=grad_output, allow_unused=True)
    for g in gs:
        if g is not None:
            g.retrieve()
    cx.compile(device=device)
    cx.execute()
    return [None if g is None else g.data() for g in gs]


def test_max_shares_gradient_evenly_between_ties():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 4.0]])
    (g,) = _grads(lambda t: t.max(-1), x, grad_output=np.array([1.0, 3.0]))
    np.testing.assert_allclose(g, [[0, 0.5, 0.5, 0], [1, 1, 1, 0]])


def test_remainder_grad_matches_torch_rule():
    a, b = mod_pair(3, 4, seed=900)
    ga, gb = _grads(lambda x, y: x.remainder(y), a, b)
    np.testing.assert_allclose(ga, np.ones_like(a))
    np.testing.assert_allclose(gb, -np.floor(a / b), atol=1e-12)


def test_where_routes_gradient_to_selected_branch_only():
    m = np.array([True, False, True, False])
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([-1.0, np.inf, -3.0, -4.0])  # inf in the unselected branch must not leak NaN
    ga, gb = _grads(lambda c, x, y: lm.where(c, x * 2.0, y), m, a, b, grad_output=np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(ga, [2.0, 0.0, 6.0, 0.0])
    np.testing.assert_array_equal(gb, [0.0, 2.0, 0.0, 4.0])


def test_gather_scatter_adds_duplicate_indices():
    x = np.arange(6.0).reshape(3, 2)
    idx = np.array([[2, 0], [2, 2], [0, 0]])
    (g,) = _grads(lambda t, i: t.gather(0, i), x, idx, grad_output=np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    np.testing.assert_array_equal(g, [[5.0, 2.0 + 6.0], [0.0, 0.0], [1.0 + 3.0, 4.0]])


# ---------------------------------------------------------------------------- non-differentiable parts
def test_grad_wrt_integer_tensor_raises():
    cx = lm.Graph()
    x = cx.tensor((3,), "float32").set(np.ones(3, np.float32))
    n = cx.tensor((3,), "int32").set(np.arange(3, dtype=np.int32))
    loss = (x * n).sum()
    with pytest.raises(TypeError,
                       match=r"input 1 \('input'\) has dtype \S*int32; only floating-point tensors have gradients"):
        grad(loss, [x, n])


def test_grad_wrt_bool_tensor_raises():
    cx = lm.Graph()
    x = cx.tensor((3,), "float32").set(np.ones(3, np.float32))
    m = cx.tensor((3,), "bool").set(np.array([True, False, True]))
    loss = lm.where(m, x, 0.0).sum()
    with pytest.raises(TypeError, match="only floating-point tensors have gradients"):
        grad(loss, [m])


def test_grad_of_integer_output_raises():
    cx = lm.Graph()
    x = cx.tensor((3,), "float32").set(np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"output has dtype \S*int64; only floating-point"):
        grad(x.cast("int64").sum(), [x])
    with pytest.raises(TypeError, match="only floating-point"):
        grad((x < 1.0).any(), [x])


def test_gradcheck_detects_a_wrong_gradient():
    """Sanity check of the checker: at the kink of relu the rule's subgradient (0, as PyTorch) differs from the
    central difference (1/2)."""
    from luminal.testing import GradcheckError

    with pytest.raises(GradcheckError, match=r"input 0 \(shape \(2,\)\) element \(1,\)"):
        gradcheck(lambda x: x.relu(), [np.array([0.5, 0.0])])
    assert gradcheck(lambda x: x.relu(), [np.array([0.5, 0.0])], raise_exception=False) is False


def test_gradcheck_rejects_non_float_output():
    with pytest.raises(TypeError, match="only floating-point outputs have gradients"):
        gradcheck(lambda x: x < 0.0, [np.ones(3)])
    with pytest.raises(TypeError, match="must return a GraphTensor"):
        gradcheck(lambda x: 1.0, [np.ones(3)])


def test_comparison_output_passes_no_gradient():
    """``LessThan`` outputs are bool: a loss that depends on x only through a comparison has no gradient."""
    cx = lm.Graph()
    x = cx.tensor((4,), "float64").set(np.array([-1.0, 0.5, 2.0, -3.0]))
    loss = (x < 0.0).cast("float64").sum() + (x > 1.0).cast("float64").sum()
    with pytest.raises(GraphError, match=r"input 0 .* is not used to compute the output; pass allow_unused=True"):
        grad(loss, [x])
    assert grad(loss, [x], allow_unused=True) == [None]
    # through gradcheck (None becomes zeros, the finite differences are zero too)
    assert gradcheck(lambda t: (t < 0.0).cast("float64") * 3.0, [np.array([-1.0, 0.5, 2.0, -3.0])])


def test_comparison_mask_contributes_zero_gradient():
    """``x * (x > 0)``: the mask is a constant for autograd, so d/dx = mask."""
    x = spread(3, 4, seed=901)
    (g,) = _grads(lambda t: t * (t > 0.0).cast("float64"), x)
    np.testing.assert_array_equal(g, (x > 0).astype(np.float64))


def test_integer_cast_cuts_the_gradient():
    """``x * float(int(x))``: only the float path is differentiated, d/dx = trunc(x)."""
    x = np.array([-2.5, -0.7, 0.3, 1.6, 3.2])
    (g,) = _grads(lambda t: t * t.cast("int32").cast("float64"), x)
    np.testing.assert_array_equal(g, np.trunc(x))


def test_gather_index_is_not_differentiable():
    cx = lm.Graph()
    x = cx.tensor((3, 2), "float32").set(np.ones((3, 2), np.float32))
    i = cx.tensor((2, 2), "int64").set(np.array([[0, 1], [2, 0]]))
    loss = x.gather(0, i).sum()
    (gx,) = grad(loss, [x])
    assert gx.dtype == x.dtype and tuple(gx.concrete_shape()) == (3, 2)
    with pytest.raises(TypeError, match=r"input 1 .* has dtype \S*int64; only floating-point tensors have gradients"):
        grad(loss, [x, i])


def test_mod_on_integers_is_not_differentiated():
    cx = lm.Graph()
    x = cx.tensor((3,), "float64").set(np.array([1.0, 2.0, 3.0]))
    n = cx.tensor((3,), "int64").set(np.array([7, 8, 9]))
    loss = (x * (n % 4).cast("float64")).sum()
    (gx,) = grad(loss, [x])
    gx.retrieve()
    cx.execute()
    np.testing.assert_array_equal(gx.data(), [3.0, 0.0, 1.0])


def test_allow_unused():
    cx = lm.Graph()
    x = cx.tensor((3,), "float64").set(np.array([1.0, 2.0, 3.0]))
    y = cx.tensor((3,), "float64").set(np.array([4.0, 5.0, 6.0]))
    loss = (x * x).sum()
    with pytest.raises(GraphError, match=r"input 1 .* is not used to compute the output"):
        grad(loss, [x, y])
    gx, gy = grad(loss, [x, y], allow_unused=True)
    assert gy is None
    gx.retrieve()
    cx.execute()
    np.testing.assert_array_equal(gx.data(), [2.0, 4.0, 6.0])


def test_grad_input_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 3), "float64").set(np.ones((2, 3)))
    loss = (x * x).sum()
    with pytest.raises(GraphError, match="is a view of node"):
        grad(loss, [x.T])
    with pytest.raises(TypeError, match="must be a GraphTensor or Parameter"):
        grad(loss, [np.ones((2, 3))])
    with pytest.raises(TypeError, match="output must be a GraphTensor"):
        grad(1.0, [x])
    other = lm.Graph().tensor((2, 3), "float64")
    with pytest.raises(GraphError, match="belongs to a different graph"):
        grad(loss, [other])


def test_non_scalar_output_needs_grad_output():
    cx = lm.Graph()
    x = cx.tensor((2, 3), "float64").set(np.arange(6.0).reshape(2, 3))
    y = x * x
    with pytest.raises(GraphError, match="pass grad_output for a non-scalar output"):
        grad(y, [x])
    with pytest.raises(GraphError, match="grad_output has shape"):
        grad(y, [x], grad_output=np.ones((3, 2)))
    w = np.arange(6.0).reshape(2, 3) + 1.0
    (gx,) = grad(y, [x], grad_output=w)
    gx.retrieve()
    cx.execute()
    np.testing.assert_allclose(gx.data(), 2 * np.arange(6.0).reshape(2, 3) * w)


def test_analytic_grad_zero_for_unused_input():
    """gradcheck's helper maps unused float inputs to zero gradients (``allow_unused=True``)."""
    ga, gb = analytic_grad(lambda a, b: a * 2.0, [np.ones(3), np.ones(2)])
    assert ga.shape == (3,) and np.all(np.abs(ga) >= 1.0)  # 2 * R, |R| in [0.5, 1.5]
    np.testing.assert_array_equal(gb, np.zeros(2))


# ---------------------------------------------------------------------------- extreme inputs
def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


EXTREME_X = np.array([-1000.0, -100.0, -30.0, -1.0, 0.5, 30.0, 100.0, 1000.0])
EXTREME_ROWS = np.array([[1000.0, 0.0, -1000.0], [100.0, -100.0, 3.0], [-1000.0, -999.0, -1000.0],
                         [1000.0, 1000.0, 999.0]])
EXTREME_W = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [1.0, 1.0, -2.0], [-0.5, 2.0, 1.0]])

# (id, fn, input, weights, derivative of sum(w * fn(x)) in float64)
EXTREME = [
    ("sigmoid", lambda x: x.sigmoid(), EXTREME_X, None, lambda x, w: w * _sigmoid(x) * _sigmoid(-x)),
    ("logsigmoid", lambda x: x.logsigmoid(), EXTREME_X, None, lambda x, w: w * _sigmoid(-x)),
    ("softplus", lambda x: x.softplus(), EXTREME_X, None, lambda x, w: w * _sigmoid(x)),
    ("tanh", lambda x: x.tanh(), EXTREME_X, None, lambda x, w: w * (1.0 - np.tanh(x) ** 2)),
    ("silu", lambda x: x.silu(), EXTREME_X, None,
     lambda x, w: w * (_sigmoid(x) + x * _sigmoid(x) * _sigmoid(-x))),
    ("log_softmax", lambda x: x.log_softmax(-1), EXTREME_ROWS, EXTREME_W,
     lambda x, w: w - _softmax(x, -1) * w.sum(-1, keepdims=True)),
    ("softmax", lambda x: x.softmax(-1), EXTREME_ROWS, EXTREME_W,
     lambda x, w: _softmax(x, -1) * (w - (w * _softmax(x, -1)).sum(-1, keepdims=True))),
    ("logsumexp", lambda x: x.logsumexp(-1), EXTREME_ROWS, np.array([1.0, -2.0, 0.5, 3.0]),
     lambda x, w: w[:, None] * _softmax(x, -1)),
]


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,fn,x,w,deriv", EXTREME, ids=[e[0] for e in EXTREME])
def test_extreme_inputs_give_finite_exact_gradients(name, fn, x, w, deriv, dtype, device):
    x = x.astype(dtype)
    if w is None:
        w = np.linspace(-1.5, 2.0, x.size).reshape(x.shape)
    (g,) = _grads(fn, x, grad_output=w.astype(dtype), device=device)
    expected = deriv(x.astype(np.float64), w.astype(np.float64))
    assert np.all(np.isfinite(g)), f"{name} ({dtype}): non-finite gradient {g} at x={x}"
    tol = dict(rtol=1e-9, atol=1e-12) if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g, expected, **tol, err_msg=f"{name} ({dtype}) at x={x}")


# ---------------------------------------------------------------------------- degenerate inputs
def _cumprod_grad(x, w):
    """d/dx_i sum_j w_j prod_{k<=j} x_k along the last axis (exact with zeros: no division)."""
    g = np.zeros_like(x)
    n = x.shape[-1]
    for i in range(n):
        for j in range(i, n):
            others = np.delete(x[..., :j + 1], i, axis=-1).prod(-1)
            g[..., i] += w[..., j] * others
    return g


def _normalize_grad(x, w, eps):
    """d/dx sum(w * x / max(||x||, eps)) along the last axis."""
    n = np.sqrt((x * x).sum(-1, keepdims=True))
    clamped = n <= eps
    u = x / np.where(clamped, 1.0, n)
    return np.where(clamped, w / eps, (w - u * (w * u).sum(-1, keepdims=True)) / np.where(clamped, 1.0, n))


NEG_INF_ROWS = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, 2.0], [-np.inf, 3.0, -1.0]])
NEG_INF_W = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0], [0.25, -1.0, 1.0]])

# (id, fn, inputs, weights, expected gradients of sum(w * fn(*inputs)) for each input)
DEGENERATE = [
    # x ** p with a non-integer p at x = 0: the derivative p * x**(p-1) is 0 for p > 1
    ("pow-2.5-at-zero", lambda x: x ** 2.5, [np.array([0.0, 1.0, 4.0])], np.array([1.0, 2.0, -1.0]),
     lambda w, x: [w * 2.5 * x ** 1.5]),
    ("relu-pow-1.5", lambda x: x.relu() ** 1.5, [np.array([-1.0, 0.5, 2.0])], np.array([1.0, 2.0, -1.0]),
     lambda w, x: [w * 1.5 * np.sqrt(np.maximum(x, 0.0))]),
    ("pow-tensor-zero-base", lambda x, y: x ** y, [np.array([0.0, 0.0, 2.0]), np.array([2.0, 3.5, 1.5])],
     np.array([1.0, -2.0, 0.5]),
     lambda w, x, y: [w * y * x ** (y - 1), w * np.where(x > 0, x ** y * np.log(np.where(x > 0, x, 1.0)), 0.0)]),
    # normalize clamps the norm at epsilon: a zero row has gradient w / epsilon (as torch)
    ("normalize-zero-row", lambda x: x.normalize(epsilon=1e-6), [np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]])],
     np.array([[1.0, -2.0, 0.5], [1.0, 1.0, 1.0]]),
     lambda w, x: [_normalize_grad(x, w, 1e-6)]),
    # -inf entries (masked logits): zero gradient there, the usual one elsewhere
    ("softmax-neg-inf", lambda x: x.softmax(-1), [NEG_INF_ROWS], NEG_INF_W,
     lambda w, x: [_softmax(x, -1) * (w - (w * _softmax(x, -1)).sum(-1, keepdims=True))]),
    ("log_softmax-neg-inf", lambda x: x.log_softmax(-1)[:, 2], [NEG_INF_ROWS], np.array([1.0, -2.0, 0.5]),
     lambda w, x: [w[:, None] * (np.eye(3)[2] - _softmax(x, -1))]),
    ("logsumexp-neg-inf", lambda x: x.logsumexp(-1), [NEG_INF_ROWS], np.array([1.0, -2.0, 0.5]),
     lambda w, x: [w[:, None] * _softmax(x, -1)]),
    ("max-neg-inf", lambda x: x.max(-1), [NEG_INF_ROWS], np.array([1.0, -2.0, 0.5]),
     lambda w, x: [w[:, None] * (x == x.max(-1, keepdims=True))]),
    # zeros in products: exact partial products, no division by zero
    ("prod-with-zero", lambda x: x.prod(-1), [np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0]])], np.array([1.0, 2.0]),
     lambda w, x: [w[:, None] * np.array([[6.0, 0.0, 0.0], [0.0, 0.0, 0.0]])]),
    ("cumprod-with-zero", lambda x: x.cumprod(-1), [np.array([[2.0, 0.0, 3.0, -1.5], [0.0, 4.0, 0.5, 2.0]])],
     np.array([[1.0, -1.0, 2.0, 0.5], [0.5, 1.0, -2.0, 1.0]]), lambda w, x: [_cumprod_grad(x, w)]),
]


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("name,fn,inputs,w,expected", DEGENERATE, ids=[d[0] for d in DEGENERATE])
def test_degenerate_inputs_give_finite_exact_gradients(name, fn, inputs, w, expected, device):
    gs = _grads(fn, *inputs, grad_output=w, device=device)
    for k, (g, e) in enumerate(zip(gs, expected(w, *inputs))):
        assert np.all(np.isfinite(g)), f"{name}: non-finite gradient for input {k}: {g}"
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12, err_msg=f"{name}: input {k}")


KINKS = np.array([-np.inf, -6.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 6.0, 7.0, np.inf])
KINK_FNS = [
    ("relu", lambda x: x.relu(), lambda t: torch.relu(t)),
    ("abs", lambda x: x.abs(), lambda t: t.abs()),
    ("leaky_relu", lambda x: x.leaky_relu(0.1), lambda t: torch.nn.functional.leaky_relu(t, 0.1)),
    ("relu6", lambda x: x.relu6(), lambda t: torch.nn.functional.relu6(t)),
    ("hardtanh", lambda x: x.hardtanh(), lambda t: torch.nn.functional.hardtanh(t)),
    ("clip", lambda x: x.clip(-1.0, 1.0), lambda t: t.clamp(-1.0, 1.0)),
    ("softplus", lambda x: x.softplus(), lambda t: torch.nn.functional.softplus(t)),
    ("logsigmoid", lambda x: x.logsigmoid(), lambda t: torch.nn.functional.logsigmoid(t)),
    ("erf", lambda x: x.erf(), lambda t: torch.erf(t)),
    ("elu", lambda x: x.elu(), lambda t: torch.nn.functional.elu(t)),
    ("sigmoid", lambda x: x.sigmoid(), lambda t: torch.sigmoid(t)),
]


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("name,ours,theirs", KINK_FNS, ids=[k[0] for k in KINK_FNS])
def test_gradients_at_kinks_and_infinities_follow_torch(name, ours, theirs, device):
    """At the non-differentiable points (0, the clamp ends) and at +-inf the gradient is PyTorch's choice:
    relu'(0) = abs'(0) = 0, leaky_relu'(0) = slope, hardtanh/relu6 0 at their ends, clamp 1 at its ends,
    softplus'(0) = 1/2. Oracle: torch.autograd in float64; tolerance rtol 1e-6, atol 1e-6 (erf: rtol 1e-5, the
    derivative of its Abramowitz-Stegun approximation)."""
    g = lm.Graph()
    x = g.tensor(KINKS.shape, "float64").set(KINKS)
    (gx,) = grad(ours(x).sum(), [x])
    gx.retrieve()
    g.compile(device=device)
    g.execute()
    t = torch.tensor(KINKS, dtype=torch.float64, requires_grad=True)
    theirs(t).sum().backward()
    np.testing.assert_allclose(gx.data(), t.grad.numpy(), rtol=1e-5 if name == "erf" else 1e-6, atol=1e-6,
                               err_msg=f"{name} on {device}")


NAN_KINK_FNS = KINK_FNS + [
    ("clip_min", lambda x: x.clip(min=0.5), lambda t: t.clamp(min=0.5)),
    ("clip_max", lambda x: x.clip(max=0.5), lambda t: t.clamp(max=0.5)),
    ("celu", lambda x: x.celu(0.5), lambda t: torch.nn.functional.celu(t, 0.5)),
    ("selu", lambda x: x.selu(), lambda t: torch.nn.functional.selu(t)),
]


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("name,ours,theirs", NAN_KINK_FNS, ids=[k[0] for k in NAN_KINK_FNS])
def test_gradients_at_nan_follow_torch(name, ours, theirs, device):
    """At a NaN input the gradient is PyTorch's: 0 through clamp (its mask is False there), the identity branch's
    1 through relu / hardtanh / elu / celu / selu (their masks test ``x <= 0``), NaN where torch's formula gives
    NaN. Values and gradients compared with NaNs equal; tolerance as in the kink test."""
    xs = np.array([np.nan, -2.0, 0.5, 3.0, np.nan], dtype=np.float64)
    g = lm.Graph()
    x = g.tensor(xs.shape, "float64").set(xs)
    y = ours(x).retrieve()
    (gx,) = grad(y.sum(), [x])
    gx.retrieve()
    g.compile(device=device)
    g.execute()
    t = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    ty = theirs(t)
    ty.sum().backward()
    np.testing.assert_allclose(y.data(), ty.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(gx.data(), t.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True,
                               err_msg=f"{name} on {device}")
