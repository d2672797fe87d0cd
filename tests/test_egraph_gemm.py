"""The `gemm` ruleset: the loader's GemmKey facts, MatMul extraction, and the GEMMs it keeps in training steps.

(The rule's soundness is checked in test_rule_soundness.py; here: the facts are asserted where the lowering finds a
GEMM and nowhere else, extraction keeps every GEMM the lowering alone would run, and the values are unchanged.)
"""

import numpy as np
import pytest

import luminal as lm
import luminal.nn as lnn
from luminal.codegen.kernel import GemmKernel, ReduceKernel, find_gemm
from luminal.compiler import EqualitySaturation
from luminal.compiler.egraph.encode import encode
from luminal.compiler.egraph.saturate import DEFAULT_RULESETS
from luminal.compiler.generic import RemoveUnusedNodes
from luminal.compiler.schedule import DepthFirst
from luminal.training import grad

pytest.importorskip("egglog")

WITHOUT_GEMM = tuple(r for r in DEFAULT_RULESETS if r != "gemm")


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_gemm_facts_where_the_lowering_finds_a_gemm(dtype):
    cx = lm.Graph()
    a = cx.tensor((2, 3, 4), dtype=dtype, name="a")
    b = cx.tensor((5, 4), dtype=dtype, name="b")
    c = (a @ b.T).retrieve()  # batched, transposed operand
    d = (a * a).sum(2).retrieve()  # a sum of products that is no matrix product
    enc = encode(cx)
    sums = [n for n, node in cx.nodes.items() if isinstance(node.op, lm.ops.SumReduce)]
    gemm_sums = {enc.view_keys[(cx.nodes[n].inputs[0].shape, True)] for n in sums if find_gemm(cx, cx.nodes[n])}
    assert {k for k, *_ in enc.gemm} == gemm_sums  # the loader and the lowering agree
    assert len(enc.gemm) == 2 * len(gemm_sums)  # both operand orders (mul-comm makes both)
    if dtype in ("float32", "float64"):
        assert find_gemm(cx, cx.nodes[c.id]) is not None and find_gemm(cx, cx.nodes[d.id]) is None
    if dtype == "float16":  # (a float16 matmul multiplies float32 casts: that product is a GEMM)
        assert len(gemm_sums) == 1
    if dtype == "int32":
        assert not enc.gemm  # integer products are plain reductions


def _encoder_step(seed=0, rulesets=None):
    """A pre-LN encoder layer's gradients of a sum() loss: the upstream gradient is the constant 1, so the weight
    gradients are products with a 1 that `mul-one` turns into a broadcast copy."""
    cx = lm.Graph()
    x = cx.tensor((4, 8, 16), name="x").set(_rand((4, 8, 16), seed))
    lm.manual_seed(seed)  # the same weights in every build
    m = lnn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    gs = [g.retrieve() for g in grad(m(x).sum(), list(m.parameters()) + [x])]
    compiler = None if rulesets is None else EqualitySaturation(rulesets=rulesets)
    return cx, gs, compiler


def _compiled(rulesets=None, egraph=True, monkeypatch=None):
    cx, gs, compiler = _encoder_step(rulesets=rulesets)
    if not egraph:
        monkeypatch.setenv("LUMINAL_EGRAPH", "0")
    if compiler is not None:
        cx.compile((RemoveUnusedNodes(), compiler, RemoveUnusedNodes(), DepthFirst()), device="cpu")
    else:
        cx.compile(device="cpu")
    cx.execute()
    return cx, [g.data().copy() for g in gs]


def _gemms(cx):
    return sum(isinstance(k, GemmKernel) for k in cx.runtime.program.kernels)


def _largest_reduction(cx):
    prog = cx.runtime.program
    return max(int(np.prod([int(d) for d in k.dims])) * int(k.extent) for k in prog.kernels
               if isinstance(k, ReduceKernel))


def test_sum_loss_keeps_every_gemm_of_the_lowering(monkeypatch):
    plain, ref = _compiled(egraph=False, monkeypatch=monkeypatch)
    monkeypatch.delenv("LUMINAL_EGRAPH")
    cx, got = _compiled()
    assert _gemms(cx) >= _gemms(plain)
    # no weight gradient summed as a generic reduction over the broadcast activations (32 x 16 x 32 elements)
    assert _largest_reduction(cx) <= _largest_reduction(plain)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_without_the_gemm_ruleset_the_copy_wins_and_gemms_are_lost():
    """What the ruleset prevents (so the test above can fail): mul-one's broadcast copy extracted, a GEMM lost."""
    base, _ = _compiled(rulesets=DEFAULT_RULESETS)
    worse, _ = _compiled(rulesets=WITHOUT_GEMM)
    assert _gemms(worse) < _gemms(base)
    assert _largest_reduction(worse) > _largest_reduction(base)


def test_values_against_the_reference_interpreter():
    cx, gs, _ = _encoder_step(seed=3)
    cx.execute()
    ref = [g.data().copy() for g in gs]
    cx.compile(device="cpu")
    cx.execute()
    for g, r in zip(gs, ref):
        np.testing.assert_allclose(g.data(), r, rtol=1e-4, atol=1e-5)
