"""The subgraph pattern matcher: matches, non-matches, repeated variables, overlapping matches, safe replacement.

Oracle: the reference interpreter before the rewrite (exact equality) and hand-checked node bindings.
"""

import numpy as np

import luminal as lm
from luminal import ops
from luminal.compiler import Pattern, RemoveUnusedNodes, replace_matches
from luminal.compiler.rewrite import replace_with_view


def _matmul_pattern():
    """broadcast-Mul-SumReduce over the last axis: the GEMM shape later backends look for."""
    a, b = Pattern.any("a"), Pattern.any("b")
    mul = Pattern.op(ops.Mul, [Pattern.edge(a, lambda st: st.strides[-2] == 0),
                               Pattern.edge(b, lambda st: st.strides[-3] == 0)], label="mul")
    return a, b, mul, Pattern.op(ops.SumReduce, [mul], where=lambda n: n.op.axis == len(n.dims), label="sum")


def test_matmul_pattern_matches_matmul_and_not_elementwise_sum():
    cx = lm.Graph()
    x, w = cx.tensor((4, 8)), cx.tensor((8, 5))
    y = x @ w
    z = (x * x).sum(-1)  # Mul-SumReduce without broadcast: must not match
    a, b, mul, root = _matmul_pattern()
    found = root.matches(cx)
    assert len(found) == 1
    m = found[0]
    assert m.root == y.id and m[a] == x.id and m[b] == w.id
    assert z.id not in {mm.root for mm in found}


def test_repeated_pattern_variable_binds_one_node():
    cx = lm.Graph()
    x, y = cx.tensor(3), cx.tensor(3)
    sq = x * x
    prod = x * y
    v = Pattern.any()
    square = Pattern.op(ops.Mul, [v, v])
    roots = {m.root for m in square.search(cx)}
    assert sq.id in roots and prod.id not in roots


def test_commutative_and_predicates():
    cx = lm.Graph()
    x = cx.tensor(3)
    left = cx.constant(0.0).expand((3,)) + x
    right = x + 0.0
    other = x + 1.0
    zero = Pattern.op(ops.Constant, where=lambda n: n.op.value == 0)
    plain = Pattern.op(ops.Add, [Pattern.any(), zero])
    comm = Pattern.op(ops.Add, [Pattern.any(), zero], commutative=True)
    assert {m.root for m in plain.search(cx)} == {right.id}
    assert {m.root for m in comm.search(cx)} == {left.id, right.id}
    assert other.id not in {m.root for m in comm.search(cx)}
    shaped = Pattern.op(ops.Add, [Pattern.any(), zero], commutative=True, dims=lambda d: d[0] == 4)
    assert shaped.matches(cx) == []


def test_overlapping_matches_are_revalidated_on_replace():
    # exp(exp(exp(x))) has two overlapping (exp . exp) matches; collapsing one must not corrupt the other
    cx = lm.Graph()
    x = cx.tensor(4).set(np.array([0.1, 0.2, -0.3, 0.0], np.float32))
    out = x.exp2().exp2().exp2().retrieve()
    cx.execute()
    want = out.data()
    inner = Pattern.op(ops.Exp2, [Pattern.any("x")])
    outer = Pattern.op(ops.Exp2, [inner])
    matches = outer.matches(cx)
    assert len(matches) == 2  # overlapping: (e2 . e1) and (e3 . e2)

    def fuse(m):  # replace exp2(exp2(v)) by a new node computing the same thing from v
        src = cx.nodes[m[inner]].inputs[0]
        first = cx.add_op(ops.Exp2(), [(src.src, src.shape)], cx.nodes[m.root].dims, cx.nodes[m.root].dtype)
        return cx.add_op(ops.Exp2(), [(first, cx.nodes[first].inputs[0].shape.contiguous())],
                         cx.nodes[m.root].dims, cx.nodes[m.root].dtype)

    applied = replace_matches(cx, outer, fuse)
    assert applied >= 1
    cx.compile(RemoveUnusedNodes(), out)
    cx.execute()
    np.testing.assert_array_equal(out.data(), want)


def test_self_contained_check_respects_outside_consumers_and_keep():
    cx = lm.Graph()
    x = cx.tensor(3).set([1.0, 2.0, 3.0])
    inner = x.sin()
    outer = inner.exp2()
    side = (inner * 2.0).retrieve()  # inner is read outside the (exp2 . sin) match
    out = outer.retrieve()
    pat = Pattern.op(ops.Exp2, [Pattern.op(ops.Sin, [Pattern.any()])])
    (m,) = pat.matches(cx)
    assert not m.is_self_contained()
    cx2 = lm.Graph()
    y = cx2.tensor(3).set([1.0, 2.0, 3.0])
    inner2 = y.sin().keep()
    inner2.exp2().retrieve()
    (m2,) = pat.matches(cx2)
    assert not m2.is_self_contained()
    cx3 = lm.Graph()
    z = cx3.tensor(3).set([1.0, 2.0, 3.0])
    z.sin().exp2().retrieve()
    (m3,) = pat.matches(cx3)
    assert m3.is_self_contained()
    assert side.id in cx.nodes and out.id in cx.nodes


def test_replacement_with_remap_moves_user_handles():
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = (x.T + 0.0).retrieve()
    zero = Pattern.op(ops.Constant, where=lambda n: n.op.value == 0)
    src = Pattern.any("src")
    add0 = Pattern.op(ops.Add, [src, zero], commutative=True)

    def rewrite(m):
        node = cx.nodes[m.root]
        edge = next(e for e in node.inputs if e.src == m[src])
        return replace_with_view(cx, m.root, edge.src, edge.shape)

    old = out.id
    n = replace_matches(cx, add0, rewrite)
    cx.compile(RemoveUnusedNodes(), out)
    assert n == 1 and out.id != old and isinstance(cx.nodes[out.id].op, ops.Contiguous)
    cx.execute()
    np.testing.assert_array_equal(out.data(), np.arange(6).reshape(2, 3).T)
