"""``lm.set_float32_matmul_precision`` (luminal/precision.py) against ``torch.set_float32_matmul_precision`` on the
CPU (torch 2.x: ``"medium"`` rounds both operands of a float32 matmul to bfloat16, sums in float32).

Oracles: torch under the same setting (where this torch build rounds on this CPU: ``_torch_rounds``), and float64
numpy products of the bfloat16-rounded operands.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.codegen.gemm_lowp import operand_stores
from luminal.codegen.kernel import GemmKernel
from luminal.runtime.cpu import find_compiler

DEVICES = ["reference"] + (["cpu"] if find_compiler() is not None else [])


@pytest.fixture(autouse=True)
def _restore():
    yield
    lm.set_float32_matmul_precision("highest")
    torch.set_float32_matmul_precision("highest")


def _torch(fn, precision):
    torch.set_float32_matmul_precision(precision)
    try:
        return fn()
    finally:
        torch.set_float32_matmul_precision("highest")


def _bf16(x):
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).bfloat16().double().numpy()


def _close(got, ref_a, ref_b, k):
    """``got`` against the float64 product of the rounded operands, within float32 accumulation error."""
    ref = ref_a @ ref_b
    bound = np.abs(ref_a) @ np.abs(ref_b)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= (k + 2) * 2.0 ** -23 * bound + 1e-30)


def _torch_rounds() -> bool:
    """Whether this torch build's "medium" rounds a float32 matmul's operands to bfloat16 on this CPU (torch 2.13
    does on an Intel Xeon with AMX; on an AMD EPYC with AVX512-BF16 it stays in float32). Where it does not,
    the float64 products of the rounded operands are the only oracle."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((32, 64), (64, 16)))
    got = _torch(lambda: (torch.from_numpy(a) @ torch.from_numpy(b)).numpy(), "medium").astype(np.float64)
    return np.abs(got - _bf16(a) @ _bf16(b)).max() < np.abs(got - a.astype(np.float64) @ b).max()


def test_setting_and_errors():
    assert lm.get_float32_matmul_precision() == "highest"
    lm.set_float32_matmul_precision("medium")
    assert lm.get_float32_matmul_precision() == "medium"
    with pytest.raises(ValueError, match="'highest', 'high', 'medium'.*'low'"):
        lm.set_float32_matmul_precision("low")
    assert lm.get_float32_matmul_precision() == "medium"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", [((96, 200), (200, 70)), ((3, 40, 64), (3, 64, 50)), ((5, 64), (2, 1, 64, 30))])
