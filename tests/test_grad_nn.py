"""Gradients of every luminal.nn layer, functional and loss.

1. ``luminal.testing.gradcheck`` (float64, central finite differences, eps 1e-6, atol 1e-5, rtol 1e-3, on the
   default reference device; a subset also on the compiled ``cpu`` device). Every floating input is checked —
   layer inputs *and* weights: functionals take the weights as graph inputs; modules run with their parameters
   (and float buffers) replaced by gradcheck's input tensors (:func:`with_params`), so the module's own
   ``forward`` is what gets differentiated. Inputs are chosen away from kinks (distinct values for max-pooling,
   nothing near 0 for ReLU-like functions, no |d| near huber's delta ...).
2. Against ``torch.autograd`` in float32 on realistic shapes, compiled with ``device="cpu"``: gradients of every
   parameter and of the input for an MLP + cross-entropy, a small CNN and a 2-layer causal TransformerEncoder;
   tolerance rtol=1e-4, atol=1e-5 (TOL).
3. Stability: cross-entropy and BCE-with-logits at logits of +-1000 give finite losses and gradients equal to
   PyTorch's.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.testing import analytic_grad, gradcheck
from luminal.training import grad


TOL = dict(rtol=1e-4, atol=1e-5)  # float32 comparisons with torch.autograd


# ------------------------------------------------------------------------------------------------- input helpers
def randn(shape, seed, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def uniform(shape, seed, lo, hi):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape)


def away(shape, seed, kinks=(0.0,), lo=-2.5, hi=2.5, gap=0.1):
    """Uniform values in [lo, hi] at least ``gap`` away from every kink."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, size=shape)
    bad = np.ones(x.shape, bool)
    while bad.any():
        bad = np.zeros(x.shape, bool)
        for k in kinks:
            bad |= np.abs(x - k) < gap
        x[bad] = rng.uniform(lo, hi, size=int(bad.sum()))
    return x


