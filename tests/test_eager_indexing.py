"""Indexing of eager tensors (luminal/eager/tensor.py ``__getitem__``/``__setitem__``) against PyTorch CPU: advanced
indexing with tensors / arrays / lists, boolean masks (realized to their nonzero indices), item assignment with
gradients to the old value and to the assigned value (torch with a cloned leaf), and the errors PyTorch raises.

Values are compared exactly (gathers and wheres move values); gradients within 1e-6 (float32 sums of a few
terms). Each test runs on both eager devices (reference, cpu)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm

T = torch.from_numpy


@pytest.fixture(params=["reference", "cpu"], autouse=True)
def device(request):
    prev = lm.get_default_device()
    lm.set_default_device(request.param)
    yield request.param
    lm.set_default_device(prev)


def same(a, b, atol=0.0):
    a = a.numpy() if isinstance(a, lm.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=0, atol=atol)


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_advanced_getitem_values_and_gradients():
    x = data((4, 5, 6), 0)
    i, k = np.array([3, -1, 0, 3]), np.array([[4], [0]])  # repeated rows accumulate their gradients
    a, at = lm.tensor(x, requires_grad=True), T(x).requires_grad_()
    keys = [lambda u, w: (u, slice(None), w), lambda u, w: (slice(1, 3), u, 2), lambda u, w: (u, None, w),
            lambda u, w: (Ellipsis, u[:2] % 5, w)]
    outs = [a[key(lm.tensor(i), k)] for key in keys] + [a[i.tolist(), 1], a[[0, 2]]]
    touts = [at[key(T(i), T(k))] for key in keys] + [at[i.tolist(), 1], at[[0, 2]]]
    for o, t in zip(outs, touts):
        same(o, t)
    sum(((o * o).sum() for o in outs), lm.tensor(0.0)).backward()
    sum((t * t).sum() for t in touts).backward()
    same(a.grad, at.grad, atol=1e-6)


def test_boolean_mask_getitem():
    x = data((4, 5), 1)
    a, at = lm.tensor(x, requires_grad=True), T(x).requires_grad_()
    m = a > 0.2
    same(a[m], at[at > 0.2])
    same(a[x[:, 0] > 0], at[T(x[:, 0] > 0)])          # a numpy mask on dim 0
    same(a[:, [True, False, True, True, False]], at[:, [True, False, True, True, False]])
    same(a[m, ...], at[at > 0.2, ...])
    (a[m] * a[m]).sum().backward()
    (at[at > 0.2] * at[at > 0.2]).sum().backward()
    same(a.grad, at.grad, atol=1e-6)
    with pytest.raises(IndexError, match="shape of the mask"):
        a[np.ones(5, bool)]
    with pytest.raises(IndexError):
        at[torch.ones(5, dtype=torch.bool)]


def test_same_mask_count_replays():
    x = lm.tensor(data((8,), 2))
    x[lm.tensor(np.arange(8) % 2 == 0)].numpy()
    before = lm.eager.stats()["compiles"]
    x[lm.tensor(np.arange(8) % 2 == 1)].numpy()   # another mask, the same number of True entries
    assert lm.eager.stats()["compiles"] == before


def test_setitem_gradients_reach_old_value_and_value():
    x, v = data((4, 5), 3), data((3, 5), 4)
    w = data((4, 5), 5)
    a, b = lm.tensor(x, requires_grad=True), lm.tensor(v, requires_grad=True)
    at, bt = T(x).requires_grad_(), T(v).requires_grad_()
    y, yt = a.clone(), at.clone()
    y[[2, 0, -1]] = b * 3.0
    yt[[2, 0, -1]] = bt * 3.0
    y[1, ::2] = 0.5
    yt[1, ::2] = 0.5
    y[:, lm.tensor([4])] = b[:1, :1] * 2.0
    yt[:, torch.tensor([4])] = bt[:1, :1] * 2.0
    same(y, yt)
    (y * lm.tensor(w)).sum().backward()
    (yt * T(w)).sum().backward()
    same(a.grad, at.grad, atol=1e-6)
    same(b.grad, bt.grad, atol=1e-6)
    assert (a.grad.numpy()[[0, 2, 3]] == 0).all()   # overwritten rows pass no gradient to the old value


def test_setitem_with_masks():
    x = data((4, 5), 6)
    a, at = lm.tensor(x), T(x.copy())
    a[a < 0] = 0.0                        # count-free value: a where, the mask is not read back
    at[at < 0] = 0.0
    same(a, at)
    m = a > 0.5
    a[m] = lm.arange(int(m.sum())).float()   # one value per True entry: the mask is realized
    mt = at > 0.5
    at[mt] = torch.arange(int(mt.sum())).float()
    same(a, at)
    a[x[:, 0] > 0, 1:3] = np.array([7.0, 8.0], np.float32)
    at[T(x[:, 0] > 0), 1:3] = torch.tensor([7.0, 8.0])
    same(a, at)


def test_setitem_repeated_indices_last_write_wins():
    a, at = lm.zeros(5), torch.zeros(5)
    idx = [1, 3, 1, 1]
    vals = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    a[lm.tensor(idx)] = vals
    at[torch.tensor(idx)] = T(vals)       # torch's CPU loop: in order, the last write wins
    same(a, at)


def test_setitem_errors():
    leaf = lm.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place"):
        leaf[0] = 3.0
    with lm.no_grad():
        leaf[0] = 3.0                     # as torch: allowed without recording
    same(leaf, torch.tensor([3.0, 2.0]))
    a = lm.zeros((3, 4))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        a[0] = np.ones(3, np.float32)
    with pytest.raises(IndexError, match="out of bounds"):
        a[0, 4] = 1.0
    b = lm.zeros((3, 4))
    b[[0, 3]] = 1.0                       # index arrays are inputs of the graph: checked when it runs
    with pytest.raises(IndexError, match="out of range"):
        b.numpy()
    with pytest.raises(IndexError, match="out of range"):
        a[:, lm.tensor([0, 5])].numpy()


def test_mask_in_jit_raises_trace_error():
    @lm.jit
    def f(x):
        return x[x > 0].sum()

    with pytest.raises(lm.JitTraceError):
        f(np.ones(3, np.float32))


def test_eager_repeat_interleave_reads_tensor_repeats():
    """Eager repeats given as a tensor are read (realized) like torch's; values and gradient against torch."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    e = lm.tensor(x, requires_grad=True)
    X = torch.from_numpy(x).requires_grad_(True)
    r = e.repeat_interleave(lm.tensor([1, 0, 2]), dim=0)
    R = X.repeat_interleave(torch.tensor([1, 0, 2]), dim=0)
    np.testing.assert_array_equal(r.numpy(), R.detach().numpy())
    (r * lm.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))).sum().backward()
    (R * torch.arange(12, dtype=torch.float32).reshape(3, 4)).sum().backward()
    np.testing.assert_array_equal(e.grad.numpy(), X.grad.numpy())
