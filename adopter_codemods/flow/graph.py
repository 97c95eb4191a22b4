"""One function's events as a graph: the path walk's events, each recorded once, linked along control flow.

The provider's walk (`provider.walk._ClassWalker`) follows control flow with partial paths, each appending its events
to a `FlowSink`; at the end of every statement it merges the partial paths with the same status (`merge_states`),
so a statement after a join is walked once whatever the number of paths leading to it. Loops are unrolled (no
copy of the body, one, two: matches stay inside one copy, the second shows loop-carried uses), so the graph is
acyclic: a property of "every path" becomes one of reachability.

Values are numbered SSA style: each computation gets a fresh id, an alias (``a = b``) shares it, and a name that
holds different ids on the edges into a join gets a fresh *phi* id there (`FlowGraph.phis`).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import libcst as cst

from ..structure import Def, DLNode, Event, NodeSummary, Use, summarise

ENTRY = 0


@dataclass(eq=False)
class GraphPath:
    """One entry-to-exit path of a graph (`FlowGraph.paths`)."""

    events: list[Event]
    nodes: list[DLNode]


class FlowGraph:
    """Events of one function in a topological order; position 0 is the entry, the last position the exit."""

    def __init__(self) -> None:
        self.events: list[Optional[Event]] = [None]
        self.preds: list[tuple[int, ...]] = [()]
        self.position: dict[int, int] = {}  # id(event) -> position
        self.phis: dict[int, frozenset[int]] = {}  # phi value id -> the ids it merges
        # phi -> operand -> the last positions before the join on the edges carrying that operand
        self.phi_tails: dict[int, dict[int, tuple[int, ...]]] = {}
        self.phi_joins: dict[int, list[int]] = {}  # phi -> the positions right after its join
        # (scoped name, value id) -> the id the name held before that definition, and the statement defining it
        self.previous: dict[tuple[str, int], Optional[int]] = {}
        self.defined_by: dict[tuple[str, int], int] = {}
        self.states: dict[int, dict[str, int]] = {}  # id(DLNode) -> the names' value ids where it is evaluated
        # ids of the compound statements walked as one event (no layer call inside): their body has no events
        self.folded: set[int] = set()
        self.by_call: dict[int, DLNode] = {}  # id(call) -> a DSL node it makes (copies of it alike)
        # the value ids of the function's parameters (``self`` aside) on entry: the caller may pass one object
        # twice, or a tensor and a view of it (`flow.aliasing`)
        self.parameters: frozenset[int] = frozenset()
        # whether code of the function may change an object in place without being handed it: a nested function or
        # lambda changing something in place (a closure over a local), or a store into a global's object
        # (`_CACHE["k"] = k`, which a call of anything may then change): `flow.checks._moved_reads_touched`
        self.reached_elsewhere: bool = False
        # names a nested function, lambda, class or generator reads (when it runs, maybe after a rewrite stopped
        # binding them), each with the first such scope; and a call reading every local (`locals()`, `eval(...)`)
        self.closure_reads: dict[str, cst.CSTNode] = {}
        self.reads_every_local: Optional[cst.CSTNode] = None
        self.exit = -1

    def add(self, event: Event, preds: tuple[int, ...]) -> int:
        pos = len(self.events)
        self.events.append(event)
        self.preds.append(preds)
        self.position[id(event)] = pos
        if isinstance(event, DLNode):
            event.index = pos
            if event.call is not None:
                self.by_call[id(event.call)] = event
        elif isinstance(event, Def):
            self.defined_by[(event.name, event.vid)] = id(event.site.small)
        return pos

    def finish(self, sinks: Iterable["FlowSink"]) -> None:
        self.exit = len(self.events)
        self.events.append(None)
        tails: set[int] = set()
        for sink in sinks:
            tails.update(sink.tails)
            for phi in sink.pending:
                self.phi_joins.setdefault(phi, []).append(self.exit)
        self.preds.append(tuple(sorted(tails)))

    # ------------------------------------------------------------------ derived indexes (built on first use)
    @functools.cached_property
    def nodes(self) -> list[DLNode]:
        return [e for e in self.events if isinstance(e, DLNode)]

    def paths(self, limit: int = 4096) -> list[GraphPath]:
        """Every entry-to-exit path, each as its events in order: for tests and debugging (their number grows
        exponentially; the analysis never enumerates them). Raises ValueError past `limit` paths."""
        succs = self.succs
        out: list[GraphPath] = []
        stack: list[tuple[int, tuple[int, ...]]] = [(ENTRY, ())]
        while stack:
            pos, prefix = stack.pop()
            if pos == self.exit:
                events = [e for e in (self.events[p] for p in prefix) if e is not None]
                out.append(GraphPath(events, [e for e in events if isinstance(e, DLNode)]))
                if len(out) > limit:
                    raise ValueError(f"more than {limit} paths")
                continue
            stack.extend((nxt, prefix + (pos,)) for nxt in reversed(succs[pos]))
        return out

    @functools.cached_property
    def summary(self) -> NodeSummary:
        """What kinds of node the graph holds (the matcher's cheap test before it searches the graph)."""
        return summarise(self.nodes)

    @functools.cached_property
    def readers(self) -> dict[int, list[int]]:
        """Value id -> positions of the events reading it (node arguments and what they read, uses)."""
        out: dict[int, list[int]] = {}
        for pos, event in enumerate(self.events):
            for vid in read_vids(event):
                out.setdefault(vid, []).append(pos)
        return out

    @functools.cached_property
    def definitions(self) -> dict[int, list[Def]]:
        """Value id -> the assignments giving a name that value, in graph order (the cause of a refusal: built by
        the first check that refuses for a redefinition)."""
        out: dict[int, list[Def]] = {}
        for event in self.events:
            if isinstance(event, Def):
                out.setdefault(event.vid, []).append(event)
        return out

    @functools.cached_property
    def merged_into(self) -> dict[int, list[int]]:
        """Value id -> the phis merging it."""
        out: dict[int, list[int]] = {}
        for phi, operands in self.phis.items():
            for vid in operands:
                out.setdefault(vid, []).append(phi)
        return out

    def flowing(self, vids: Iterable[int]) -> set[int]:
        """The ids and every phi they flow into (on some path, reading one of those reads one of `vids`)."""
        out = set(vids)
        todo = list(out)
        while todo:
            for phi in self.merged_into.get(todo.pop(), ()):
                if phi not in out:
                    out.add(phi)
                    todo.append(phi)
        return out

    @functools.cached_property
    def producers(self) -> dict[int, DLNode]:
        return {n.out: n for n in self.nodes}

    @functools.cached_property
    def by_statement(self) -> dict[int, list[int]]:
        """id(small statement) -> positions of its events."""
        out: dict[int, list[int]] = {}
        for pos, event in enumerate(self.events):
            if event is not None:
                out.setdefault(id(event.site.small), []).append(pos)
        return out

    @functools.cached_property
    def inlined_from(self) -> dict[int, list[int]]:
        """id(small statement) -> positions of the events of the helper methods it calls (inlined there, at any
        depth)."""
        out: dict[int, list[int]] = {}
        for pos, event in enumerate(self.events):
            if event is not None:
                for call_site in event.site.inline_stack:
                    out.setdefault(id(call_site.small), []).append(pos)
        return out

    @functools.cached_property
    def by_key(self) -> dict[tuple[int, Optional[str]], list[DLNode]]:
        """(id(expr), layer) -> the nodes of that expression (loop copies, helper inlined twice)."""
        out: dict[tuple[int, Optional[str]], list[DLNode]] = {}
        for node in self.nodes:
            out.setdefault((id(node.expr), node.layer), []).append(node)
        return out

    @functools.cached_property
    def succs(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.events]
        for pos, preds in enumerate(self.preds):
            for pred in preds:
                out[pred].append(pos)
        return out

    @functools.cached_property
    def reach(self) -> "Reach":
        return Reach(self)


def read_vids(event: Optional[Event]) -> set[int]:
    if isinstance(event, DLNode):
        vids = set()
        for value in (*event.args, *(v for _, v in event.kwargs)):
            if value.kind == "var":
                vids.add(value.vid)
            vids.update(vid for _, vid in value.uses)
        return vids
    if isinstance(event, Use):
        return set(event.vids)
    return set()


class Reach:
    """Reachability between positions of a graph, optionally with some positions taken out (paths avoiding them).

    Ancestor sets are bit sets (Python ints), built in one pass over the topological order."""

    def __init__(self, graph: FlowGraph, excluded: frozenset[int] = frozenset()) -> None:
        # A proxy: the graph caches its Reach, and a strong reference back would be a cycle that only the collector
        # frees, along with the syntax trees the graph holds (docs/PERFORMANCE.md).
        self.graph: FlowGraph = weakref.proxy(graph)
        count = len(graph.events)
        ancestors: list[int] = [0] * count
        alive = [False] * count
        for pos in range(count):
            if pos in excluded:
                continue
            if pos == ENTRY:
                alive[pos] = True
                continue
            bits = 0
            for pred in graph.preds[pos]:
                if alive[pred]:
                    bits |= ancestors[pred] | (1 << pred)
            if bits & 1:  # reachable from the entry
                alive[pos] = True
                ancestors[pos] = bits
        self.ancestors = ancestors
        exit_bits = ancestors[graph.exit] if alive[graph.exit] else 0
        # On a complete path: reachable from the entry and reaching the exit.
        self.live = [alive[p] and (p == graph.exit or bool((exit_bits >> p) & 1)) for p in range(count)]

    def before(self, a: int, b: int) -> bool:
        """Whether some path goes from `a` to `b` (a == b included)."""
        return a == b or bool((self.ancestors[b] >> a) & 1)

    def ordered(self, a: int, b: int) -> bool:
        return self.before(a, b) or self.before(b, a)

    def on_chain(self, pos: int, chain: list[int]) -> bool:
        """Whether one complete path goes through every position of `chain` (in order) and through `pos`."""
        return self.live[pos] and all(self.ordered(pos, c) for c in chain)

    def avoiding(self, pos: int, avoid: frozenset[int]) -> bool:
        """Whether a complete path (of this `Reach`) goes through `pos` and through none of `avoid`. Searches only
        towards the side where some of `avoid` lies, stopping at them: cost of the region in between."""
        if pos in avoid or not self.live[pos]:
            return False
        graph = self.graph
        before = any(self.before(a, pos) for a in avoid)
        after = any(self.before(pos, a) for a in avoid)
        if before and not self._escapes(pos, avoid, graph.preds, ENTRY):
            return False
        return not after or self._escapes(pos, avoid, graph.succs, graph.exit)

    def _escapes(self, pos: int, avoid: frozenset[int], edges: Sequence[Sequence[int]], goal: int) -> bool:
        seen = {pos}
        todo = [pos]
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt == goal:
                    return True
                if nxt not in seen and nxt not in avoid and self.live[nxt]:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    def carried(self, vids: Iterable[int], chain: list[int]) -> dict[int, Optional[list[int]]]:
        """The ids and the phis they flow into on a path through `chain`, each with the positions right after the
        joins where that happens (None for the ids themselves): reading a phi at a position after one of those
        reads one of `vids`. A join counts when a path through `chain` takes one of the edges carrying the value
        into it, after the previous join."""
        graph = self.graph
        out: dict[int, Optional[list[int]]] = {vid: None for vid in vids}
        todo = list(out)
        while todo:
            vid = todo.pop()
            after = out[vid]
            for phi in graph.merged_into.get(vid, ()):
                joins = [
                    join
                    for tail in graph.phi_tails.get(phi, {}).get(vid, ())
                    if self.live[tail] and (after is None or any(self.before(a, tail) for a in after))
                    for join in graph.phi_joins.get(phi, ())
                    if self.live[join] and all(self.before(c, tail) or self.before(join, c) for c in chain)
                ]
                known = out.get(phi)
                new = [j for j in joins if known is None or j not in known]
                if new and (phi not in out or known is not None):
                    out[phi] = (known or []) + new
                    todo.append(phi)
        return out

    def reads_at(self, pos: int, chain: list[int], joins: Optional[list[int]]) -> bool:
        """Whether a read at `pos` of an id `carried` returned with `joins` reads the value on a path through
        `chain`."""
        return self.on_chain(pos, chain) and (joins is None or any(self.before(j, pos) for j in joins))


def merge_states(
    graph: FlowGraph,
    states: list[dict[str, int]],
    tails: list[tuple[int, ...]],
    entry: dict[str, int],
    new_vid: Callable[[], int],
) -> tuple[dict[str, int], list[int]]:
    """The names' value ids after a join (and the phis made): shared ids stay, others get a phi. `tails`: each
    state's last positions. A name missing on an edge holds its value on entry there (`entry`: parameters and
    globals read somewhere) or is unbound."""
    merged = states[0].copy()
    names: set[str] = set()
    for state in states[1:]:
        names.update(name for name, _ in state.items() ^ merged.items())  # item views: set operations in C
    phis = []
    for name in sorted(names):  # a fixed order: new names enter the state (and its dict order) alike every run
        vids = [s.get(name, entry.get(name)) for s in states]
        if len(set(vids)) == 1 and vids[0] is not None:
            continue
        phi = new_vid()
        graph.phis[phi] = frozenset(v for v in vids if v is not None)
        sources: dict[int, tuple[int, ...]] = {}
        for vid, ends in zip(vids, tails):
            if vid is not None:
                sources[vid] = sources.get(vid, ()) + ends
        graph.phi_tails[phi] = sources
        merged[name] = phi
        phis.append(phi)
    return merged, phis


class FlowState(dict):  # type: ignore[type-arg]
    """A partial path's names -> value ids, remembering what each definition replaced (`FlowGraph.previous`)."""

    def __init__(self, graph: FlowGraph, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.graph = graph

    def __setitem__(self, name: str, vid: int) -> None:
        self.graph.previous.setdefault((name, vid), self.get(name))
        super().__setitem__(name, vid)

    def copy(self) -> "FlowState":
        return FlowState(self.graph, self)


class FlowSink:
    """Stands for a partial path's event list: appending links the event after the partial path's last ones."""

    def __init__(self, graph: FlowGraph, tails: tuple[int, ...], pending: tuple[int, ...] = ()) -> None:
        self.graph = graph
        self.tails = tails
        self.pending = pending  # phis of the join this partial path starts at, until its first event

    def append(self, event: Event) -> None:
        pos = self.graph.add(event, self.tails)
        for phi in self.pending:
            self.graph.phi_joins.setdefault(phi, []).append(pos)
        self.tails, self.pending = (pos,), ()

    def copy(self) -> "FlowSink":
        return FlowSink(self.graph, self.tails, self.pending)
