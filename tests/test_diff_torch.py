"""``x.diff`` / ``lm.diff`` are ``torch.diff`` (eager and lazy), compared with torch CPU exactly (integers, bool)
or at atol=rtol=1e-6 (float32); the file comparison is ``compare_file``."""

import numpy as np
import pytest
import torch

import luminal as lm


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("n,dim", [(1, -1), (2, 0), (0, 1), (3, 1), (5, 1)])
def test_eager_diff_matches_torch(n, dim):
    xs = _data(3, 4)
    got = lm.tensor(xs).diff(n, dim)
    ref = torch.diff(torch.tensor(xs), n, dim)
    assert got.shape == tuple(ref.shape)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(lm.diff(lm.tensor(xs), n=n, dim=dim).numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)


def test_prepend_append_int_and_bool():
    xs = np.array([[1, 5, 2], [7, 7, 0]], np.int64)
    pre, app = np.array([[0], [1]], np.int64), np.array([[9, 9], [3, 3]], np.int64)
    got = lm.tensor(xs).diff(dim=1, prepend=lm.tensor(pre), append=lm.tensor(app))
    ref = torch.diff(torch.tensor(xs), dim=1, prepend=torch.tensor(pre), append=torch.tensor(app))
    assert got.dtype == lm.int64
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    b = np.array([True, False, False, True])
    np.testing.assert_array_equal(lm.tensor(b).diff().numpy(), torch.diff(torch.tensor(b)).numpy())


def test_diff_gradient_matches_torch():
    xs = _data(5)
    x = lm.tensor(xs, requires_grad=True)
    (x.diff(2) * lm.tensor(np.arange(3, dtype=np.float32))).sum().backward()
    tx = torch.tensor(xs, requires_grad=True)
    (torch.diff(tx, 2) * torch.arange(3.0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-6)


def test_lazy_graph_diff():
    xs = _data(2, 6)
    cx = lm.Graph()
    x = cx.tensor((2, 6)).set(xs)
    y = x.diff(dim=1, prepend=cx.tensor((2, 1)).set(np.zeros((2, 1), np.float32))).retrieve()
    cx.execute()
    ref = torch.diff(torch.tensor(xs), dim=1, prepend=torch.zeros(2, 1))
    np.testing.assert_allclose(y.data(), ref.numpy(), atol=1e-6)


def test_diff_errors_match_torch():
    x = lm.tensor(_data(4))
    with pytest.raises(RuntimeError, match="order must be non-negative"):
        x.diff(-1)
    with pytest.raises(RuntimeError, match="at least one-dimensional"):
        lm.tensor(1.0).diff()
    with pytest.raises(RuntimeError, match="same dimension as input"):
        x.diff(prepend=lm.tensor(_data(1, 1)))
    with pytest.raises(TypeError, match="compare_file"):
        x.diff("reference.bin")


def test_compare_file_is_the_debug_helper(tmp_path):
    xs = _data(10)
    ref = tmp_path / "ref.bin"
    np.tanh(xs).astype("<f4").tofile(ref)
    cx = lm.Graph()
    x = cx.tensor(10).set(xs)
    x.tanh().compare_file(ref)
    cx.execute()
    assert cx.diff_results[str(ref)]["ok"]


def test_from_torch_diff_uses_the_same_op():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.diff(x, n=2, dim=0, append=x[:1])

    xs = _data(4, 3)
    model = lm.from_torch(M(), (torch.tensor(xs),))
    out = model(xs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    np.testing.assert_allclose(np.asarray(out), M()(torch.tensor(xs)).numpy(), atol=1e-6)