def test_medium_matches_torch(device, shapes):
    rng = np.random.default_rng(len(shapes[0]))
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    lm.set_float32_matmul_precision("medium")
    cx = lm.Graph()
    y = (cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b)).retrieve()
    lm.set_float32_matmul_precision("highest")  # (read when the graph is built)
    if device == "cpu":
        cx.compile(device="cpu")
        prog = cx.runtime.program
        assert [operand_stores(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)] == [("bf16r", "bf16r")]
    cx.execute()
    assert y.dtype == lm.float32
    k = a.shape[-1]
    if _torch_rounds():
        ref = _torch(lambda: (torch.from_numpy(a) @ torch.from_numpy(b)).numpy(), "medium")
        np.testing.assert_allclose(y.data(), ref, rtol=0, atol=(k + 2) * 2.0 ** -23 * np.abs(ref).max() + 1e-6)
    _close(y.data(), _bf16(a), _bf16(b), k)
    assert np.abs(y.data() - a.astype(np.float64) @ b).max() > 1e-3  # (the rounding did happen)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_layer_forward_and_gradients(device):
    """nn.Linear under "medium" against torch's: the forward equals within float32 accumulation; the gradients
    within bfloat16 precision (torch also rounds the incoming gradient in its backward products; luminal keeps it
    float32, the products of the rounded operands)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((48, 80)).astype(np.float32)
    lin = lm.nn.Linear(80, 40)
    tl = torch.nn.Linear(80, 40)
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(np.asarray(lin.weight.data)))
        tl.bias.copy_(torch.from_numpy(np.asarray(lin.bias.data)))
    lm.set_float32_matmul_precision("medium")
    cx = lm.Graph()
    x = cx.tensor(a.shape).set(a)
    y = lin(x)
    from luminal.training import grad
    gx, gw = grad((y * y).sum(), [x, lin.weight])
    for t in (y, gx, gw):
        t.retrieve()
    lm.set_float32_matmul_precision("highest")
    if device == "cpu":
        cx.compile(device="cpu")
    cx.execute()
    ta = torch.from_numpy(a).requires_grad_()

    def run():
        out = tl(ta)
        (out * out).sum().backward()
        return out.detach().numpy()
    if _torch_rounds():
        ref = _torch(run, "medium")
        wants = (ta.grad.numpy(), tl.weight.grad.numpy())
    else:  # float64 on the rounded operands: y = x W^T + b, dy = 2 y, gx = dy W, gW = dy^T x
        w, bias = np.asarray(lin.weight.data), np.asarray(lin.bias.data).astype(np.float64)
        ref = _bf16(a) @ _bf16(w).T + bias
        dy = _bf16(2 * ref)
        wants = (dy @ _bf16(w), dy.T @ _bf16(a))
    np.testing.assert_allclose(y.data(), ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    for got, want in zip((gx, gw), wants):
        np.testing.assert_allclose(got.data(), want, rtol=0, atol=2 * 2.0 ** -8 * np.abs(want).max())


def test_matrix_vector_products_are_not_rounded():
    """A 1-D operand makes a matrix-vector product, which torch's "medium" leaves in float32 on the CPU."""
    rng = np.random.default_rng(7)
    v, m = rng.standard_normal(64).astype(np.float32), rng.standard_normal((64, 30)).astype(np.float32)
    lm.set_float32_matmul_precision("medium")
    cx = lm.Graph()
    y = (cx.tensor(v.shape).set(v) @ cx.tensor(m.shape).set(m)).retrieve()
    z = (cx.tensor(m.T.shape).set(np.ascontiguousarray(m.T)) @ cx.tensor(v.shape).set(v)).retrieve()
    cx.execute()
    ref = _torch(lambda: (torch.from_numpy(v) @ torch.from_numpy(m)).numpy(), "medium")
    np.testing.assert_allclose(y.data(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z.data(), ref, rtol=1e-5, atol=1e-5)


def test_high_is_highest_and_convolutions_are_not_rounded():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((30, 50)).astype(np.float32), rng.standard_normal((50, 20)).astype(np.float32)
    img, ker = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    outs = {}
    for p in ("highest", "high", "medium"):
        lm.set_float32_matmul_precision(p)
        cx = lm.Graph()
        y = (cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b)).retrieve()
        c = lm.nn.functional.conv2d(cx.tensor(img.shape).set(img), cx.tensor(ker.shape).set(ker)).retrieve()
        cx.execute()
        outs[p] = (y.data(), c.data())
    np.testing.assert_array_equal(outs["high"][0], outs["highest"][0])
    assert np.abs(outs["medium"][0] - outs["highest"][0]).max() > 1e-3
    np.testing.assert_array_equal(outs["medium"][1], outs["highest"][1])


def test_graphs_keep_the_setting_they_were_built_with():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((20, 64)).astype(np.float32), rng.standard_normal((64, 10)).astype(np.float32)
    cx = lm.Graph()
    x, w = cx.tensor(a.shape).set(a), cx.tensor(b.shape).set(b)
    exact = (x @ w).retrieve()
    lm.set_float32_matmul_precision("medium")
    rounded = (x @ w).retrieve()
    cx.execute()
    _close(exact.data(), a.astype(np.float64), b.astype(np.float64), 64)
    _close(rounded.data(), _bf16(a), _bf16(b), 64)


def test_eager_operations_use_the_setting_they_were_recorded_under():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)
    x, w = lm.tensor(a), lm.tensor(b)
    lm.set_float32_matmul_precision("medium")
    rounded = x @ w  # realized below, after the setting changed back
    lm.set_float32_matmul_precision("highest")
    exact = x @ w
    lm.set_float32_matmul_precision("medium")
    exact_np, rounded_np = exact.numpy(), rounded.numpy()  # both realized under "medium"
    _close(rounded_np, _bf16(a), _bf16(b), 64)
    _close(exact_np, a.astype(np.float64), b.astype(np.float64), 64)
