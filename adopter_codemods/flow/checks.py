"""The matcher's safety questions answered on a `FlowGraph` (docs/ENGINE.md "Graph analysis").

The correctness contract is stated per control-flow path of a function: which matched nodes run on it, whether an
event outside the match reads an intermediate, whether a target input is redefined before the anchor, whether code
with calls touches what a deleted statement reads before the anchor. On the acyclic graph, a path through a set of
nodes exists when they are ordered by reachability; a path through a node that avoids a set exists when the node
still lies on an entry-to-exit path without that set (`Reach.avoiding`, or a `Reach` with `excluded`). Each
function below states its question per path.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable, Iterator, Optional, Sequence, Union

import libcst as cst

from .. import cstwalk
from .. import matcher as m
from ..dsl import CallNode, Node, OpNode, Rule, Var
from ..provider import syntax
from ..structure import ClassStructure, Def, DLNode, Event, Site, Use, Value
from . import aliasing
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
    if m._may_occur(patterns, graph.summary, rule):
        yield from _Search(patterns, graph, rule).search(0, None, {}, [])


class _Search:
    """The depth-first search of :func:`subsequences` (methods, not nested closures: a recursive closure is a cycle
    that keeps the graph alive until the collector runs)."""

    def __init__(self, patterns: tuple[Node, ...], graph: FlowGraph, rule: Rule) -> None:
        self.patterns, self.graph, self.rule = patterns, graph, rule
        self.reach = graph.reach
        self.readers: dict[int, list[DLNode]] = {}
        for node in graph.nodes:
            for value in (*node.args, *(v for _, v in node.kwargs)):
                if value.kind == "var":
                    self.readers.setdefault(value.vid, []).append(node)

    def after(self, prev: Optional[DLNode], node: DLNode) -> bool:
        reach = self.reach
        # by index: `resolved` may have copied `prev`, and one call never stands for two pattern nodes
        return reach.live[node.index] and (
            prev is None or (node.index != prev.index and reach.before(prev.index, node.index))
        )

    def candidates(self, pattern: Node, env: dict[str, m.Binding], prev: Optional[DLNode]) -> Sequence[DLNode]:
        if isinstance(pattern, (CallNode, OpNode)):
            atoms = pattern.operands if isinstance(pattern, OpNode) else (
                *pattern.args.positional, *(a for _, a in pattern.args.keywords)
            )
            for atom in atoms:
                bound = env.get(atom.name) if isinstance(atom, Var) else None
                if isinstance(bound, m.Value) and bound.kind == "var":
                    readers = self.readers
                    found = {id(n): n for vid in self.graph.flowing([bound.vid]) for n in readers.get(vid, ())}
                    return sorted((n for n in found.values() if self.after(prev, n)), key=lambda n: n.index)
        return [n for n in self.graph.nodes if self.after(prev, n)]

    def search(
        self, pi: int, prev: Optional[DLNode], env: dict[str, m.Binding], chosen: list[Optional[DLNode]]
    ) -> Iterator[tuple[list[Optional[DLNode]], dict[str, m.Binding]]]:
        if pi == len(self.patterns):
            yield chosen, env
            return
        pattern = self.patterns[pi]
        for node in self.candidates(pattern, env, prev):
            node = resolved(self.graph, node, env, [n.index for n in chosen if n is not None])
            result = m._match_node(pattern, node, env, self.rule)
            if result is not None:
                yield from self.search(pi + 1, node, result, chosen + [node])
        if isinstance(pattern, (CallNode, OpNode)) and pattern.optional:
            skipped = m._pass_through(pattern, env)
            if skipped is not None:
                yield from self.search(pi + 1, prev, skipped, chosen + [None])


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


def _instances(candidate: "m.Match", at: DLNode, reach: Reach) -> Union[list[dict[Key, DLNode]], Key]:
    """Per copy of the anchor `at` on a path of `reach`, the candidate's nodes it follows (the nearest of each key):
    one check per copy of the match (loop-body copies, helpers inlined twice). A key without such a node, if some
    has none."""
    graph = reach.graph
    out = []
    for anchor in graph.by_key.get(key(at), ()):
        if not reach.live[anchor.index]:
            continue
        instance: dict[Key, DLNode] = {}
        for node in candidate.nodes:
            found = [c for c in graph.by_key.get(key(node), ()) if reach.live[c.index] and reach.before(c.index, anchor.index)]
            if not found:
                return key(node)
            instance[key(node)] = max(found, key=lambda c: c.index)
        out.append(instance)
    return out


def _missing_key_paths(reach: Reach, keys: Sequence[Key], through: set[Key]) -> Optional[Key]:
    """A key in `keys` (tried in order) such that some path of `reach` runs a node of a key in `through` but no
    node of it, if any."""
    graph = reach.graph
    targets = _positions(graph, through)
    for k in keys:
        avoid = _positions(graph, {k})
        if any(reach.avoiding(p, avoid) for p in targets - avoid):
            return k
    return None


def _partial_path(match: "m.Match", missing: Key) -> "m.Reason":
    node = next(n for n in match.nodes if key(n) == missing)
    return m.Reason(
        m.RefusalCategory.PARTIAL_PATH, "some path runs the other matched calls but not the one here", node.site.line
    )


def _ordered_keys(match: "m.Match") -> list[Key]:
    """The match's keys in pattern order, once each (refusals name the first missing one)."""
    return list(dict.fromkeys(key(n) for n in match.nodes))


def check_paths(match: "m.Match", placement: "m.Placement", graph: FlowGraph) -> Optional["m.Reason"]:
    """The checks on every path running a matched statement, for the match placed as `placement`: without the
    anchor (the branch plan's other arm aside), what the matched nodes compute is unused; with the anchor, every
    matched node runs and `_check_complete` holds. The first failure's reason, if any."""
    assert placement.anchor is not None
    keys = {key(n) for n in match.nodes}
    anchor_key = key(placement.anchor)
    deleted = {id(s) for s in placement.deleted}
    prefix = {id(n.site.small) for n in match.nodes if id(n.site.small) in deleted}
    # Paths running matched statements but not the anchor: what they compute must be unused.
    anchors = _positions(graph, {anchor_key})
    others = [n for k in keys - {anchor_key} for n in graph.by_key.get(k, ())]
    partial = [n for n in others if graph.reach.avoiding(n.index, anchors)]
    copied = placement.plan == "branch" and all(id(n.site.small) in prefix for n in partial)
    if not copied:
        # The call goes with the match, into the fused call, which those paths (an early `return`, a `continue` to
        # the next iteration) skip: a dropout's draw would be lost there, and every later draw take another sample.
        lost = next((n for n in others if _draws_or_changes_state(n) and (
            n in partial or _runs_again_first(graph, n, anchors) or _folded_exit_between(graph, n, anchors)
        )), None)
        if lost is not None:
            return m.Reason(
                m.RefusalCategory.PARTIAL_PATH,
                "on a path that leaves before the last matched call (a `return`, a `continue`), this call runs and "
                "may draw random numbers or change state (a dropout): the fused call would not do it there",
                lost.site.line,
            )
    if partial and not copied:
        without_anchor = Reach(graph, anchors)
        for node in partial:
            use = _read_outside(graph, without_anchor, {node.out}, keys, [node.index], frozenset())
            if use is not None:
                return _used_reason(
                    m.RefusalCategory.INTERMEDIATE_USED_ELSEWHERE, use, graph, match, {node.out},
                    "on a path that skips the last matched call, {name} is used here",
                )
    # Paths running the anchor run every matched node.
    missing = _missing_key_paths(graph.reach, _ordered_keys(match), {anchor_key})
    if missing is not None:
        return _partial_path(match, missing)
    instances = _instances(match, placement.anchor, graph.reach)
    if isinstance(instances, tuple):
        return _partial_path(match, instances)
    for instance in instances:
        reason = _check_complete(match, placement, graph, graph.reach, instance, deleted)
        if reason is not None:
            return reason
    return None


