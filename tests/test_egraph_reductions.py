"""The `reductions` ruleset in the default pipeline, the loader's Extent facts, and explain()'s derivations.

(Each rule's soundness is checked in test_rule_soundness.py; here: the rules fire where they should, the rebuilt
graph computes the same values, and explain() names the rewrites that produced each replacement.)
"""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler import EqualitySaturation, explain
from luminal.compiler.egraph.encode import encode
from luminal.compiler.egraph.extract import default_cost
from luminal.compiler.egraph.match import derivation
from luminal.compiler.egraph.saturate import DEFAULT_RULESETS, Saturation, node_signature

pytest.importorskip("egglog")


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _build(cx):
    x = cx.tensor((3, 1, 5), name="x").set(_rand((3, 1, 5), 1))
    s = x.sum(1).retrieve()  # a sum over an axis of extent 1
    m = x.max(1).retrieve()
    c = cx.constant(2.5, shape=(4, 6)).max(0).retrieve()  # the max of a broadcast constant
    k = cx.constant(3, dtype="int32", shape=(4, 6)).sum(1).retrieve()  # a sum of an integer constant
    n = cx.tensor(("n", 4), name="y").set(_rand((5, 4), 2))
    ns = n.sum(0).retrieve()  # a symbolic extent: no Extent fact, nothing to do
    return [s, m, c, k, ns]


@pytest.mark.parametrize("readback", ["freeze", "json"])
def test_reductions_fire_by_default_and_keep_the_values(readback):
    assert "reductions" in DEFAULT_RULESETS
    cx = lm.Graph()
    outs = _build(cx)
    cx.execute()
    want = [t.data().copy() for t in outs]
    p = EqualitySaturation(readback=readback)  # on its own: the default pipeline squeezes unit axes before it
    cx.compile(p, outs)
    cx.execute()
    for w, t in zip(want, outs):
        np.testing.assert_array_equal(t.data(), w)
        assert t.data().shape == w.shape
    fired = p.report.rules_fired
    for rule in ("sum-unit-axis", "max-unit-axis", "max-const", "nonneg-max"):
        assert fired.get(rule), fired
    assert any(r.startswith("sum-const-int") for r in fired), fired
    ops = sorted(type(n.op).__name__ for n in cx.nodes.values())
    assert ops.count("SumReduce") == 1 and "MaxReduce" not in ops, ops  # only the symbolic sum is left


def test_the_default_pipeline_compiles_reductions_to_the_same_values():
    cx = lm.Graph()
    outs = _build(cx)
    cx.execute()
    want = [t.data().copy() for t in outs]
    cx.compile(device="cpu")
    cx.execute()
    for w, t in zip(want, outs):
        np.testing.assert_array_equal(t.data(), w)


def test_the_loader_asserts_constant_extents_only():
    cx = lm.Graph()
    x = cx.tensor(("n", 3), name="x")
    x.sum(1).retrieve()
    enc = encode(cx)
    key = next(k for k, v in enumerate(enc.views) if [str(d) for d in v.dims] == ["n", "3"])
    assert (key, 1, 3) in enc.extent
    assert not any(k == key and a == 0 for k, a, _ in enc.extent)  # symbolic: no fact
    assert f"{key}\t1\t3" in enc.rows()["Extent"]


def test_explain_names_the_rewrites_that_produced_each_node():
    cx = lm.Graph()
    x = cx.tensor((3, 1, 5), name="x").set(_rand((3, 1, 5), 3))
    s = x.sum(1).retrieve()
    y = (x * 2).retrieve()
    z = ((x + 0) * 1).retrieve()
    p = EqualitySaturation(op_cost=default_cost)  # the per-op model: x * 2 -> x + x saves the constant
    cx.compile(p, (s, y, z))
    by_op = {}
    for ch in p.report.changes:
        by_op.setdefault(ch["op"], []).append(ch)
    (sum_change,) = by_op["SumReduce(1)"]
    assert sum_change["derivation"] and sum_change["rules"] == ["sum-unit-axis", "copy-contig"]
    chains = sorted(tuple(ch["rules"]) for ch in by_op["Mul"])
    assert ("mul-two",) in chains and ("mul-one", "copy-contig") in chains, chains
    text = explain(cx)
    assert "via sum-unit-axis -> copy-contig" in text and "via mul-two" in text, text


