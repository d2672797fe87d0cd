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