def _used_reason(
    category: "m.RefusalCategory", use: Event, graph: FlowGraph, match: "m.Match", vids: set[int], text: str
) -> "m.Reason":
    """`text` with ``{name}``: the variable holding the value `use` reads (one of `vids`, or a phi they flow
    into), quoted, or a description of it; worded only when refusals are listed."""

    def sentence() -> str:
        read = read_vids(use)
        name = m._name_of({v for v in vids if graph.flowing([v]) & read}, graph, match.cls)
        return text.format(name=f"`{name}`" if name else "a matched call's result")

    return m.Reason(category, sentence, use.site.line)


def check_fused_paths(
    match: "m.Match", placement: "m.Placement", graph: FlowGraph, original_only: frozenset[int],
    guarded: frozenset[int], twin: Optional["m.PlacedMatch"],
) -> Optional["m.Reason"]:
    """The checks of the fallback plan's fused copy: on the paths where every fallback test is false (the graph
    without the statements only those tests reach), a path with a matched node runs the whole match, or with a
    `twin` (the match without its absorbed nodes) at least the twin, and `_check_complete` holds for what it runs;
    reads in `guarded` statements happen only when a test is true and are ignored. Some path must run the match.
    None when they hold; else `_check_complete`'s reason, or an unlisted one for the others."""
    unplaced = m.Reason(m.RefusalCategory.NOT_PLACEABLE, "no path runs the fused copy whole", listed=False)
    excluded = frozenset(
        pos
        for pos, event in enumerate(graph.events)
        if event is not None and (id(event.site.small) in original_only or id(event.site.line) in original_only)
    )
    reach = Reach(graph, excluded)
    keys = {key(n) for n in match.nodes}
    twin_keys = {key(n) for n in twin.match.nodes} if twin is not None else keys
    # A path with some matched node has all of the candidate's (with a twin: all the twin's at least).
    if _missing_key_paths(reach, list(twin_keys), keys) is not None:
        return unplaced
    checked = 0
    candidates: list[tuple[m.Match, m.Placement, Reach]] = [(match, placement, reach)]
    if twin is not None:
        # Paths missing an absorbed node are checked as the twin.
        where_skipped = [Reach(graph, excluded | _positions(graph, {k})) for k in keys - twin_keys]
        candidates += [(twin.match, twin.placement, where) for where in where_skipped]
    for candidate, candidate_placement, where in candidates:
        assert candidate_placement.anchor is not None
        deleted = {id(s) for s in candidate_placement.deleted}
        instances = _instances(candidate, candidate_placement.anchor, where)
        if isinstance(instances, tuple):
            if candidate is match and twin is not None:
                continue  # no path runs every node: the twin's checks cover them
            return unplaced
        for instance in instances:
            reason = _check_complete(candidate, candidate_placement, graph, where, instance, deleted, guarded)
            if reason is not None:
                return reason
            checked += 1
    return None if checked else unplaced


def _read_outside(
    graph: FlowGraph, reach: Reach, vids: set[int], keys: set[Key], chain: list[int], ignore: frozenset[int],
    between: Optional[tuple[int, int]] = None,
) -> Optional[Event]:
    """An event outside the matched nodes (`keys`; statements in `ignore` aside) that reads one of `vids`, or a
    phi they flow into through edges such a path takes, on a path through `chain`, if any (the first in graph
    order); with `between`, only from the first position up to (not including) the second."""
    first: Optional[int] = None
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
            if (first is None or pos < first) and reach.reads_at(pos, chain, joins):
                first = pos
    if first is None:
        return None
    event = graph.events[first]
    assert event is not None
    return event


def read_after_anchor(match: "m.Match", anchor: DLNode, graph: FlowGraph, vids: set[int]) -> Optional[Event]:
    """An event outside the matched nodes that reads one of `vids` (or a phi they flow into) after the `anchor`, on
    a path through the match, if any (the first in graph order)."""
    chain = sorted(n.index for n in match.nodes)
    keys = {key(n) for n in match.nodes}
    return _read_outside(graph, graph.reach, vids, keys, chain, frozenset(), (anchor.index, graph.exit))


_HIDDEN_USED = "{name}, an intermediate result the fused call hides, is used here"


def intermediate_read_later(match: "m.Match") -> Optional["m.Reason"]:
    """The refusal no placement cures: an intermediate result the fused call hides is read after the match's last
    node (returned with the output, stored). Worded like check (i) of `_check_complete`."""
    graph = match.graph
    assert graph is not None, "a forward match has its graph"
    anchor = max(match.nodes, key=lambda n: n.index)
    inter, _ = m._output_vids(match)
    use = read_after_anchor(match, anchor, graph, inter) if inter else None
    if use is None:
        return None
    return _used_reason(m.RefusalCategory.INTERMEDIATE_USED_ELSEWHERE, use, graph, match, inter, _HIDDEN_USED)


def hoist_instances(match: "m.Match", graph: FlowGraph) -> Optional[list[dict[Key, DLNode]]]:
    """The copies of a match whose nodes all move to one statement before the first of them (plan "hoist"): per
    copy of the first matched node, the nodes of the other keys on its paths. None unless every path running a
    matched node runs each of them exactly once, some path runs them, and every copy's nodes read the matched
    values on every path through it (not a phi's other operand)."""
    reach = graph.reach
    keys = _ordered_keys(match)
    copies = {k: [n for n in graph.by_key.get(k, ()) if reach.live[n.index]] for k in keys}
    for nodes in copies.values():  # one path running a node twice (a loop body, a helper inlined twice in a row)
        if any(reach.before(a.index, b.index) for a in nodes for b in nodes if a is not b):
            return None
    if _missing_key_paths(reach, keys, set(keys)) is not None:
        return None
    first_key = key(min(match.nodes, key=lambda n: n.index))
    instances = []
    for first in copies[first_key]:
        instance: dict[Key, DLNode] = {}
        for k in keys:
            ordered = [n for n in copies[k] if reach.ordered(n.index, first.index)]
            if len(ordered) != 1:
                return None
            instance[k] = ordered[0]
        rep_to_path = {n.out: instance[key(n)].out for n in match.nodes}
        chain = sorted(n.index for n in instance.values())
        if _phi_other_operand(match, graph, reach, instance, rep_to_path, chain) is not None:
            return None
        instances.append(instance)
    return instances or None


