"""The matcher's safety questions answered on a `FlowGraph` (docs/ENGINE.md "Graph analysis").

The correctness contract is stated per control-flow path of a function: which matched nodes run on it, whether an
event outside the match reads an intermediate, whether a target input is redefined before the anchor, whether code
with calls touches what a deleted statement reads before the anchor. On the acyclic graph, a path through a set of
nodes exists when they are ordered by reachability; a path through a node that avoids a set exists when the node
still lies on an entry-to-exit path without that set (`Reach.avoiding`, or a `Reach` with `excluded`). Each
function below states its question per path.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional, Sequence

from .. import matcher as m
from ..dsl import CallNode, Node, OpNode, Rule, Var
from ..structure import DLNode
from .graph import FlowGraph, Reach, read_vids

Key = tuple[int, Optional[str]]


def key(node: DLNode) -> Key:
    return (id(node.expr), node.layer)


# ------------------------------------------------------------------------------------------ matching


def subsequences(
    patterns: tuple[Node, ...], graph: FlowGraph, rule: Rule
) -> Iterator[tuple[list[Optional[DLNode]], dict[str, "m.Binding"]]]:
    """Matches of the pattern sequence along a path: one node per pattern (None for an absent optional node), each
    reachable from the previous one, with consistent `$var` bindings. A node reading a phi of a value already bound
    reads that value on the paths through the join's edges carrying it: it is matched as a copy reading the value
    (`resolved`); `_phi_other_operand` later refuses the match if a path through it takes another edge."""
    if not m._may_occur(patterns, graph.summary, rule):
        return
    nodes = graph.nodes
    reach = graph.reach
    readers: dict[int, list[DLNode]] = {}
    for node in nodes:
        for value in (*node.args, *(v for _, v in node.kwargs)):
            if value.kind == "var":
                readers.setdefault(value.vid, []).append(node)

    def after(prev: Optional[DLNode], node: DLNode) -> bool:
        return reach.live[node.index] and (prev is None or (node is not prev and reach.before(prev.index, node.index)))

    def candidates(pattern: Node, env: dict[str, m.Binding], prev: Optional[DLNode]) -> Sequence[DLNode]:
        if isinstance(pattern, (CallNode, OpNode)):
            atoms = pattern.operands if isinstance(pattern, OpNode) else (
                *pattern.args.positional, *(a for _, a in pattern.args.keywords)
            )
            for atom in atoms:
                bound = env.get(atom.name) if isinstance(atom, Var) else None
                if isinstance(bound, m.Value) and bound.kind == "var":
                    found = {id(n): n for vid in graph.flowing([bound.vid]) for n in readers.get(vid, ())}
                    return sorted((n for n in found.values() if after(prev, n)), key=lambda n: n.index)
        return [n for n in nodes if after(prev, n)]

    def search(
        pi: int, prev: Optional[DLNode], env: dict[str, m.Binding], chosen: list[Optional[DLNode]]
    ) -> Iterator[tuple[list[Optional[DLNode]], dict[str, m.Binding]]]:
        if pi == len(patterns):
            yield chosen, env
            return
        pattern = patterns[pi]
        for node in candidates(pattern, env, prev):
            node = resolved(graph, node, env, [n.index for n in chosen if n is not None])
            result = m._match_node(pattern, node, env, rule)
            if result is not None:
                yield from search(pi + 1, node, result, chosen + [node])
        if isinstance(pattern, (CallNode, OpNode)) and pattern.optional:
            skipped = m._pass_through(pattern, env)
            if skipped is not None:
                yield from search(pi + 1, prev, skipped, chosen + [None])

    yield from search(0, None, {}, [])


def resolved(graph: FlowGraph, node: DLNode, env: dict[str, "m.Binding"], chain: list[int]) -> DLNode:
    """`node`, or a copy reading bound values where it reads phis they flow into through edges a path through
    `chain` and the node can take."""
    bound = [v for v in env.values() if isinstance(v, m.Value) and v.kind == "var"]
    if not bound or not any(a.kind == "var" and a.vid in graph.phis for a in (*node.args, *(v for _, v in node.kwargs))):
        return node
    reach = graph.reach
    chain = [*chain, node.index]

    def read(value: m.Value) -> m.Value:
        if value.kind != "var" or value.vid not in graph.phis:
            return value
        for candidate in bound:
            if value.vid not in graph.flowing([candidate.vid]):
                continue
            joins = reach.carried([candidate.vid], chain[:-1]).get(value.vid, [])
            if joins and reach.reads_at(node.index, chain, joins):
                return candidate
        return value

    args = tuple(read(a) for a in node.args)
    kwargs = tuple((k, read(v)) for k, v in node.kwargs)
    if all(a is b for a, b in zip(args, node.args)) and all(a[1] is b[1] for a, b in zip(kwargs, node.kwargs)):
        return node
    return dataclasses.replace(node, args=args, kwargs=kwargs)


def rebound(graph: FlowGraph, nodes: list[DLNode], env: dict[str, "m.Binding"]) -> list[DLNode]:
    """Matched nodes read again under another environment (a match's twin without its absorbed nodes)."""
    out: list[DLNode] = []
    for node in nodes:
        original = graph.events[node.index]
        assert isinstance(original, DLNode)
        out.append(resolved(graph, original, env, [n.index for n in out]))
    return out


def state_at(graph: FlowGraph, node: DLNode, deleted: set[int]) -> dict[str, int]:
    """Names -> value ids where `node` is evaluated, the definitions by `deleted` statements undone (a phi stays)."""
    out: dict[str, int] = {}
    for name, vid in graph.states[id(graph.events[node.index])].items():
        if name.startswith("%"):
            continue
        current: Optional[int] = vid
        while current is not None and graph.defined_by.get((name, current)) in deleted:
            current = graph.previous.get((name, current))
        if current is not None:
            out[name] = current
    return out


# ------------------------------------------------------------------------------------------ checks


def _positions(graph: FlowGraph, keys: set[Key]) -> frozenset[int]:
    return frozenset(n.index for k in keys for n in graph.by_key.get(k, ()))


def _instances(candidate: "m.Match", reach: Reach) -> Optional[list[dict[Key, DLNode]]]:
    """Per anchor node on a path of `reach`, the candidate's nodes it follows (the nearest of each key): one check
    per copy of the match (loop-body copies, helpers inlined twice). None when some key has no such node."""
    graph = reach.graph
    assert candidate.anchor is not None
    out = []
    for anchor in graph.by_key.get(key(candidate.anchor), ()):
        if not reach.live[anchor.index]:
            continue
        instance: dict[Key, DLNode] = {}
        for node in candidate.nodes:
            found = [c for c in graph.by_key.get(key(node), ()) if reach.live[c.index] and reach.before(c.index, anchor.index)]
            if not found:
                return None
            instance[key(node)] = max(found, key=lambda c: c.index)
        out.append(instance)
    return out


def _missing_key_paths(reach: Reach, keys: set[Key], through: set[Key]) -> bool:
    """Whether some path of `reach` runs a node of a key in `through` but no node of some key in `keys`."""
    graph = reach.graph
    targets = _positions(graph, through)
    for k in keys:
        avoid = _positions(graph, {k})
        if any(reach.avoiding(p, avoid) for p in targets - avoid):
            return True
    return False


def check_paths(match: "m.Match", graph: FlowGraph) -> bool:
    """The checks on every path running a matched statement: without the anchor (the branch plan's other arm
    aside), what the matched nodes compute is unused; with the anchor, every matched node runs and
    `_check_complete` holds."""
    assert match.anchor is not None
    keys = {key(n) for n in match.nodes}
    anchor_key = key(match.anchor)
    deleted = {id(s) for s in match.deleted}
    prefix = {id(n.site.small) for n in match.nodes if id(n.site.small) in deleted}
    # Paths running matched statements but not the anchor: what they compute must be unused.
    anchors = _positions(graph, {anchor_key})
    partial = [n for k in keys - {anchor_key} for n in graph.by_key.get(k, ()) if graph.reach.avoiding(n.index, anchors)]
    if partial and not (match.plan == "branch" and all(id(n.site.small) in prefix for n in partial)):
        without_anchor = Reach(graph, anchors)
        for node in partial:
            if _read_outside(graph, without_anchor, {node.out}, keys, [node.index], frozenset()):
                return False
    # Paths running the anchor run every matched node.
    if _missing_key_paths(graph.reach, keys, {anchor_key}):
        return False
    instances = _instances(match, graph.reach)
    if instances is None:
        return False
    return all(_check_complete(match, graph, graph.reach, instance, deleted) for instance in instances)


def check_fused_paths(
    match: "m.Match", graph: FlowGraph, original_only: frozenset[int], guarded: frozenset[int], twin: Optional["m.Match"]
) -> bool:
    """The checks of the fallback plan's fused copy: on the paths where every fallback test is false (the graph
    without the statements only those tests reach), a path with a matched node runs the whole match, or with a
    `twin` (the match without its absorbed nodes) at least the twin, and `_check_complete` holds for what it runs;
    reads in `guarded` statements happen only when a test is true and are ignored. Some path must run the match."""
    excluded = frozenset(
        pos
        for pos, event in enumerate(graph.events)
        if event is not None and (id(event.site.small) in original_only or id(event.site.line) in original_only)
    )
    reach = Reach(graph, excluded)
    keys = {key(n) for n in match.nodes}
    twin_keys = {key(n) for n in twin.nodes} if twin is not None else keys
    # A path with some matched node has all of the candidate's (with a twin: all the twin's at least).
    if _missing_key_paths(reach, twin_keys, keys):
        return False
    checked = 0
    candidates: list[tuple[m.Match, Reach]] = [(match, reach)]
    if twin is not None:
        # Paths missing an absorbed node are checked as the twin.
        candidates += [(twin, Reach(graph, excluded | _positions(graph, {k}))) for k in keys - twin_keys]
    for candidate, where in candidates:
        deleted = {id(s) for s in candidate.deleted}
        instances = _instances(candidate, where)
        if instances is None:
            if candidate is match and twin is not None:
                continue  # no path runs every node: the twin's checks cover them
            return False
        for instance in instances:
            if not _check_complete(candidate, graph, where, instance, deleted, guarded):
                return False
            checked += 1
    return checked > 0


def _read_outside(
    graph: FlowGraph, reach: Reach, vids: set[int], keys: set[Key], chain: list[int], ignore: frozenset[int],
    between: Optional[tuple[int, int]] = None,
) -> bool:
    """Whether an event outside the matched nodes (`keys`; statements in `ignore` aside) reads one of `vids`, or a
    phi they flow into through edges such a path takes, on a path through `chain`; with `between`, only from the
    first position up to (not including) the second."""
    for vid, joins in reach.carried(vids, chain).items():
        for pos in graph.readers.get(vid, ()):
            event = graph.events[pos]
            assert event is not None
            if id(event.site.small) in ignore or (isinstance(event, DLNode) and key(event) in keys):
                continue
            if between is not None and not (
                reach.before(between[0], pos) and reach.before(pos, between[1]) and pos != between[1]
            ):
                continue
            if reach.reads_at(pos, chain, joins):
                return True
    return False


def _check_complete(
    match: "m.Match", graph: FlowGraph, reach: Reach, instance: dict[Key, DLNode], deleted: set[int],
    ignore: frozenset[int] = frozenset(),
) -> bool:
    """On the paths through one copy of the match: (i) intermediates are read by matched nodes only; (ii) other
    target outputs are not read before the anchor; (iii) every input of the fused call holds the same value at the
    anchor once the deleted statements are gone; (iv) `_moved_reads_touched` is false."""
    assert match.anchor is not None
    keys = set(instance)
    anchor = instance[key(match.anchor)]
    chain = sorted(n.index for n in instance.values())
    first = chain[0]
    rep_to_path = {n.out: instance[key(n)].out for n in match.nodes}
    inter_rep, outs_rep = m._output_vids(match)
    inter = {rep_to_path.get(v, v) for v in inter_rep}
    outs = {rep_to_path.get(v, v) for v in outs_rep} - {anchor.out}
    # Matched nodes read the matched values on every path through the copy (not a phi's other operand).
    if _phi_other_operand(match, graph, reach, instance, rep_to_path, chain):
        return False
    # (i) intermediates are read by matched nodes only (and by what disappears with them)
    if _read_outside(graph, reach, inter, keys | _absorbed(graph, list(instance.values()), deleted), chain, ignore):
        return False
    # (ii) other target outputs are produced at the anchor now: nothing may read them earlier
    if outs and _read_outside(graph, reach, outs, keys, chain, frozenset(), (first, anchor.index)):
        return False
    # (iii) every input of the fused call holds the same value at the anchor once the deleted statements are gone
    state = state_at(graph, anchor, deleted)
    anchor_stmt = id(anchor.site.small)
    twins: dict[int, m.Value] = {}
    for n in match.nodes:
        copy = instance[key(n)]
        for rep_value, value in zip([*n.args, *(v for _, v in n.kwargs)], [*copy.args, *(v for _, v in copy.kwargs)]):
            twins[id(rep_value)] = value
    todo: list[tuple[str, int]] = []
    for value in m._target_inputs(match):
        if value.kind == "expr" and not value.pure and m._value_site_moves(match, value, anchor_stmt):
            return False
        copy_value = twins.get(id(value))
        todo.extend(copy_value.uses if copy_value is not None else [(n, rep_to_path.get(v, v)) for n, v in value.uses])
    while todo:
        name, vid = todo.pop()
        if name.startswith("%"):
            producer = graph.producers.get(vid)
            if producer is not None:
                for arg in [*producer.args, *(v for _, v in producer.kwargs)]:
                    todo.extend(arg.uses)
            continue
        if state.get(name, vid) != vid:
            return False
    return not _moved_reads_touched(graph, reach, anchor, keys, deleted, chain)


def _phi_other_operand(
    match: "m.Match", graph: FlowGraph, reach: Reach, instance: dict[Key, DLNode], rep_to_path: dict[int, int],
    chain: list[int],
) -> bool:
    """Whether a path through the copy reaches a matched node reading a phi (where the match reads one of its
    operands) through an edge carrying another operand: there the node reads something else."""
    for rep_node in match.nodes:
        node = instance[key(rep_node)]
        pairs = zip([*rep_node.args, *(v for _, v in rep_node.kwargs)], [*node.args, *(v for _, v in node.kwargs)])
        for rep_value, value in pairs:
            if value.kind != "var" or value.vid not in graph.phis or rep_value.vid == value.vid:
                continue
            wanted = graph.flowing([rep_to_path.get(rep_value.vid, rep_value.vid)])
            if value.vid not in wanted:
                return True
            carrying = {w for w in graph.phis[value.vid] if w in wanted}
            for operand, tails in graph.phi_tails.get(value.vid, {}).items():
                if operand in carrying:
                    continue
                for tail in tails:
                    for join in graph.phi_joins.get(value.vid, ()):
                        if (
                            reach.live[tail] and reach.live[join] and reach.before(join, node.index)
                            and all(reach.before(c, tail) or reach.before(join, c) for c in chain)
                        ):
                            return True
    return False


def _absorbed(graph: FlowGraph, occ: list[DLNode], deleted: set[int]) -> set[Key]:
    """Keys of the unmatched nodes nested in a matched node of a deleted statement (``torch.finfo(s.dtype)`` in
    ``s.masked_fill(m, torch.finfo(s.dtype).min)``): they vanish with it, so their reads are no uses. What the target
    still reads of them is checked as a target input (iii)."""
    inside = {id(n.expr) for n in occ if id(n.site.small) in deleted}
    out: set[Key] = set()
    for statement in deleted:
        for pos in reversed(graph.by_statement.get(statement, ())):
            node = graph.events[pos]
            if isinstance(node, DLNode) and node.parent is not None and id(node.parent) in inside:
                inside.add(id(node.expr))
                out.add(key(node))
    return out


def _moved_reads_touched(
    graph: FlowGraph, reach: Reach, anchor: DLNode, keys: set[Key], deleted: set[int], chain: list[int]
) -> bool:
    """(iv) Deleted statements now run at the anchor: what they read must not reach code with calls in between, on
    a path through the copy, which may mutate it in place (``xs.clear()``, ``nn.ReLU(inplace=True)(x)``)."""
    moved_at = [
        pos
        for statement in deleted
        for pos in graph.by_statement.get(statement, ())
        if pos != anchor.index and reach.before(pos, anchor.index) and reach.on_chain(pos, chain)
    ]
    if not moved_at:
        return False
    moved: set[int] = set()
    for pos in moved_at:
        event = graph.events[pos]
        moved |= {vid for vid in read_vids(event) if vid not in _temporaries(event)}
    skip = deleted | {id(anchor.site.small)}
    for vid, joins in reach.carried(moved, chain).items():
        for pos in graph.readers.get(vid, ()):
            event = graph.events[pos]
            assert event is not None
            if pos == anchor.index or id(event.site.small) in deleted:
                continue
            if isinstance(event, DLNode) and key(event) in keys:
                continue
            if not (reach.before(pos, anchor.index) and any(p != pos and reach.before(p, pos) for p in moved_at)):
                continue
            if not reach.reads_at(pos, chain, joins):
                continue
            if isinstance(event, DLNode):
                impure = event.kind != "op" or not all(v.pure for v in [*event.args, *(v for _, v in event.kwargs)])
            else:
                scan = m._EffectScan(skip)
                event.site.small.visit(scan)
                impure = scan.unsafe
            if impure:
                return True
    before = m._CallBefore(anchor.expr)
    anchor.site.small.visit(before)
    return before.found


def _temporaries(event: object) -> set[int]:
    """Value ids a node reads as DSL results (``%`` names): no variable a deleted statement reads."""
    if not isinstance(event, DLNode):
        return set()
    return {vid for v in [*event.args, *(v for _, v in event.kwargs)] for name, vid in v.uses if name.startswith("%")}
