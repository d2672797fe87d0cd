"""Convolution layers against torch.nn (weights copied with ``load_state_dict(torch_module.state_dict())``).

Tolerance: float32, rtol=1e-4, atol=1e-5. Conv4d (no torch counterpart) is checked against a sum of torch conv3d
over the kernel's t offsets. Every test runs on both backends (see conftest.py).
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.nn import conv as C

RTOL, ATOL = 1e-4, 1e-5
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run(module, arr, **kwargs):
    cx = lm.Graph()
    x = cx.tensor(arr.shape).set(arr)
    y = module(x, **kwargs).retrieve()
    cx.execute()
    return y.data()


def _compare(ours, theirs, arr, **kwargs):
    torch.manual_seed(0)
    ours.load_state_dict(theirs.state_dict())
    got = _run(ours, arr, **kwargs)
    with torch.no_grad():
        exp = theirs(torch.from_numpy(arr), **kwargs).numpy()
    assert got.shape == exp.shape, (got.shape, exp.shape)
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL)


CONV_CASES = [
    # (luminal class, torch class, input shape, kwargs)
    (C.Conv1d, torch.nn.Conv1d, (2, 4, 11), dict(in_channels=4, out_channels=6, kernel_size=3)),
    (C.Conv1d, torch.nn.Conv1d, (4, 11), dict(in_channels=4, out_channels=3, kernel_size=4, stride=2, padding=2,
                                              dilation=2, bias=False)),                       # unbatched
    (C.Conv1d, torch.nn.Conv1d, (2, 4, 9), dict(in_channels=4, out_channels=4, kernel_size=4, padding="same",
                                                dilation=1, groups=4)),                       # even-kernel 'same'
    (C.Conv2d, torch.nn.Conv2d, (2, 4, 9, 8), dict(in_channels=4, out_channels=6, kernel_size=3, stride=2,
                                                   padding=1, groups=2)),
    (C.Conv2d, torch.nn.Conv2d, (3, 7, 6), dict(in_channels=3, out_channels=2, kernel_size=(3, 2),
                                                stride=(1, 2), padding=(2, 0), dilation=(2, 1))),  # unbatched
    (C.Conv2d, torch.nn.Conv2d, (1, 4, 8, 7), dict(in_channels=4, out_channels=8, kernel_size=3, padding="same",
                                                   groups=4)),                                # depthwise x2
    (C.Conv2d, torch.nn.Conv2d, (2, 3, 6, 7), dict(in_channels=3, out_channels=4, kernel_size=(2, 4),
                                                   padding="same", dilation=(3, 1))),        # asymmetric 'same'
    (C.Conv2d, torch.nn.Conv2d, (1, 2, 7, 6), dict(in_channels=2, out_channels=3, kernel_size=3,
                                                   padding="valid")),
    (C.Conv3d, torch.nn.Conv3d, (1, 4, 5, 6, 5), dict(in_channels=4, out_channels=4, kernel_size=2, stride=(1, 2, 1),
                                                      padding=(1, 0, 1), groups=2)),
    (C.Conv3d, torch.nn.Conv3d, (2, 5, 4, 5), dict(in_channels=2, out_channels=2, kernel_size=(1, 3, 2),
                                                   dilation=(1, 1, 2), bias=False)),          # unbatched
]


@pytest.mark.parametrize("ours,theirs,shape,kwargs", CONV_CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CONV_CASES)])
def test_conv_matches_torch(ours, theirs, shape, kwargs):
    _compare(ours(**kwargs), theirs(**kwargs), _data(shape))


TRANSPOSED_CASES = [
    (C.ConvTranspose1d, torch.nn.ConvTranspose1d, (2, 3, 5), dict(in_channels=3, out_channels=4, kernel_size=3,
                                                                  stride=2)),
    (C.ConvTranspose1d, torch.nn.ConvTranspose1d, (4, 6), dict(in_channels=4, out_channels=2, kernel_size=3,
                                                               stride=3, padding=4, bias=False)),  # crop, unbatched
    (C.ConvTranspose2d, torch.nn.ConvTranspose2d, (1, 4, 4, 3), dict(in_channels=4, out_channels=6, kernel_size=3,
                                                                     stride=2, padding=1, output_padding=1,
                                                                     groups=2, dilation=2)),
    (C.ConvTranspose2d, torch.nn.ConvTranspose2d, (2, 2, 3, 4), dict(in_channels=2, out_channels=3,
                                                                     kernel_size=(2, 3), stride=(1, 2),
                                                                     padding=(0, 1))),
    (C.ConvTranspose3d, torch.nn.ConvTranspose3d, (1, 2, 3, 2, 3), dict(in_channels=2, out_channels=2,
                                                                        kernel_size=2, stride=2, padding=(1, 0, 0),
                                                                        output_padding=(1, 0, 1))),
]


@pytest.mark.parametrize("ours,theirs,shape,kwargs", TRANSPOSED_CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(TRANSPOSED_CASES)])
def test_conv_transpose_matches_torch(ours, theirs, shape, kwargs):
    _compare(ours(**kwargs), theirs(**kwargs), _data(shape))


def test_conv_transpose_output_size():
    ours = C.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    theirs = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    _compare(ours, theirs, _data((1, 2, 3, 4)), output_size=(6, 8))


def _conv4d_reference(x, w, b, stride, padding, dilation, groups):
    """Conv4d as a sum over the t kernel offsets of torch conv3d (padding t by hand)."""
    x, w = torch.from_numpy(x), torch.from_numpy(w)
    unbatched = x.ndim == 5
    if unbatched:
        x = x[None]
    (st, *s3), (pt, *p3), (dt, *d3) = stride, padding, dilation
    x = F.pad(x, (0, 0, 0, 0, 0, 0, pt, pt))
    kt = w.shape[2]
    t_out = (x.shape[2] - dt * (kt - 1) - 1) // st + 1
    outs = []
    for t in range(t_out):
        acc = sum(F.conv3d(x[:, :, t * st + k * dt], w[:, :, k], None, s3, p3, d3, groups) for k in range(kt))
        outs.append(acc)
    out = torch.stack(outs, 2)
    if b is not None:
        out = out + torch.from_numpy(b).reshape(1, -1, 1, 1, 1, 1)
    return (out[0] if unbatched else out).numpy()


@pytest.mark.parametrize("shape,kwargs", [
    ((1, 2, 4, 4, 3, 4), dict(in_channels=2, out_channels=3, kernel_size=2)),
    ((4, 5, 3, 4, 3), dict(in_channels=4, out_channels=2, kernel_size=(2, 3, 1, 2), stride=(2, 1, 1, 2),
                           padding=(1, 1, 0, 0), dilation=(1, 1, 2, 1), groups=2, bias=False)),   # unbatched
    ((1, 2, 3, 3, 3, 3), dict(in_channels=2, out_channels=2, kernel_size=3, padding="same", groups=2)),
])
def test_conv4d_against_conv3d_sum(shape, kwargs):
    conv = C.Conv4d(**kwargs)
    arr = _data(shape, seed=1)
    got = _run(conv, arr)
    n = 4
    pad = kwargs.get("padding", 0)
    if pad == "same":
        pad = tuple((k - 1) // 2 for k in conv.kernel_size)  # odd kernels: symmetric
    exp = _conv4d_reference(arr, conv.weight.data, conv.bias.data if conv.bias is not None else None,
                            C._ntuple(kwargs.get("stride", 1), n, ""), C._ntuple(pad, n, ""),
                            C._ntuple(kwargs.get("dilation", 1), n, ""), kwargs.get("groups", 1))
    assert got.shape == exp.shape, (got.shape, exp.shape)
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL)


def test_functional_forms_and_symbolic_batch():
    x, w, b = _data((3, 4, 10)), _data((6, 2, 3), 1), _data((6,), 2)
    cx = lm.Graph()
    xt = cx.tensor(("batch", 4, 10)).set(x)
    wt, bt = cx.tensor(w.shape).set(w), cx.tensor(b.shape).set(b)
    y1 = C.conv1d(xt, wt, bt, stride=2, padding=1, groups=2).retrieve()
    wT = cx.tensor((4, 3, 3)).set(_data((4, 3, 3), 3))
    y2 = C.conv_transpose1d(xt, wT, None, stride=2, output_padding=1).retrieve()
    cx.execute()
    tx = torch.from_numpy(x)
    np.testing.assert_allclose(y1.data(), F.conv1d(tx, torch.from_numpy(w), torch.from_numpy(b), 2, 1, 1, 2).numpy(),
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y2.data(), F.conv_transpose1d(tx, torch.from_numpy(_data((4, 3, 3), 3)), None, 2, 0,
                                                             1).numpy(), rtol=RTOL, atol=ATOL)


def test_state_dict_layout_and_default_init():
    import luminal.nn as nn
    nn.init.manual_seed(0)  # the std check below is a statistic of 36 draws: fixed draws, not the suite's order
    conv = C.Conv2d(6, 4, (3, 2), groups=2)
    assert list(conv.state_dict()) == list(torch.nn.Conv2d(6, 4, (3, 2), groups=2).state_dict())
    assert conv.weight.shape == (4, 3, 3, 2) and conv.bias.shape == (4,)
    fan_in = 3 * 3 * 2
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives the same bound as the bias
    assert np.abs(conv.weight.data).max() <= bound and np.abs(conv.weight.data).std() > bound / 4
    assert np.abs(conv.bias.data).max() <= bound
    tconv = C.ConvTranspose3d(4, 6, 2, groups=2, bias=False)
    assert tconv.weight.shape == (4, 3, 2, 2, 2) and tconv.bias is None
    assert list(tconv.state_dict()) == ["weight"]
    assert np.abs(tconv.weight.data).max() <= 1 / math.sqrt(3 * 8)
    assert C.Conv4d(2, 4, 3).weight.shape == (4, 2, 3, 3, 3, 3)


def test_argument_errors():
    with pytest.raises(ValueError):
        C.Conv2d(2, 2, 3, padding_mode="mirror")            # (reflect/replicate/circular: test_nn_extra_ops.py)
    with pytest.raises(ValueError):
        C.ConvTranspose2d(2, 2, 3, padding_mode="reflect")  # zeros only, as PyTorch
    with pytest.raises(ValueError):
        C.Conv2d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(ValueError):
        C.Conv2d(3, 2, 3, groups=2)
    with pytest.raises(ValueError):
        C.ConvTranspose1d(2, 2, 3, stride=2, output_padding=2)
