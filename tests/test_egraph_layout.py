"""The layout ruleset (copies looked through), reductions with an op pulled out (through ReducedKey facts) and the
size-aware cost model of the extraction; results compared with numpy on both devices."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import ops
from luminal.compiler import EqualitySaturation, explain
from luminal.compiler.egraph.cost import BACKENDS, SYMBOL_VALUE, SizeCost
from luminal.compiler.egraph.encode import encode
from luminal.compiler.egraph.extract import ENode

DEVICES = ("reference", "cpu")


def counts(cx) -> dict:
    out: dict = {}
    for n in cx.nodes.values():
        out[type(n.op).__name__] = out.get(type(n.op).__name__, 0) + 1
    return out


def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_max_of_x_plus_c_adds_after_the_reduction(device):
    """max(x + 3) over axis 1 of a (6, 40) tensor becomes max(x) + 3: the Add runs on 6 elements, not 240."""
    data = rand((6, 40), 1)
    data[2, 5] = np.nan
    data[4, :] = -np.inf
    cx = lm.Graph()
    x = cx.tensor((6, 40)).set(data)
    y = (x + 3.0).max(1).retrieve()
    p = EqualitySaturation()
    cx.compile(p, y, device=device)
    cx.execute()
    np.testing.assert_array_equal(y.data(), (data + np.float32(3.0)).max(1))
    add = next(n for n in cx.nodes.values() if isinstance(n.op, ops.Add))
    assert tuple(int(d) for d in add.dims) == (6,), cx.summary()  # the Add reads the reduced result
    assert "max-add-const" in explain(cx)
    assert p.report.cost_after < p.report.cost_before


@pytest.mark.parametrize("device", DEVICES)
def test_max_of_x_times_negative_c_is_not_pulled_out(device):
    data = rand((5, 9), 2)
    cx = lm.Graph()
    x = cx.tensor((5, 9)).set(data)
    y = (x * -2.0).max(1).retrieve()
    cx.compile(EqualitySaturation(), y, device=device)
    cx.execute()
    np.testing.assert_array_equal(y.data(), (data * np.float32(-2.0)).max(1))
    mul = next(n for n in cx.nodes.values() if isinstance(n.op, ops.Mul))
    assert tuple(int(d) for d in mul.dims) == (5, 9)  # the order reverses: max(-2x) is -2 min(x), not -2 max(x)


@pytest.mark.parametrize("device", DEVICES)
def test_integer_sum_of_x_times_c_multiplies_after_the_reduction(device):
    """sum(7 i) == 7 sum(i) modulo 2^64 (both sides wrap the same way), over a symbolic axis too. (An int32 sum
    accumulates in int64 as torch's does, so the Mul sits under a Cast there and stays.)"""
    data = np.random.default_rng(3).integers(-2**62, 2**62, (4, 11)).astype(np.int64)
    cx = lm.Graph()
    i = cx.tensor(("n", 11), "int64")
    y = (i * 7).sum(0).retrieve()
    cx.compile(EqualitySaturation(), y, device=device)
    mul = next(n for n in cx.nodes.values() if isinstance(n.op, ops.Mul))
    assert tuple(int(d) for d in mul.dims) == (11,)
    for n in (4, 1, 3):
        i.set(data[:n])
        cx.execute()
        with np.errstate(over="ignore"):
            expect = (data[:n] * np.int64(7)).sum(0, dtype=np.int64)
        np.testing.assert_array_equal(y.data(), expect)


@pytest.mark.parametrize("device", DEVICES)
def test_float_sum_of_x_times_c_keeps_its_rounding(device):
    """sum(x * 0.1) is not sum(x) * 0.1 in floating point: the product stays inside the reduction."""
    data = rand((3, 37), 4)
    cx = lm.Graph()
    x = cx.tensor((3, 37)).set(data)
    y = (x * 0.1).sum(1).retrieve()
    cx.compile(EqualitySaturation(), y, device=device)
    cx.execute()
    mul = next(n for n in cx.nodes.values() if isinstance(n.op, ops.Mul))
    assert tuple(int(d) for d in mul.dims) == (3, 37)
    np.testing.assert_allclose(y.data(), (data.astype(np.float64) * np.float32(0.1)).sum(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_copy_read_whole_is_looked_through(device):
    """exp2(contiguous(x^T)) reads x through the transpose: no Contiguous node remains."""
    data = rand((4, 6), 5)
    cx = lm.Graph()
    x = cx.tensor((4, 6)).set(data)
    a = x.permute(1, 0).contiguous().exp2().retrieve()
    cx.compile(EqualitySaturation(), a, device=device)
    cx.execute()
    np.testing.assert_allclose(a.data(), np.exp2(data.T), rtol=1e-6)
    assert "copy-into-exp2" in explain(cx)
    assert counts(cx).get("Contiguous", 0) == 0, cx.summary()


@pytest.mark.parametrize("device", DEVICES)
def test_a_copy_another_reader_needs_stays_for_both(device):
    """When the copy is also read reshaped (it must exist anyway), reading it row-major is cheaper than reading
    x strided: the whole-program (DAG) cost keeps the original form, though the copy-into rule matched."""
    data = rand((4, 6), 6)
    cx = lm.Graph()
    x = cx.tensor((4, 6)).set(data)
    xt = x.permute(1, 0).contiguous()
    a = xt.exp2().retrieve()
    b = xt.reshape((24,)).cumsum(0).retrieve()
    p = EqualitySaturation()
    cx.compile(p, (a, b), device=device)
    cx.execute()
    np.testing.assert_allclose(a.data(), np.exp2(data.T), rtol=1e-6)
    np.testing.assert_allclose(b.data(), np.cumsum(data.T.reshape(-1), dtype=np.float64), rtol=1e-5, atol=1e-5)
    assert p.report.rules_fired.get("copy-into-exp2", 0) >= 1
    exp2 = next(n for n in cx.nodes.values() if isinstance(n.op, ops.Exp2))
    assert isinstance(cx.nodes[exp2.inputs[0].src].op, ops.Contiguous)


@pytest.mark.parametrize("device", DEVICES)
def test_symbolic_shapes_and_masks(device):
    """The rules over a symbolic batch, with a padded (masked) operand: the same values as numpy at 3 bindings."""
    cx = lm.Graph()
    x = cx.tensor(("b", 5))
    y = (x.pad(((0, 0), (1, 2))) + 1.5).max(1).retrieve()
    z = x.permute(1, 0).contiguous().sqrt().retrieve()
    cx.compile(EqualitySaturation(), (y, z), device=device)
    for b in (2, 1, 5):
        data = np.abs(rand((b, 5), 10 + b))
        x.set(data)
        cx.execute()
        np.testing.assert_array_equal(y.data(), (np.pad(data, ((0, 0), (1, 2))) + np.float32(1.5)).max(1))
        np.testing.assert_allclose(z.data(), np.sqrt(data.T), rtol=1e-6)


# ------------------------------------------------------------------------------------------------ cost model
def _cost_of(build, backend="cpu"):
    cx = lm.Graph()
    build(cx)
    enc = encode(cx)
    model = SizeCost(enc.views, backend)
    return {nid: model(ENode(t[0], tuple(t[1:]), "")) for nid, t in enc.terms.items()}, cx


def test_cost_grows_with_the_elements_and_the_op():
    costs, cx = _cost_of(lambda cx: ((cx.tensor((10, 10)) + 1.0).retrieve(), (cx.tensor((100, 10)) + 1.0).exp2()))
    adds = sorted(costs[n.id] for n in cx.nodes.values() if isinstance(n.op, ops.Add))
    exp2 = next(costs[n.id] for n in cx.nodes.values() if isinstance(n.op, ops.Exp2))
    assert adds[1] == pytest.approx(10 * adds[0])  # ten times the elements, ten times the cost
    assert exp2 > adds[1]  # a transcendental costs more than an add over the same elements


def test_cost_of_strided_reads_materialization_and_symbols():
    costs, cx = _cost_of(lambda cx: (cx.tensor((8, 16)).permute(1, 0) + 1.0, cx.tensor((8, 16)) + 1.0,
                                     cx.tensor((8, 16)).sum(1), cx.tensor(("s", 16)) + 1.0))
    adds = [costs[n.id] for n in cx.nodes.values() if isinstance(n.op, ops.Add)]
    strided, plain, symbolic = adds
    assert strided > plain  # a transposed read costs more than a row-major one
    assert symbolic == pytest.approx(plain * SYMBOL_VALUE / 8)  # "s" costed at SYMBOL_VALUE rows
    total_sum = next(costs[n.id] for n in cx.nodes.values() if isinstance(n.op, ops.SumReduce))
    c = BACKENDS["cpu"]
    assert total_sum == pytest.approx(c.compute["Sum"] * 128 + c.read_contiguous * 128 + c.write * 8 + c.kernel)


def test_reference_backend_charges_every_op_a_kernel():
    cpu, cx = _cost_of(lambda cx: cx.tensor((4,)) + 1.0)
    ref, _ = _cost_of(lambda cx: cx.tensor((4,)) + 1.0, "reference")
    add = next(n.id for n in cx.nodes.values() if isinstance(n.op, ops.Add))
    assert ref[add] - cpu[add] == pytest.approx(BACKENDS["reference"].kernel + BACKENDS["reference"].write * 4)


def test_unknown_cost_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown cost backend 'tpu'.*'cpu', 'gpu', 'reference'"):
        EqualitySaturation(cost_backend="tpu")


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_of_scaled_scores_keeps_its_form(device):
    """In softmax(s * c) the exponent needs s * c anyway, so max(s * c) -> max(s) * c (which matches) would only
    add a multiply: the DAG-cost check keeps the maximum over the scaled scores."""
    data = rand((3, 8, 16), 7)
    cx = lm.Graph()
    s = cx.tensor((3, 8, 16)).set(data)
    y = (s * 0.125).softmax(-1).retrieve()
    p = EqualitySaturation()
    cx.compile(p, y, device=device)
    cx.execute()
    z = data.astype(np.float64) * 0.125
    ref = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(y.data(), ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert p.report.rules_fired.get("max-mul-pos-const", 0) >= 1
    mx = next(n for n in cx.nodes.values() if isinstance(n.op, ops.MaxReduce))
    assert isinstance(cx.nodes[mx.inputs[0].src].op, ops.Mul)
    assert p.report.cost_after <= p.report.cost_before
