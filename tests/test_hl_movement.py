"""Movement ops (luminal/hl_ops/movement.py) against PyTorch CPU / numpy: axis order, rank changes, broadcasting,
indexing, padding, joins, windows, gathers and chains of views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
import hl_helpers
from hl_helpers import check, run


def make(dtype=np.float32, shape=(2, 3, 4), seed=0):
    return hl_helpers.make(dtype, shape, seed, low=-50, high=50)


# ---------------------------------------------------------------------------- helpers
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


T = torch.from_numpy


# ---------------------------------------------------------------------------- axis order
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (-1, 0, -2)])
def test_permute(dtype, axes):
    x = make(dtype)
    check(run(lambda t: t.permute(axes), x), T(x).permute(axes))
    check(run(lambda t: t.permute(*axes), x), T(x).permute(*axes))


@pytest.mark.parametrize("dims", [(0, 1), (0, 2), (-1, -2), (1, 1), (2, 0)])
def test_transpose(dims):
    x = make(np.float64, (2, 3, 4, 5), seed=1)
    check(run(lambda t: t.transpose(*dims), x), T(x).transpose(*dims))


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)])
def test_T_and_mT(shape):
    x = make(np.int64, shape, seed=2)
    check(run(lambda t: t.T, x), np.transpose(x))  # torch deprecates .T for ndim != 2; numpy's reverses axes
    if len(shape) == 2:
        check(run(lambda t: t.T, x), T(x).T)
    if len(shape) >= 2:
        check(run(lambda t: t.mT, x), T(x).mT)


# ---------------------------------------------------------------------------- reshapes
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("shape", [(24,), (4, 6), (-1, 3), (2, -1, 2), (1, 24, 1), (3, 2, 2, 2), (-1,)])
def test_reshape_and_view(dtype, shape):
    x = make(dtype, seed=3)
    check(run(lambda t: t.reshape(shape), x), T(x).reshape(shape))
    check(run(lambda t: t.view(*shape), x), T(x).view(*shape))


def test_reshape_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 3, 4))
    with pytest.raises(ValueError):
        x.reshape(-1, -1)
    with pytest.raises(ValueError):
        x.reshape(5, -1)
    with pytest.raises(lm.GraphError):
        x.reshape(5, 5)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -4])
def test_unsqueeze(axis):
    x = make(np.float32, seed=4)
    check(run(lambda t: t.unsqueeze(axis), x), T(x).unsqueeze(axis))


@pytest.mark.parametrize("axis", [None, 0, 2, -1, (0, 2), 1])
def test_squeeze(axis):
    x = make(np.float32, (1, 3, 1, 4), seed=5)
    check(run(lambda t: t.squeeze(axis), x), T(x).squeeze() if axis is None else T(x).squeeze(axis))


@pytest.mark.parametrize("start,end", [(0, -1), (1, 2), (0, 1), (2, 3), (-2, -1), (1, 1)])
def test_flatten(start, end):
    x = make(np.int32, (2, 3, 4, 2), seed=6)
    check(run(lambda t: t.flatten(start, end), x), T(x).flatten(start, end))


def test_flatten_0d():
    x = np.array(3.5, np.float32)
    check(run(lambda t: t.flatten(), x), T(x).flatten())


@pytest.mark.parametrize("axis,sizes", [(0, (2, 3)), (1, (2, 2)), (-1, (5, 1)), (1, (1, 4)), (0, (3, -1)),
                                        (-1, (-1, 5)), (1, (2, -1, 1))])
def test_unflatten(axis, sizes):
    x = make(np.float32, (6, 4, 5), seed=7)
    check(run(lambda t: t.unflatten(axis, sizes), x), T(x).unflatten(axis, sizes))


@pytest.mark.parametrize("axis", [0, 1, 2, -2])
def test_merge_dims(axis):
    x = make(np.float32, (2, 3, 4, 5), seed=8)
    t = T(x)
    a = axis % 4
    check(run(lambda g: g.merge_dims(axis, axis + 1 if axis >= 0 else axis + 1), x), t.flatten(a, a + 1))


def test_merge_dims_of_permuted_needs_copy():
    x = make(np.float32, (2, 3, 4), seed=9)
    check(run(lambda g: g.permute(2, 0, 1).merge_dims(1, 2), x), T(x).permute(2, 0, 1).flatten(1, 2))
    check(run(lambda g: g.permute(1, 0, 2).merge_dims(0, 1), x), T(x).permute(1, 0, 2).flatten(0, 1))


def test_merge_dims_not_adjacent_raises():
    with pytest.raises(ValueError):
        lm.Graph().tensor((2, 3, 4)).merge_dims(0, 2)


@pytest.mark.parametrize("axis,inner", [(0, 3), (1, 2), (-1, 5), (1, 1), (0, 6)])
def test_split_dims(axis, inner):
    x = make(np.int64, (6, 4, 5), seed=10)
    n = x.shape[axis]
    check(run(lambda t: t.split_dims(axis, inner), x), T(x).unflatten(axis, (n // inner, inner)))


# ---------------------------------------------------------------------------- broadcasting
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", [(3, 4, 5), (2, 3, 4, 5), (-1, 4, -1), (2, -1, 4, 5)])
def test_expand_and_broadcast_to(dtype, target):
    x = make(dtype, (3, 1, 5), seed=11)
    check(run(lambda t: t.expand(*target), x), T(x).expand(*target))
    full = tuple(x.shape[k - (len(target) - 3)] if d == -1 else d for k, d in enumerate(target))
    check(run(lambda t: t.broadcast_to(full), x), torch.broadcast_to(T(x), full))


def test_expand_errors():
    x = lm.Graph().tensor((3, 2))
    with pytest.raises(lm.GraphError):
        x.expand(3, 4)
    with pytest.raises(lm.GraphError):
        x.expand(2)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_expand_dim(axis):
    x = make(np.float32, (2, 3), seed=12)
    check(run(lambda t: t.expand_dim(axis, 4), x), np.repeat(np.expand_dims(x, axis), 4, axis=axis))
    shape = list(x.shape)
    shape.insert(axis % 3, 4)
    check(run(lambda t: t.expand_dim(axis, 4), x), T(x).unsqueeze(axis).expand(shape))


# ---------------------------------------------------------------------------- __getitem__
NEG_STEP_KEYS = [
    slice(None, None, -1), (slice(None), slice(None, None, -1)), (Ellipsis, slice(4, 0, -2)),
    (slice(-1, None, -1), 1, slice(None, None, -3)), (0, slice(2, None, -1)), (slice(None, -5, -1),),
    (slice(10, -10, -2),),
]
POS_KEYS = [
    0, -1, 1, (0, 1), (-1, -2, -3), (1, slice(None), 2), slice(1, None), slice(None, 2), (slice(None), slice(1, 4, 2)),
    (slice(None), slice(None), slice(None, None, 3)), (slice(-2, None), slice(-3, -1)), slice(5, 10), slice(0, 0),
    None, (None, 0), (slice(None), None, 1), (Ellipsis, 1), (0, Ellipsis), (Ellipsis,), (None, Ellipsis, None),
    (1, Ellipsis, None, slice(1, 3)), (slice(None, None, 2), Ellipsis, slice(3, None, 5)), (), (slice(1, 100),),
]


@pytest.mark.parametrize("key", POS_KEYS + NEG_STEP_KEYS, ids=repr)
def test_getitem(key):
    x = make(np.float32, (3, 4, 5), seed=13)
    got = run(lambda t: t[key], x)
    check(got, x[key])  # numpy's basic indexing (torch has no negative steps) ...
    if key not in NEG_STEP_KEYS:
        check(got, T(x)[key])  # ... and torch's


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.float64])
def test_getitem_other_dtypes(dtype):
    x = make(dtype, (3, 4, 5), seed=14)
    check(run(lambda t: t[1:, ::-2, -1], x), x[1:, ::-2, -1])
    check(run(lambda t: t[None, :, 2], x), T(x)[None, :, 2])


@pytest.mark.parametrize("key", [3, -4, (0, 0, 0, 0)], ids=repr)
def test_getitem_out_of_range_raises(key):
    x = lm.Graph().tensor((3, 4, 5))
    with pytest.raises(IndexError):
        x[key]
    with pytest.raises(IndexError):
        torch.zeros(3, 4, 5)[key]


def test_getitem_two_ellipses_raises():
    with pytest.raises(IndexError):
        lm.Graph().tensor((3, 4))[..., ...]


def test_chained_getitem():
    x = make(np.float32, (6, 7, 5), seed=15)
    check(run(lambda t: t[1:][::2][:, 3:][..., ::-1][0], x), x[1:][::2][:, 3:][..., ::-1][0])


@pytest.mark.parametrize("idx_shape", [(4,), (2, 3), (1,)])
@pytest.mark.parametrize("pos", [0, 1, 2])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
def test_getitem_tensor_index(idx_shape, pos, idx_dtype):
    x = make(np.float32, (4, 5, 3), seed=16)
    n = x.shape[pos]
    idx = np.random.default_rng(17).integers(0, n, size=idx_shape).astype(idx_dtype)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    it = cx.tensor(idx.shape, dtype=lm.DType(idx.dtype.name)).set(idx)
    key = (slice(None),) * pos + (it,)
    out = xt[key].retrieve()
    cx.execute()
    tkey = (slice(None),) * pos + (T(idx.astype(np.int64)),)
    check(out.data(), T(x)[tkey])


TENSOR_KEYS = {  # (luminal key builder, torch key builder) with the tensor index among ints / slices / None
    "1,:,idx": lambda i: (1, slice(None), i), ":,1,idx": lambda i: (slice(None), 1, i),
    "idx,:,1": lambda i: (i, slice(None), 1), "1,idx": lambda i: (1, i), "None,idx,1": lambda i: (None, i, 1),
    "1,None,idx": lambda i: (1, None, i), "...,idx": lambda i: (Ellipsis, i), "::2,idx": lambda i: (slice(None, None, 2), i),
}


@pytest.mark.parametrize("name", list(TENSOR_KEYS))
def test_getitem_tensor_index_mixed_with_basic_indices(name):
    x = make(np.float32, (4, 5, 3), seed=18)
    idx = np.array([2, 0, 2], np.int64)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    it = cx.tensor(idx.shape, dtype=lm.int64).set(idx)
    out = xt[TENSOR_KEYS[name](it)].retrieve()
    cx.execute()
    check(out.data(), T(x)[TENSOR_KEYS[name](T(idx))])


def test_getitem_tensor_index_with_int_and_slice():
    x = make(np.int64, (4, 5, 6), seed=18)
    idx = np.array([4, 0, 0, 2], np.int64)
    cx = lm.Graph()
    xt = cx.tensor(x.shape, dtype=lm.int64).set(x)
    it = cx.tensor((4,), dtype=lm.int64).set(idx)
    out = xt[1, it, 1:5:2].retrieve()
    cx.execute()
    check(out.data(), T(x)[1, T(idx), 1:5:2])


def test_getitem_tensor_index_negative_values_wrap():
    x = make(np.float32, (5, 3), seed=19)
    idx = np.array([-1, 0, -5, 2], np.int64)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    it = cx.tensor((4,), dtype=lm.int64).set(idx)
    out = xt[it].retrieve()
    cx.execute()
    check(out.data(), T(x)[T(idx)])


@pytest.mark.parametrize("bad", [5, -6])
def test_getitem_tensor_index_out_of_range_raises_at_execute(bad):
    cx = lm.Graph()
    xt = cx.tensor((5, 3)).set(make(np.float32, (5, 3)))
    it = cx.tensor((2,), dtype=lm.int64).set(np.array([0, bad], np.int64))
    xt[it].retrieve()
    with pytest.raises(IndexError):
        cx.execute()
    with pytest.raises(IndexError):
        torch.zeros(5, 3)[torch.tensor([0, bad])]


# ---------------------------------------------------------------------------- pad
PADS = [
    [(1, 2)], [(0, 0), (2, 1)], [(1, 0), (0, 3), (2, 2)], [(0, 0), (0, 0), (-1, 2)], [(-1, -1), (1, -2)],
    [(0, 0), (-2, 0), (0, -3)], [(3, 3)],
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("pads", PADS, ids=str)
@pytest.mark.parametrize("value", [0, 2, -1.5])
def test_pad(dtype, pads, value):
    if np.dtype(dtype).kind == "i" and value == -1.5:
        value = -7
    x = make(dtype, (3, 4, 5), seed=20)
    full = list(pads) + [(0, 0)] * (x.ndim - len(pads))  # luminal pads from axis 0 ...
    flat = [v for before_after in reversed(full) for v in before_after]  # ... torch from the last axis
    got = run(lambda t: t.pad(pads, value=value), x)
    check(got, F.pad(T(x), flat, mode="constant", value=value))


def test_pad_flat_form_raises():
    with pytest.raises(TypeError):
        lm.Graph().tensor((3, 4)).pad([1, 2])


def test_pad_symmetric_with_bool():
    x = make(np.bool_, (2, 3), seed=21)
    check(run(lambda t: t.pad([(1, 1), (2, 0)]), x), np.pad(x, [(1, 1), (2, 0)]))


# ---------------------------------------------------------------------------- concat / stack
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concat_three(dtype, axis):
    shapes = [[2, 3, 4] for _ in range(3)]
    for k, s in enumerate(shapes):
        s[axis] = k + 1
    xs = [make(dtype, tuple(s), seed=22 + k) for k, s in enumerate(shapes)]
    exp = torch.cat([T(a) for a in xs], axis)
    check(run(lambda a, b, c: lm.concat([a, b, c], axis), *xs), exp)
    check(run(lambda a, b, c: lm.cat([a, b, c], axis=axis), *xs), exp)


def test_concat_method_and_promotion():
    a, b = make(np.int32, (2, 3), seed=25), make(np.float32, (2, 2), seed=26)
    check(run(lambda x, y: x.concat(y, 1), a, b), torch.cat([T(a), T(b)], 1))
    check(run(lambda x, y: x.cat(y, axis=-1), a, b), torch.cat([T(a), T(b)], -1))


def test_concat_shape_mismatch_raises():
    cx = lm.Graph()
    with pytest.raises(lm.GraphError):
        lm.concat([cx.tensor((2, 3)), cx.tensor((3, 3))], 1)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack(dtype, axis):
    xs = [make(dtype, (3, 4), seed=27 + k) for k in range(3)]
    check(run(lambda a, b, c: lm.stack([a, b, c], axis), *xs), torch.stack([T(a) for a in xs], axis))


# ---------------------------------------------------------------------------- flip / roll / repeat
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("axes", [0, -1, (0, 2), (1,), (0, 1, 2)])
def test_flip(dtype, axes):
    x = make(dtype, seed=30)
    check(run(lambda t: t.flip(axes), x), T(x).flip(axes if isinstance(axes, tuple) else (axes,)))


def test_flip_all():
    x = make(np.float32, seed=31)
    check(run(lambda t: t.flip(), x), np.flip(x))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("shift,axis", [(1, 0), (2, 1), (-1, 2), (7, -1), (0, 1), (-9, 1), (4, 2)])
def test_roll(dtype, shift, axis):
    x = make(dtype, seed=32)
    check(run(lambda t: t.roll(shift, axis), x), torch.roll(T(x), shift, axis))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("reps", [(1, 1, 1), (2, 1, 1), (1, 3, 2), (2, 1, 1, 3), (2, 2, 2, 2), (3, 1, 1, 1, 1)])
def test_repeat(dtype, reps):
    x = make(dtype, (2, 3, 2), seed=33)
    check(run(lambda t: t.repeat(*reps), x), T(x).repeat(*reps))
    check(run(lambda t: t.repeat(reps), x), T(x).repeat(reps))


# ---------------------------------------------------------------------------- chunk / split
@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 6, 7])
@pytest.mark.parametrize("axis", [0, -1])
def test_chunk(chunks, axis):
    x = make(np.float32, (6, 5), seed=34)
    exp = torch.chunk(T(x), chunks, axis)
    got = run(lambda t: t.chunk(chunks, axis), x)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        check(g, e)


@pytest.mark.parametrize("split", [1, 2, 4, 7, [1, 4, 2], [7], [0, 3, 4]], ids=str)
@pytest.mark.parametrize("axis", [1, -1])
def test_split(split, axis):
    x = make(np.int32, (3, 7), seed=35)
    exp = torch.split(T(x), split, axis)
    got = run(lambda t: t.split(split, axis), x)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        check(g, e)


def test_split_bad_sizes_raises():
    with pytest.raises(ValueError):
        lm.Graph().tensor((3, 7)).split([2, 2], 1)


# ---------------------------------------------------------------------------- pool_last_dim
def numpy_windows(x, kernel, stride, dilation):
    n = x.shape[-1]
    n_win = (n - dilation * (kernel - 1) - 1) // stride + 1
    idx = stride * np.arange(n_win)[:, None] + dilation * np.arange(kernel)[None, :]
    return x[..., idx]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("kernel,stride", [(1, 1), (3, 1), (3, 2), (2, 3), (4, 4), (10, 1), (5, 3)])
def test_pool_last_dim_vs_unfold(dtype, kernel, stride):
    x = make(dtype, (2, 3, 10), seed=36)
    got = run(lambda t: t.pool_last_dim(kernel, stride), x)
    check(got, T(x).unfold(-1, kernel, stride))
    check(got, numpy_windows(x, kernel, stride, 1))


@pytest.mark.parametrize("kernel,stride,dilation", [(3, 1, 2), (2, 2, 3), (3, 3, 4), (2, 1, 9), (4, 2, 2)])
def test_pool_last_dim_dilated(kernel, stride, dilation):
    x = make(np.float32, (3, 11), seed=37)
    check(run(lambda t: t.pool_last_dim(kernel, stride, dilation), x), numpy_windows(x, kernel, stride, dilation))


def test_pool_last_dim_then_reduce_is_avg_pool():
    x = make(np.float32, (2, 3, 12), seed=38)
    got = run(lambda t: t.pool_last_dim(4, 2).mean(-1), x)
    check(got, F.avg_pool1d(T(x), 4, 2), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- gather / index_select
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_gather(axis, idx_dtype, dtype):
    data = make(dtype, (4, 5, 6), seed=39)
    rng = np.random.default_rng(40)
    # index is smaller than data along the other axes and may be longer along ``axis``
    shape = [3, 2, 4]
    shape[axis] = 7
    index = rng.integers(0, data.shape[axis], size=shape).astype(idx_dtype)
    got = run(lambda d, i: d.gather(axis, i), data, index)
    check(got, torch.gather(T(data), axis, T(index.astype(np.int64))))


def test_gather_index_from_argmax():
    x = make(np.float32, (3, 4, 5), seed=41)
    t = T(x)
    got = run(lambda g: g.gather(1, g.argmax(1, keepdim=True)), x)
    check(got, torch.gather(t, 1, t.argmax(1, keepdim=True)))
    check(got, t.amax(1, keepdim=True))


@pytest.mark.parametrize("bad", [6, -1, 100])
def test_gather_out_of_range_raises_at_execute(bad):
    data = make(np.float32, (3, 6), seed=42)
    index = np.array([[0, 1], [bad, 2]], np.int64)
    cx = lm.Graph()
    d = cx.tensor(data.shape).set(data)
    i = cx.tensor(index.shape, dtype=lm.int64).set(index)
    d.gather(1, i).retrieve()  # building is fine: the values are only known at execute
    with pytest.raises(IndexError):
        cx.execute()
    with pytest.raises((IndexError, RuntimeError)):
        torch.gather(T(data), 1, T(index))


def test_gather_errors_when_building():
    cx = lm.Graph()
    d = cx.tensor((3, 4))
    with pytest.raises(TypeError):
        d.gather(0, cx.tensor((3, 4)))  # float index
    with pytest.raises(lm.GraphError):
        d.gather(0, cx.tensor((3,), dtype=lm.int64))  # rank mismatch
    with pytest.raises(lm.GraphError):
        d.gather(0, cx.tensor((2, 5), dtype=lm.int64))  # index larger than data on a non-gather axis


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("n_idx", [1, 3, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_index_select(axis, n_idx, dtype):
    data = make(dtype, (4, 5, 6), seed=43)
    index = np.random.default_rng(44 + n_idx).integers(0, data.shape[axis], size=(n_idx,)).astype(np.int64)
    got = run(lambda d, i: d.index_select(axis, i), data, index)
    check(got, torch.index_select(T(data), axis, T(index)))


@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
def test_embedding_lookup(idx_dtype):
    vocab, dim, batch, seq = 11, 6, 3, 7
    table = make(np.float32, (vocab, dim), seed=45)
    ids = np.random.default_rng(46).integers(0, vocab, size=(batch, seq)).astype(idx_dtype)
    got = run(lambda w, i: w.index_select(0, i), table, ids)
    assert got.shape == (batch, seq, dim)
    check(got, F.embedding(T(ids.astype(np.int64)), T(table)))


def test_index_select_on_middle_axis_with_2d_index():
    data = make(np.float64, (2, 5, 3), seed=47)
    ids = np.array([[4, 0], [1, 1], [3, 2]], np.int64)
    got = run(lambda d, i: d.index_select(1, i), data, ids)
    check(got, T(data)[:, T(ids)])


def test_index_select_out_of_range_raises_at_execute():
    cx = lm.Graph()
    table = cx.tensor((4, 3)).set(make(np.float32, (4, 3)))
    ids = cx.tensor((2,), dtype=lm.int64).set(np.array([1, 4], np.int64))
    table.index_select(0, ids).retrieve()
    with pytest.raises(IndexError):
        cx.execute()


def test_index_select_float_index_raises():
    cx = lm.Graph()
    with pytest.raises(TypeError):
        cx.tensor((4, 3)).index_select(0, cx.tensor((2,)))


# ---------------------------------------------------------------------------- chained views
@pytest.mark.parametrize("perm,shape", [((1, 0, 2), (3, -1)), ((2, 0, 1), (-1,)), ((0, 2, 1), (6, 10)),
                                        ((2, 1, 0), (5, 2, 2, 3)), ((1, 2, 0), (12, 5)), ((2, 0, 1), (5, 2, 6))])
def test_reshape_after_permute(perm, shape):
    x = make(np.float32, (4, 3, 5), seed=48)
    check(run(lambda t: t.permute(perm).reshape(shape), x), T(x).permute(perm).reshape(shape))


@pytest.mark.parametrize("key,shape", [((slice(None), slice(1, 3)), (-1,)), ((slice(1, None), slice(None, None, 2)), (3, -1)),
                                       ((Ellipsis, slice(None, None, -1)), (4, 3, 5)), ((slice(0, 3),), (3, 3, 5)),
                                       ((slice(None), 1), (20,)), ((slice(None, None, 2), slice(None), slice(1, 4)), (-1, 3))],
                         ids=str)
def test_reshape_of_sliced(key, shape):
    x = make(np.int64, (4, 3, 5), seed=49)
    check(run(lambda t: t[key].reshape(shape), x), x[key].reshape(shape))


def test_reshape_of_broadcast_and_padded():
    x = make(np.float32, (3, 1, 4), seed=50)
    t = T(x)
    got = run(lambda g: (g.expand(3, 2, 4).reshape(6, 4), g.expand(3, 2, 4).reshape(3, 8),
                         g.pad([(1, 0), (0, 1)]).reshape(-1, 4), g.squeeze(1).T.reshape(2, 6)), x)
    check(got[0], t.expand(3, 2, 4).reshape(6, 4))
    check(got[1], t.expand(3, 2, 4).reshape(3, 8))
    check(got[2], F.pad(t, (0, 0, 0, 1, 1, 0)).reshape(-1, 4))
    check(got[3], t.squeeze(1).T.reshape(2, 6))


def test_ops_on_padded_permuted_broadcast_inputs():
    a = make(np.float32, (3, 4), seed=51)
    b = make(np.float32, (5, 1), seed=52)
    ta, tb = T(a), T(b)

    def build(x, y):
        xv = x.pad([(1, 1), (0, 1)]).T                        # (5, 5) padded then transposed
        yv = y.expand(5, 5)                                   # broadcast
        z = xv * yv + xv.flip(0)                              # elementwise on views
        return z, z.sum(0), (xv[1:, ::2] @ yv[:3, :2]), z.reshape(25)[3::4]

    got = run(build, a, b)
    xv = F.pad(ta, (0, 1, 1, 1)).T
    yv = tb.expand(5, 5)
    z = xv * yv + xv.flip(0)
    check(got[0], z, rtol=1e-6, atol=1e-6)
    check(got[1], z.sum(0), rtol=1e-5, atol=1e-6)
    check(got[2], xv[1:, ::2] @ yv[:3, :2], rtol=1e-5, atol=1e-6)
    check(got[3], z.reshape(25)[3::4], rtol=1e-6, atol=1e-6)


def test_chain_of_every_view():
    x = make(np.float64, (2, 3, 4), seed=53)
    t = T(x)

    def build(g):
        return (g.permute(2, 0, 1)[1:, :, ::-1].unsqueeze(1).expand(3, 2, 2, 3).flatten(0, 1)
                .pad([(0, 0), (1, 0), (0, 2)]).transpose(0, 2).contiguous().reshape(5, -1))

    exp = (F.pad(t.permute(2, 0, 1)[1:].flip(2).unsqueeze(1).expand(3, 2, 2, 3).flatten(0, 1), (0, 2, 1, 0))
           .transpose(0, 2).reshape(5, -1))
    check(run(build, x), exp)


# ---------------------------------------------------------------------------- symbolic dims
SYM_KEYS = [slice(1, -1), slice(None, None, -1), slice(-2, None), slice(None, None, 2), slice(1, None, 3),
            slice(-1, None, -2), slice(None, -3), slice(2, 100), slice(3, 1, -1), -1, 0]


@pytest.mark.parametrize("key", SYM_KEYS, ids=repr)
def test_getitem_on_symbolic_dim(key):
    cx = lm.Graph()
    x = cx.tensor(("n", 3))
    y = x[key].retrieve()
    for n in ((4, 7) if isinstance(key, int) else (1, 4, 7)):
        xv = make(np.float32, (n, 3), seed=60 + n)
        x.set(xv)
        cx.execute()
        check(y.data(), xv[key])


def test_views_on_symbolic_dim():
    cx = lm.Graph()
    x = cx.tensor(("n", 4))
    outs = [x.pad([(1, 2)], value=3.0), x.flip(0).reshape(-1), x.T.reshape(-1), x.pool_last_dim(2),
            x.unsqueeze(0).expand(2, "n", 4), lm.concat([x, x[:1]], 0), x.permute(1, 0)[::2]]
    for o in outs:
        o.retrieve()
    for n in (3, 6):
        xv = make(np.float32, (n, 4), seed=70 + n)
        x.set(xv)
        cx.execute()
        t = T(xv)
        exps = [F.pad(t, (0, 0, 1, 2), value=3.0), t.flip(0).reshape(-1), t.T.reshape(-1), t.unfold(-1, 2, 1),
                t.unsqueeze(0).expand(2, n, 4), torch.cat([t, t[:1]], 0), t.permute(1, 0)[::2]]
        for o, e in zip(outs, exps):
            check(o.data(), e)
