"""Resampling, padding modes, max-pool indices and unpooling, conv ``padding_mode`` (issue 17, item 4) against
torch CPU on both devices (conftest's ``backend`` parameter). One graph per test; seeded data.

Tolerances: ``interpolate`` linear/cubic 1e-5 relative + 5e-6 absolute (float32 weighted sums of N(0, 1) data, in
another order than ATen's; the cubic weights are partly negative, so the sums cancel; the weights are
computed as ATen does, in float32); nearest, padding, pooling indices and unpooling exact (they move values);
convolutions 1e-5 / 1e-5; the transformers 1e-4 / 1e-5 (float32 attention and layer norms).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F


def _inputs(*arrays):
    cx = lm.Graph()
    return cx, [cx.tensor(a.shape, dtype=a.dtype.name).set(a) for a in arrays]


def _check(cx, outs, exps, rtol=0.0, atol=0.0, labels=None):
    for o in outs:
        o.retrieve()
    cx.execute()
    for k, (o, e) in enumerate(zip(outs, exps)):
        g, e = o.data(), e.detach().numpy()
        what = labels[k] if labels else str(k)
        assert g.shape == e.shape and g.dtype == e.dtype, (what, g.shape, e.shape, g.dtype, e.dtype)
        if rtol or atol:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(g, e, err_msg=what)


def test_interpolate_modes():
    """Every mode with sizes up and down, integer and fractional scale factors, size 1, align_corners both
    ways, recompute_scale_factor, 1-D/2-D/3-D inputs; nn.Upsample and the fixed-mode layers."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    x1 = rng.standard_normal((2, 3, 6)).astype(np.float32)
    x3 = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    cx, (t, t1, t3) = _inputs(x, x1, x3)
    X, X1, X3 = (torch.from_numpy(a) for a in (x, x1, x3))
    cases = []
    for mode in ["nearest", "nearest-exact", "bilinear", "bicubic", "area"]:
        for kw in [dict(size=(8, 11)), dict(size=(3, 4)), dict(scale_factor=2), dict(scale_factor=(1.7, 0.6)),
                   dict(size=(1, 1)), dict(scale_factor=2.5, recompute_scale_factor=True)]:
            for ac in ([None] if mode in ("nearest", "nearest-exact", "area") else [False, True]):
                cases.append((t, X, mode, dict(kw, **({} if ac is None else dict(align_corners=ac)))))
    cases += [(t1, X1, "nearest", dict(scale_factor=1.5)), (t1, X1, "linear", dict(size=13)),
              (t1, X1, "linear", dict(size=4, align_corners=True)), (t3, X3, "trilinear", dict(size=(5, 3, 8))),
              (t3, X3, "trilinear", dict(scale_factor=(2, 0.5, 1.5), align_corners=True)),
              (t3, X3, "nearest", dict(size=(2, 6, 5)))]
    outs = [F.interpolate(a, mode=m, **k) for a, _, m, k in cases]
    exps = [TF.interpolate(T, mode=m, **k) for _, T, m, k in cases]
    labels = [f"{m} {k}" for _, _, m, k in cases]
    outs += [nn.Upsample(scale_factor=2, mode="bilinear")(t), nn.UpsamplingNearest2d(size=(4, 9))(t),
             nn.UpsamplingBilinear2d(scale_factor=3)(t)]
    exps += [torch.nn.Upsample(scale_factor=2, mode="bilinear")(X), torch.nn.UpsamplingNearest2d(size=(4, 9))(X),
             torch.nn.UpsamplingBilinear2d(scale_factor=3)(X)]
    labels += ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]
    _check(cx, outs, exps, rtol=1e-5, atol=5e-6, labels=labels)