def test_derivation_is_none_for_a_member_no_rewrite_produced():
    cx = lm.Graph()
    x = cx.tensor((4,), name="x").set(_rand((4,), 4))
    a = (x * 2).retrieve()
    sat = Saturation(cx)
    enc = sat.load()
    sat.run()
    eg = sat.data()
    nid = a.id
    cls = eg.node_class[nid]
    start = node_signature(enc.terms[nid], eg)
    add = next(e.signature for e in eg.classes[cls] if e.op == "Add")
    assert derivation(sat.rules, eg, cls, start, add) == ["mul-two"]
    assert derivation(sat.rules, eg, cls, start, start) == []
    other = ("Mul", ("float32",) + start[1][1:3] * 2)  # x * x: not an e-node of this class
    assert derivation(sat.rules, eg, cls, start, other) is None


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_default_pipeline_removes_unit_axis_reductions_without_the_pass(device):
    """GenericCompiler no longer runs RemoveSingleReductions: the e-graph's unit-axis rules remove the
    reductions (a plain read, a permuted read, keepdim, a max) and the values equal numpy's."""
    from luminal import ops
    from luminal.compiler import GenericCompiler, RemoveSingleReductions

    assert not any(isinstance(p, RemoveSingleReductions) for p in GenericCompiler())
    cx = lm.Graph()
    xv, zv = _rand((4, 1, 5), 3), _rand((3, 5, 1), 4)
    x = cx.tensor((4, 1, 5), name="x").set(xv)
    z = cx.tensor((3, 5, 1), name="z").set(zv)
    a = (x.sum(1) * 2 + x.max(1)).retrieve()
    b = z.permute((2, 1, 0)).sum(0).exp().retrieve()
    c = x.sum(1, keepdim=True).retrieve()
    cx.compile(GenericCompiler(), (a, b, c), device=device)
    left = [n for n in cx.nodes.values() if isinstance(n.op, (ops.SumReduce, ops.MaxReduce))]
    assert left == []
    cx.execute()
    np.testing.assert_allclose(a.data(), xv.sum(1) * 2 + xv.max(1), rtol=1e-6)
    np.testing.assert_allclose(b.data(), np.exp(zv.transpose(2, 1, 0).sum(0)), rtol=1e-6)
    np.testing.assert_allclose(c.data(), xv.sum(1, keepdims=True), rtol=1e-6)