def _check_complete(
    match: "m.Match", placement: "m.Placement", graph: FlowGraph, reach: Reach, instance: dict[Key, DLNode],
    deleted: set[int], ignore: frozenset[int] = frozenset(),
) -> Optional["m.Reason"]:
    """On the paths through one copy of the match: (i) intermediates are read by matched nodes only; (ii) other
    target outputs are not read before the anchor; (iii) every input of the fused call holds the same value at the
    anchor once the deleted statements are gone; (iv) `_moved_reads_touched` finds nothing; (v) no matched random
    draw moves past another (`_draw_moved_past_another`). The first failure's reason, if any."""
    assert placement.anchor is not None
    ignore = ignore | {id(s) for s in placement.feeders}  # removed with the match: their reads go too
    keys = set(instance)
    anchor = instance[key(placement.anchor)]
    chain = sorted(n.index for n in instance.values())
    first = chain[0]
    rep_to_path = {n.out: instance[key(n)].out for n in match.nodes}
    inter_rep, outs_rep = m._output_vids(match)
    inter = {rep_to_path.get(v, v) for v in inter_rep}
    outs = {rep_to_path.get(v, v) for v in outs_rep} - {anchor.out}
    # (i) intermediates are read by matched nodes only (and by what disappears with them: the unmatched calls nested
    # in a deleted statement's node, and the reads of a deleted helper call, `h = self.residual(h, x)`, which pass
    # its arguments to the matched nodes in the helper's body)
    own = {id(n.site.small) for n in instance.values()}
    helper_calls = frozenset(s for s in deleted if s not in own)
    use = _read_outside(
        graph, reach, inter, keys | _absorbed(graph, list(instance.values()), deleted), chain, ignore | helper_calls
    )
    if use is not None:
        return _used_reason(m.RefusalCategory.INTERMEDIATE_USED_ELSEWHERE, use, graph, match, inter, _HIDDEN_USED)
    # (ii) other target outputs are produced at the anchor now: nothing may read them earlier (their deleted copies
    # aside, whose names the call assigns instead)
    copies = frozenset(id(copy) for copy in placement.output_copies.values())
    use = _read_outside(graph, reach, outs, keys, chain, ignore | copies, (first, anchor.index)) if outs else None
    if use is not None:
        return _used_reason(
            m.RefusalCategory.OUTPUT_READ_EARLY, use, graph, match, outs,
            "{name} is read here, before the place where the fused call would produce it",
        )
    # Matched nodes read the matched values on every path through the copy (not a phi's other operand). Asked
    # after (i) and (ii): where one of those fails too, its reason is the one refusals have always given. One call
    # rewritten where it stands (ADP004's drop-in) passes its own arguments as written: it reads, on every path,
    # what the original call read (nanoGPT's `logits` changed in place under `if top_k is not None:`).
    if len(match.nodes) > 1 or placement.plan != "inline":
        reason = _phi_other_operand(match, graph, reach, instance, rep_to_path, chain)
        if reason is not None:
            return reason
    # (iii) every input of the fused call holds the same value at the anchor once the deleted statements are gone
    state = state_at(graph, anchor, deleted)
    anchor_stmt = id(anchor.site.small)
    twins: dict[int, m.Value] = {}
    for n in match.nodes:
        copy = instance[key(n)]
        for rep_value, value in zip([*n.args, *(v for _, v in n.kwargs)], [*copy.args, *(v for _, v in copy.kwargs)]):
            twins[id(rep_value)] = value
    todo: list[tuple[str, int]] = []
    inputs = _input_nodes(graph, instance)  # what the fused call re-renders: both effect-order checks read it
    for value in m._target_inputs(match):
        # impure without a call: a property read (`self.temperature`), which runs code as a call does
        if value.kind == "expr" and not value.pure and (
            not syntax.computes_only(value.expr) or not any(type(n) is cst.Call for n in cstwalk.walk(value.expr))
        ):
            moved_from = m._value_site_moves(match, value, anchor_stmt)
            if moved_from is not None and not _moves_only_past_the_match(
                match, instance, value, moved_from, anchor, deleted
            ):
                calls = any(type(n) is cst.Call for n in cstwalk.walk(value.expr))
                return m.Reason(
                    m.RefusalCategory.NOT_PLACEABLE,
                    f"an argument here {'makes a call' if calls else 'reads a property, which runs code'}, and the "
                    "fused call would evaluate it at another statement",
                    moved_from,
                )
        copy_value = twins.get(id(value))
        effect = _moved_effect(graph, copy_value if copy_value is not None else value, deleted, anchor_stmt)
        if effect is not None and not _effect_keeps_its_order(graph, instance, inputs, effect, anchor, deleted):
            return m.Reason(
                m.RefusalCategory.NOT_PLACEABLE,
                "an argument here calls a layer or a function that may have effects (random numbers, state), and the "
                "fused call would run it at another statement",
                effect.site.line,
            )
        todo.extend(copy_value.uses if copy_value is not None else [(n, rep_to_path.get(v, v)) for n, v in value.uses])
    swapped = _effects_reordered(graph, instance, [twins.get(id(v), v) for v in m._target_inputs(match)])
    if swapped is not None:
        return m.Reason(
            m.RefusalCategory.NOT_PLACEABLE,
            "an argument here calls a layer or a function that may have effects (random numbers, state) before "
            "one that computes an earlier argument of the fused call; the fused call would run them in the other order",
            swapped.site.line,
        )
    late = _input_after_an_effect(instance, inputs)
    if late is not None:
        return m.Reason(
            m.RefusalCategory.NOT_PLACEABLE,
            "an argument here calls a layer or a function that may have effects (random numbers, state) after a "
            "matched call that has them; the fused call would run it first",
            late.site.line,
        )
    while todo:
        name, vid = todo.pop()
        if name.startswith("%"):
            producer = graph.producers.get(vid)
            if producer is not None:
                for arg in [*producer.args, *(v for _, v in producer.kwargs)]:
                    todo.extend(arg.uses)
            continue
        if state.get(name, vid) != vid and not _holds_on_chain(reach, state[name], vid, chain, anchor.index):
            definition = _definition(graph, name, state[name], vid)
            return m.Reason(
                m.RefusalCategory.INPUT_REDEFINED,
                f"`{name.rsplit('::', 1)[-1]}` is assigned again here, so at the fused call's place it would hold "
                "another value",
                definition.site.line if definition is not None else None,
            )
    return _moved_reads_touched(match, graph, reach, anchor, keys, deleted, chain) or _draw_moved_past_another(
        graph, reach, anchor, instance, deleted, chain
    )


def _holds_on_chain(reach: Reach, phi: int, vid: int, chain: list[int], pos: int) -> bool:
    """Whether reading the phi `phi` at `pos` reads `vid` on every path through `chain`: `vid` is carried into it on
    such a path and no other operand is (a name assigned in an `if` whose body the chain goes through:
    ``if exists(mask): mask = rearrange(mask, ...); s = s.masked_fill(~mask, ...)``)."""
    operands = reach.graph.phis.get(phi)
    if operands is None or vid not in operands:
        return False
    joins = reach.carried({vid}, chain).get(phi)
    if not joins or not reach.reads_at(pos, chain, joins):
        return False
    for other in operands - {vid}:
        joins = reach.carried({other}, chain).get(phi)
        if joins and reach.reads_at(pos, chain, joins):
            return False
    return True