def test_interpolate_antialias():
    """antialias=True (bilinear, bicubic): downscaling by integer and fractional factors, upscaling, one axis
    down and one up, align_corners both ways, scale_factor; against torch (same tolerances as above, 2e-5
    absolute for bicubic: partly negative weights over up to 13 taps)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 16, 20)).astype(np.float32)
    cx, (t,) = _inputs(x)
    X = torch.from_numpy(x)
    cases = []
    for mode in ["bilinear", "bicubic"]:
        for kw in [dict(size=(5, 7)), dict(size=(4, 30)), dict(size=(8, 10)), dict(scale_factor=0.3),
                   dict(size=(32, 3))]:
            for ac in [False, True]:
                cases.append((mode, dict(kw, align_corners=ac)))
    outs = [F.interpolate(t, mode=m, antialias=True, **k) for m, k in cases]
    exps = [TF.interpolate(X, mode=m, antialias=True, **k) for m, k in cases]
    _check(cx, outs, exps, rtol=1e-5, atol=2e-5, labels=[f"{m} {k}" for m, k in cases])


def test_interpolate_errors():
    cx = lm.Graph()
    x = cx.tensor((1, 2, 4, 4))
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="mode"):
        F.interpolate(x, size=3, mode="cubic")
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=3, mode="nearest", align_corners=True)
    with pytest.raises(ValueError, match="5-D"):
        F.interpolate(x, size=3, mode="trilinear")
    with pytest.raises(ValueError, match="antialias.*bilinear"):
        F.interpolate(x, size=3, mode="nearest", antialias=True)


def test_pad_modes_and_conv_padding_mode():
    """F.pad in every mode on the last one, two and three dims, asymmetric, with negative (cropping) amounts;
    Conv1d/Conv2d with padding_mode reflect/replicate/circular (and 'same')."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    x5 = rng.standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    s = rng.standard_normal((2, 3, 9)).astype(np.float32)
    cx, (t, t5, ts) = _inputs(x, x5, s)
    X, X5, S = (torch.from_numpy(a) for a in (x, x5, s))
    outs, exps = [], []
    for mode in ["reflect", "replicate", "circular", "constant"]:
        for p in [(2, 1, 1, 3), (-1, 2, 3, -2), (3, 3, 5, 0)]:
            outs.append(F.pad(t, p, mode=mode))
            exps.append(TF.pad(X, p, mode=mode))
        outs += [F.pad(ts, (1, 2), mode=mode), F.pad(t5, (1, 2, 0, 1, 2, 1), mode=mode)]
        exps += [TF.pad(S, (1, 2), mode=mode), TF.pad(X5, (1, 2, 0, 1, 2, 1), mode=mode)]
    outs.append(F.pad(t, (1, 1), value=2.5))
    exps.append(TF.pad(X, (1, 1), value=2.5))
    convs = []
    for mode in ["reflect", "replicate", "circular"]:
        torch.manual_seed(0)
        convs.append((nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode=mode),
                      torch.nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode=mode), t, X))
        convs.append((nn.Conv1d(3, 2, 4, padding="same", padding_mode=mode),
                      torch.nn.Conv1d(3, 2, 4, padding="same", padding_mode=mode), ts, S))
        convs.append((nn.Conv2d(3, 2, 3, stride=2, padding=1, padding_mode=mode),
                      torch.nn.Conv2d(3, 2, 3, stride=2, padding=1, padding_mode=mode), t, X))
    n_pad = len(outs)
    for ours, theirs, a, A in convs:
        ours.load_state_dict(theirs.state_dict())
        outs.append(ours(a))
        with torch.no_grad():
            exps.append(theirs(A))
    for o in outs:
        o.retrieve()
    cx.execute()
    for k, (o, e) in enumerate(zip(outs, exps)):
        g, e = o.data(), e.numpy()
        assert g.shape == e.shape, (k, g.shape, e.shape)
        if k < n_pad:
            np.testing.assert_array_equal(g, e, err_msg=str(k))
        else:
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=str(k))
    with pytest.raises(ValueError, match="reflect padding"):
        F.pad(t, (7, 0), mode="reflect")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.ConvTranspose2d(3, 3, 3, padding_mode="reflect")


