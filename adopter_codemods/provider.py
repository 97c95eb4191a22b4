"""ModelStructureProvider: per ``nn.Module`` class, the ``__init__`` bindings and the ``forward`` graph (paper §3.2).

Computed once per file (a LibCST metadata provider keyed on the Module node) and shared by every rule, codemod,
lint rule and ``scan``. The walk is a plain recursive descent over the CST, not scope analysis:

* nn.Module classes are those deriving from ``torch.nn.Module`` (or ``Sequential``/``ModuleList``/``ModuleDict``),
  named through the import table, through classes in the same file, or through classes of other files, which
  ``class_bases`` resolves statically from the file's path (a base it cannot find counts only when named
  ``*PreTrainedModel`` or ``modeling_layers.GradientCheckpointingLayer``);
* ``__init__``: every ``self.<attr> = <value>`` (also under ``if``), ``nn.Sequential(...)`` elements included;
* ``forward``: its control-flow graph (adopter_codemods/flow/graph.py: if/elif/else, early return/raise, loops
  unrolled to no, one and two copies of the body, try/with bodies, match cases; values numbered SSA style, phis at
  joins), with calls to ``self`` helper methods inlined (recursion-safe) and nested calls and tensor ops unchained
  into temporaries. Each statement is walked once per loop-body copy and inlining, whatever the number of paths.
  Compound statements holding no layer, function or helper call are folded into one opaque event;
* the class's other methods not inlined into ``forward`` (``_attn`` called with ``*args``, ``generate``, ...) are
  walked the same way, each on its own, and so are the module's top-level functions (one unnamed unit, no
  layers): a rewrite inside them is as local as one inside ``forward``. Functions compiled by a decorator
  (``torch.jit.script``) and async ones are left alone.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Literal, Optional, Sequence

import libcst as cst
from libcst.metadata import BaseMetadataProvider

from . import cstwalk
from .class_bases import BaseResolver, ClassRef
from .factory_types import FactoryTypes
from .flow.graph import FlowGraph, FlowSink, FlowState, merge_states
from .gc_pause import collector_paused
from .init_bindings import InitReader
from .qualnames import ImportTable, canonical_torch_name, dotted_name, qualname_matches
from .structure import OPAQUE, ClassStructure, Def, DLNode, LayerBinding, ModuleStructure, NodeKind, Site, Use, Value

_SEQUENTIAL = "torch.nn.Sequential"
_BINARY_OPS: dict[type, str] = {
    cst.Add: "+",
    cst.Subtract: "-",
    cst.Multiply: "*",
    cst.Divide: "/",
    cst.MatrixMultiply: "@",
}
# Tensor methods the walk turns into DSL nodes ``torch.Tensor.<name>(receiver, *args)`` (receiver first), so rules can
# follow data through ``att.masked_fill(m, v)``, ``k.transpose(-2, -1)``, ``att.softmax(dim=-1)`` (ADP010). Only
# these: every other method call stays an opaque expression, and a compound statement holding only method calls is
# still folded (they do not count in `_has_dsl_call`), so the walk forks no more often.
TENSOR_METHODS = frozenset({"masked_fill", "softmax", "transpose"})
# Decorators after which a function still runs its body as written (so the body can be rewritten like forward's).
_TRANSPARENT_DECORATORS = (
    "staticmethod",
    "classmethod",
    "torch.no_grad",
    "torch.inference_mode",
    "torch.enable_grad",
    "torch.jit.ignore",  # TorchScript leaves these bodies to Python
    "torch.jit.unused",
)


# The hottest predicates of the walk test exact types: LibCST nodes are ABCs, so isinstance() goes through
# ABCMeta.__instancecheck__ (these leaf classes have no subclasses).
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)


def _is_self_attr(node: cst.BaseExpression) -> Optional[str]:
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":  # type: ignore[attr-defined]
        return node.attr.value  # type: ignore[attr-defined]
    return None


def _const_text(node: cst.BaseExpression) -> Optional[str]:
    kind = type(node)
    if kind in _LITERALS:
        return node.value  # type: ignore[attr-defined]
    if kind is cst.Name:
        return node.value if node.value in ("True", "False", "None") else None  # type: ignore[attr-defined]
    if (
        kind is cst.UnaryOperation
        and type(node.operator) is cst.Minus  # type: ignore[attr-defined]
        and type(node.expression) in (cst.Integer, cst.Float)  # type: ignore[attr-defined]
    ):
        return "-" + node.expression.value  # type: ignore[attr-defined]
    return None


def _not_self_attr(node: cst.CSTNode) -> bool:
    return not (type(node) is cst.Attribute and _is_self_attr(node) is not None)


def _read_names(node: cst.CSTNode) -> tuple[list[str], bool]:
    """Names read by an expression: plain names and ``self.<attr>``; and whether it calls (impure)."""
    names: list[str] = []
    has_call = False
    for sub in cstwalk.walk(node, _not_self_attr):
        kind = type(sub)
        if kind is cst.Name:
            names.append(sub.value)  # type: ignore[attr-defined]
        elif kind is cst.Attribute:
            attr = _is_self_attr(sub)  # type: ignore[arg-type]
            if attr is not None:
                names.append("self." + attr)
        elif kind in (cst.Call, cst.Await, cst.NamedExpr):
            has_call = True  # a walrus assigns inside: never move it either
    return names, has_call


class _TargetCollector:
    """Names (re)bound or mutated anywhere inside a statement: assignment targets, for targets, del, augassign."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit(self, root: cst.CSTNode) -> None:
        for node in cstwalk.walk(root):
            kind = type(node)
            if kind in (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.Del, cst.NamedExpr):
                self._targets(node.target)  # type: ignore[attr-defined]
            elif kind is cst.WithItem:
                if node.asname is not None:  # type: ignore[attr-defined]
                    self._targets(node.asname.name)  # type: ignore[attr-defined]
            elif kind is cst.ExceptHandler:
                if node.name is not None:  # type: ignore[attr-defined]
                    self._targets(node.name.name)  # type: ignore[attr-defined]
            elif kind is cst.Call:
                # `x.add_(y)`: in-place tensor methods mutate their receiver.
                func = node.func  # type: ignore[attr-defined]
                if isinstance(func, cst.Attribute) and func.attr.value.endswith("_") and not func.attr.value.endswith("__"):
                    self._targets(func.value)

    def _targets(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            self.names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._targets(el.value)
        elif isinstance(node, cst.StarredElement):
            self._targets(node.value)
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            root: cst.BaseExpression = node
            while isinstance(root, (cst.Attribute, cst.Subscript)):
                attr = _is_self_attr(root) if isinstance(root, cst.Attribute) else None
                if attr is not None:
                    self.names.add("self." + attr)
                    return
                root = root.value
            if isinstance(root, cst.Name):
                self.names.add(root.value)  # mutation of the object the name refers to


def _written_names(node: cst.CSTNode) -> set[str]:
    collector = _TargetCollector()
    collector.visit(node)
    return collector.names


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
    function: str
    prefix: str
    inline_stack: tuple[Site, ...]
    loop_copy: tuple[int, ...]
    owner: cst.CSTNode
    block: tuple[cst.BaseStatement, ...]
    helper_stack: tuple[str, ...]


@dataclass
class _ClassInfo:
    node: Optional[cst.ClassDef]  # None: the module's top-level functions
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)  # local base class names
    external_bases: list[ClassRef] = field(default_factory=list)  # bases resolved to classes of other files

    @property
    def name(self) -> str:
        return self.node.name.value if self.node is not None else ""


