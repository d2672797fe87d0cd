"""Alternatives a front end offers: another program for a value, unioned with it in the e-graph and measured.

Some choices are not rewrites of the primitive graph but two ways a front end can write the same value, e.g. a
convolution's input gradient as a convolution of the upstream gradient (:func:`luminal.nn.conv_grad.conv_input_grad`,
which the direct kernel reads in place) or as the primitives' col2im form (a GEMM, then a sum of shifted views:
:func:`luminal.nn.conv_grad.conv_input_grad_col2im`). Which one is faster depends on the code generator (whether
the direct kernel takes the convolution, what the prologue search chooses), which the e-graph's cost model cannot
see. So the front end builds its choice and *offers* the other (:func:`offer`); when a compile measures
(``compile(device="cpu", search="quick" | "full")``), :class:`~luminal.compiler.egraph.EqualitySaturation` builds
every offered alternative (:func:`build_offered`), asserts ``(union (Node kept) (Node alternative))``, extracts the
kept program by cost (an alternative's root e-node costs :data:`ALT_COST` more: the cost model never picks it by
itself) and hands the program search (:mod:`luminal.runtime.program_search`) the same program with every
alternative of one kind switched first. The measured winner is cached; a later ``search="off"`` compile of the
same graph builds the alternatives again only when a search found that they matter (the cache entry
``program-alternatives/<key of the graph without them>``), and then rebuilds the cached winner. Without a
measuring compile nothing is built (no nodes, no time).

Each kind must be checked: ``tests/test_egraph_alternatives.py`` evaluates both forms of every kind in
:data:`KINDS` in the reference interpreter.
"""

from __future__ import annotations

from ...shape import ShapeTracker

ALT_COST = 1e15  # added to an offered alternative's root e-node: extraction by cost keeps the front end's choice
# the kinds a front end offers, with what the alternative is (tests/test_egraph_alternatives.py checks each)
KINDS = {"conv-input-grad": "a convolution's input gradient in the other form (col2im <-> a convolution of the "
                            "upstream gradient)"}


def offer(tensor, kind: str, fn, *args) -> None:
    """Offer ``fn(*args)`` as another program for the value of ``tensor`` (a whole row-major node: its buffer),
    named ``kind`` (a key of :data:`KINDS`). ``fn`` (a module-level function, so that the graph pickles) must
    return a tensor of the same dims and dtype; it runs only when a measuring compile builds the alternatives."""
    if kind not in KINDS:
        raise ValueError(f"offer: unknown alternative kind {kind!r}; expected one of {sorted(KINDS)}")
    node = tensor.graph.nodes[tensor.id]
    if not _whole(tensor, node.dims):
        raise ValueError("offer: the tensor must be its node's whole row-major buffer (call .contiguous() first)")
    tensor.graph.__dict__.setdefault("alternatives", []).append((tensor.id, kind, fn, args))


def pending(graph) -> list:
    """The offered alternatives not built yet whose node is still in ``graph``."""
    return [a for a in graph.__dict__.get("alternatives", ()) if a[0] in graph.nodes]


def build_offered(graph) -> list[tuple[int, int, str]]:
    """Build every pending alternative of ``graph`` (consuming them): ``(kept node, alternative node, kind)`` for
    each, also kept as ``graph.offered`` for the encoding (:func:`luminal.compiler.egraph.encode.encode`)."""
    out = []
    for nid, kind, fn, args in pending(graph):
        node = graph.nodes[nid]
        t = fn(*args).contiguous()
        if t.id == nid:
            continue
        if tuple(t.dims) != tuple(node.dims) or t.dtype != node.dtype or not _whole(t, graph.nodes[t.id].dims):
            raise ValueError(f"alternative {kind!r}: built {list(t.dims)} {t.dtype}, expected {list(node.dims)} "
                             f"{node.dtype} read whole")
        out.append((nid, t.id, kind))
    graph.__dict__["alternatives"] = []
    graph.__dict__["offered"] = out
    return out


def _whole(t, dims) -> bool:
    """Whether ``t`` reads its node's buffer (of ``dims``) whole and row-major (a reshape of it at most): the
    e-graph's e-classes are buffers."""
    st = t.tracker
    return st.is_contiguous() and (st.n_elements() - ShapeTracker.contiguous_of(tuple(dims)).n_elements()).to_int() == 0


def drop_offered(graph) -> None:
    """Forget the offered alternatives of ``graph`` (built or not); the rebuild already deleted the losers."""
    graph.__dict__.pop("alternatives", None)
    graph.__dict__.pop("offered", None)


def offered(graph) -> list[tuple[int, int, str]]:
    """The built alternatives of ``graph`` whose two nodes are both still in it."""
    return [o for o in graph.__dict__.get("offered", ()) if o[0] in graph.nodes and o[1] in graph.nodes]


def build_if_measured(sat_pass, graph, measuring) -> tuple:
    """Build the alternatives offered in ``graph`` when the compile running ``sat_pass`` (an
    :class:`~luminal.compiler.egraph.EqualitySaturation`) measures programs (``measuring``: ``(level, budget)``
    from :func:`~luminal.compiler.egraph.choose.search_options`, or None) at ``"quick"``/``"full"``, or when an
    earlier search of this graph found them worth building (a ``program-alternatives/<key>`` tuning entry,
    ``key`` naming the graph without them); otherwise drop them. Returns ``(that key when they were built, the
    pass's ``(memo key, session)`` of the graph when they were not and it computed them, else None)``."""
    if not pending(graph):
        drop_offered(graph)
        return None, None
    if measuring is not None:
        from ...runtime import tuning

        probe = sat_pass._memo_key(graph, force=True)
        if measuring[0] in ("quick", "full") or tuning.lookup(f"program-alternatives/{probe[0]}") is not None:
            build_offered(graph)
            return probe[0], None
        drop_offered(graph)
        return None, probe
    drop_offered(graph)
    return None, None


def root_signatures(enc, eg) -> dict:
    """Signature of each offered alternative's root e-node -> its kind, for an encoding ``enc``
    (:class:`~luminal.compiler.egraph.encode.Encoding`) and its e-graph ``eg``."""
    from .saturate import node_signature

    return {node_signature(enc.terms[b], eg): kind for a, b, kind in enc.offered if b in enc.terms}


def live_nodes(graph, roots) -> set[int]:
    """The nodes ``roots`` read, themselves included (what the graph computes without its offered alternatives)."""
    live, stack = set(roots), list(roots)
    while stack:
        for e in graph.nodes[stack.pop()].inputs:
            if e.src not in live:
                live.add(e.src)
                stack.append(e.src)
    return live


def penalized(op_cost, signatures: dict):
    """``op_cost`` with :data:`ALT_COST` added to the e-nodes in ``signatures`` (the alternatives' roots)."""
    if not signatures:
        return op_cost

    def cost(e):
        return op_cost(e) + (ALT_COST if e.signature in signatures else 0.0)
    return cost
