"""Tests for ``luminal.shape.ShapeTracker``: every view op against numpy, zero-copy rules, errors.

Oracle: the same chain of view ops applied to a numpy array (transpose, broadcast_to, slicing, np.flip,
np.pad with zeros, sliding_window_view, reshape). All values are exact integers: comparisons are exact.
The physical buffer holds 1..n so that zero padding is distinguishable from real data.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from luminal.shape import ShapeTracker, UnboundSymbolError, sym

PROP = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------- oracle helpers
def np_pool(arr: np.ndarray, axis: int, kernel: int, stride: int, dilation: int) -> np.ndarray:
    """Axis ``axis`` of size n becomes ``(n_windows, kernel)`` with element ``[w, k] = x[stride*w + dilation*k]``."""
    span = dilation * (kernel - 1) + 1
    win = sliding_window_view(arr, span, axis=axis)           # window axis appended last
    win = np.take(win, np.arange(0, win.shape[axis], stride), axis=axis)
    win = win[..., ::dilation]
    return np.moveaxis(win, -1, axis + 1)


def flat_reads(tracker: ShapeTracker, buf: np.ndarray, bindings=None) -> np.ndarray:
    """Values read at every flat logical index z through index_expression()/valid_expression()."""
    shape = tracker.shape(bindings)
    n = math.prod(shape)
    env = dict(bindings or {})
    env["z"] = np.arange(n, dtype=np.int64)
    idx = np.broadcast_to(np.asarray(tracker.index_expression().evaluate_array(env)), (n,)).astype(np.int64)
    valid = np.broadcast_to(np.asarray(tracker.valid_expression().evaluate_array(env)), (n,)).astype(bool)
    if valid.any():
        assert idx[valid].min() >= 0 and idx[valid].max() < buf.size, (tracker, idx[valid])
        assert tracker.physical_extent(bindings) >= idx[valid].max() + 1, tracker
    out = np.zeros(n, dtype=buf.dtype)
    out[valid] = buf[idx[valid]]
    return out.reshape(shape)


def check_view(tracker: ShapeTracker, buf: np.ndarray, expected: np.ndarray, bindings=None):
    assert tracker.shape(bindings) == expected.shape, (tracker, expected.shape)
    got = tracker.gather_numpy(buf, bindings)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected, err_msg=repr(tracker))
    np.testing.assert_array_equal(flat_reads(tracker, buf, bindings), expected, err_msg=repr(tracker))
    if tracker.is_contiguous():
        np.testing.assert_array_equal(buf[: expected.size].reshape(expected.shape), expected)


def random_factorization(draw, n: int, max_dims: int = 5) -> tuple[int, ...]:
    """A random shape with product n (n >= 1), possibly with size-1 axes."""
    primes, m, p = [], n, 2
    while m > 1:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    order = draw(st.permutations(primes)) if primes else []
    k = draw(st.integers(1, max(1, min(max_dims, len(primes)))))
    dims = [1] * k
    for q in order:
        dims[draw(st.integers(0, k - 1))] *= q
    for _ in range(draw(st.integers(0, 1))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(dims)


# ---------------------------------------------------------------------------------------------- the property test
# Hypothesis favours early entries; the ops that create masks / need copies come first.
OPS = ["pad", "slice", "reshape", "merge_dims", "pool", "permute", "flip", "split_dims", "expand", "squeeze",
       "expand_dim", "unsqueeze"]


def apply_random_op(draw, tracker: ShapeTracker, arr: np.ndarray, buf: np.ndarray):
    """Apply one random valid view op to (tracker, arr); returns (tracker, arr, buf, description)."""
    shape = arr.shape
    ndim = len(shape)
    op = draw(st.sampled_from(OPS))
    if op == "permute" and ndim >= 1:
        perm = draw(st.permutations(range(ndim)))
        return tracker.permute(perm), np.transpose(arr, perm), buf, (op, perm)
    if op == "expand":
        ones = [j for j, d in enumerate(shape) if d == 1]
        if ones:
            axis, k = draw(st.sampled_from(ones)), draw(st.integers(1, 4))
            new_shape = shape[:axis] + (k,) + shape[axis + 1:]
            return tracker.expand(axis, k), np.broadcast_to(arr, new_shape), buf, (op, axis, k)
    if op == "expand_dim" and ndim < 6:
        axis, k = draw(st.integers(0, ndim)), draw(st.integers(1, 3))
        expected = np.expand_dims(arr, axis)
        expected = np.broadcast_to(expected, expected.shape[:axis] + (k,) + expected.shape[axis + 1:])
        return tracker.expand_dim(axis, k), expected, buf, (op, axis, k)
    if op == "unsqueeze" and ndim < 6:
        axis = draw(st.integers(-ndim - 1, ndim))
        return tracker.unsqueeze(axis), np.expand_dims(arr, axis), buf, (op, axis)
    if op == "squeeze":
        ones = [j for j, d in enumerate(shape) if d == 1]
        if ones:
            axis = draw(st.sampled_from(ones))
            if draw(st.booleans()):
                axis -= ndim  # negative axes are accepted too
            return tracker.squeeze(axis), np.squeeze(arr, axis), buf, (op, axis)
    if op == "slice" and ndim >= 1:
        axis = draw(st.integers(0, ndim - 1))
        n = shape[axis]
        bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
        start, stop = draw(bound), draw(bound)
        step = draw(st.sampled_from([-3, -2, -1, 1, 1, 2, 3]))
        # mirror the tensor layer's normalization: Python's slice.indices; for negative steps -1 means
        # "through index 0", which the tracker also spells stop=None
        s, e, _ = slice(start, stop, step).indices(n)
        if step < 0 and e < 0:
            e = -1
        t_stop = None if ((step > 0 and e == n) or (step < 0 and e == -1)) and draw(st.booleans()) else e
        key = (slice(None),) * axis + (slice(start, stop, step),)
        return tracker.slice(axis, s, t_stop, step), arr[key], buf, (op, axis, s, t_stop, step)
    if op == "flip" and ndim >= 1:
        axis = draw(st.integers(0, ndim - 1))
        return tracker.flip(axis), np.flip(arr, axis), buf, (op, axis)
    if op == "pad" and ndim >= 1:
        axis, before, after = draw(st.integers(0, ndim - 1)), draw(st.integers(0, 3)), draw(st.integers(0, 3))
        widths = [(0, 0)] * ndim
        widths[axis] = (before, after)
        return tracker.pad(axis, before, after), np.pad(arr, widths), buf, (op, axis, before, after)
    if op == "pool" and ndim >= 1 and ndim < 6:
        axis = draw(st.integers(0, ndim - 1))
        n = shape[axis]
        if n >= 1:
            kernel = draw(st.integers(1, n))
            max_dil = 1 if kernel == 1 else (n - 1) // (kernel - 1)
            dilation = draw(st.integers(1, max(1, min(3, max_dil))))
            stride = draw(st.integers(1, 3))
            return (tracker.pool(axis, kernel, stride, dilation), np_pool(arr, axis, kernel, stride, dilation), buf,
                    (op, axis, kernel, stride, dilation))
    if op == "split_dims" and ndim >= 1 and ndim < 6:
        axis = draw(st.integers(0, ndim - 1))
        n = shape[axis]
        divisors = [d for d in range(1, n + 1) if n % d == 0] or [1]
        inner = draw(st.sampled_from(divisors))
        outer = n // inner
        expected = arr.reshape(shape[:axis] + (outer, inner) + shape[axis + 1:])
        return tracker.split_dims(axis, inner), expected, buf, (op, axis, inner)
    if op == "merge_dims" and ndim >= 2:
        axis = draw(st.integers(0, ndim - 2))
        new_shape = shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:]
        expected = arr.reshape(new_shape)
        merged = tracker.merge_dims(axis, axis + 1 if draw(st.booleans()) else None)
        if merged is None:  # needs a copy: materialize (what a Contiguous op does) and restart
            assert not tracker.is_contiguous(), tracker
            return ShapeTracker.contiguous_of(new_shape), expected, np.ascontiguousarray(expected).reshape(-1), \
                (op, axis, "copy")
        return merged, expected, buf, (op, axis)
    if op == "reshape" and arr.size >= 1:
        new_shape = random_factorization(draw, arr.size)
        expected = arr.reshape(new_shape)
        out = tracker.reshape(new_shape)
        if out is None:
            assert not tracker.is_contiguous(), tracker
            return ShapeTracker.contiguous_of(new_shape), expected, np.ascontiguousarray(expected).reshape(-1), \
                (op, new_shape, "copy")
        return out, expected, buf, (op, new_shape)
    return tracker, arr, buf, ("noop", op)


@PROP
@given(st.data())
def test_random_view_chains_match_numpy(data):
    draw = data.draw
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4), label="shape"))
    n = math.prod(shape)
    buf = np.arange(1, n + 1, dtype=np.int64)
    arr = buf.reshape(shape)
    tracker = ShapeTracker.contiguous_of(shape)
    assert tracker.is_contiguous()
    check_view(tracker, buf, arr)
    history = [shape]
    for _ in range(draw(st.integers(1, 6), label="chain length")):
        tracker, arr, buf, what = apply_random_op(draw, tracker, arr, buf)
        history.append(what)
        assert tracker.shape() == arr.shape, history
        check_view(tracker, buf, arr)
    # trackers are values: an identical rebuild is equal and hashes equal
    clone = ShapeTracker(tracker.dims, tracker.strides, tracker.offset, tracker.masks)
    assert clone == tracker and hash(clone) == hash(tracker)


# ---------------------------------------------------------------------------------------------- symbolic chains
@PROP
@given(st.integers(1, 6), st.integers(1, 4))
def test_symbolic_chain_matches_numpy_after_binding(s_val, b_val):
    bindings = {"s": s_val, "b": b_val}
    tracker = (ShapeTracker.contiguous_of(("b", "s", 3))
               .pad(1, 1, 2)            # (b, s+3, 3)
               .permute((2, 0, 1))      # (3, b, s+3)
               .slice(2, 1, None, 2)    # every second padded row from 1
               .flip(0)
               .unsqueeze(1)
               .expand(1, 2))
    buf = np.arange(1, b_val * s_val * 3 + 1, dtype=np.int64)
    arr = buf.reshape(b_val, s_val, 3)
    arr = np.pad(arr, [(0, 0), (1, 2), (0, 0)]).transpose(2, 0, 1)[:, :, 1::2][::-1]
    arr = np.broadcast_to(arr[:, None], (3, 2) + arr.shape[1:])
    assert tracker.symbols() == {"b", "s"}
    check_view(tracker, buf, arr, bindings)
    resolved = tracker.resolve(bindings)
    assert not resolved.symbols()
    check_view(resolved, buf, arr)
    # the index expressions of the symbolic tracker, with s and b bound, agree with the resolved ones
    zs = np.arange(arr.size)
    np.testing.assert_array_equal(
        np.broadcast_to(tracker.index_expression().evaluate_array({"z": zs, **bindings}), zs.shape),
        np.broadcast_to(resolved.index_expression().evaluate_array({"z": zs}), zs.shape))


@PROP
@given(st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2))
def test_symbolic_pool_and_split_match_numpy(s_val, kernel, stride, dilation):
    span = dilation * (kernel - 1) + 1
    n = s_val + span  # the pooled axis is "s + span" long, so there is always at least one window
    tracker = ShapeTracker.contiguous_of((2, sym("s") + span)).pool(1, kernel, stride, dilation)
    buf = np.arange(1, 2 * n + 1, dtype=np.int64)
    expected = np_pool(buf.reshape(2, n), 1, kernel, stride, dilation)
    check_view(tracker, buf, expected, {"s": s_val})
    split = ShapeTracker.contiguous_of(("b", 6)).permute((1, 0)).split_dims(0, 3)
    buf = np.arange(1, 6 * s_val + 1, dtype=np.int64)
    check_view(split, buf, buf.reshape(s_val, 6).T.reshape(2, 3, s_val), {"b": s_val})


# ---------------------------------------------------------------------------------------------- zero-copy rules
@PROP
@given(st.data())
def test_reshape_of_contiguous_never_copies(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    new_shape = random_factorization(data.draw, math.prod(shape))
    out = ShapeTracker.contiguous_of(shape).reshape(new_shape)
    assert out is not None
    assert out.is_contiguous() and out == ShapeTracker.contiguous_of(new_shape)


@PROP
@given(st.data())
def test_split_always_works_on_any_view(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=2, max_size=4)))
    perm = data.draw(st.permutations(range(len(shape))))
    buf = np.arange(1, math.prod(shape) + 1, dtype=np.int64)
    tracker = ShapeTracker.contiguous_of(shape).permute(perm).flip(0).pad(1, 1, 1)
    arr = np.pad(np.flip(buf.reshape(shape).transpose(perm), 0), [(0, 0), (1, 1)] + [(0, 0)] * (len(shape) - 2))
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = arr.shape[axis]
    inner = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    out = tracker.split_dims(axis, inner)
    assert out is not None
    check_view(out, buf, arr.reshape(arr.shape[:axis] + (n // inner, inner) + arr.shape[axis + 1:]))
    # and splitting then merging back is a no-op view
    merged = out.merge_dims(axis)
    assert merged is not None
    check_view(merged, buf, arr)


def test_merge_of_permuted_pair_needs_copy():
    st_ = ShapeTracker.contiguous_of((2, 3)).permute((1, 0))
    assert st_.merge_dims(0) is None
    assert st_.reshape((6,)) is None
    assert ShapeTracker.contiguous_of((2, 3, 4)).permute((0, 2, 1)).reshape((2, 12)) is None
    # merging the untouched outer pair of a partially permuted view is fine
    part = ShapeTracker.contiguous_of((2, 3, 4, 5)).permute((0, 1, 3, 2))
    merged = part.merge_dims(0)
    assert merged is not None
    buf = np.arange(1, 121, dtype=np.int64)
    check_view(merged, buf, buf.reshape(2, 3, 4, 5).transpose(0, 1, 3, 2).reshape(6, 5, 4))


def test_masked_views_merge_and_reshape_without_copy_when_affine():
    buf = np.arange(1, 25, dtype=np.int64)
    padded = ShapeTracker.contiguous_of((2, 3, 4)).pad(0, 1, 2)       # mask on axis 0 only
    arr = np.pad(buf.reshape(2, 3, 4), [(1, 2), (0, 0), (0, 0)])
    merged = padded.merge_dims(1)
    assert merged is not None and merged.has_masks()
    check_view(merged, buf, arr.reshape(5, 12))
    # split the padded axis and merge it back: the mask stays affine in the merged index
    split = ShapeTracker.contiguous_of((6, 4)).pad(0, 2, 0).split_dims(0, 2)
    arr = np.pad(buf.reshape(6, 4), [(2, 0), (0, 0)])
    check_view(split, buf, arr.reshape(4, 2, 4))
    back = split.merge_dims(0)
    assert back is not None
    check_view(back, buf, arr)
    reshaped = split.reshape((8, 4))
    assert reshaped is not None
    check_view(reshaped, buf, arr)
    # merging the padded axis with its neighbour is not affine: copy
    assert ShapeTracker.contiguous_of((6, 4)).pad(1, 1, 0).merge_dims(0) is None


def test_symbolic_reshape_merges_without_copy():
    b = sym("b")
    st_ = ShapeTracker.contiguous_of((b, 3, 4))
    out = st_.reshape((b, 12))
    assert out is not None and out.dims == (b, 12) and out.is_contiguous()
    # the same on a non-contiguous view: (3, 4, b) permuted to (b, 3, 4), then (b, 12)
    perm = ShapeTracker.contiguous_of((3, 4, b)).permute((2, 0, 1))
    assert not perm.is_contiguous()
    out = perm.reshape((b, 12))
    assert out is not None and out.dims == (b, 12)
    for bv in (1, 2, 5):
        buf = np.arange(1, 12 * bv + 1, dtype=np.int64)
        check_view(out, buf, buf.reshape(3, 4, bv).transpose(2, 0, 1).reshape(bv, 12), {"b": bv})
        check_view(out.resolve({"b": bv}), buf, buf.reshape(3, 4, bv).transpose(2, 0, 1).reshape(bv, 12))
    back = out.reshape((b, 3, 4))
    assert back is not None and back == perm


def test_is_contiguous_cases():
    base = ShapeTracker.contiguous_of((2, 3, 4))
    assert base.is_contiguous()
    assert not base.permute((1, 0, 2)).is_contiguous()
    assert base.permute((1, 0, 2)).permute((1, 0, 2)).is_contiguous()
    assert base.unsqueeze(0).is_contiguous() and base.unsqueeze(3).is_contiguous()
    assert not base.unsqueeze(0).expand(0, 5).is_contiguous()
    assert base.slice(1, 0, None, 1).is_contiguous()
    assert not base.slice(1, 1, None, 1).is_contiguous()
    assert not base.slice(2, 0, None, 2).is_contiguous()
    assert not base.flip(0).is_contiguous()
    assert not base.pad(0, 1, 0).is_contiguous()
    assert base.slice(0, 0, 1, 1).is_contiguous()  # first row of a contiguous tensor: offset 0, still row-major
    assert base.split_dims(2, 2).is_contiguous() and base.merge_dims(0).is_contiguous()
    assert ShapeTracker.contiguous_of(()).is_contiguous()
    assert base.permute((1, 0, 2)).contiguous() == ShapeTracker.contiguous_of((3, 2, 4))


def test_n_elements_and_symbolic_shapes():
    assert ShapeTracker.contiguous_of((2, 3, 4)).n_elements() == 24
    assert ShapeTracker.contiguous_of(()).n_elements() == 1
    b, s = sym("b"), sym("s")
    st_ = ShapeTracker.contiguous_of(("b", "s", 4))
    assert st_.n_elements() == b * s * 4
    assert st_.n_elements().evaluate({"b": 2, "s": 5}) == 40
    assert st_.strides == (s * 4, 4, 1)
    assert st_.shape({"b": 2, "s": 3}) == (2, 3, 4)
    with pytest.raises(UnboundSymbolError, match="s"):
        st_.shape({"b": 2})
    half = st_.resolve({"b": 2})
    assert half.dims == (2, s, 4) and half.symbols() == {"s"}
    full = st_.resolve({"b": 2, "s": 3})
    assert full == ShapeTracker.contiguous_of((2, 3, 4)) and full.is_contiguous()
    padded = st_.pad(1, 1, 1)
    assert padded.shape({"b": 1, "s": 2}) == (1, 4, 4)
    assert padded.pool(2, 2, 2).shape({"b": 1, "s": 2}) == (1, 4, 2, 2)
    assert ShapeTracker.fake((3, "b")).shape({"b": 2}) == (3, 2)


def test_fake_and_expand_views():
    fake = ShapeTracker.fake((2, 3))
    assert fake.is_fake(0) and fake.is_fake(1)
    np.testing.assert_array_equal(fake.gather_numpy(np.array([7])), np.full((2, 3), 7))
    st_ = ShapeTracker.contiguous_of((3,)).expand_dim(0, 4)
    assert st_.is_fake(0) and not st_.is_fake(1)
    buf = np.arange(1, 4)
    check_view(st_, buf, np.broadcast_to(buf, (4, 3)))


def test_empty_views():
    buf = np.arange(1, 13, dtype=np.int64)
    for tracker, expected in [
        (ShapeTracker.contiguous_of((3, 4)).slice(1, 3, 1, 1), buf.reshape(3, 4)[:, 3:1]),
        (ShapeTracker.contiguous_of((3, 4)).slice(0, 3, None, 1), buf.reshape(3, 4)[3:]),
        (ShapeTracker.contiguous_of((3, 4)).slice(1, 0, 2, -1).pad(0, 1, 1), np.pad(buf.reshape(3, 4)[:, 0:2:-1],
                                                                                   [(1, 1), (0, 0)])),
    ]:
        assert tracker.n_elements() == 0
        check_view(tracker, buf, expected)


# ---------------------------------------------------------------------------------------------- errors
def test_view_op_errors_name_the_problem():
    st_ = ShapeTracker.contiguous_of((2, 3))
    with pytest.raises(ValueError, match=r"\[0, 0\].*2 axes"):
        st_.permute((0, 0))
    with pytest.raises(ValueError, match="permutation"):
        st_.permute((0,))
    with pytest.raises(IndexError, match=r"axis 5 .*\[2, 3\]"):
        st_.permute((0, 5))
    with pytest.raises(ValueError, match="size 2.*5"):
        st_.expand(0, 5)
    with pytest.raises(ValueError, match="size 3, not 1"):
        st_.squeeze(1)
    with pytest.raises(ValueError, match=r"\[2, 3\] \(6 elements\).*\[4, 2\] \(8 elements\)"):
        st_.reshape((4, 2))
    with pytest.raises(ValueError, match="not divisible"):
        st_.split_dims(1, 2)
    with pytest.raises(ValueError, match="larger than the dimension 3"):
        st_.pool(1, 2, 1, 3)
    with pytest.raises(ValueError, match="step"):
        st_.slice(0, 0, None, 0)
    with pytest.raises(IndexError):
        st_.merge_dims(1)
    with pytest.raises(ValueError, match="adjacent"):
        ShapeTracker.contiguous_of((2, 3, 4)).merge_dims(0, 2)
    with pytest.raises(IndexError):
        st_.unsqueeze(4)
    with pytest.raises(IndexError):
        st_.flip(2)
    with pytest.raises(ValueError, match="negative dimension"):
        ShapeTracker.contiguous_of((2, -1))
    with pytest.raises(IndexError, match="reads"):  # a view beyond its buffer is refused, not read out of bounds
        ShapeTracker.contiguous_of((2, 3)).gather_numpy(np.arange(4))


def _masked_views():
    """Views whose reads take the index gather: padded (masks), flipped (negative strides), padded and permuted
    with a broadcast axis, padded on a symbolic axis."""
    base = ShapeTracker.contiguous_of((6, 9, 11))
    yield base.pad(1, 2, 3).pad(2, 1, 0), {}
    yield base.flip(2).pad(0, 1, 1).permute((2, 0, 1)), {}
    yield base.pad(2, 4, 4).expand_dim(1, 5).slice(3, 1, 17, 2), {}
    sym = ShapeTracker.contiguous_of(("n", 9, 11))
    yield sym.pad(0, 1, 2).pad(2, 3, 3), {"n": 6}


@pytest.mark.parametrize("chunk", [1, 5, 37, 100])
def test_masked_gather_in_slices_equals_the_whole(monkeypatch, chunk):
    """A large masked gather is computed in slices of its first long axis (bounded index arrays): the same
    array as the whole gather (a numpy oracle: the padded / flipped / permuted array built directly for the
    first view), and a view reading past its buffer still raises IndexError when sliced."""
    import luminal.shape.tracker as tracker
    buf = np.random.default_rng(3).standard_normal(6 * 9 * 11).astype(np.float32)
    whole = [v.gather_numpy(buf, b) for v, b in _masked_views()]
    monkeypatch.setattr(tracker, "GATHER_CHUNK", chunk)
    for (v, b), want in zip(_masked_views(), whole):
        got = v.gather_numpy(buf, b)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    first = np.pad(buf.reshape(6, 9, 11), ((0, 0), (2, 3), (1, 0)))
    np.testing.assert_array_equal(next(_masked_views())[0].gather_numpy(buf), first)
    past = ShapeTracker((4, 40), (11, 1), 0, ()).pad(0, 1, 1)  # (rows 3: elements up to 72 of a 66-element buffer)
    with pytest.raises(IndexError, match="outside"):
        past.gather_numpy(buf[:66])