# Functions whose calls an argument may carry to another statement: they only compute. Anything else under `torch`
# that draws random numbers or works in place, a layer, or a function of other code may have effects.
_RANDOM = frozenset({
    "torch.rand", "torch.rand_like", "torch.randn", "torch.randn_like", "torch.randint", "torch.randint_like",
    "torch.randperm", "torch.bernoulli", "torch.multinomial", "torch.normal", "torch.poisson",
})
_EFFECT_FREE_ROOTS = ("math.", "torch.", "operator.", "numpy.", "einops.")


def _moved_effect(graph: FlowGraph, value: "m.Value", deleted: set[int], anchor_stmt: int) -> Optional[DLNode]:
    """The first call with possible effects among the unmatched DSL nodes computing `value` in a deleted statement
    other than the anchor's: the fused call would run it at the anchor, after whatever stands between."""
    todo, seen = [value], set()
    while todo:
        current = todo.pop()
        if current.kind != "var" or not current.text.startswith("%") or current.vid in seen:
            continue
        seen.add(current.vid)
        node = graph.producers.get(current.vid)
        if node is None or id(node.site.small) not in deleted or id(node.site.small) == anchor_stmt:
            continue
        args = [*node.args, *(v for _, v in node.kwargs)]
        if may_have_effects(node) or any(a.kind == "expr" and not a.pure for a in args):
            return node
        todo.extend(args)
    return None


def _effect_keeps_its_order(
    graph: FlowGraph, instance: dict[Key, DLNode], inputs: dict[int, DLNode], effect: DLNode, anchor: DLNode,
    deleted: set[int],
) -> bool:
    """Whether the call `effect`, written in a deleted statement, may run at the fused call instead: every statement
    from its own to the anchor's is deleted, and neither a matched call that ran before it nor another call of the
    anchor's statement that runs before the fused call has effects (their order with it would change)."""
    if not _only_deleted_up_to_the_anchor(effect.site.line, anchor, deleted):
        return False
    if any(may_have_effects(n) for n in instance.values() if n.index < effect.index):
        return False
    matched = {id(n) for n in instance.values()}
    return not any(
        may_have_effects(n)
        for n in graph.nodes
        if id(n) not in matched and n.index not in inputs and n.site.small is anchor.site.small
        and effect.index < n.index < anchor.index
    )


def _input_nodes(graph: FlowGraph, instance: dict[Key, DLNode]) -> dict[int, DLNode]:
    """The unmatched nodes whose results the matched nodes read (re-rendered in the fused call), by graph position."""
    found: dict[int, DLNode] = {}
    matched = {id(n) for n in instance.values()}
    todo = [v for n in instance.values() for v in [*n.args, *(kv for _, kv in n.kwargs)]]
    while todo:
        value = todo.pop()
        node = graph.producers.get(value.vid) if value.kind == "var" and value.text.startswith("%") else None
        if node is None or node.index in found or id(node) in matched:
            continue
        found[node.index] = node
        todo.extend([*node.args, *(kv for _, kv in node.kwargs)])
    return found


def _effects_reordered(graph: FlowGraph, instance: dict[Key, DLNode], values: list["m.Value"]) -> Optional[DLNode]:
    """The unmatched call with effects computing an argument of the fused call (`values`, in its argument order) that
    ran before one computing an earlier argument (`F.dropout(x, p) + self.drop(self.inner(x))`, whose fused call
    takes the dropout's input first): the fused call evaluates its arguments one after the other, in its order."""
    matched = {id(n) for n in instance.values()}
    latest = -1  # the last effect of the arguments so far, by graph position
    for value in values:
        effects: list[int] = []
        todo, seen = _computed_by(value), set()
        while todo:
            node = graph.producers.get(todo.pop())
            if node is None or id(node) in matched or node.index in seen:
                continue
            seen.add(node.index)
            if may_have_effects(node):
                effects.append(node.index)
            for arg in [*node.args, *(v for _, v in node.kwargs)]:
                todo.extend(_computed_by(arg))
        if effects and min(effects) < latest:
            return graph.events[min(effects)]  # type: ignore[return-value]
        latest = max([latest, *effects])
    return None


def _computed_by(value: "m.Value") -> list[int]:
    """The ids of the walk's temporaries (`%3`: the results of DSL nodes nested in a statement) a value reads."""
    return [vid for name, vid in value.uses if name.startswith("%")]


def _input_after_an_effect(instance: dict[Key, DLNode], inputs: dict[int, DLNode]) -> Optional[DLNode]:
    """An unmatched call with effects computing an input of the fused call that ran after a matched call with effects
    (`attn = self.drop(attn); out = attn @ self.value(v)`): the fused call evaluates its inputs before the matched
    computation, so the two would swap their random draws or state changes."""
    first = min((n.index for n in instance.values() if may_have_effects(n)), default=None)
    if first is None:
        return None
    late = [n for index, n in inputs.items() if index > first and may_have_effects(n)]
    return min(late, key=lambda n: n.index) if late else None


def _folded_exit_between(graph: FlowGraph, node: DLNode, anchors: frozenset[int]) -> bool:
    """Whether a compound statement the walk read as one event (an ``if`` without DSL calls: ``if skip: return x``,
    ``if i == 0: continue``), between `node` and an anchor, may leave the path there: its exits are not edges of
    the graph."""
    reach = graph.reach
    for pos in range(node.index + 1, max(anchors, default=node.index)):
        event = graph.events[pos]
        small = event.site.small if event is not None else None
        if small is None or id(small) not in graph.folded or not reach.before(node.index, pos):
            continue
        if any(reach.before(pos, a) for a in anchors) and _leaves(small):
            return True
    return False


def _leaves(statement: cst.CSTNode) -> bool:
    """Whether a compound statement holds a ``return``, or a ``continue``/``break`` of a loop around it (not of a
    loop it is or holds), outside nested functions and classes. A ``raise`` ends the call: what it drew is moot."""
    todo: list[tuple[cst.CSTNode, bool]] = [(statement, False)]
    while todo:
        node, in_loop = todo.pop()
        kind = type(node)
        if kind is cst.Return or (not in_loop and kind in (cst.Continue, cst.Break)):
            return True
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        inner = in_loop or kind in (cst.For, cst.While)  # a loop's own `continue`/`break` stay inside it
        todo.extend((child, inner) for child in node.children)
    return False


def _runs_again_first(graph: FlowGraph, node: DLNode, anchors: frozenset[int]) -> bool:
    """Whether a path from `node` reaches another copy of it (the next iteration of a loop) before an anchor."""
    again = {c.index for c in graph.by_key.get(key(node), ()) if c.index != node.index}
    if not again:
        return False
    seen = {node.index}
    todo = [node.index]
    while todo:
        for nxt in graph.succs[todo.pop()]:
            if nxt in again:
                return True
            if nxt not in seen and nxt not in anchors and graph.reach.live[nxt]:
                seen.add(nxt)
                todo.append(nxt)
    return False