def test_max_pool_indices_and_unpool():
    """max_pool1d/2d/3d(return_indices=True) with padding, strides, dilation, ceil_mode, ties (first max) and NaN
    (last NaN), int input; MaxPool2d(return_indices=True); adaptive max pooling with indices (even and uneven
    bins); max_unpool1d/2d/3d and nn.MaxUnpool2d, with output_size."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    x[0, 0, 1, 1] = x[0, 0, 0, 1] = np.nan
    x[0, 1, 2, 2] = x[0, 1, 2, 3] = 5.0
    x1 = rng.standard_normal((2, 2, 9)).astype(np.float32)
    x3 = rng.standard_normal((1, 2, 4, 4, 6)).astype(np.float32)
    xi = rng.integers(-4, 4, (1, 2, 5, 5)).astype(np.int64)
    cx, (t, t1, t3, ti) = _inputs(x, x1, x3, xi)
    X, X1, X3, XI = (torch.from_numpy(a) for a in (x, x1, x3, xi))
    outs, exps = [], []
    for kw in [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1)), dict(kernel_size=3, stride=2, ceil_mode=True)]:
        outs += list(F.max_pool2d(t, return_indices=True, **kw))
        exps += list(TF.max_pool2d(X, return_indices=True, **kw))
    outs += list(F.max_pool1d(t1, 3, 2, 1, return_indices=True)) + list(F.max_pool3d(t3, 2, return_indices=True))
    exps += list(TF.max_pool1d(X1, 3, 2, 1, return_indices=True)) + list(TF.max_pool3d(X3, 2, return_indices=True))
    outs += list(F.max_pool2d(ti, 2, return_indices=True))[1:]
    exps += list(TF.max_pool2d(XI.double(), 2, return_indices=True))[1:]
    outs += list(nn.MaxPool2d(3, 1, 1, return_indices=True)(t))
    exps += list(torch.nn.MaxPool2d(3, 1, 1, return_indices=True)(X))
    v, i = F.max_pool2d(t, 2, return_indices=True)
    ev, ei = TF.max_pool2d(X, 2, return_indices=True)
    outs += [F.max_unpool2d(v, i, 2, output_size=(6, 7)), F.max_unpool2d(v, i, 2, output_size=(2, 3, 7, 7)),
             nn.MaxUnpool2d(2)(v, i, output_size=(6, 7))]
    exps += [TF.max_unpool2d(ev, ei, 2, output_size=(6, 7)), TF.max_unpool2d(ev, ei, 2, output_size=(2, 3, 7, 7)),
             torch.nn.MaxUnpool2d(2)(ev, ei, output_size=(6, 7))]
    v1, i1 = F.max_pool1d(t1, 2, return_indices=True)
    ev1, ei1 = TF.max_pool1d(X1, 2, return_indices=True)
    v3, i3 = F.max_pool3d(t3, 2, return_indices=True)
    ev3, ei3 = TF.max_pool3d(X3, 2, return_indices=True)
    outs += [F.max_unpool1d(v1, i1, 2), F.max_unpool3d(v3, i3, 2)]
    exps += [TF.max_unpool1d(ev1, ei1, 2), TF.max_unpool3d(ev3, ei3, 2)]
    for size in [(3, 7), (4, 5), 1, (2, None)]:   # divisible (windows) and not (per-cell bins)
        outs += list(F.adaptive_max_pool2d(t, size, return_indices=True))
        exps += list(TF.adaptive_max_pool2d(X, size, return_indices=True))
    outs += list(F.adaptive_max_pool1d(t1, 4, return_indices=True)) + list(nn.AdaptiveMaxPool3d((3, 2, 4),
                                                                                                 True)(t3))
    exps += list(TF.adaptive_max_pool1d(X1, 4, return_indices=True)) + list(torch.nn.AdaptiveMaxPool3d(
        (3, 2, 4), True)(X3))
    _check(cx, outs, exps)
    with pytest.raises(ValueError, match="output_size"):
        F.max_unpool2d(v, i, 2, output_size=(9, 9))


def test_transformer_and_decoder():
    """nn.Transformer (batch_first, causal tgt mask from generate_square_subsequent_mask, padding mask on the
    memory) and nn.TransformerDecoder against torch in eval mode with torch's weights (state_dict keys and order
    equal); parameter_count equals torch's."""
    torch.manual_seed(0)
    theirs = torch.nn.Transformer(8, 2, 2, 2, 16, dropout=0.0, batch_first=True).eval()
    ours = nn.Transformer(8, 2, 2, 2, 16, dropout=0.0, batch_first=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    assert nn.parameter_count(ours) == sum(p.numel() for p in theirs.parameters())
    dec_t = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, 0.0, norm_first=True), 2,
                                        torch.nn.LayerNorm(8)).eval()
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, 0.0, norm_first=True), 2, nn.LayerNorm(8))
    assert list(dec.state_dict()) == list(dec_t.state_dict())
    dec.load_state_dict(dec_t.state_dict())
    rng = np.random.default_rng(3)
    src = rng.standard_normal((2, 5, 8)).astype(np.float32)
    tgt = rng.standard_normal((2, 4, 8)).astype(np.float32)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    cx, (ts, tt, tp) = _inputs(src, tgt, pad)
    mask = nn.Transformer.generate_square_subsequent_mask(4, cx)
    outs = [ours(ts, tt, tgt_mask=mask, memory_key_padding_mask=tp), mask,
            dec(tt.permute(1, 0, 2), ts.permute(1, 0, 2), tgt_mask=mask)]
    S, T, P = (torch.from_numpy(a) for a in (src, tgt, pad))
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(4)
    with torch.no_grad():
        exps = [theirs(S, T, tgt_mask=tmask, memory_key_padding_mask=P), tmask,
                dec_t(T.transpose(0, 1), S.transpose(0, 1), tgt_mask=tmask)]
    _check(cx, outs, exps, rtol=1e-4, atol=1e-5)
