"""What a saturation changed, for people: each change's rules (:func:`annotate`) and :func:`explain`."""

from __future__ import annotations


def annotate(rep, sat, eg, ext) -> None:
    """Attach to each change how it came about: the loader's constant fold; "its inputs were rewritten" (same
    e-node, new operands); the chain of rewrites from the node's own e-node to the extracted one
    (:func:`~luminal.compiler.egraph.match.derivation`, ``ch["derivation"] = True``); or, when no chain is found,
    the rules whose left-hand side matches in its e-class (commutativity only when nothing else matches)."""
    from .match import derivation, rules_matching
    from .saturate import node_signature

    for ch in rep.changes:
        names, found = [], False
        if ch["node"] in sat.encoding.folded:
            names.append("fold-constants (loader)")
        if ch.get("same_enode") and not names:
            names.append("its inputs were rewritten")
        elif not names:
            sig = node_signature(sat.encoding.terms[ch["node"]], eg)
            chain = derivation(sat.rules, eg, ch["eclass"], sig, ext.choice[ch["eclass"]].signature)
            if chain:
                names, found = chain, True
            else:
                names = rules_matching(sat.rules, eg, ch["eclass"], sig) or \
                    rules_matching(sat.rules, eg, ch["eclass"])
        ch["rules"] = names
        ch["derivation"] = found


def explain(graph, file=None) -> str:
    """Which rules changed which nodes in the last :class:`EqualitySaturation` run on ``graph``.

    Returns the text (and prints it to ``file`` when given).
    """
    reports = graph.__dict__.get("egraph_reports", [])
    if not reports:
        text = "no EqualitySaturation has run on this graph"
    else:
        lines = []
        for k, rep in enumerate(reports, 1):
            lines.append(f"equality saturation #{k}: {rep.stop_reason} after {len(rep.iterations)} iterations, "
                         f"cost {rep.cost_before:.2f} -> {rep.cost_after:.2f}")
            for ch in rep.changes:
                if ch.get("derivation"):  # the rewrites applied in turn
                    rules = " -> ".join(ch["rules"])
                else:  # the rules whose left-hand side matches there
                    rules = ", ".join(ch.get("rules", [])) or "(cheaper equivalent)"
                lines.append(f"  node {ch['node']} {ch['op']} '{ch['label']}' -> node {ch['new']} {ch['new_op']}"
                             f"   via {rules}")
            if not rep.changes:
                lines.append("  no node changed")
        text = "\n".join(lines)
    if file is not None:
        print(text, file=file)
    return text