def distinct(shape, seed, spacing=0.1):
    """Pairwise distinct values (gaps >= spacing/2): no ties inside max-pooling windows."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    vals = (rng.permutation(n) - n / 2) * spacing + rng.uniform(-spacing / 4, spacing / 4, n)
    return vals.reshape(shape)


def ints(shape, high, seed):
    return np.random.default_rng(seed).integers(0, high, size=shape).astype(np.int64)


def with_params(module, call=None, n_inputs=1, seed=0, scale=0.1):
    """``(fn, arrays)`` to gradcheck ``module`` as a function of its inputs and its parameters.

    ``fn(*inputs, *params)`` calls ``call(module, *inputs)`` (default ``module(*inputs)``) while each of the
    module's parameters (and, in eval mode, float buffers: BatchNorm's running statistics) binds to the tensor
    given for it instead of creating its own graph input: ``bind(param, x)`` inside the layer's ``forward``
    returns that tensor. ``arrays`` are the parameters' current values (PyTorch-style init) plus
    ``scale * N(0, 1)`` so that zero / one initializations (biases, norms, LoRA's B) are generic.
    """
    call = call or (lambda m, *xs: m(*xs))
    params = [p for _, p in module.named_parameters()]
    if not module.training:
        params += [b for _, b in module.named_buffers() if b.dtype.is_float]
    rng = np.random.default_rng(seed)
    arrays = [p.data.astype(np.float64) + scale * rng.standard_normal(p.shape) for p in params]

    def fn(*tensors):
        xs, ws = tensors[:n_inputs], tensors[n_inputs:]
        for p, w in zip(params, ws):
            p.bind = (lambda graph, w=w: w)  # instance attribute: shadows Parameter.bind for this call
        try:
            return call(module, *xs)
        finally:
            for p in params:
                del p.bind

    return fn, arrays


def module_case(module, inputs, call=None, seed=0, scale=0.1):
    fn, arrays = with_params(module, call, len(inputs), seed, scale)
    return fn, list(inputs) + arrays


# ------------------------------------------------------------------------------------------------- the gradcheck table
# Each entry: pytest.param(builder) where builder() -> (fn, inputs). Builders run inside the test (fresh modules).
def _c(id_, builder):
    return pytest.param(builder, id=id_)


def _linear_fn():
    return lambda x, w, b: F.linear(x, w, b), [randn((3, 4), 1), randn((5, 4), 2), randn(5, 3)]


LINEAR = [
    _c("F.linear", _linear_fn),
    _c("F.linear-nobias", lambda: (lambda x, w: F.linear(x, w), [randn((2, 3, 4), 1), randn((5, 4), 2)])),
    _c("Linear", lambda: module_case(nn.Linear(4, 5), [randn((3, 4), 4)])),
    _c("Linear-nobias", lambda: module_case(nn.Linear(4, 5, bias=False), [randn((2, 3, 4), 5)])),
    _c("Linear-permute", lambda: module_case(nn.Linear(4, 3, permute=True), [randn((3, 4), 6)])),
    _c("Flatten-Linear", lambda: module_case(nn.Sequential(nn.Flatten(), nn.Identity(), nn.Linear(6, 3)),
                                             [randn((2, 2, 3), 7)])),
    _c("F.prelu-shared", lambda: (F.prelu, [away((2, 3, 4), 8), np.array([0.3])])),
    _c("F.prelu-channel", lambda: (F.prelu, [away((2, 3, 4), 9), np.array([0.1, -0.4, 0.7])])),
    _c("PReLU", lambda: module_case(nn.PReLU(3), [away((2, 3, 2), 10)])),
    _c("PReLU-shared", lambda: module_case(nn.PReLU(), [away((4, 5), 11)])),
]

_ACT_KINKS = (-3.0, -1.0, 0.0, 1.0, 3.0, 6.0)
ACTIVATIONS = [
    _c(name, (lambda mod=mod, lo=lo, hi=hi: (lambda x: mod(x), [away((3, 5), 12, _ACT_KINKS, lo, hi)])))
    for name, mod, lo, hi in [
        ("ReLU", nn.ReLU(), -2, 2), ("ReLU6", nn.ReLU6(), -2, 8), ("LeakyReLU", nn.LeakyReLU(0.2), -2, 2),
        ("GELU", nn.GELU(), -3, 3), ("GELU-tanh", nn.GELU("tanh"), -3, 3), ("SiLU", nn.SiLU(), -3, 3),
        ("Mish", nn.Mish(), -3, 3), ("Tanh", nn.Tanh(), -3, 3), ("Sigmoid", nn.Sigmoid(), -3, 3),
        ("Softplus", nn.Softplus(beta=2.0), -3, 3), ("ELU", nn.ELU(0.7), -3, 3), ("SELU", nn.SELU(), -3, 3),
        ("CELU", nn.CELU(1.5), -3, 3), ("Hardswish", nn.Hardswish(), -5, 5),
        ("Hardsigmoid", nn.Hardsigmoid(), -5, 5), ("Hardtanh", nn.Hardtanh(), -2, 2),
        ("Softsign", nn.Softsign(), -3, 3), ("LogSigmoid", nn.LogSigmoid(), -4, 4),
        ("Softmax-dim1", nn.Softmax(dim=1), -3, 3), ("LogSoftmax-dim0", nn.LogSoftmax(dim=0), -3, 3),
    ]
] + [
    _c("F.softmax", lambda: (lambda x: F.softmax(x, 0), [randn((3, 4), 13)])),
    _c("F.log_softmax", lambda: (lambda x: F.log_softmax(x, -1), [randn((3, 4), 14)])),
    _c("F.normalize", lambda: (lambda x: F.normalize(x, 2.0, 1), [randn((3, 4), 15)])),
    _c("F.pad", lambda: (lambda x: F.pad(x, (1, 2, 0, 1), 0.5) * x.sum(), [randn((2, 3), 16)])),
    _c("F.relu-gelu-silu", lambda: (lambda x: F.relu(x) + F.gelu(x, "tanh") + F.silu(x), [away((3, 4), 17)])),
]

CONV = [
    _c("F.conv1d-s2p1", lambda: (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
                                 [randn((2, 3, 5), 20), randn((4, 3, 3), 21), randn(4, 22)])),
    _c("F.conv2d-same-dil2", lambda: (lambda x, w: F.conv2d(x, w, padding="same", dilation=2),
                                      [randn((1, 2, 5, 4), 23), randn((3, 2, 2, 3), 24)])),
    _c("F.conv3d-unbatched", lambda: (lambda x, w, b: F.conv3d(x, w, b, padding=(1, 0, 1)),
                                      [randn((2, 3, 3, 2), 25), randn((2, 2, 2, 2, 2), 26), randn(2, 27)])),
    _c("F.conv4d", lambda: (lambda x, w: F.conv4d(x, w, stride=(1, 2, 1, 1), padding=(0, 1, 0, 1)),
                            [randn((1, 1, 3, 3, 2, 3), 28), randn((2, 1, 2, 2, 1, 2), 29)])),
    _c("F.conv_nd-groups", lambda: (lambda x, w, b: F.conv_nd(x, w, b, stride=1, padding=1, groups=3),
                                    [randn((2, 3, 4), 30), randn((6, 1, 3), 31), randn(6, 32)])),
    _c("Conv1d-s2-p1-d2-g2", lambda: module_case(nn.Conv1d(4, 2, 3, stride=2, padding=1, dilation=2, groups=2),
                                                 [randn((2, 4, 7), 33)])),
    _c("Conv1d-valid-nobias", lambda: module_case(nn.Conv1d(2, 3, 2, padding="valid", bias=False),
                                                  [randn((3, 2, 5), 34)])),
    _c("Conv2d-s21-p1-g2", lambda: module_case(nn.Conv2d(2, 4, (2, 3), stride=(2, 1), padding=1, groups=2),
                                               [randn((2, 2, 4, 3), 35)])),
    _c("Conv2d-d2-same", lambda: module_case(nn.Conv2d(2, 2, 3, dilation=2, padding="same"),
                                             [randn((1, 2, 5, 5), 36)])),
    _c("Conv2d-unbatched", lambda: module_case(nn.Conv2d(3, 2, 2, stride=2), [randn((3, 4, 4), 37)])),
    _c("Conv3d-p1-d2-g2", lambda: module_case(nn.Conv3d(2, 2, 2, padding=1, dilation=2, groups=2),
                                              [randn((1, 2, 3, 3, 3), 38)])),
    _c("Conv3d-s2", lambda: module_case(nn.Conv3d(1, 3, (1, 2, 2), stride=(1, 2, 2)), [randn((2, 1, 2, 4, 3), 39)])),
    _c("Conv4d-s-p-g2", lambda: module_case(nn.Conv4d(2, 2, (2, 1, 2, 2), stride=(1, 1, 2, 1), padding=(0, 1, 1, 0),
                                                      groups=2), [randn((1, 2, 2, 2, 3, 2), 40)])),
    _c("Conv4d-d2", lambda: module_case(nn.Conv4d(1, 2, 2, dilation=(1, 2, 1, 1)), [randn((1, 1, 2, 3, 2, 3), 41)])),
    _c("F.conv_transpose1d", lambda: (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=1,
                                                                         output_padding=2),
                                      [randn((2, 2, 3), 42), randn((2, 3, 3), 43), randn(3, 44)])),
    _c("ConvT1d-s2-p1-op1-g2", lambda: module_case(nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1,
                                                                      groups=2), [randn((2, 4, 3), 45)])),
    _c("ConvT1d-d2", lambda: module_case(nn.ConvTranspose1d(2, 3, 2, dilation=2, bias=False), [randn((1, 2, 4), 46)])),
    _c("ConvT2d-s21-p01-d12", lambda: module_case(nn.ConvTranspose2d(2, 4, (2, 3), stride=(2, 1), padding=(0, 1),
                                                                     dilation=(1, 2)), [randn((1, 2, 3, 3), 47)])),
    _c("ConvT2d-output_size", lambda: module_case(nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1),
                                                  [randn((1, 2, 2, 3), 48)],
                                                  call=lambda m, x: m(x, output_size=(4, 6)))),
    _c("ConvT3d-s2-p1-op1", lambda: module_case(nn.ConvTranspose3d(2, 2, 2, stride=2, padding=1, output_padding=1),
                                                [randn((1, 2, 2, 2, 2), 49)])),
    _c("ConvT3d-g2", lambda: module_case(nn.ConvTranspose3d(2, 4, (1, 2, 2), groups=2), [randn((1, 2, 2, 2, 3), 50)])),
]

NORM = [
    _c("F.layer_norm", lambda: (lambda x, w, b: F.layer_norm(x, (4,), w, b),
                                [randn((3, 4), 60), randn(4, 61), randn(4, 62)])),
    _c("F.layer_norm-2d-noaffine", lambda: (lambda x: F.layer_norm(x, (2, 3), eps=1e-3), [randn((2, 2, 3), 63)])),
    _c("LayerNorm", lambda: module_case(nn.LayerNorm(5), [randn((2, 3, 5), 64)])),
    _c("LayerNorm-2d-nobias", lambda: module_case(nn.LayerNorm((2, 3), bias=False), [randn((4, 2, 3), 65)])),
    _c("F.rms_norm", lambda: (lambda x, w: F.rms_norm(x, 4, w, 1e-6), [randn((3, 4), 66), randn(4, 67)])),
    _c("RMSNorm", lambda: module_case(nn.RMSNorm(4), [randn((2, 3, 4), 68)])),
    _c("RMSNorm-2d-eps", lambda: module_case(nn.RMSNorm((2, 3), eps=1e-3), [randn((3, 2, 3), 69)])),
    _c("F.group_norm", lambda: (lambda x, w, b: F.group_norm(x, 2, w, b),
                                [randn((2, 4, 3), 70), randn(4, 71), randn(4, 72)])),
    _c("GroupNorm", lambda: module_case(nn.GroupNorm(2, 4), [randn((2, 4, 2, 2), 73)])),
    _c("GroupNorm-1group-noaffine", lambda: (lambda x: nn.GroupNorm(1, 3, affine=False)(x), [randn((2, 3, 4), 74)])),
    _c("F.batch_norm-train", lambda: (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                                      [randn((4, 3), 75), randn(3, 76), randn(3, 77)])),
    _c("F.batch_norm-eval", lambda: (lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=False),
                                     [randn((2, 3, 4), 78), randn(3, 79), uniform(3, 80, 0.5, 2), randn(3, 81),
                                      randn(3, 82)])),
    _c("BatchNorm1d-train-2d", lambda: module_case(nn.BatchNorm1d(3), [randn((5, 3), 83)])),
    _c("BatchNorm1d-train-3d", lambda: module_case(nn.BatchNorm1d(3), [randn((2, 3, 4), 84)])),
    _c("BatchNorm2d-train", lambda: module_case(nn.BatchNorm2d(2), [randn((3, 2, 2, 3), 85)])),
    _c("BatchNorm2d-train-momentumNone", lambda: module_case(nn.BatchNorm2d(2, momentum=None),
                                                             [randn((2, 2, 3, 2), 86)])),
    _c("BatchNorm1d-eval", lambda: module_case(nn.BatchNorm1d(3).eval(), [randn((4, 3), 87)], scale=0.2)),
    _c("BatchNorm2d-eval", lambda: module_case(nn.BatchNorm2d(2).eval(), [randn((2, 2, 2, 3), 88)], scale=0.2)),
    _c("BatchNorm2d-no-running-stats", lambda: module_case(nn.BatchNorm2d(2, track_running_stats=False).eval(),
                                                           [randn((2, 2, 2, 2), 89)])),
    _c("F.instance_norm", lambda: (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                                   [randn((2, 3, 4), 90), randn(3, 91), randn(3, 92)])),
    _c("InstanceNorm1d", lambda: module_case(nn.InstanceNorm1d(3), [randn((2, 3, 5), 93)])),
    _c("InstanceNorm2d-affine", lambda: module_case(nn.InstanceNorm2d(2, affine=True), [randn((2, 2, 3, 3), 94)])),
    _c("InstanceNorm2d-unbatched", lambda: module_case(nn.InstanceNorm2d(2, affine=True), [randn((2, 3, 2), 95)])),
    _c("InstanceNorm3d-tracked-train", lambda: module_case(nn.InstanceNorm3d(2, affine=True,
                                                                              track_running_stats=True),
                                                           [randn((1, 2, 2, 2, 3), 96)])),
    _c("InstanceNorm1d-tracked-eval", lambda: module_case(nn.InstanceNorm1d(2, track_running_stats=True).eval(),
                                                          [randn((2, 2, 3), 97)], scale=0.2)),
]

POOL = [
    _c("MaxPool1d", lambda: (nn.MaxPool1d(2), [distinct((2, 3, 6), 100)])),
    _c("MaxPool1d-s1-p1-d2", lambda: (nn.MaxPool1d(3, stride=1, padding=1, dilation=2), [distinct((2, 2, 7), 101)])),
    _c("MaxPool1d-ceil", lambda: (nn.MaxPool1d(2, stride=2, ceil_mode=True), [distinct((1, 3, 7), 102)])),
    _c("MaxPool2d-overlap-p1", lambda: (nn.MaxPool2d(3, stride=2, padding=1), [distinct((1, 2, 5, 5), 103)])),
    _c("MaxPool2d-ceil-unbatched", lambda: (nn.MaxPool2d((2, 3), stride=(2, 2), ceil_mode=True),
                                            [distinct((2, 5, 5), 104)])),
    _c("F.max_pool2d-dil", lambda: (lambda x: F.max_pool2d(x, 2, 1, 0, 2), [distinct((1, 2, 5, 4), 105)])),
    _c("MaxPool3d", lambda: (nn.MaxPool3d(2, stride=1), [distinct((1, 2, 3, 3, 3), 106)])),
    _c("MaxPool3d-p1", lambda: (nn.MaxPool3d((2, 2, 3), stride=2, padding=(1, 0, 1)),
                                [distinct((1, 1, 3, 4, 4), 107)])),
    _c("AvgPool1d-p1-incl", lambda: (nn.AvgPool1d(3, stride=2, padding=1), [randn((2, 3, 6), 108)])),
    _c("AvgPool1d-p1-excl", lambda: (nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False),
                                     [randn((2, 3, 6), 109)])),
    _c("AvgPool1d-ceil", lambda: (nn.AvgPool1d(2, ceil_mode=True), [randn((1, 2, 7), 110)])),
    _c("AvgPool2d-p1-excl", lambda: (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
                                     [randn((1, 2, 5, 4), 111)])),
    _c("AvgPool2d-p1-incl-ceil", lambda: (nn.AvgPool2d(2, stride=2, padding=1, ceil_mode=True),
                                          [randn((1, 2, 5, 4), 112)])),
    _c("AvgPool2d-divisor", lambda: (nn.AvgPool2d(2, stride=1, divisor_override=3), [randn((2, 1, 3, 4), 113)])),
    _c("AvgPool3d-p1-excl", lambda: (nn.AvgPool3d(2, stride=2, padding=1, count_include_pad=False),
                                     [randn((1, 2, 3, 3, 3), 114)])),
    _c("F.avg_pool3d", lambda: (lambda x: F.avg_pool3d(x, (1, 2, 2)), [randn((1, 2, 2, 4, 4), 115)])),
    _c("AdaptiveAvgPool1d-uneven", lambda: (nn.AdaptiveAvgPool1d(3), [randn((2, 3, 7), 116)])),
    _c("AdaptiveAvgPool2d", lambda: (nn.AdaptiveAvgPool2d((2, 3)), [randn((1, 2, 4, 5), 117)])),
    _c("AdaptiveAvgPool2d-None", lambda: (nn.AdaptiveAvgPool2d((None, 2)), [randn((1, 2, 3, 5), 118)])),
    _c("AdaptiveAvgPool3d", lambda: (nn.AdaptiveAvgPool3d(2), [randn((1, 1, 3, 4, 3), 119)])),
    _c("AdaptiveMaxPool1d-uneven", lambda: (nn.AdaptiveMaxPool1d(3), [distinct((2, 3, 7), 120)])),
    _c("AdaptiveMaxPool2d", lambda: (nn.AdaptiveMaxPool2d((3, 2)), [distinct((1, 2, 5, 4), 121)])),
    _c("AdaptiveMaxPool3d", lambda: (nn.AdaptiveMaxPool3d((1, 2, 2)), [distinct((1, 2, 2, 3, 4), 122)])),
    _c("GlobalAvgPool", lambda: (nn.GlobalAvgPool(), [randn((2, 3, 2, 3), 123)])),
    _c("GlobalAvgPool-keepdim", lambda: (lambda x: F.global_avg_pool(x, keepdim=True), [randn((2, 3, 4), 124)])),
]


def _embedding_ids():
    return np.array([[1, 3, 1, 0], [3, 3, 4, 1]], np.int64)  # repeated rows accumulate


EMBED_DROPOUT = [
    _c("F.embedding-repeated", lambda: (lambda i, w: F.embedding(i, w), [_embedding_ids(), randn((5, 3), 130)])),
    _c("Embedding-repeated", lambda: module_case(nn.Embedding(5, 3), [_embedding_ids()], scale=0.0)),
    # (padding_idx=2, which the ids do not hold: the other rows' gradients are the true derivative; the padding
    # row's, zero by PyTorch's definition, is compared with torch in tests/test_nn_dropout_embedding.py)
    _c("Embedding-padding_idx", lambda: module_case(nn.Embedding(5, 3, padding_idx=2), [_embedding_ids()])),
    _c("Embedding-tied-reverse", lambda: module_case(nn.Embedding(5, 3), [_embedding_ids()],
                                                     call=lambda m, i: m.reverse(m(i).tanh()))),
    _c("Dropout-eval", lambda: (lambda x: nn.Dropout(0.5).eval()(x) * 2.0, [randn((3, 4), 131)])),
    _c("Dropout2d-eval", lambda: (lambda x: nn.Dropout2d(0.3).eval()(x), [randn((2, 3, 2, 2), 132)])),
    _c("F.dropout-training-False", lambda: (lambda x: F.dropout(x, 0.5, training=False), [randn((3, 4), 133)])),
    _c("Dropout-p0-train", lambda: (lambda x: nn.Dropout(0.0)(x), [randn((3, 4), 134)])),
]


def _bool_mask(L, S, seed):
    m = np.random.default_rng(seed).random((L, S)) < 0.6
    m[:, 0] = True  # every query sees at least one key
    return m


ATTENTION = [
    _c("sdpa", lambda: (F.scaled_dot_product_attention,
                        [randn((1, 2, 3, 4), 140), randn((1, 2, 5, 4), 141), randn((1, 2, 5, 3), 142)])),
    _c("sdpa-causal", lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               [randn((2, 4, 3), 143), randn((2, 4, 3), 144), randn((2, 4, 3), 145)])),
    _c("sdpa-bool-mask", lambda: (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                  [randn((2, 3, 4), 146), randn((2, 5, 4), 147), randn((2, 5, 4), 148),
                                   _bool_mask(3, 5, 149)])),
    _c("sdpa-float-mask-scale", lambda: (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                                          scale=0.3),
                                         [randn((1, 3, 4), 150), randn((1, 4, 4), 151), randn((1, 4, 2), 152),
                                          randn((3, 4), 153)])),
    _c("sdpa-causal-and-mask", lambda: (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                                         is_causal=True),
                                        [randn((2, 4, 3), 154), randn((2, 4, 3), 155), randn((2, 4, 3), 156),
                                         _bool_mask(4, 4, 157)])),
    _c("sdpa-gqa", lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                            [randn((1, 4, 3, 2), 158), randn((1, 2, 4, 2), 159), randn((1, 2, 4, 2), 160)])),
    _c("flash_attention-blocks", lambda: (lambda q, k, v: F.flash_attention(q, k, v, block_size=2),
                                          [randn((1, 2, 3, 4), 161), randn((1, 2, 5, 4), 162),
                                           randn((1, 2, 5, 4), 163)])),
    _c("flash_attention-causal", lambda: (lambda q, k, v: F.flash_attention(q, k, v, is_causal=True, block_size=2),
                                          [randn((2, 5, 3), 164), randn((2, 5, 3), 165), randn((2, 5, 3), 166)])),
    _c("rotary_embedding", lambda: (lambda x: F.rotary_embedding(x, base=100.0, offset=3),
                                    [randn((1, 2, 3, 4), 167)])),
    _c("repeat_kv", lambda: (lambda x: F.repeat_kv(x, 2) * 1.0, [randn((1, 2, 3, 2), 168)])),
    _c("MHA-self-causal-batch_first", lambda: module_case(nn.MultiheadAttention(4, 2, batch_first=True),
                                                          [randn((2, 3, 4), 170)],
                                                          call=lambda m, x: m(x, x, x, need_weights=False,
                                                                              is_causal=True)[0])),
    _c("MHA-seq_first-float-mask", lambda: module_case(nn.MultiheadAttention(4, 2),
                                                       [randn((3, 1, 4), 171), randn((4, 1, 4), 172),
                                                        randn((3, 4), 173)],
                                                       call=lambda m, q, kv, am: m(q, kv, kv, attn_mask=am)[0])),
    _c("MHA-attn-weights", lambda: module_case(nn.MultiheadAttention(4, 2, batch_first=True),
                                               [randn((1, 3, 4), 174), randn((1, 4, 4), 175)],
                                               call=lambda m, q, kv: sum(m(q, kv)))),  # output + weights
    _c("MHA-kdim-vdim-padding-mask", lambda: module_case(
        nn.MultiheadAttention(4, 2, kdim=3, vdim=2, batch_first=True, bias=False),
        [randn((2, 3, 4), 176), randn((2, 4, 3), 177), randn((2, 4, 2), 178),
         np.array([[False, False, True, False], [False, True, True, False]])],
        call=lambda m, q, k, v, pad: m(q, k, v, key_padding_mask=pad, need_weights=False)[0])),
    _c("MHA-unbatched-bool-mask", lambda: module_case(nn.MultiheadAttention(4, 1),
                                                      [randn((3, 4), 179), ~_bool_mask(3, 3, 180)],
                                                      call=lambda m, x, am: m(x, attn_mask=am)[0])),
]


def _mlp_relu_input():
    return away((3, 4), 190)


BLOCKS = [
    _c("LoRALinear", lambda: module_case(nn.LoRALinear(4, 3, rank=2, alpha=3.0), [randn((2, 4), 191)])),
    _c("LoRALinear-nobias", lambda: module_case(nn.LoRALinear(3, 2, rank=1, bias=False), [randn((2, 5, 3), 192)])),
    _c("ResNetBlock-same", lambda: module_case(nn.ResNetBlock(2, 2, groups=2), [randn((1, 2, 3, 3), 193)])),
    _c("ResNetBlock-shortcut", lambda: module_case(nn.ResNetBlock(2, 3, groups=1), [randn((1, 2, 3, 3), 194)])),
    _c("MLP-gelu", lambda: module_case(nn.MLP(4, 6, 3), [randn((3, 4), 195)])),
    _c("MLP-relu", lambda: module_case(nn.MLP(4, 5, activation="relu", bias=False), [_mlp_relu_input()])),
    _c("TransformerEncoderLayer-post-relu", lambda: module_case(
        nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0, batch_first=True),
        [randn((2, 3, 4), 196)], call=lambda m, x: m(x, is_causal=True))),
    _c("TransformerEncoderLayer-pre-gelu-mask", lambda: module_case(
        nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0, activation="gelu", norm_first=True),
        [randn((3, 2, 4), 197), np.array([[False, False, True], [False, False, False]])],
        call=lambda m, x, pad: m(x, src_key_padding_mask=pad))),
    _c("TransformerEncoder-2layers-norm", lambda: module_case(
        nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, dim_feedforward=4, dropout=0.0, batch_first=True), 2,
                              norm=nn.LayerNorm(4)),
        [randn((1, 3, 4), 198)], call=lambda m, x: m(x, is_causal=True))),
    _c("TransformerDecoderLayer-post", lambda: module_case(
        nn.TransformerDecoderLayer(4, 2, dim_feedforward=6, dropout=0.0),
        [randn((3, 1, 4), 199), randn((4, 1, 4), 200)], call=lambda m, t, mem: m(t, mem, tgt_is_causal=True))),
    _c("TransformerDecoderLayer-pre-gelu", lambda: module_case(
        nn.TransformerDecoderLayer(4, 2, dim_feedforward=5, dropout=0.0, activation="gelu", norm_first=True,
                                   batch_first=True),
        [randn((1, 3, 4), 201), randn((1, 3, 4), 202), np.array([[False, True, False]])],
        call=lambda m, t, mem, pad: m(t, mem, memory_key_padding_mask=pad, tgt_is_causal=True))),
]


def _probs(shape, seed, axis=1):
    e = np.exp(randn(shape, seed))
    return e / e.sum(axis, keepdims=True)


def _loss_cases():
    cases = []
    for red in ("mean", "sum", "none"):
        cases += [
            _c(f"mse-{red}", lambda red=red: (lambda x, y: F.mse_loss(x, y, reduction=red),
                                              [randn((3, 4), 300), randn((3, 4), 301)])),
            _c(f"mse-weight-{red}", lambda red=red: (lambda x, y, w: F.mse_loss(x, y, reduction=red, weight=w),
                                                     [randn((3, 4), 302), randn((3, 4), 303),
                                                      uniform((3, 4), 304, 0.5, 2)])),
            _c(f"l1-{red}", lambda red=red: (lambda x, y: F.l1_loss(x, y, reduction=red),
                                             [randn((3, 4), 305), randn((3, 4), 306)])),
            _c(f"l1-weight-{red}", lambda red=red: (lambda x, y, w: F.l1_loss(x, y, reduction=red, weight=w),
                                                    [randn((2, 5), 307), randn((2, 5), 308),
                                                     uniform((2, 5), 309, 0.5, 2)])),
            _c(f"huber-{red}", lambda red=red: (lambda x, y: F.huber_loss(x, y, reduction=red, delta=0.7),
                                                [away((3, 4), 310, (0.7, -0.7)) + randn((3, 4), 311),
                                                 randn((3, 4), 311)])),
            _c(f"huber-weight-{red}", lambda red=red: (lambda d, w: F.huber_loss(d, 0.0, reduction=red, weight=w),
                                                       [away((3, 4), 312, (1.0, -1.0)),
                                                        uniform((3, 4), 313, 0.5, 2)])),
            _c(f"smooth_l1-{red}", lambda red=red: (lambda x, y: F.smooth_l1_loss(x, y, reduction=red, beta=0.5),
                                                    [away((3, 4), 314, (0.5, -0.5, 0.0)), np.zeros((3, 4))])),
            _c(f"smooth_l1-beta0-{red}", lambda red=red: (lambda x, y: F.smooth_l1_loss(x, y, reduction=red,
                                                                                         beta=0.0),
                                                          [randn((3, 4), 315), randn((3, 4), 316)])),
            _c(f"nll-{red}", lambda red=red: (lambda x, t: F.nll_loss(x.log_softmax(1), t, reduction=red),
                                              [randn((4, 3), 317), ints(4, 3, 318)])),
            _c(f"nll-weight-ignore-{red}", lambda red=red: (
                lambda x, t, w: F.nll_loss(x, t, w, ignore_index=2, reduction=red),
                [randn((5, 3), 319), np.array([0, 2, 1, 1, 2]), uniform(3, 320, 0.5, 2)])),
            _c(f"nll-spatial-{red}", lambda red=red: (lambda x, t: F.nll_loss(x, t, reduction=red),
                                                      [randn((2, 3, 4), 321), ints((2, 4), 3, 322)])),
            _c(f"ce-index-{red}", lambda red=red: (lambda x, t: F.cross_entropy(x, t, reduction=red),
                                                   [randn((4, 5), 323), ints(4, 5, 324)])),
            _c(f"ce-index-weight-{red}", lambda red=red: (lambda x, t, w: F.cross_entropy(x, t, w, reduction=red),
                                                          [randn((4, 3), 325), ints(4, 3, 326),
                                                           uniform(3, 327, 0.5, 2)])),
            _c(f"ce-ignore_index-default-{red}", lambda red=red: (
                lambda x, t: F.cross_entropy(x, t, reduction=red),
                [randn((4, 3), 328), np.array([2, -100, 0, -100])])),
            _c(f"ce-ignore_index-inrange-weight-{red}", lambda red=red: (
                lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=1, reduction=red),
                [randn((5, 3), 329), np.array([1, 0, 2, 1, 2]), uniform(3, 330, 0.5, 2)])),
            _c(f"ce-label_smoothing-{red}", lambda red=red: (
                lambda x, t: F.cross_entropy(x, t, reduction=red, label_smoothing=0.2),
                [randn((4, 3), 331), ints(4, 3, 332)])),
            _c(f"ce-smoothing-weight-ignore-{red}", lambda red=red: (
                lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=0, reduction=red, label_smoothing=0.1),
                [randn((4, 3), 333), np.array([0, 2, 1, 2]), uniform(3, 334, 0.5, 2)])),
            _c(f"ce-spatial-{red}", lambda red=red: (lambda x, t: F.cross_entropy(x, t, reduction=red),
                                                     [randn((2, 3, 2, 2), 335), ints((2, 2, 2), 3, 336)])),
            _c(f"ce-probs-{red}", lambda red=red: (lambda x, p: F.cross_entropy(x, p, reduction=red),
                                                   [randn((4, 3), 337), _probs((4, 3), 338)])),
            _c(f"ce-probs-weight-smoothing-{red}", lambda red=red: (
                lambda x, p, w: F.cross_entropy(x, p, w, reduction=red, label_smoothing=0.15),
                [randn((2, 3, 2), 339), _probs((2, 3, 2), 340), uniform(3, 341, 0.5, 2)])),
            _c(f"bce-{red}", lambda red=red: (lambda p, y: F.binary_cross_entropy(p, y, reduction=red),
                                              [uniform((3, 4), 342, 0.05, 0.95), uniform((3, 4), 343, 0, 1)])),
            _c(f"bce-weight-{red}", lambda red=red: (lambda p, y, w: F.binary_cross_entropy(p, y, w, reduction=red),
                                                     [uniform((3, 4), 344, 0.05, 0.95),
                                                      (uniform((3, 4), 345, 0, 1) > 0.5) * 1.0,
                                                      uniform(4, 346, 0.5, 2)])),
            _c(f"bce_logits-{red}", lambda red=red: (
                lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=red),
                [away((3, 4), 347, (0.0,), -4, 4), uniform((3, 4), 348, 0, 1)])),
            _c(f"bce_logits-weight-pos_weight-{red}", lambda red=red: (
                lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, w, reduction=red, pos_weight=pw),
                [away((3, 4), 349, (0.0,), -4, 4), uniform((3, 4), 350, 0, 1), uniform((3, 4), 351, 0.5, 2),
                 uniform(4, 352, 0.5, 3)])),
            _c(f"kl_div-{red}", lambda red=red: (lambda x, y: F.kl_div(x, y, reduction=red),
                                                 [np.log(_probs((3, 4), 353)), _probs((3, 4), 354)])),
            _c(f"kl_div-log_target-{red}", lambda red=red: (
                lambda x, y: F.kl_div(x, y, reduction=red, log_target=True),
                [np.log(_probs((3, 4), 355)), np.log(_probs((3, 4), 356))])),
        ]
    cases += [
        _c("kl_div-batchmean", lambda: (lambda x, y: F.kl_div(x, y, reduction="batchmean"),
                                        [np.log(_probs((3, 4), 357)), _probs((3, 4), 358)])),
        _c("ce-unbatched-index", lambda: (lambda x: F.cross_entropy(x, np.array(2)), [randn(4, 359)])),
        _c("bce_logits-pos_weight-0d-target", lambda: (
            lambda x, pw: F.binary_cross_entropy_with_logits(x, 1.0, pos_weight=pw),
            [away((2, 3), 360, (0.0,), -3, 3), uniform(3, 361, 0.5, 2)])),
        _c("CrossEntropyLoss-module", lambda: (
            lambda x, t: nn.CrossEntropyLoss(weight=np.array([1.0, 2.0, 0.5]), ignore_index=1,
                                             label_smoothing=0.1)(x, t),
            [randn((4, 3), 362), np.array([0, 1, 2, 2])])),
        _c("NLLLoss-module-sum", lambda: (lambda x, t: nn.NLLLoss(reduction="sum")(x, t),
                                          [randn((4, 3), 363), ints(4, 3, 364)])),
        _c("BCEWithLogitsLoss-module", lambda: (
            lambda x, y: nn.BCEWithLogitsLoss(pos_weight=np.array([2.0, 0.5, 1.0]))(x, y),
            [away((2, 3), 365, (0.0,), -3, 3), uniform((2, 3), 366, 0, 1)])),
        _c("BCELoss-HuberLoss-SmoothL1Loss-MSELoss-L1Loss-KLDivLoss-modules", lambda: (
            lambda p, y: (nn.BCELoss()(p, y) + nn.HuberLoss(delta=0.5)(p, y) + nn.SmoothL1Loss(beta=0.3)(p, y)
                          + nn.MSELoss()(p, y) + nn.L1Loss(reduction="sum")(p, y)
                          + nn.KLDivLoss(reduction="batchmean")(p.log(), y)),
            [uniform((3, 3), 367, 0.05, 0.45), uniform((3, 3), 368, 0.55, 0.95)])),
    ]
    return cases


LOSSES = _loss_cases()

GRADCHECK_CASES = LINEAR + ACTIVATIONS + CONV + NORM + POOL + EMBED_DROPOUT + ATTENTION + BLOCKS + LOSSES


def _sizes_ok(inputs):
    for x in inputs:
        assert np.asarray(x).size <= 81, f"gradcheck input of shape {np.shape(x)} is too big for this suite"


@pytest.mark.parametrize("builder", GRADCHECK_CASES)
def test_gradcheck(builder):
    fn, inputs = builder()
    _sizes_ok(inputs)
    # every checked input (weights included) really reaches the output: no vacuous 0 == 0 checks
    for k, g in enumerate(analytic_grad(fn, inputs)):
        assert np.abs(g).max() > 0, f"float input {k} gets an all-zero gradient"
    assert gradcheck(fn, inputs)


def test_gradcheck_keeps_0d_inputs():
    """0-d inputs keep their shape: a 0-d class index (unbatched cross-entropy) and a 0-d float scale."""
    assert gradcheck(lambda x, t, s: F.cross_entropy(x * s, t), [randn(4, 370), np.array(2), np.array(1.5)])


# The compiled backend runs the same backward graphs through generated C: a representative subset.
CPU_SUBSET = {"F.linear", "PReLU", "Conv1d-s2-p1-d2-g2", "Conv2d-s21-p1-g2", "ConvT2d-s21-p01-d12", "Conv4d-s-p-g2",
              "LayerNorm", "GroupNorm", "BatchNorm2d-train", "MaxPool2d-overlap-p1", "AvgPool2d-p1-excl",
              "AdaptiveMaxPool1d-uneven", "Embedding-repeated", "sdpa-causal-and-mask", "flash_attention-causal",
              "MHA-kdim-vdim-padding-mask", "TransformerEncoderLayer-post-relu", "ce-smoothing-weight-ignore-mean",
              "bce_logits-weight-pos_weight-mean", "kl_div-mean"}


@pytest.mark.parametrize("builder", [c for c in GRADCHECK_CASES if c.id in CPU_SUBSET])
def test_gradcheck_cpu(builder):
    fn, inputs = builder()
    assert gradcheck(fn, inputs, device="cpu")


def test_cpu_subset_names_exist():
    ids = {c.id for c in GRADCHECK_CASES}
    assert CPU_SUBSET <= ids, CPU_SUBSET - ids
    assert len(ids) == len(GRADCHECK_CASES), "duplicate case ids"


# ------------------------------------------------------------------------------------------------- dropout in training
@pytest.mark.parametrize("kind", ["F.dropout", "Dropout", "Dropout2d"])
def test_dropout_training_gradient_is_the_drawn_mask(kind):
    """The mask is redrawn at every execute (no fixed-mask API), so finite differences do not apply: the gradient
    must equal upstream * mask of the same execute, where mask = output / input (input has no zeros)."""
    p = 0.4
    x_np = away((4, 3, 2, 2), 400, (0.0,), -2, 2)
    r_np = randn(x_np.shape, 401)
    cx = lm.Graph()
    x = cx.tensor(x_np.shape, "float64").set(x_np)
    r = cx.tensor(x_np.shape, "float64").set(r_np)
    if kind == "F.dropout":
        y = F.dropout(x, p, training=True, seed=7)
    elif kind == "Dropout":
        y = nn.Dropout(p, seed=7)(x)
    else:
        y = nn.Dropout2d(p, seed=7)(x)
    (gx,) = grad((y * r).sum(), [x])
    y.retrieve()
    gx.retrieve()
    masks = []
    for _ in range(3):
        cx.execute()
        mask = y.data() / x_np
        assert np.allclose(np.isin(np.round(mask, 12), [0.0, round(1 / (1 - p), 12)]), True)
        np.testing.assert_allclose(gx.data(), r_np * mask, rtol=1e-12, atol=1e-12)
        if kind == "Dropout2d":  # whole channels
            np.testing.assert_allclose(mask, np.broadcast_to(mask[..., :1, :1], mask.shape), rtol=1e-12)
        masks.append(mask)
    assert not np.array_equal(masks[0], masks[1])  # a fresh mask per step, and the gradient followed it


# ------------------------------------------------------------------------------------------------- against torch
def _luminal_grads(model, x_np, loss_fn, extra=()):
    """Gradients (float32, compiled on device='cpu') of ``loss_fn(model(x))`` for the input and every parameter,
    in ``named_parameters`` order; returns (loss, input grad, {name: grad})."""
    cx = lm.Graph()
    x = cx.tensor(x_np.shape).set(x_np)
    names = [n for n, _ in model.named_parameters()]
    loss = loss_fn(model, x, cx).retrieve()
    grads = grad(loss, [x] + [p for _, p in model.named_parameters()])
    for g in grads:
        g.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    return loss.item(), grads[0].data(), {n: g.data() for n, g in zip(names, grads[1:])}


def _torch_grads(tmodel, x_np, loss_fn):
    x = torch.from_numpy(x_np).requires_grad_(True)
    loss = loss_fn(tmodel, x)
    loss.backward()
    return loss.item(), x.grad.numpy(), {n: p.grad.numpy() for n, p in tmodel.named_parameters()}


def _compare(ours, theirs):
    loss, gx, gp = ours
    tloss, tgx, tgp = theirs
    np.testing.assert_allclose(loss, tloss, rtol=1e-5)
    assert set(gp) == set(tgp)
    np.testing.assert_allclose(gx, tgx, err_msg="input gradient", **TOL)
    for name in tgp:
        assert np.isfinite(gp[name]).all(), name
        np.testing.assert_allclose(gp[name], tgp[name], err_msg=name, **TOL)


def _load_into_torch(model, tmodel):
    tmodel.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    return tmodel


def test_mlp_cross_entropy_grads_match_torch():
    """784-256-128-10 ReLU MLP, batch 64, mean cross-entropy."""
    nn.init.manual_seed(11)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    T = torch.nn
    tmodel = _load_into_torch(model, T.Sequential(T.Linear(784, 256), T.ReLU(), T.Linear(256, 128), T.ReLU(),
                                                  T.Linear(128, 10)))
    rng = np.random.default_rng(12)
    x_np = rng.standard_normal((64, 784)).astype(np.float32)
    y_np = rng.integers(0, 10, 64)
    ours = _luminal_grads(model, x_np, lambda m, x, cx: F.cross_entropy(m(x), y_np))
    theirs = _torch_grads(tmodel, x_np, lambda m, x: torch.nn.functional.cross_entropy(m(x), torch.from_numpy(y_np)))
    _compare(ours, theirs)


def test_cnn_grads_match_torch():
    """conv(1->8, 3) - relu - maxpool 2 - conv(8->16, 3) - relu - maxpool 2 - linear(400->10), batch 8 of 1x28x28,
    mean cross-entropy."""
    nn.init.manual_seed(13)
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 5 * 5, 10))
    T = torch.nn
    tmodel = _load_into_torch(model, T.Sequential(T.Conv2d(1, 8, 3), T.ReLU(), T.MaxPool2d(2), T.Conv2d(8, 16, 3),
                                                  T.ReLU(), T.MaxPool2d(2), T.Flatten(), T.Linear(400, 10)))
    rng = np.random.default_rng(14)
    x_np = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y_np = rng.integers(0, 10, 8)
    ours = _luminal_grads(model, x_np, lambda m, x, cx: F.cross_entropy(m(x), y_np))
    theirs = _torch_grads(tmodel, x_np, lambda m, x: torch.nn.functional.cross_entropy(m(x), torch.from_numpy(y_np)))
    _compare(ours, theirs)


def test_transformer_encoder_grads_match_torch():
    """2-layer TransformerEncoder (d_model 32, 4 heads, ff 64, batch_first, dropout 0), batch 4, seq 16, causal
    mask; loss = sum(out * R) for a fixed random R."""
    torch.manual_seed(15)
    T = torch.nn
    tmodel = T.TransformerEncoder(T.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2,
                                  enable_nested_tensor=False)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    model.load_state_dict(tmodel.state_dict())
    rng = np.random.default_rng(16)
    x_np = rng.standard_normal((4, 16, 32)).astype(np.float32)
    r_np = rng.standard_normal((4, 16, 32)).astype(np.float32)
    mask = T.Transformer.generate_square_subsequent_mask(16)

    def ours_loss(m, x, cx):
        r = cx.tensor(r_np.shape).set(r_np)
        return (m(x, is_causal=True) * r).sum()

    ours = _luminal_grads(model, x_np, ours_loss)
    theirs = _torch_grads(tmodel, x_np, lambda m, x: (m(x, mask=mask, is_causal=True) * torch.from_numpy(r_np)).sum())
    _compare(ours, theirs)


# ------------------------------------------------------------------------------------------------- extreme logits
def _extreme_logits():
    return np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 999.0], [0.0, 1000.0, -1000.0],
                     [1000.0, 1000.0, -1000.0]], np.float32)


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("case", ["ce", "ce-smoothing-weight", "ce-probs", "bce_logits", "bce_logits-pos_weight"])
def test_extreme_logits_finite_and_match_torch(case, device):
    TF = torch.nn.functional
    x_np = _extreme_logits()
    t_idx = np.array([0, 2, 1, 2])
    w_np = np.array([1.0, 0.5, 2.0], np.float32)
    probs = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.1, 0.1, 0.8]], np.float32)
    y_bin = (np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]]) * 1.0).astype(np.float32)
    pw = np.array([3.0, 0.5, 1.5], np.float32)
    ours_fn, torch_fn = {
        "ce": (lambda x: F.cross_entropy(x, t_idx), lambda x: TF.cross_entropy(x, torch.from_numpy(t_idx))),
        "ce-smoothing-weight": (
            lambda x: F.cross_entropy(x, t_idx, w_np, label_smoothing=0.1, reduction="sum"),
            lambda x: TF.cross_entropy(x, torch.from_numpy(t_idx), torch.from_numpy(w_np), label_smoothing=0.1,
                                       reduction="sum")),
        "ce-probs": (lambda x: F.cross_entropy(x, probs), lambda x: TF.cross_entropy(x, torch.from_numpy(probs))),
        "bce_logits": (lambda x: F.binary_cross_entropy_with_logits(x, y_bin),
                       lambda x: TF.binary_cross_entropy_with_logits(x, torch.from_numpy(y_bin))),
        "bce_logits-pos_weight": (
            lambda x: F.binary_cross_entropy_with_logits(x, y_bin, pos_weight=pw, reduction="sum"),
            lambda x: TF.binary_cross_entropy_with_logits(x, torch.from_numpy(y_bin), pos_weight=torch.from_numpy(pw),
                                                          reduction="sum")),
    }[case]
    cx = lm.Graph()
    x = cx.tensor(x_np.shape).set(x_np)
    loss = ours_fn(x).retrieve()
    (gx,) = grad(loss, [x])
    gx.retrieve()
    cx.compile(device=device)
    cx.execute()
    tx = torch.from_numpy(x_np).requires_grad_(True)
    tloss = torch_fn(tx)
    tloss.backward()
    assert np.isfinite(loss.item()) and np.isfinite(gx.data()).all()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    np.testing.assert_allclose(gx.data(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