class _ClassWalker:
    """Builds one class's structure."""

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
        # Walking functions other than forward: each is walked once on its own, so helpers are not inlined (a
        # rewrite there stays as local as one inside forward).
        self.on_its_own = False
        # Walk `if`s with a simple test holding tensor ops as separate branches (`_guards_ops`).
        self.split_guarded_ifs = True
        # Loop-body copies and helpers inlined twice revisit statements and expressions: memoise their name scans.
        self._reads: dict[int, tuple[cst.CSTNode, tuple[list[str], bool]]] = {}
        self._writes: dict[int, tuple[cst.CSTNode, list[str]]] = {}

    # ------------------------------------------------------------------ class helpers
    def find_method(self, name: str, seen: Optional[set[str]] = None) -> Optional[cst.FunctionDef]:
        """A method of this class or of a base class defined in the same file (left-to-right MRO approximation)."""
        return _find_method(self.info, self.classes, name, set() if seen is None else seen)

    def read_names(self, node: cst.CSTNode) -> tuple[list[str], bool]:
        hit = self._reads.get(id(node))
        if hit is None or hit[0] is not node:  # the entry keeps its node alive, so its id is not reused
            hit = self._reads[id(node)] = (node, _read_names(node))
        return hit[1]

    def written_names(self, node: cst.CSTNode) -> list[str]:
        hit = self._writes.get(id(node))
        if hit is None or hit[0] is not node:
            hit = self._writes[id(node)] = (node, sorted(_written_names(node)))
        return hit[1]

    # ------------------------------------------------------------------ __init__
    def collect_bindings(self, functions: dict[str, cst.FunctionDef], sequential_calls: bool,
                         factories: Optional[FactoryTypes] = None) -> None:
        """The ``__init__`` bindings and, with `sequential_calls`, every ``nn.Sequential`` the class's own methods
        build (adopter_codemods/init_bindings.py)."""
        init = self.find_method("__init__")
        base = _sequential_base(self.info, self.table) if init is not None else None
        reader = InitReader(self.table, functions, base, sequential_calls, factories)
        if init is not None:
            reader.read_init(init)
            if init is not self.info.methods.get("__init__"):
                reader.containers.clear()  # an inherited __init__'s containers are the base class's findings
        if sequential_calls:
            for name, method in self.info.methods.items():
                if name != "__init__":
                    reader.read_other(method, self.qualify(name), method=True)
        self.bindings = reader.bindings
        self.containers = reader.containers

    def container_graphs(self) -> list[FlowGraph]:
        """One straight-line graph per ``nn.Sequential`` built: its elements called in order, each on the previous
        one's output (what ``nn.Sequential.forward`` does), so a rule's forward pattern matches adjacent elements."""
        graphs = []
        for container in self.containers:
            line = container.statement
            assert line is not None
            site = Site(line.body[0], line, (line,), line, container.where, (), ())
            value = Value("var", "%in", self.new_vid(), container.value, ())
            graph = FlowGraph()
            sink = FlowSink(graph, (0,))
            for element in container.elements:
                opaque = element.layer_type.certainty == OPAQUE
                node = DLNode(
                    "op" if opaque else "layer", "barrier" if opaque else element.qualname,
                    None if opaque else "self." + element.attr, () if opaque else (element,), (value,), (), None,
                    self.new_vid(), element.value, None, False, site,
                )
                sink.append(node)
                graph.states[id(node)] = {}  # no name holds a value inside the container
                value = Value("var", f"%{node.out}", node.out, element.value, ((f"%{node.out}", node.out),))
            graph.finish([sink])
            graphs.append(graph)
        return graphs

    # ------------------------------------------------------------------ forward
    def qualify(self, function: str) -> str:
        return f"{self.info.name}.{function}" if self.info.name else function

    def forward_graphs(self) -> list[FlowGraph]:
        # The class's own forward only: an inherited one is analysed (and rewritten once) in the class defining it.
        forward = self.info.methods.get("forward")
        return [self.function_graph(forward)] if forward is not None else []

    def other_graphs(
        self, functions: Iterable[cst.FunctionDef], skipped: list[tuple[cst.CSTNode, str]]
    ) -> list[FlowGraph]:
        """The graph of each function walked on its own, helpers not inlined (class methods other than forward,
        module-level functions), skipping helpers already inlined into forward; a function nested too deeply for
        the walk is left out alone (and added to `skipped` with the reason)."""
        graphs: list[FlowGraph] = []
        self.on_its_own = True
        for fn in functions:
            if fn.name.value in self.inlined or not self.standalone(fn):
                continue
            try:
                graphs.append(self.function_graph(fn))
            except RecursionError:
                skipped.append((fn, f"{fn.name.value} is nested too deeply to analyse"))
        return graphs

    def standalone(self, fn: cst.FunctionDef) -> bool:
        """Whether a function's body runs as plain Python: not async, decorated at most by a wrapper that calls it
        as is (a ``torch.jit.script`` body, for one, could not call the runtime kernels)."""
        for dec in fn.decorators:
            expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            name = dotted_name(expr)
            if name not in _TRANSPARENT_DECORATORS and self.table.resolve(expr) not in _TRANSPARENT_DECORATORS:
                return False
        return not fn.asynchronous

    def function_graph(self, fn: cst.FunctionDef) -> FlowGraph:
        """The graph of one function, ``self`` helpers inlined (unless walking functions on their own).

        The walk follows control flow with a list of partial paths, forking at branches; at the end of every
        statement the partial paths with the same status are merged (`join`), so each statement is walked once
        per loop-body copy and helper inlining, whatever the number of paths reaching it."""
        ctx = _Ctx(self.qualify(fn.name.value), "", (), (), fn, tuple(_suite_body(fn.body)), (fn.name.value,))
        graph = self.graph = FlowGraph()
        self.entry_vids = {}
        try:
            partials = self.walk_block(fn.body, ctx, [_Partial(FlowSink(graph, (0,)), FlowState(graph))])
        finally:
            self.graph = None
        graph.finish(p.events for p in partials)  # type: ignore[misc]
        return graph

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

    def walk_block(self, suite: cst.BaseSuite, ctx: _Ctx, partials: list[_Partial]) -> list[_Partial]:
        body = _suite_body(suite)
        ctx = _Ctx(ctx.function, ctx.prefix, ctx.inline_stack, ctx.loop_copy, suite, tuple(body), ctx.helper_stack)
        for stmt in body:
            open_partials = [p for p in partials if p.status == "open"]
            if not open_partials:
                break
            closed = [p for p in partials if p.status != "open"]
            partials = self.merged(closed + self.walk_statement(stmt, ctx, open_partials))
        return partials

    def site(self, ctx: _Ctx, small: cst.CSTNode, line: cst.BaseStatement) -> Site:
        return Site(small, line, ctx.block, ctx.owner, ctx.function, ctx.inline_stack, ctx.loop_copy, ctx.prefix)  # type: ignore[arg-type]

    def walk_statement(self, stmt: cst.BaseStatement, ctx: _Ctx, partials: list[_Partial]) -> list[_Partial]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                partials = self._flat_map(partials, lambda p, s=small: self.walk_small(s, stmt, ctx, p))
            return partials
        if not self.is_interesting(stmt):
            return [self.opaque(stmt, stmt, ctx, p) for p in partials]
        if isinstance(stmt, cst.If):
            return self._flat_map(partials, lambda p: self.walk_if(stmt, ctx, p))
        if isinstance(stmt, (cst.For, cst.While)):
            return self._flat_map(partials, lambda p: self.walk_loop(stmt, ctx, p))
        if isinstance(stmt, (cst.Try, cst.TryStar)):
            return self._flat_map(partials, lambda p: self.walk_try(stmt, ctx, p))
        if isinstance(stmt, cst.With):
            out = []
            for p in partials:
                for item in stmt.items:
                    p = self.opaque(item, stmt, ctx, p)
                out.extend(self.walk_block(stmt.body, ctx, [p]))
            return out
        if isinstance(stmt, cst.Match):
            return self._flat_map(partials, lambda p: self.walk_match(stmt, ctx, p))
        return [self.opaque(stmt, stmt, ctx, p) for p in partials]

    def _flat_map(self, partials: list[_Partial], fn) -> list[_Partial]:  # type: ignore[no-untyped-def]
        out: list[_Partial] = []
        for p in partials:
            if p.status != "open":
                out.append(p)
            else:
                out.extend(fn(p))
        return out

    @staticmethod
    def fork(p: _Partial) -> _Partial:
        return _Partial(p.events.copy(), p.state.copy(), p.status, p.ret)

    def opaque(self, node: cst.CSTNode, line: cst.BaseStatement, ctx: _Ctx, p: _Partial) -> _Partial:
        """A statement with no DSL content: one use event for what it reads, fresh ids for what it writes."""
        names, _ = self.read_names(node)
        site = self.site(ctx, node, line)
        vids = tuple(self.lookup(p.state, ctx.prefix + n if not n.startswith("self.") else n) for n in names)
        if vids:
            p.events.append(Use(vids, site))
        for name in self.written_names(node):
            scoped = name if name.startswith("self.") else ctx.prefix + name
            vid = p.state[scoped] = self.new_vid()
            p.events.append(Def(scoped, vid, site))
        return p

    def is_interesting(self, node: cst.CSTNode) -> bool:
        """Whether a compound statement holds a layer/function/helper call worth separate paths."""
        if _has_dsl_call(self, node):
            return True
        return self.split_guarded_ifs and _guards_ops(node)

    def walk_if(self, stmt: cst.If, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        out: list[_Partial] = []
        for p2 in self.walk_expr_stmt(stmt.test, stmt, ctx, p, stmt):
            if p2.status != "open":
                out.append(p2)
                continue
            out.extend(self.walk_block(stmt.body, ctx, [self.fork(p2)]))
            orelse = stmt.orelse
            if orelse is None:
                out.append(self.fork(p2))
            elif isinstance(orelse, cst.If):
                # An elif is the single statement of the else block.
                ectx = _Ctx(ctx.function, ctx.prefix, ctx.inline_stack, ctx.loop_copy, orelse, (orelse,), ctx.helper_stack)
                out.extend(self.walk_if(orelse, ectx, self.fork(p2)))
            else:
                out.extend(self.walk_block(orelse.body, ctx, [self.fork(p2)]))
        return out

    def walk_loop(self, stmt: cst.For | cst.While, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        header = stmt.iter if isinstance(stmt, cst.For) else stmt.test
        p = self.opaque(header, stmt, ctx, p)
        if isinstance(stmt, cst.For):
            p = self.opaque(cst.Assign([cst.AssignTarget(stmt.target)], cst.Name("None")), stmt, ctx, p)
        skipped = self.fork(p)
        partials = [p]
        # Two copies of the body: matches stay inside one copy, the second shows loop-carried uses.
        for _ in range(2):
            copy_ctx = _Ctx(
                ctx.function, ctx.prefix, ctx.inline_stack, ctx.loop_copy + (next(self._loop),), stmt, (), ctx.helper_stack
            )
            partials = self.walk_block(stmt.body, copy_ctx, partials)
            for q in partials:
                if q.status in ("break", "continue"):
                    q.status = "open"
        out = [skipped] + partials
        if stmt.orelse is not None:
            out = self._flat_map(out, lambda q: self.walk_block(stmt.orelse.body, ctx, [q]))  # type: ignore[union-attr]
        return out

    def walk_try(self, stmt: cst.Try | cst.TryStar, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        main = self.walk_block(stmt.body, ctx, [self.fork(p)])
        if stmt.orelse is not None:
            main = self._flat_map(main, lambda q: self.walk_block(stmt.orelse.body, ctx, [q]))  # type: ignore[union-attr]
        out = main
        for handler in stmt.handlers:
            h = self.opaque(handler.type, stmt, ctx, self.fork(p)) if handler.type is not None else self.fork(p)
            out.extend(self.walk_block(handler.body, ctx, [h]))
        if stmt.finalbody is not None:
            final = stmt.finalbody
            out = [q for q in out if q.status != "open"] + self.walk_block(
                final.body, ctx, [q for q in out if q.status == "open"]
            )
        return out

    def walk_match(self, stmt: cst.Match, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        p = self.opaque(stmt.subject, stmt, ctx, p)
        out: list[_Partial] = []
        for case in stmt.cases:
            q = self.opaque(case.pattern, stmt, ctx, self.fork(p))
            out.extend(self.walk_block(case.body, ctx, [q]))
        return out

    # ------------------------------------------------------------------ simple statements
    def walk_small(
        self, small: cst.BaseSmallStatement, line: cst.SimpleStatementLine, ctx: _Ctx, p: _Partial
    ) -> list[_Partial]:
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            value = small.value
            if value is None:
                return [p]
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            out = []
            for q, val in self.walk_expr(value, small, line, ctx, p, None, whole=True):
                if q.status == "open":
                    self.assign(targets, val, small, line, ctx, q)
                out.append(q)
            return out
        if isinstance(small, cst.Return):
            if small.value is None:
                p.status = "return"
                return [p]
            out = []
            for q, val in self.walk_expr(small.value, small, line, ctx, p, None, whole=True):
                if q.status == "open":
                    if not ctx.prefix:  # a helper's return value flows into its caller, which records the uses
                        q.events.append(Use(tuple(v for _, v in val.uses), self.site(ctx, small, line)))
                    q.status, q.ret = "return", val
                out.append(q)
            return out
        if isinstance(small, cst.Expr):
            out = []
            for q, val in self.walk_expr(small.value, small, line, ctx, p, None, whole=True):
                if q.status == "open" and val.kind != "var":
                    if val.uses:
                        q.events.append(Use(tuple(v for _, v in val.uses), self.site(ctx, small, line)))
                    for name in sorted(_written_names(small)):
                        scoped = name if name.startswith("self.") else ctx.prefix + name
                        vid = q.state[scoped] = self.new_vid()
                        q.events.append(Def(scoped, vid, self.site(ctx, small, line)))
                elif q.status == "open" and not val.text.startswith("%"):
                    # `self._helper(x)` whose inlined `return h` names a variable: the return still reads it.
                    q.events.append(Use((val.vid,), self.site(ctx, small, line)))
                out.append(q)
            return out
        if isinstance(small, cst.Raise):
            p = self.opaque(small, line, ctx, p)
            p.status = "raise"
            return [p]
        if isinstance(small, cst.Break):
            p.status = "break"
            return [p]
        if isinstance(small, cst.Continue):
            p.status = "continue"
            return [p]
        return [self.opaque(small, line, ctx, p)]

    def walk_expr_stmt(
        self, expr: cst.BaseExpression, small: cst.CSTNode, ctx: _Ctx, p: _Partial, line: cst.BaseStatement
    ) -> list[_Partial]:
        """Evaluate an expression for its effects (an `if` test): DSL nodes plus a use of what it reads."""
        out = []
        for q, val in self.walk_expr(expr, small, line, ctx, p, None, whole=False):
            if q.status == "open" and val.uses:
                q.events.append(Use(tuple(v for _, v in val.uses), self.site(ctx, small, line)))
            out.append(q)
        return out

    def assign(
        self,
        targets: Sequence[cst.BaseAssignTargetExpression],
        val: Value,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
    ) -> None:
        site = self.site(ctx, small, line)
        for target in targets:
            name = self.target_name(target, ctx)
            if name is not None and val.kind == "var":
                if not val.text.startswith("%"):
                    p.events.append(Use((val.vid,), site))  # `b = a` reads `a`: its definition must stay
                p.state[name] = val.vid  # alias (or the DSL node's output): same value id
                p.events.append(Def(name, val.vid, site))
                continue
            if val.kind == "expr" and val.uses:
                p.events.append(Use(tuple(v for _, v in val.uses), site))
            if name is not None:
                vid = p.state[name] = self.new_vid()
                p.events.append(Def(name, vid, site))
                continue
            reads, _ = _read_names(target)
            vids = tuple(self.lookup(p.state, self.scoped(n, ctx)) for n in reads)
            if vids:
                p.events.append(Use(vids, site))
            for written in sorted(_written_names(cst.Assign([cst.AssignTarget(target)], cst.Name("None")))):
                scoped = self.scoped(written, ctx)
                vid = p.state[scoped] = self.new_vid()
                p.events.append(Def(scoped, vid, site))

    def target_name(self, target: cst.BaseExpression, ctx: _Ctx) -> Optional[str]:
        if isinstance(target, cst.Name):
            return ctx.prefix + target.value
        attr = _is_self_attr(target)
        return "self." + attr if attr is not None else None

    @staticmethod
    def scoped(name: str, ctx: _Ctx) -> str:
        return name if name.startswith("self.") else ctx.prefix + name

    # ------------------------------------------------------------------ expressions
    def walk_expr(
        self,
        expr: cst.BaseExpression,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        """Unchain an expression: DSL nodes in evaluation order; returns (partial, value) alternatives."""
        const = _const_text(expr)
        if const is not None:
            return [(p, Value("const", const, 0, expr, ()))]
        if isinstance(expr, cst.Name):
            name = ctx.prefix + expr.value
            vid = self.lookup(p.state, name)
            return [(p, Value("var", expr.value, vid, expr, ((name, vid),)))]
        attr = _is_self_attr(expr)
        if attr is not None:
            name = "self." + attr
            vid = self.lookup(p.state, name)
            return [(p, Value("var", name, vid, expr, ((name, vid),)))]
        if isinstance(expr, cst.Call):
            return self.walk_call(expr, small, line, ctx, p, parent, whole)
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _BINARY_OPS:
            return self.walk_op(_BINARY_OPS[type(expr.operator)], [expr.left, expr.right], expr, small, line, ctx, p, parent, whole)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            return self.walk_op("neg", [expr.expression], expr, small, line, ctx, p, parent, whole)
        return self.walk_opaque_expr(expr, small, line, ctx, p, parent)

    def walk_opaque_expr(
        self,
        expr: cst.BaseExpression,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
    ) -> list[tuple[_Partial, Value]]:
        """An expression that is no DSL node: still unchain DSL nodes nested in it, except where they may not run
        (lambdas, comprehensions, conditional expressions, `and`/`or`): those are read as a whole."""
        children = _sub_expressions(expr)
        alternatives = [(p, [])] if children is None else self.walk_values(children, small, line, ctx, p, parent)
        names, has_call = self.read_names(expr)
        out = []
        for q, vals in alternatives:
            if children is None:
                uses = {(self.scoped(n, ctx), self.lookup(q.state, self.scoped(n, ctx))) for n in names}
            else:
                uses = {u for v in vals for u in v.uses}  # what the parts read (a DSL node's result for nodes)
            out.append((q, Value("expr", "", self.new_vid(), expr, tuple(sorted(uses)), pure=not has_call)))
        return out

    def walk_op(
        self,
        op: str,
        operands: list[cst.BaseExpression],
        expr: cst.BaseExpression,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        out = []
        for q, vals in self.walk_values(operands, small, line, ctx, p, expr):
            if q.status != "open":
                out.append((q, Value("const", "None", 0, expr, ())))
                continue
            out.append((q, self.emit_node("op", op, None, (), vals, (), None, expr, parent, whole, small, line, ctx, q)))
        return out

    def walk_values(
        self,
        exprs: Sequence[cst.BaseExpression],
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
    ) -> list[tuple[_Partial, list[Value]]]:
        """Evaluate expressions left to right; one (partial, values) alternative per path through them."""
        alternatives: list[tuple[_Partial, list[Value]]] = [(p, [])]
        for e in exprs:
            nxt = []
            for q, vals in alternatives:
                if q.status != "open":
                    nxt.append((q, vals))
                    continue
                for q2, v in self.walk_expr(e, small, line, ctx, q, parent, whole=False):
                    nxt.append((q2, vals + [v]))
            alternatives = nxt
        return alternatives

    def emit_node(
        self,
        kind: NodeKind,
        qualname: Optional[str],
        layer: Optional[str],
        bindings: tuple[LayerBinding, ...],
        args: list[Value],
        kwargs: tuple[tuple[str, Value], ...],
        call: Optional[cst.Call],
        expr: cst.BaseExpression,
        parent: Optional[cst.BaseExpression],
        whole: bool,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
    ) -> Value:
        temp = f"%{next(self._temp)}"
        vid = self.new_vid()  # read through the node's value, never by name: not in the state
        node = DLNode(
            kind, qualname, layer, bindings, tuple(args), kwargs, call, vid, expr, parent, whole, self.site(ctx, small, line)
        )
        p.events.append(node)
        p.events.graph.states[id(node)] = dict(p.state)
        return Value("var", temp, vid, expr, ((temp, vid),))

    def walk_call(
        self,
        call: cst.Call,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        if any(a.star for a in call.args):
            return self.walk_opaque_expr(call, small, line, ctx, p, parent)
        attr = _is_self_attr(call.func)
        if attr is not None and attr not in self.bindings and not self.on_its_own:
            method = self.find_method(attr)
            if method is not None and attr not in ctx.helper_stack and _inlinable(method):
                return self.inline(method, call, small, line, ctx, p, parent)
        qualname: Optional[str] = None
        bindings: tuple[LayerBinding, ...] = ()
        kind: NodeKind = "func"
        if attr is not None and attr in self.bindings:
            kind = "layer"
            bindings = tuple(self.bindings[attr])
            types = {b.qualname for b in bindings}
            qualname = types.pop() if len(types) == 1 else None
        elif attr is None:
            qualname = self.table.resolve(call.func)
            if qualname is not None:
                qualname = canonical_torch_name(qualname)
        positional = [a.value for a in call.args if a.keyword is None]
        tensor_method = _tensor_method(call) if kind == "func" and qualname is None else None
        if tensor_method is not None:
            qualname, positional = "torch.Tensor." + tensor_method, [call.func.value, *positional]  # type: ignore[attr-defined]
        if kind == "func" and qualname is None:
            return self.walk_opaque_expr(call, small, line, ctx, p, parent)
        if kind == "layer" and len(bindings) == 1 and bindings[0].elements and _fixed_order(bindings[0]):
            return self.walk_sequential(bindings[0], call, small, line, ctx, p, parent, whole)
        keyword = [a for a in call.args if a.keyword is not None]
        out = []
        for q, vals in self.walk_values(positional + [a.value for a in keyword], small, line, ctx, p, call):
            if q.status != "open":
                out.append((q, Value("const", "None", 0, call, ())))
                continue
            kwargs = tuple((a.keyword.value, v) for a, v in zip(keyword, vals[len(positional):]))  # type: ignore[union-attr]
            layer = "self." + attr if attr is not None else None
            out.append(
                (
                    q,
                    self.emit_node(
                        kind, qualname, layer, bindings, vals[: len(positional)], kwargs, call, call, parent, whole, small, line, ctx, q
                    ),
                )
            )
        return out

    def walk_sequential(
        self,
        binding: LayerBinding,
        call: cst.Call,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        """``self.block(x)`` on an ``nn.Sequential``: one layer node per element, in order."""
        if len(call.args) != 1 or call.args[0].keyword is not None:
            return self.walk_opaque_expr(call, small, line, ctx, p, parent)
        out = []
        for q, val in self.walk_expr(call.args[0].value, small, line, ctx, p, call, whole=False):
            if q.status != "open":
                out.append((q, val))
                continue
            for element in binding.elements:
                val = self.emit_node(
                    "layer", element.qualname, "self." + element.attr, (element,), [val], (), None, call, parent, False,
                    small, line, ctx, q,
                )
            out.append((q, val))
        return out

    def inline(
        self,
        method: cst.FunctionDef,
        call: cst.Call,
        small: cst.CSTNode,
        line: cst.BaseStatement,
        ctx: _Ctx,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
    ) -> list[tuple[_Partial, Value]]:
        """Inline a helper method: bind parameters as aliases, walk its paths, continue with its return value."""
        params = [prm for prm in method.params.params][1:]  # drop `self`
        kwonly = list(method.params.kwonly_params)
        positional = [a for a in call.args if a.keyword is None]
        keyword = {a.keyword.value: a for a in call.args if a.keyword is not None}  # type: ignore[union-attr]
        if len(positional) > len(params):
            return self.walk_opaque_expr(call, small, line, ctx, p, parent)
        prefix = f"{ctx.prefix}{method.name.value}@{next(self._inline)}::"
        bound: list[tuple[str, cst.BaseExpression]] = []
        for i, prm in enumerate(params + kwonly):
            name = prm.name.value
            if i < len(positional) and prm in params:
                bound.append((name, positional[i].value))
            elif name in keyword:
                bound.append((name, keyword[name].value))
            elif prm.default is not None:
                bound.append((name, prm.default))
            else:
                return self.walk_opaque_expr(call, small, line, ctx, p, parent)
        if set(keyword) - {n for n, _ in bound}:
            return self.walk_opaque_expr(call, small, line, ctx, p, parent)
        self.inlined.add(method.name.value)
        helper_ctx = _Ctx(
            self.qualify(method.name.value),
            prefix,
            ctx.inline_stack + (self.site(ctx, small, line),),
            ctx.loop_copy,
            method,
            tuple(_suite_body(method.body)),
            ctx.helper_stack + (method.name.value,),
        )
        out: list[tuple[_Partial, Value]] = []
        for q, vals in self.walk_values([e for _, e in bound], small, line, ctx, p, call):
            if q.status != "open":
                out.append((q, Value("const", "None", 0, call, ())))
                continue
            site = self.site(ctx, small, line)
            for (name, _), val in zip(bound, vals):
                if val.kind == "var" and not val.text.startswith("%"):
                    q.events.append(Use((val.vid,), site))  # the call reads its argument, used in the helper or not
                scoped = prefix + name
                vid = q.state[scoped] = val.vid if val.kind == "var" else self.new_vid()
                q.events.append(Def(scoped, vid, site))
            for r in self.walk_block(method.body, helper_ctx, [q]):
                if r.status == "return" and r.ret is not None:
                    ret = r.ret
                    r.status, r.ret = "open", None
                    out.append((r, ret))
                elif r.status in ("open", "return"):
                    r.status = "open"
                    out.append((r, Value("const", "None", 0, call, ())))
                else:
                    out.append((r, Value("const", "None", 0, call, ())))
        return self.joined_returns(out, call)

    def joined_returns(self, alternatives: list[tuple[_Partial, Value]], call: cst.Call) -> list[tuple[_Partial, Value]]:
        """The helper's returns joined into one partial path; differing return values get a phi."""
        returned = [(p, v) for p, v in alternatives if p.status == "open"]
        if len(returned) < 2:
            return alternatives
        assert self.graph is not None
        joined = self.join([p for p, _ in returned])
        first = returned[0][1]
        same = all(v.kind == first.kind and v.vid == first.vid and v.text == first.text for _, v in returned)
        value = first
        if not same:
            vid = self.new_vid()
            self.graph.phis[vid] = frozenset(v.vid for _, v in returned)
            sources: dict[int, tuple[int, ...]] = {}
            for p, v in returned:
                sources[v.vid] = sources.get(v.vid, ()) + p.events.tails
            self.graph.phi_tails[vid] = sources
            joined.events.pending += (vid,)
            value = Value("var", f"%{vid}", vid, call, ((f"%{vid}", vid),))
        return [(joined, value)] + [(p, v) for p, v in alternatives if p.status != "open"]


def _fixed_order(container: LayerBinding) -> bool:
    """Whether a container's elements are known in order (no barrier where the arms of an ``if`` meet)."""
    return all(e.layer_type.certainty != OPAQUE for e in container.elements)


def _sequential_base(info: _ClassInfo, table: ImportTable) -> Optional[cst.BaseExpression]:
    """The ``nn.Sequential`` base of a class deriving from it directly and defining no ``forward`` (its calls run
    ``nn.Sequential.forward`` over what ``super().__init__(...)`` received), as written in the class line."""
    if info.node is None or "forward" in info.methods:
        return None
    for base in info.node.bases:
        qual = table.resolve(base.value)
        if base.keyword is None and qual is not None and qual not in table.local_classes:
            if qualname_matches("torch.nn.Sequential", canonical_torch_name(qual)):
                return base.value
    return None


def _inlinable(method: cst.FunctionDef) -> bool:
    prm = method.params
    return (
        bool(prm.params)
        and prm.params[0].name.value == "self"
        and not isinstance(prm.star_arg, cst.Param)
        and prm.star_kwarg is None
        and not prm.posonly_params
        and not method.decorators
        and not method.asynchronous
    )


def _tensor_method(call: cst.Call) -> Optional[str]:
    """``name`` for ``<expr>.name(...)`` with ``name`` in TENSOR_METHODS and a receiver other than ``self`` (whose
    methods are helpers or layers); the caller has checked the callee is no imported name (``torch.transpose``)."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in TENSOR_METHODS:  # type: ignore[attr-defined]
        return None
    receiver = func.value  # type: ignore[attr-defined]
    if type(receiver) is cst.Name and receiver.value == "self":  # type: ignore[attr-defined]
        return None
    return func.attr.value  # type: ignore[attr-defined]


def simple_condition(test: cst.BaseExpression) -> bool:
    """Names, `x is None`, `x is not None`, `not`, `and`/`or`: a value no call or attribute can change."""
    if isinstance(test, cst.Name):
        return test.value not in ("True", "False", "None")
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return simple_condition(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return simple_condition(test.left) and simple_condition(test.right)
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        none = isinstance(comp.comparator, cst.Name) and comp.comparator.value == "None"
        return none and isinstance(comp.operator, (cst.Is, cst.IsNot))
    return False


def _guards_ops(node: cst.CSTNode) -> bool:
    """An ``if`` with a simple test (`simple_condition`), no else, that updates a name by a tensor op on it, such as
    ``if head_mask is not None: probs = probs * head_mask``: walked as separate paths, so a rule can tell the paths
    that run it from the others (ADP010's fallback plan); other ``if``s without calls are still folded."""
    if type(node) is not cst.If or node.orelse is not None or not simple_condition(node.test):  # type: ignore[attr-defined]
        return False
    for line in _suite_body(node.body):  # type: ignore[attr-defined]
        if type(line) is not cst.SimpleStatementLine:
            return False
        for small in line.body:  # type: ignore[attr-defined]
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                name, value = small.targets[0].target.value, small.value
                if type(value) is cst.BinaryOperation and type(value.operator) in _BINARY_OPS and any(
                    type(side) is cst.Name and side.value == name for side in (value.left, value.right)
                ):
                    return True
    return False


def _not_a_scope(node: cst.CSTNode) -> bool:
    return type(node) is not cst.FunctionDef and type(node) is not cst.ClassDef


def _has_dsl_call(walker: _ClassWalker, root: cst.CSTNode) -> bool:
    """Whether `root` (nested functions and classes aside) holds a call the walk would turn into a DSL node or
    inline."""
    for node in cstwalk.walk(root, _not_a_scope):
        if type(node) is not cst.Call:
            continue
        func = node.func  # type: ignore[attr-defined]
        attr = _is_self_attr(func)
        if attr is not None:
            inlined = not walker.on_its_own and walker.find_method(attr) is not None
            if attr in walker.bindings or inlined:
                return True
        elif walker.table.resolve(func) is not None:
            return True
    return False


def _find_method(
    info: _ClassInfo, classes: dict[str, _ClassInfo], name: str, seen: set[str]
) -> Optional[cst.FunctionDef]:
    if name in info.methods:
        return info.methods[name]
    seen.add(info.name)
    for base in info.bases:
        if base in classes and base not in seen:
            found = _find_method(classes[base], classes, name, seen)
            if found is not None:
                return found
    return None


def _suite_body(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if isinstance(suite, cst.IndentedBlock):
        return suite.body
    return [suite]  # type: ignore[list-item]  # SimpleStatementSuite: one "line" of small statements


def _child_suites(stmt: cst.BaseCompoundStatement) -> Iterator[cst.BaseSuite]:
    for child in cstwalk.children(stmt):
        if isinstance(child, cst.BaseSuite):
            yield child
        elif isinstance(child, (cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)):
            yield child.body
        elif isinstance(child, cst.If):
            yield from _child_suites(child)


def _sub_expressions(expr: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
    """The parts an expression evaluates, in order; None when some part may not run or is a new scope."""
    if isinstance(expr, cst.Attribute):
        return [expr.value]
    if isinstance(expr, cst.Call):
        return [expr.func, *(a.value for a in expr.args)]
    if isinstance(expr, cst.Subscript):
        parts: list[cst.BaseExpression] = [expr.value]
        for el in expr.slice:
            if isinstance(el.slice, cst.Index):
                parts.append(el.slice.value)
            elif isinstance(el.slice, cst.Slice):
                parts.extend(x for x in (el.slice.lower, el.slice.upper, el.slice.step) if x is not None)
        return parts
    if isinstance(expr, cst.BinaryOperation):
        return [expr.left, expr.right]
    if isinstance(expr, cst.UnaryOperation):
        return [expr.expression]
    if isinstance(expr, cst.Comparison):
        return [expr.left, *(c.comparator for c in expr.comparisons)]
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        return [el.value for el in expr.elements]
    if isinstance(expr, cst.Dict):
        out: list[cst.BaseExpression] = []
        for item in expr.elements:
            if isinstance(item, cst.DictElement):
                out.extend((item.key, item.value))
            else:
                out.append(item.value)
        return out
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)):
        return []
    return None


@dataclass
class _Scan:
    """One walk over a class body: how it reaches and rebinds its own attributes."""

    refs: dict[str, list[cst.Attribute]] = field(default_factory=dict)  # every `self.<attr>`
    stores: dict[str, list[cst.CSTNode]] = field(default_factory=dict)  # attr -> target node / setattr-like call
    dynamic: bool = False  # `setattr(self, name, ...)` with a computed name: any attribute may be rebound
    callees: set[str] = field(default_factory=set)  # qualified names of the imported functions it calls
    operators: set[str] = field(default_factory=set)  # symbols of the op nodes the walk can make of it
    foreign_stores: set[str] = field(default_factory=set)  # attributes bound on other objects ("*": computed)


# `setattr(self, "attr", ...)`, `delattr(self, "attr")`; `self.add_module("attr", ...)` and friends.
_STORE_BUILTINS = ("setattr", "delattr")
_STORE_METHODS = ("add_module", "register_module", "register_buffer", "register_parameter")
_STORE_KINDS = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.Del, cst.For)


def _scan(root: cst.CSTNode, table: ImportTable, foreign: set[str]) -> _Scan:
    """Self references and rebinding stores of one class; adds to `foreign` every attribute name read on an
    object other than `self` or an imported module (`self.embeddings.dropout`: maybe another class's layer)."""
    scan = _Scan()
    for node in cstwalk.walk(root):
        kind = type(node)
        if kind is cst.Attribute:
            attr = _is_self_attr(node)  # type: ignore[arg-type]
            if attr is not None:
                scan.refs.setdefault(attr, []).append(node)  # type: ignore[arg-type]
            elif table.resolve(node) is None:  # type: ignore[arg-type]
                foreign.add(node.attr.value)  # type: ignore[attr-defined]
        elif kind in _STORE_KINDS or (kind is cst.WithItem and node.asname is not None):  # type: ignore[attr-defined]
            target = node.asname.name if kind is cst.WithItem else node.target  # type: ignore[attr-defined]
            for attr, sub in _attribute_targets(target):
                if _is_self_attr(sub) is not None:
                    scan.stores.setdefault(attr, []).append(sub)
                else:
                    scan.foreign_stores.add(attr)  # `other.ln = ...`: maybe some class's layer
        elif kind is cst.Call:
            callee = table.resolve(node.func)  # type: ignore[attr-defined]
            if callee is not None:
                scan.callees.add(canonical_torch_name(callee))
            else:
                method = _tensor_method(node)  # type: ignore[arg-type]
                if method is not None:
                    scan.callees.add("torch.Tensor." + method)
            stored = _stored_by_call(node)  # type: ignore[arg-type]
            if stored is not None:
                on_self, name = stored
                if on_self and name:
                    scan.stores.setdefault(name, []).append(node)
                elif on_self:
                    scan.dynamic = True
                else:
                    scan.foreign_stores.add(name or "*")
        elif kind is cst.BinaryOperation:
            op = _BINARY_OPS.get(type(node.operator))  # type: ignore[attr-defined]
            if op is not None:
                scan.operators.add(op)
        elif kind is cst.UnaryOperation and type(node.operator) is cst.Minus:  # type: ignore[attr-defined]
            scan.operators.add("neg")
    return scan


def _attribute_targets(target: cst.BaseExpression) -> Iterator[tuple[str, cst.Attribute]]:
    """Attributes bound by an assignment target (`x.a = `, `self.a, *self.b = `): the outermost one of a chain."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _attribute_targets(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _attribute_targets(target.value)
    elif isinstance(target, cst.Attribute):
        yield target.attr.value, target


def _stored_by_call(call: cst.Call) -> Optional[tuple[bool, str]]:
    """For a setattr-like call: (whether it binds on `self`, the attribute's name or "" when computed)."""
    func = call.func
    if isinstance(func, cst.Name) and func.value in _STORE_BUILTINS:
        if not call.args:
            return None
        receiver = call.args[0].value
        name_arg = call.args[1].value if len(call.args) > 1 else None
    elif isinstance(func, cst.Attribute) and func.attr.value in _STORE_METHODS:
        receiver = func.value
        name_arg = call.args[0].value if call.args else None
    else:
        return None
    on_self = isinstance(receiver, cst.Name) and receiver.value == "self"
    if isinstance(name_arg, cst.SimpleString) and name_arg.prefix.lower() in ("", "u"):
        return on_self, name_arg.raw_value
    return on_self, ""


def _is_module_class(
    info: _ClassInfo,
    classes: dict[str, _ClassInfo],
    table: ImportTable,
    memo: dict[str, bool],
    resolver: BaseResolver,
) -> bool:
    """Whether a class derives from torch.nn.Module through local classes or through classes of other files
    (`class_bases`); the latter are added to `info.external_bases`."""
    node = info.node
    assert node is not None  # a class definition, not the top-level functions' unit
    name = node.name.value
    if name in memo:
        return memo[name]
    memo[name] = False  # cycles
    result = False
    for base in node.bases:
        qual = table.resolve(base.value)
        if qual is not None and qual not in table.local_classes:
            is_module, ref = resolver.base_is_module(canonical_torch_name(qual))
            result = result or is_module
            if ref is not None:
                info.external_bases.append(ref)
        bname = dotted_name(base.value)
        if bname in classes and _is_module_class(classes[bname], classes, table, memo, resolver):
            result = True
    memo[name] = result
    return result


@collector_paused
def build_module_structure(module: cst.Module, path: Optional[str] = None) -> ModuleStructure:
    """The model structure of every nn.Module class defined at the top level of a module, plus one unnamed unit
    for the module's top-level functions when any of them holds a DSL node. `path`: the module's file, from which
    bases imported from other files are resolved (`class_bases`); without it only their names decide."""
    table = ImportTable.from_module(module)
    resolver = BaseResolver(path)
    factories = FactoryTypes(resolver)  # layer factories of other files, read through the same resolver
    classes: dict[str, _ClassInfo] = {}
    functions = {stmt.name.value: stmt for stmt in module.body if isinstance(stmt, cst.FunctionDef)}
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            info = _ClassInfo(stmt)
            for item in _suite_body(stmt.body):
                if isinstance(item, cst.FunctionDef):
                    info.methods[item.name.value] = item
            info.bases = [n for n in (dotted_name(b.value) for b in stmt.bases) if n is not None]
            classes[stmt.name.value] = info
    memo: dict[str, bool] = {}
    foreign: set[str] = set()
    scans = {name: _scan(info.node.body, table, foreign) for name, info in classes.items() if info.node is not None}
    foreign_stores = set().union(*(scan.foreign_stores for scan in scans.values()))
    function_callees: set[str] = set()
    function_operators: set[str] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.ClassDef):
            scan = _scan(stmt, table, foreign)
            # Outside a class body `self` is any object (`def _fwd(self, x)` assigned as `forward = _fwd`).
            foreign.update(scan.refs)
            foreign_stores.update(scan.foreign_stores, scan.stores, ["*"] if scan.dynamic else [])
            if isinstance(stmt, cst.FunctionDef):
                function_callees |= scan.callees
                function_operators |= scan.operators
    subclasses: dict[str, set[str]] = {n: set() for n in classes}
    for name, info in classes.items():
        for base in info.bases:
            if base in subclasses:
                subclasses[base].add(name)
    result: list[ClassStructure] = []
    for name, info in classes.items():
        if not _is_module_class(info, classes, table, memo, resolver):
            continue
        walker = _ClassWalker(info, classes, table)
        walker.collect_bindings(functions, _SEQUENTIAL in scans[name].callees, factories)
        # An __init__ edit reaches every class sharing the edited statement: the family of local bases and their
        # subclasses sees the layers (and may rebind them, or call the removed ones).
        family = _family(name, classes, subclasses)
        self_refs: dict[str, list[cst.Attribute]] = {}
        for cls_name in family:
            for attr, nodes in scans[cls_name].refs.items():
                self_refs.setdefault(attr, []).extend(nodes)
        structure = ClassStructure(name, info.node, walker.bindings, None, self_refs, walker.entry_names)
        structure.rebound = _rebound(walker.bindings, [scans[c] for c in family])
        structure.foreign_stores = frozenset(foreign_stores)
        structure.foreign_attributes = frozenset(foreign)
        # Forward and helpers may come from local bases.
        bases = _family(name, classes, {})
        external = [ref for c in bases for ref in classes[c].external_bases]
        if external:
            # Methods of bases in other files run on this class's instances: a layer they read is not removed, and
            # one they bind is not relied on (they are not walked, so their uses cannot be checked).
            reads, stores = resolver.attributes(external)
            structure.rebound |= stores
            structure.foreign_attributes |= reads
        structure.callees = frozenset().union(*(scans[c].callees for c in bases))
        structure.operators = frozenset().union(*(scans[c].operators for c in bases))
        structure.walk = functools.partial(_walk_class, walker)
        structure.containers = walker.containers
        structure.container_graphs = walker.container_graphs()
        result.append(structure)
    if function_callees:
        # Top-level functions (helpers such as `def softmax(x, dim)`) as one unnamed unit without layers.
        walker = _ClassWalker(_ClassInfo(None), classes, table)
        unit = ClassStructure("", None, {}, None, {}, walker.entry_names, callees=frozenset(function_callees))
        unit.operators = frozenset(function_operators)
        unit.walk = functools.partial(_walk_functions, walker, list(functions.values()))
        if _SEQUENTIAL in function_callees:
            reader = InitReader(table, functions, factories=factories)
            for fn in functions.values():
                reader.read_other(fn, fn.name.value, method=False)
            walker.containers = reader.containers
            unit.containers = reader.containers
            unit.container_graphs = walker.container_graphs()
        result.append(unit)
    for structure in result:
        structure.module = module
        structure.resolver = resolver
    return ModuleStructure(result, module, resolver)


def _walk_class(walker: _ClassWalker, structure: ClassStructure) -> None:
    """The graphs of a class, computed on first use."""
    walker.split_guarded_ifs = structure.split_guarded_ifs
    try:
        structure.graphs = walker.forward_graphs()
    except RecursionError:
        structure.truncated = True
        structure.skipped_reason = "forward is nested too deeply to analyse"
    if structure.truncated:
        assert structure.node is not None and structure.skipped_reason is not None
        structure.skipped.append((structure.node, structure.skipped_reason))
    else:
        others = [fn for method, fn in walker.info.methods.items() if method not in ("__init__", "forward")]
        structure.graphs += walker.other_graphs(others, structure.skipped)


def _walk_functions(walker: _ClassWalker, functions: list[cst.FunctionDef], structure: ClassStructure) -> None:
    walker.split_guarded_ifs = structure.split_guarded_ifs
    structure.graphs = walker.other_graphs(functions, structure.skipped)


def _family(name: str, classes: dict[str, _ClassInfo], subclasses: dict[str, set[str]]) -> list[str]:
    """The class, its local bases (transitively) and every local subclass of those."""
    roots, todo = [], [name]
    while todo:
        cur = todo.pop()
        if cur in roots or cur not in classes:
            continue
        roots.append(cur)
        todo.extend(classes[cur].bases)
    family: list[str] = []
    for root in roots:
        family.extend(c for c in _descendants(root, subclasses) if c not in family)
    return family


def _rebound(bindings: dict[str, list[LayerBinding]], scans: list[_Scan]) -> frozenset[str]:
    """Attributes bound anywhere in the family other than by this class's `__init__` bindings ("*": any)."""
    own: set[int] = set()  # ids: nodes hash through a Python-level __hash__ (slower), ids in C
    for attr_bindings in bindings.values():
        for binding in attr_bindings:
            if binding.statement is not None:
                for small in binding.statement.body:
                    if isinstance(small, cst.Assign):
                        own.update(id(t.target) for t in small.targets)
                    elif isinstance(small, cst.AnnAssign):
                        own.add(id(small.target))
    rebound = {attr for scan in scans for attr, nodes in scan.stores.items() if any(id(n) not in own for n in nodes)}
    if any(scan.dynamic for scan in scans):
        rebound.add("*")
    return frozenset(rebound)


def _descendants(name: str, subclasses: dict[str, set[str]]) -> list[str]:
    out, todo = [], [name]
    while todo:
        cur = todo.pop()
        if cur in out:
            continue
        out.append(cur)
        todo.extend(subclasses.get(cur, ()))
    return out


class ModelStructureProvider(BaseMetadataProvider[ModuleStructure]):
    """LibCST metadata provider: ``wrapper.resolve(ModelStructureProvider)[module]`` is the ModuleStructure.

    Computed once per file and shared by every rule that declares it in ``METADATA_DEPENDENCIES``. A provider gets
    no file path, so bases imported from other files are judged by name only; the codemods build the structure
    with ``context.filename`` instead.
    """

    def _gen_impl(self, module: cst.Module) -> None:
        self.set_metadata(module, build_module_structure(module))