# ---------------------------------------------------------------------------------------------- split reductions
def test_split_choice_offers_a_divisor_that_fills_the_device():
    """The inner extent divides the axis, lies in SPLIT_INNER, and leaves the first stage SPLIT_ROWS outputs
    when a divisor allows it; short axes, many outputs (128 contiguous rows, 1024 strided ones), symbolic sizes
    and prime extents get no split."""
    from luminal.compiler.egraph.encode import SPLIT_INNER, SPLIT_ROWS, split_choice
    from luminal.shape import ShapeTracker

    lo, hi = SPLIT_INNER
    for dims, axis in (((10 ** 6,), 0), ((64, 36864), 1), ((36864, 64), 0), ((8192, 768), 0), ((3, 40000), 1)):
        st = ShapeTracker.contiguous_of(dims)
        q = split_choice(st, axis)
        n, rows = dims[axis], int(np.prod(dims)) // dims[axis]
        assert q is not None and n % q == 0 and lo <= q <= hi and n // q >= 2, (dims, q)
        better = [d for d in range(q + 1, hi + 1) if n % d == 0 and rows * (n // d) >= SPLIT_ROWS]
        assert not better, (dims, q, better)  # the largest divisor that still fills the device
        if any(n % d == 0 and rows * (n // d) >= SPLIT_ROWS for d in range(lo, hi + 1)):
            assert rows * (n // q) >= SPLIT_ROWS
    assert split_choice(ShapeTracker.contiguous_of((4096,)), 0) is None          # short
    assert split_choice(ShapeTracker.contiguous_of((8192, 4096)), 0) is None     # enough outputs already
    assert split_choice(ShapeTracker.contiguous_of((512, 50257)), 1) is None     # contiguous rows: 256 programs
    assert split_choice(ShapeTracker.contiguous_of((1000003,)), 0) is None       # prime
    assert split_choice(ShapeTracker.contiguous_of(("n", 65536)), 1) is None     # symbolic outputs
    assert split_choice(ShapeTracker.contiguous_of((2, "n")), 1) is None         # symbolic extent


def _long_reductions(cx):
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((3, 40000)).astype(np.float32)
    wv = (rng.standard_normal(100000) * 100).astype(np.float32)
    iv = rng.integers(-2 ** 31, 2 ** 31 - 1, 65536).astype(np.int64)
    x, w, i = cx.tensor((3, 40000)).set(xv), cx.tensor((100000,)).set(wv), cx.tensor((65536,), "int64").set(iv)
    outs = [x.sum(1), x.max(1), w.mean(), (w * w).sum(), i.sum(), x.sum(0)]  # the last: 40000 outputs, no split
    want = [xv.astype(np.float64).sum(1), xv.max(1), wv.astype(np.float64).mean(),
            (wv.astype(np.float64) ** 2).sum(), iv.sum(), xv.astype(np.float64).sum(0)]
    return [o.retrieve() for o in outs], want


def _reductions(cx):
    from luminal import ops
    return sorted((type(n.op).__name__, tuple(str(d) for d in n.dims)) for n in cx.nodes.values()
                  if isinstance(n.op, (ops.SumReduce, ops.MaxReduce)))


def test_gpu_cost_model_splits_long_reductions_with_few_outputs():
    """With cost_backend="gpu" the sums and maxima over 40000 / 100000 / 65536 elements with at most 3 outputs
    run in two stages (split-sum / split-max), and the values stay those of numpy (float64 sums within the
    reordering tolerance, integer sums exactly, maxima exactly); the CPU's cost model keeps one stage."""
    cx = lm.Graph()
    outs, want = _long_reductions(cx)
    before = _reductions(cx)
    p = EqualitySaturation(cost_backend="gpu")
    cx.compile(p, outs)
    cx.execute()
    fired = p.report.rules_fired
    assert fired.get("split-sum") and fired.get("split-max"), fired
    after = _reductions(cx)
    assert len(after) == len(before) + 5, (before, after)  # every reduction but the 40000-output one
    assert ("SumReduce", ("40000",)) in after and not any(d[-1:] == ("40000",) and len(d) > 1 for _, d in after)
    for o, w in zip(outs, want):
        if o.dtype.is_float:
            np.testing.assert_allclose(o.data(), w, rtol=2e-5, atol=1e-3)
        else:
            np.testing.assert_array_equal(o.data(), w)
    assert "split-sum" in explain(cx)

    cx2 = lm.Graph()
    outs2, _ = _long_reductions(cx2)
    before2 = _reductions(cx2)
    p2 = EqualitySaturation()
    cx2.compile(p2, outs2)
    assert _reductions(cx2) == before2 and not p2.report.rules_fired.get("split-sum")


def test_default_pipeline_splits_only_for_gpu_devices():
    """compile(device=...) picks the cost model from the device: "cpu" keeps one-stage reductions (its C code
    parallelizes a long row itself), the Triton devices get the split."""
    from luminal.compiler.generic import GenericCompiler

    cx = lm.Graph()
    outs, want = _long_reductions(cx)
    before = _reductions(cx)
    cx.compile(device="cpu")
    cx.execute()
    assert _reductions(cx) == before
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.data(), w, rtol=2e-5, atol=1e-3)
    passes = GenericCompiler("gpu-interpret")
    sat = next(p for p in passes if isinstance(p, EqualitySaturation))
    assert sat.cost_backend == "gpu"
    assert next(p for p in GenericCompiler("cpu") if isinstance(p, EqualitySaturation)).cost_backend == "cpu"