def _draws_or_changes_state(node: DLNode) -> bool:
    """`may_have_effects`, but not a layer of a type known to only compute (`COMPUTING_LAYERS`, not in place)."""
    if node.kind == "layer" and node.qualname in COMPUTING_LAYERS and not aliasing._layer_in_place(node):
        return False
    return may_have_effects(node)


def may_change_arguments(node: DLNode) -> bool:
    """Whether evaluating the node may change in place what it is handed: an operand with a call of its own; a layer
    not of a type known to only compute (`COMPUTING_LAYERS`) or built with ``inplace=``; a function other than a
    ``torch``/``math`` one whose name does not end in ``_``, or one passed ``out=``/``inplace=`` (for
    ``torch.nn.functional``, where ``inplace`` may come positionally, any positional argument after the first that is
    not a number). Operators never do."""
    if not all(v.pure for v in (*node.args, *(v for _, v in node.kwargs))):
        return True
    if node.kind == "op":
        return False
    if node.kind == "layer":
        return node.qualname not in COMPUTING_LAYERS or aliasing._layer_in_place(node)
    name = node.qualname
    if name is None or not name.startswith(("torch.", "math.")) or syntax.is_in_place_name(name.rsplit(".", 1)[-1]):
        return True
    if any(k in ("out", "inplace") for k, _ in node.kwargs):
        return True
    return name.startswith("torch.nn.functional.") and not all(_is_number(v) for v in node.args[1:])


def may_change_state(node: DLNode) -> bool:
    """Whether evaluating the node may change in place anything it reaches, what it is handed or other state:
    `may_change_arguments`, a dropout layer aside (it draws random numbers and changes nothing in place unless
    built with ``inplace=``)."""
    if node.kind == "layer" and node.qualname in _DROPOUT_LAYERS:
        return aliasing._layer_in_place(node)
    return may_change_arguments(node)


_DROPOUT_LAYERS = frozenset({
    "torch.nn.Dropout", "torch.nn.Dropout1d", "torch.nn.Dropout2d", "torch.nn.Dropout3d", "torch.nn.AlphaDropout",
})


def _is_number(value: Value) -> bool:
    """A literal int or float (not a bool, which ``inplace`` may be)."""
    if value.kind != "const":
        return False
    try:
        literal = ast.literal_eval(value.text)
    except (ValueError, SyntaxError):
        return False
    return isinstance(literal, (int, float)) and not isinstance(literal, bool)


def statement_may_change_arguments(small: cst.CSTNode, skip: set[int], graph: FlowGraph) -> bool:
    """Whether the calls of a statement outside `skip` (ids of expressions judged on their own) may change in place
    what they are handed: any call but those `other_calls` passes over and the DSL nodes `may_change_arguments`
    clears."""
    nodes = graph.by_call
    return any(id(call) not in nodes or may_change_arguments(nodes[id(call)]) for call in other_calls(small, skip))


def may_have_effects(node: DLNode) -> bool:
    """Whether the node may do more than compute its result: a layer (it may hold a dropout or change state), a
    call the walk could not resolve, a random draw, dropout, an in-place method (`add_`), a function outside `math`,
    `torch`, `operator`, `numpy` and `einops`. Operators never do."""
    if node.kind == "op":
        return False
    if node.kind == "layer" or node.qualname is None:
        return True  # a module may hold a dropout, or state its forward changes
    name = node.qualname
    return (
        name in _RANDOM or "dropout" in name or name.endswith("_") or not name.startswith(_EFFECT_FREE_ROOTS)
    )


# Layers whose call only computes (no random draw, no state read by another call): a matched dropout may move past
# them. Any other layer may hold a dropout.
COMPUTING_LAYERS = frozenset({
    "torch.nn.Linear", "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d", "torch.nn.LayerNorm",
    "torch.nn.GroupNorm", "torch.nn.RMSNorm", "torch.nn.Embedding", "torch.nn.Softmax", "torch.nn.GELU",
    "torch.nn.Tanh", "torch.nn.Sigmoid", "torch.nn.ReLU", "torch.nn.SiLU", "torch.nn.Identity",
})


def _draw_moved_past_another(
    graph: FlowGraph, reach: Reach, anchor: DLNode, instance: dict[Key, DLNode], deleted: set[int], chain: list[int]
) -> Optional["m.Reason"]:
    """(v) A matched call with effects in a deleted statement (a dropout's random draw) now runs at the anchor: a
    call between, on a path through the copy, that may have effects too (another dropout, ``torch.rand_like``, an
    unknown function or layer) would swap places with it, and the two would draw each other's random numbers
    (``p = self.drop(p); v2 = self.drop2(v); out = p @ v2``). The reason naming the first such statement, if any.
    Calls of deleted statements and of the anchor's own statement are judged with the fused call's inputs (iii)."""
    moved = [
        n.index for n in instance.values()
        if id(n.site.small) in deleted and n.index < anchor.index and _may_draw(n)
    ]
    if not moved:
        return None
    first = min(moved)
    matched = {id(n) for n in instance.values()}
    for pos in range(first + 1, anchor.index):
        event = graph.events[pos]
        if event is None or id(event) in matched or id(event.site.small) in deleted:
            continue
        if event.site.small is anchor.site.small or not (reach.before(first, pos) and reach.on_chain(pos, chain)):
            continue
        if isinstance(event, DLNode):
            draws = _may_draw(event)
        elif isinstance(event, Use):
            small = event.site.small
            whole = isinstance(small, cst.BaseSmallStatement) or id(small) in graph.folded
            scanned = small if whole else syntax.compound_header(small)
            draws = scanned is not None and _calls_beyond_computing(scanned)
        else:
            continue
        if draws:
            return m.Reason(
                m.RefusalCategory.NOT_PLACEABLE,
                "a call here may have effects (random numbers, state), and a matched call that has them (a dropout) "
                "would now run after it, at the fused call's place: the two would swap their draws",
                event.site.line,
            )
    return None


def _may_draw(node: DLNode) -> bool:
    """`may_have_effects`, less the layers known to only compute."""
    if node.kind == "layer" and node.qualname in COMPUTING_LAYERS:
        return False
    return may_have_effects(node)


def _calls_beyond_computing(node: cst.CSTNode) -> bool:
    """A call other than a metadata read, a number builtin and a computing method (`syntax.computing_call`)."""
    return any(True for _ in other_calls(node))


def other_calls(node: cst.CSTNode, skip: frozenset[int] | set[int] = frozenset()) -> Iterator[cst.Call]:
    """The calls in `node`, outside the expressions in `skip`, other than tensor metadata reads, number builtins and
    computing methods (``view``, ``to``, ...: `syntax.computing_call`)."""
    for sub in cstwalk.walk(node, lambda n: id(n) not in skip):
        if type(sub) is cst.Call and id(sub) not in skip and not syntax.computing_call(sub):  # type: ignore[arg-type]
            yield sub  # type: ignore[misc]


