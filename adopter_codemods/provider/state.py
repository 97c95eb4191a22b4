"""The walk's per-class state: partial paths, value numbering, joins, and the memoised name scans of revisited
nodes. The statement walk (walk.py) and expression unchaining (unchain.py) build on it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Literal, Optional

import libcst as cst

from ..flow.graph import FlowGraph, FlowSink, merge_states
from ..qualnames import ImportTable, dotted_name
from ..structure import Def, LayerBinding, Site, Value
from . import syntax
from .discovery import _ClassInfo, _find_method, function_scope
from .syntax import _is_self_attr


# How a partial path ends so far: still "open" (statements follow), or left by return/raise/break/continue.
PathStatus = Literal["open", "return", "raise", "break", "continue"]


@dataclass
class _Partial:
    """A partial path of the walk (merged with the others of its status after each statement)."""

    events: FlowSink
    state: dict[str, int]
    status: PathStatus = "open"
    ret: Optional[Value] = None


@dataclass
class _Ctx:
    """The block being walked: the function, the helper inlining and loop-body copy it sits in, its statements."""

    function: str
    prefix: str
    inline_stack: tuple[Site, ...]
    loop_copy: tuple[int, ...]
    owner: cst.CSTNode
    block: tuple[cst.BaseStatement, ...]
    helper_stack: tuple[str, ...]

    def within(self, owner: cst.CSTNode, block: tuple[cst.BaseStatement, ...]) -> _Ctx:
        """The context of a nested block (`owner`'s body `block`), in the same function, inlining and loop copy."""
        return _Ctx(self.function, self.prefix, self.inline_stack, self.loop_copy, owner, block, self.helper_stack)

    def at(self, small: cst.CSTNode, line: cst.BaseStatement) -> _Cursor:
        return _Cursor(self, small, line)


@dataclass
class _Cursor:
    """Where the walk records events: a statement of a block (`small`, the part of `line` the events belong to: a
    small statement, a compound statement or its header). The statement and expression walks pass it down instead
    of the block context and both statements; the partial path and the enclosing DSL node change as they go, so
    those stay arguments."""

    ctx: _Ctx
    small: cst.CSTNode
    line: cst.BaseStatement

    def site(self) -> Site:
        ctx = self.ctx
        return Site(self.small, self.line, ctx.block, ctx.owner, ctx.function, ctx.inline_stack, ctx.loop_copy, ctx.prefix)  # type: ignore[arg-type]


class _WalkState:
    """What one class's walk keeps between statements: the graph being built, value ids, layer bindings."""

    def __init__(
        self,
        info: _ClassInfo,
        classes: dict[str, _ClassInfo],
        table: ImportTable,
    ) -> None:
        self.info = info
        self.graph: Optional[FlowGraph] = None  # the graph being built
        self.entry_vids: dict[str, int] = {}  # per function: one value id per name read before any assignment
        self.classes = classes
        self.table = table
        self._vid = itertools.count(1)
        self._temp = itertools.count(1)
        self._inline = itertools.count(1)
        self._loop = itertools.count(1)
        self.bindings: dict[str, list[LayerBinding]] = {}
        self.containers: list[LayerBinding] = []  # every nn.Sequential the class builds (init_bindings.py)
        self.entry_names: dict[int, str] = {}
        self.inlined: set[str] = set()  # helper methods inlined into forward: not walked on their own
        # Per walked function (by `_Ctx.prefix`: "" for the function walked, one per helper inlining): the names it
        # binds itself, which its calls must not resolve through the imports (`def forward(self, x, F)`).
        self.shadowed: dict[str, frozenset[str]] = {}
        self._shadowed_by: dict[int, tuple[cst.FunctionDef, frozenset[str], frozenset[str]]] = {}
        # Per walked function (by prefix): its names a nested function rebinds (`nonlocal`), new after any call.
        self.volatile: dict[str, frozenset[str]] = {}
        # Walking functions other than forward: each is walked once on its own, so helpers are not inlined (a
        # rewrite there stays as local as one inside forward).
        self.on_its_own = False
        # Walk `if`s with a simple test holding tensor ops as separate branches (`_guards_ops`).
        self.split_guarded_ifs = True
        # Loop-body copies and helpers inlined twice revisit statements and expressions: memoise their name scans.
        self._reads: dict[int, tuple[cst.CSTNode, tuple[list[str], bool]]] = {}
        self._writes: dict[int, tuple[cst.CSTNode, list[str]]] = {}
        self._walrus: dict[int, tuple[cst.CSTNode, list[str]]] = {}
        self.walrus_possible = True  # False where the module holds no `:=` (`_Scan.walrus`): nothing to look for

    # ------------------------------------------------------------------ class helpers
    def find_method(self, name: str, seen: Optional[set[str]] = None) -> Optional[cst.FunctionDef]:
        """A method of this class or of a base class defined in the same file (left-to-right MRO approximation)."""
        return _find_method(self.info, self.classes, name, set() if seen is None else seen)

    def shadow(self, prefix: str, fn: cst.FunctionDef) -> None:
        """Record the names `fn`, walked under `prefix`, binds itself and those a function nested in it rebinds
        (`discovery.function_scope`)."""
        hit = self._shadowed_by.get(id(fn))
        if hit is None or hit[0] is not fn:
            hit = self._shadowed_by[id(fn)] = (fn, *function_scope(fn))
        self.shadowed[prefix] = hit[1]
        self.volatile[prefix] = hit[2]

    def resolve_import(self, expr: cst.BaseExpression, ctx: _Ctx) -> Optional[str]:
        """The qualified name of an imported name or chain (`F.softmax`), unless the function binds its head."""
        qualname = self.table.resolve(expr)
        shadowed = self.shadowed.get(ctx.prefix)
        if qualname is not None and shadowed and (dotted_name(expr) or "").split(".")[0] in shadowed:
            return None
        return qualname

    def redefine(self, p: _Partial, names: Iterable[str], prefix: str, site: Site) -> None:
        """A new value on `p` for each name (``self.<attr>`` as it is, others under `prefix`), as assigning it gives."""
        for name in names:
            scoped = name if name.startswith("self.") else prefix + name
            vid = p.state[scoped] = self.new_vid()
            p.events.append(Def(scoped, vid, site))

    def read_names(self, node: cst.CSTNode) -> tuple[list[str], bool]:
        hit = self._reads.get(id(node))
        if hit is None or hit[0] is not node:  # the entry keeps its node alive, so its id is not reused
            hit = self._reads[id(node)] = (node, syntax._read_names(node))
        return hit[1]

    def walrus_names(self, expr: cst.CSTNode) -> list[str]:
        """`syntax.walrus_targets`, memoised as `read_names` is."""
        if not self.walrus_possible:
            return []
        hit = self._walrus.get(id(expr))
        if hit is None or hit[0] is not expr:
            hit = self._walrus[id(expr)] = (expr, syntax.walrus_targets(expr))
        return hit[1]

    def written_names(self, node: cst.CSTNode) -> list[str]:
        hit = self._writes.get(id(node))
        if hit is None or hit[0] is not node:
            hit = self._writes[id(node)] = (node, sorted(syntax._written_names(node)))
        return hit[1]


    def qualify(self, function: str) -> str:
        return f"{self.info.name}.{function}" if self.info.name else function

    def merged(self, partials: list[_Partial]) -> list[_Partial]:
        """One partial path per status (returns aside: `inline` joins them with their values)."""
        groups: dict[str, list[_Partial]] = {}
        out = []
        for p in partials:
            if p.status == "return":
                out.append(p)
            else:
                groups.setdefault(p.status, []).append(p)
        return [self.join(group) for group in groups.values()] + out

    def join(self, parts: list[_Partial]) -> _Partial:
        if len(parts) == 1:
            return parts[0]
        graph = self.graph
        assert graph is not None
        sinks = [p.events for p in parts]
        tails = tuple(sorted({t for sink in sinks for t in sink.tails}))
        state, phis = merge_states(graph, [p.state for p in parts], [sink.tails for sink in sinks], self.entry_vids, self.new_vid)
        # A join right after another (nothing in between) still gates the first join's phis.
        pending = tuple(phis) + tuple(phi for sink in sinks for phi in sink.pending)
        return _Partial(FlowSink(graph, tails, pending), state, parts[0].status, parts[0].ret)

    def new_vid(self) -> int:
        return next(self._vid)

    def lookup(self, state: dict[str, int], name: str) -> int:
        vid = state.get(name)
        if vid is None:
            vid = self.entry_vids.get(name)
            if vid is None:
                vid = self.entry_vids[name] = self.new_vid()  # parameters and globals: defined on entry
                self.entry_names[vid] = name
            state[name] = vid
        return vid

    @staticmethod
    def fork(p: _Partial) -> _Partial:
        return _Partial(p.events.copy(), p.state.copy(), p.status, p.ret)

    def target_name(self, target: cst.BaseExpression, ctx: _Ctx) -> Optional[str]:
        if isinstance(target, cst.Name):
            return ctx.prefix + target.value
        attr = _is_self_attr(target)
        return "self." + attr if attr is not None else None

    @staticmethod
    def scoped(name: str, ctx: _Ctx) -> str:
        return name if name.startswith("self.") else ctx.prefix + name