def _only_deleted_up_to_the_anchor(line: cst.CSTNode, anchor: DLNode, deleted: set[int]) -> bool:
    """Whether `line` and every statement after it up to the anchor's are deleted simple statements of the anchor's
    block (`line` not after the anchor's)."""
    block = anchor.site.block
    if line not in block or anchor.site.line not in block:
        return False
    start, stop = block.index(line), block.index(anchor.site.line)  # type: ignore[arg-type]
    return start <= stop and all(
        isinstance(stmt, cst.SimpleStatementLine) and all(id(small) in deleted for small in stmt.body)
        for stmt in block[start:stop]
    )


def _moves_only_past_the_match(
    match: "m.Match", instance: dict[Key, DLNode], value: "m.Value", line: cst.CSTNode, anchor: DLNode,
    deleted: set[int],
) -> bool:
    """Whether `value`, an argument with calls written in the deleted statement `line`, may be evaluated at the fused
    call instead: `line` and every statement from it to the anchor's are deleted statements of the anchor's block,
    and the matched nodes the argument now runs before, those that ran before the first matched node taking it
    (of `line` and of the matched statements before it), call no layer and no dropout. Then only the match's own
    side-effect-free computation changes places with the call (LeViT's `q @ k * scale + self.get_attention_biases()`,
    a later `s.masked_fill(~mask.unsqueeze(1), -inf)`); a dropout's own input may make calls (rfdetr's
    `self.drop(self.attn(q).reshape(shape))`), as it ran before the dropout anyway.
    """
    if not _only_deleted_up_to_the_anchor(line, anchor, deleted):
        return False
    if not any(instance[key(r)].site.line is line for r in match.nodes):
        return False
    consumers = [
        instance[key(r)].index for r in match.nodes
        if any(a is value for a in r.args) or any(v is value for _, v in r.kwargs)
    ]
    if not consumers:
        return False
    return all(
        n.kind == "op" or (n.kind == "func" and "dropout" not in (n.qualname or ""))
        for n in (instance[key(r)] for r in match.nodes) if n.index < min(consumers)
    )


def _definition(graph: FlowGraph, name: str, held: int, wanted: int) -> Optional[Def]:
    """The assignment giving `name` the value `held` it has at the anchor instead of `wanted`; for a phi, that of
    one of its operands other than `wanted` (the first in graph order)."""
    todo, seen = [held], set()
    while todo:
        vid = todo.pop(0)
        if vid in seen or vid == wanted:
            continue
        seen.add(vid)
        found = next((d for d in graph.definitions.get(vid, ()) if d.name == name), None)
        if found is not None:
            return found
        todo.extend(sorted(graph.phis.get(vid, ())))
    return None


def _phi_other_operand(
    match: "m.Match", graph: FlowGraph, reach: Reach, instance: dict[Key, DLNode], rep_to_path: dict[int, int],
    chain: list[int],
) -> Optional["m.Reason"]:
    """Whether a path through the copy reaches a matched node reading a phi (where the match reads one of its
    operands) through an edge carrying another operand: there the node reads something else. The reason, if so."""
    for rep_node in match.nodes:
        node = instance[key(rep_node)]
        pairs = zip([*rep_node.args, *(v for _, v in rep_node.kwargs)], [*node.args, *(v for _, v in node.kwargs)])
        for rep_value, value in pairs:
            if value.kind != "var" or value.vid not in graph.phis or rep_value.vid == value.vid:
                continue
            base = rep_to_path.get(rep_value.vid, rep_value.vid)
            if value.vid not in graph.flowing([base]):
                return _other_value(graph, node, value.vid)
            other = _other_operand(graph, reach, value.vid, base, node.index, False, chain, set())
            if other is not None:
                return _other_value(graph, node, other)
    return None


def _other_operand(
    graph: FlowGraph, reach: Reach, phi: int, base: int, target: int, nested: bool, chain: list[int],
    seen: set[tuple[int, int]],
) -> Optional[int]:
    """An operand of `phi` other than `base` that a path through `chain` carries into the join and on to `target`
    (the reading node; for a `nested` phi, the edge of the later join it flows along), if any. An operand that is
    itself a phi of an earlier join carrying `base` is looked through: it may carry another value on some of its
    own edges (``if a: if b: y = other``; both joins may start at the same position)."""
    if (phi, target) in seen:
        return None
    seen.add((phi, target))
    for operand, tails in graph.phi_tails.get(phi, {}).items():
        if operand == base:
            continue
        for tail in tails:
            for join in graph.phi_joins.get(phi, ()):
                if not (
                    reach.live[tail] and reach.live[join]
                    and (reach.before(tail, target) if nested else reach.before(join, target))
                    and all(reach.before(c, tail) or reach.before(join, c) for c in chain)
                ):
                    continue
                if operand not in graph.phis or operand not in graph.flowing([base]):
                    return operand
                found = _other_operand(graph, reach, operand, base, tail, True, chain, seen)
                if found is not None:
                    return found
    return None


def _other_value(graph: FlowGraph, node: DLNode, other: int) -> "m.Reason":
    """The refusal of a matched `node` that reads, on some path, the value `other` (a phi: any of its operands):
    caused by the assignment of that value (the first in graph order), else by the node."""
    others: set[int] = set()
    todo = [other]
    while todo:  # a phi of an earlier join: its own operands are assigned
        vid = todo.pop()
        if vid not in others:
            others.add(vid)
            todo.extend(graph.phis.get(vid, frozenset()))
    assignments = [d for vid in others for d in graph.definitions.get(vid, ())[:1]]
    assignment = min(assignments, key=lambda d: graph.position[id(d)], default=None)
    read = {v.vid for v in (*node.args, *(v for _, v in node.kwargs)) if v.kind == "var"}

    def sentence() -> str:
        state = graph.states.get(id(graph.events[node.index]), {})
        name = next((n for n, v in state.items() if v in read and not n.startswith("%")), None)
        held = f"`{name.rsplit('::', 1)[-1]}`" if name else "a variable"
        return f"on a path through this assignment, {held} holds another value where a matched call reads it"

    return m.Reason(
        m.RefusalCategory.OTHER_VALUE_READ, sentence, assignment.site.line if assignment is not None else node.site.line
    )


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


def _held_by_a_layer(cls: ClassStructure, vids: set[int]) -> Optional[str]:
    """An attribute of ``self`` among `vids` (as its value on entry) that ``__init__`` hands to a layer's constructor
    (``self.stats = Stats(self.temp)``): that layer may keep it and change it in place whenever it is called."""
    read = {cls.entry_names[vid][len("self."):] for vid in vids if cls.entry_names.get(vid, "").startswith("self.")}
    read &= cls.tensor_attributes  # a number (`self.head_dim`, handed to an nn.Embedding) cannot change in place
    if not read:
        return None
    for bindings in cls.init_bindings.values():
        for binding in (b for bs in bindings for b in (bs, *bs.elements)):
            for arg in binding.args:
                for node in cstwalk.walk(arg.value):
                    attr = syntax._is_self_attr(node) if type(node) is cst.Attribute else None  # type: ignore[arg-type]
                    if attr in read:
                        return attr
    return None


def _in_frames(stack: tuple[Site, ...], stacks: set[tuple[Site, ...]]) -> bool:
    """Whether an event inlined through `stack` runs in one of the frames leading to `stacks`' events (the same
    frames, or callers of theirs)."""
    return any(other[: len(stack)] == stack for other in stacks)


def _moved_reads_touched(
    match: "m.Match", graph: FlowGraph, reach: Reach, anchor: DLNode, keys: set[Key], deleted: set[int],
    chain: list[int],
) -> Optional["m.Reason"]:
    """(iv) Deleted statements now run at the anchor: what they read must not be changed in place in between, on a
    path through the copy: by code with calls reading it (``xs.clear()``, ``nn.ReLU(inplace=True)(x)``), or by a
    statement changing in place a value that may share its memory (`aliasing`: ``z += 1``, ``z[0] = 0``,
    ``z.add_(1)`` after ``z = x.view(-1)``). The reason naming the first such statement (in graph order), if any."""
    # A helper's statements are walked once per call inlining it: only this copy's frames (those through which
    # its nodes were inlined) move; another call's copy is another instance.
    stacks = {graph.events[i].site.inline_stack for i in chain} | {anchor.site.inline_stack}  # type: ignore[union-attr]
    moved_at = [
        pos
        for statement in deleted
        for pos in graph.by_statement.get(statement, ())
        if pos != anchor.index and reach.before(pos, anchor.index) and reach.on_chain(pos, chain)
        and _in_frames(graph.events[pos].site.inline_stack, stacks)  # type: ignore[union-attr]
    ]
    if not moved_at:
        return None
    moved: set[int] = set()
    for pos in moved_at:
        event = graph.events[pos]
        moved |= {vid for vid in read_vids(event) if vid not in _temporaries(event)}
    skip = deleted | {id(anchor.site.small)}
    sharing = aliasing.sharing_memory(graph, moved)
    direct = reach.carried(moved, chain)
    # readers of a value sharing memory with a moved one between a deleted statement and the anchor -> whether they
    # read a moved value itself
    suspects: dict[int, bool] = {}
    for vid, joins in reach.carried(sharing, chain).items():
        for pos in graph.readers.get(vid, ()):
            event = graph.events[pos]
            assert event is not None
            if pos == anchor.index or id(event.site.small) in deleted:
                continue
            if isinstance(event, DLNode) and key(event) in keys:
                continue
            if not (reach.before(pos, anchor.index) and any(p != pos and reach.before(p, pos) for p in moved_at)):
                continue
            if reach.reads_at(pos, chain, joins):
                reads_moved = vid in direct and reach.reads_at(pos, chain, direct[vid])
                suspects[pos] = suspects.get(pos, False) or reads_moved
    # A helper called by a deleted statement runs with it at the fused call's place: its stores (a memo such as
    # `self.cache[key] = bias`) change in place what the helper itself reads next, and are judged by its calls only.
    inlined = {pos for statement in deleted for pos in graph.inlined_from.get(statement, ())}
    for pos in sorted(suspects):  # in graph order: the reason names the first statement that may mutate
        event = graph.events[pos]
        assert event is not None
        if suspects[pos]:
            if isinstance(event, DLNode):
                calls = may_change_arguments(event)
            else:
                calls = statement_may_change_arguments(event.site.small, skip, graph)
        else:
            # Only a value sharing memory with a moved one: a method of its own may change what it holds
            # (`past.reset()` zeroing the key a caller passed with its cache); other changes are judged below.
            calls = isinstance(event, Use) and _calls_a_method_of(event, sharing, skip)
        if calls or (pos not in inlined and aliasing.changes_in_place(graph, event, sharing)):
            sentence = _mutated_sentence(graph, match, moved, event, calls)
            return m.Reason(m.RefusalCategory.INPUT_MAY_BE_MUTATED, sentence, event.site.line)
    held = _held_by_a_layer(match.cls, sharing)
    if graph.reached_elsewhere or held is not None:
        # A closure or a global may hold what the moved statements read, or a layer handed it when built
        # (`self.stats = Stats(self.temp)`): any call in between may change it.
        for pos in range(min(moved_at) + 1, anchor.index):
            event = graph.events[pos]
            if event is None or id(event.site.small) in skip or (isinstance(event, DLNode) and key(event) in keys):
                continue
            if not (reach.before(pos, anchor.index) and reach.on_chain(pos, chain)):
                continue
            if not any(reach.before(p, pos) for p in moved_at):
                continue
            if may_have_effects(event) if isinstance(event, DLNode) else any(
                id(call) not in graph.by_call for call in other_calls(event.site.small, skip)
            ):
                return m.Reason(
                    m.RefusalCategory.INPUT_MAY_BE_MUTATED,
                    "this function changes objects in place through a nested function or a global, and a call here "
                    "may run that code: it could change what a matched statement moved to the fused call's place reads"
                    if held is None else
                    f"a matched statement moved to the fused call's place reads `self.{held}`, which `__init__` hands "
                    "to a layer it builds: a call here may change it in place",
                    event.site.line,
                )
    # A moved layer call runs at the fused call's place with the layer as it is there: nothing in between may reach
    # the layer other than by calling it (`self.q.bias.add_(1)`, also in a helper method called in between).
    moved_layers = {
        n.layer[len("self."):] for p in moved_at if isinstance(n := graph.events[p], DLNode)
        and n.kind == "layer" and n.layer is not None and n.layer.startswith("self.")
    }
    if moved_layers:
        matched_calls = {id(n.call) for n in match.nodes if n.call is not None}
        for pos in range(min(moved_at) + 1, anchor.index):
            event = graph.events[pos]
            if event is None or id(event.site.small) in skip or not reach.on_chain(pos, chain):
                continue
            if any(reach.before(p, pos) for p in moved_at) and syntax.references_layers(
                event.site.small, moved_layers, matched_calls
            ):
                return m.Reason(
                    m.RefusalCategory.INPUT_MAY_BE_MUTATED,
                    "this statement reaches a matched layer other than by calling it, after the layer's call and "
                    "before the fused call's place, where the layer would be used as it is then",
                    event.site.line,
                )
    before = m._CallBefore(anchor.expr)
    anchor.site.small.visit(before)
    if before.found:  # opaque calls of the anchor's statement that run before it leave no event to judge
        return m.Reason(
            m.RefusalCategory.INPUT_MAY_BE_MUTATED,
            "this statement makes a call before the last matched call, which may modify in place what the moved "
            "statements read",
            anchor.site.line,
        )
    return None


def _calls_a_method_of(event: Use, vids: set[int], skip: set[int]) -> bool:
    """Whether the statement calls a method (not a computing one or a metadata read) of a name the event reads
    holding one of `vids`."""
    # scoped names: an inlined helper's are `<helper>@<n>::<name>`
    held = {name.rsplit("::", 1)[-1] for name, vid in zip(event.names, event.vids) if vid in vids}
    for call in other_calls(event.site.small, skip):
        func = call.func
        if type(func) is not cst.Attribute:
            continue
        receiver = func.value  # type: ignore[attr-defined]
        name = receiver.value if type(receiver) is cst.Name else ("self." + attr if (attr := syntax._is_self_attr(receiver)) else None)  # type: ignore[attr-defined]
        if name in held:
            return True
    return False


def _mutated_sentence(
    graph: FlowGraph, match: "m.Match", moved: set[int], event: Event, calls: bool
) -> Callable[[], str]:
    def sentence() -> str:
        read = read_vids(event)
        name = m._name_of({v for v in moved if graph.flowing([v]) & read}, graph, match.cls)
        subject = f"`{name}`" if name else "a value"
        if calls:
            return f"a call here may modify {subject} in place, which a matched statement moved to the fused call's place reads"
        if name is None:  # the statement reads a value sharing memory with a moved one: name the moved one
            name = m._name_of(
                {v for v in moved if graph.flowing(aliasing.sharing_memory(graph, [v])) & read}, graph, match.cls
            )
            subject = f"a value that may share memory with `{name}` (a view, an alias, a container holding it)"
        return (
            f"this statement may change {subject} in place, which a matched statement moved to the fused call's "
            "place reads"
        )

    return sentence


def _temporaries(event: object) -> set[int]:
    """Value ids a node reads as DSL results (``%`` names): no variable a deleted statement reads."""
    if not isinstance(event, DLNode):
        return set()
    return {vid for v in [*event.args, *(v for _, v in event.kwargs)] for name, vid in v.uses if name.startswith("%")}


# ------------------------------------------------------------------------------------------ helper methods


def helper_refusal(match: "m.Match", placement: "m.Placement") -> Optional["m.Reason"]:
    """What a rewrite would get wrong about the helper methods inlined into the match, if anything.

    The fused call's arguments are written where it goes: a value computed inside a helper (one of its locals, an
    expression reading them, a node there) has no name there (``r`` of ``def res(self, x): r = x * 2; return r``).
    And a helper called from what the rewrite removes, and not written again in an argument, is no longer called:
    whatever else it does (assignments, other calls) would be lost. The reason for the first such value or call."""
    anchor, graph = placement.anchor, match.graph
    if anchor is None or graph is None:
        return None
    # (statement, what of it disappears): code of the anchor's function, where the fused call goes
    removed: list[tuple[cst.CSTNode, cst.CSTNode]]
    if placement.plan == "hoist":  # each matched node is replaced by a name where it stands
        removed = [(n.site.small, n.expr) for n in match.nodes]
    else:
        removed = [(s, s) for s in placement.deleted] + [(anchor.site.small, anchor.expr)]
    scope = anchor.site.scope
    written = {id(node) for _, region in removed for node in cstwalk.walk(region)}
    rendered: list[cst.CSTNode] = []  # the expressions of the removed code the fused call writes again as they are
    for value in m._target_inputs(match):
        if value.kind == "var" and not value.text.startswith("%"):
            readable = value.vid in placement.names or _visible(value.uses[0][0], value.vid, scope, graph)
        elif value.kind == "var" and (value.vid not in graph.producers or _helper_call_in(value, anchor.site.small)):
            # A helper's result is written as its call (a phi of its returns, or a DSL node's result: kornia's
            # RT-DETR, `self.norm3(tgt + self.dropout4(self._ffn(tgt)))`): readable where that call is written; a
            # node's result only in the fused call's own statement, where the call runs in its turn as it did.
            readable = id(value.expr) in written
        elif value.kind == "var" or value.kind == "expr":
            readable = all(_visible(name, vid, scope, graph) for name, vid in value.uses)
        else:
            readable = True  # a constant
        if not readable:
            readers = (n for n in match.nodes if any(v is value for v in (*n.args, *(v for _, v in n.kwargs))))
            return m.Reason(m.RefusalCategory.NOT_PLACEABLE, _computed_in_helper(value), next(readers, anchor).site.line)
        if id(value.expr) in written and (value.kind != "var" or value.text.startswith("%")):
            rendered.append(value.expr)
    return _helper_call_dropped(match, graph, removed, rendered)


def _helper_call_in(value: "m.Value", statement: cst.CSTNode) -> bool:
    """Whether `value` is written as a helper method's call (``self._ffn(tgt)``: `unchain` gives the result of an
    inlined helper that expression) inside `statement`."""
    call = value.expr
    if type(call) is not cst.Call or syntax._is_self_attr(call.func) is None:  # type: ignore[attr-defined]
        return False
    return any(node is call for node in cstwalk.walk(statement))


def _computed_in_helper(value: m.Value) -> Callable[[], str]:
    if type(value.expr) is cst.Call and syntax._is_self_attr(value.expr.func) is not None:  # type: ignore[attr-defined]
        return lambda: (
            f"`{m._code(value.expr)}`, a helper method's result, is passed as that call only in the fused call's own "
            "statement: the helper would run at another statement"
        )
    return lambda: (
        f"`{m._code(value.expr)}` is computed inside a helper method, so the fused call could not name it where it goes"
    )


def _visible(name: str, vid: int, scope: str, graph: FlowGraph) -> bool:
    """Whether code written in the function of `scope` reads `name` as the walk scoped it: ``self.<attr>``, a name
    of that function (not of a helper inlined in it), a DSL node's result computed there."""
    if name.startswith("%"):
        producer = graph.producers.get(vid)
        return producer is not None and producer.site.scope == scope
    return name.startswith("self.") or (name.startswith(scope) and "::" not in name[len(scope):])


def _helper_call_dropped(
    match: "m.Match", graph: FlowGraph, removed: list[tuple[cst.CSTNode, cst.CSTNode]], rendered: list[cst.CSTNode]
) -> Optional["m.Reason"]:
    """A ``self.<helper>(...)`` call the rewrite removes without writing it again, whose inlined body does more than
    compute the match's own nodes: the reason, naming its line."""
    kept = {id(e) for e in rendered}
    keys = {key(n) for n in match.nodes}
    for statement, region in removed:
        inlined = graph.inlined_from.get(id(statement))
        if not inlined:
            continue
        dropped = {
            name
            for node in cstwalk.walk(region, lambda n: id(n) not in kept)
            if id(node) not in kept and isinstance(node, cst.Call)
            for name in [m._self_attr_name(node.func)]
            if name is not None
        }
        for pos in inlined:
            event = graph.events[pos]
            assert event is not None
            if isinstance(event, DLNode) and key(event) in keys:
                continue
            if isinstance(event, Use) and type(event.site.small) is cst.Return:
                continue  # the helper's result read where it is returned: what the fused call writes again
            stack = event.site.inline_stack
            depth = next(i for i, s in enumerate(stack) if s.small is statement)
            helper = (stack[depth + 1].function if depth + 1 < len(stack) else event.site.function).rsplit(".", 1)[-1]
            if helper in dropped:
                return m.Reason(
                    m.RefusalCategory.NOT_PLACEABLE,
                    f"the rewrite would remove this call of `self.{helper}`, and with it what the helper does besides "
                    "computing the matched calls",
                    stack[depth].line,
                )
    return None
