"""The forward/helper walker: follows each function's control flow with partial paths (if/elif/else, early
return/raise, loops unrolled to two body copies, try/with, match), recording its events into a
``flow.graph.FlowGraph``; also reads the ``__init__`` bindings and the ``nn.Sequential`` containers of a class."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import libcst as cst

from .. import cstwalk
from ..factory_types import FactoryTypes
from ..flow.graph import FlowGraph, FlowSink, FlowState
from ..init_bindings import InitReader, _is_super_init
from ..qualnames import dotted_name
from ..structure import OPAQUE, Def, DLNode, Site, Use, Value
from . import syntax
from .discovery import _find_method, _sequential_base, function_scope
from .state import _Ctx, _Cursor, _Partial
from .syntax import _BINARY_OPS, _is_self_attr, _suite_body, _tensor_method, fallback_condition
from .unchain import _Unchainer

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
# transformers' hub-kernel markers (`@use_kernel_forward_from_hub("rotary_pos_emb")` on `apply_rotary_pos_emb` in
# most transformers 5.x models): the function runs its body unless the user opts in to `kernelize()`, which then
# replaces the whole function, rewritten or not. Named by their last two components: transformers imports them
# relatively (`from ...integrations import use_kernel_forward_from_hub`).
_HUB_KERNEL_MARKERS = tuple(
    f".{module}.{name}"
    for module in ("integrations", "hub_kernels")
    for name in ("use_kernel_forward_from_hub", "use_kernel_func_from_hub")
)


class _ClassWalker(_Unchainer):
    """Builds one class's structure."""

    # ------------------------------------------------------------------ __init__
    def collect_bindings(self, functions: dict[str, cst.FunctionDef], sequential_calls: bool,
                         factories: Optional[FactoryTypes] = None, init_helpers: frozenset[str] = frozenset()) -> None:
        """The ``__init__`` bindings and, with `sequential_calls`, every ``nn.Sequential`` the class's own methods
        build (adopter_codemods/init_bindings.py); `init_helpers`: the methods only ``__init__`` calls
        (`discovery._init_helpers`), read as part of it."""
        init = self.find_method("__init__")
        base = _sequential_base(self.info, self.table) if init is not None else None
        reader = InitReader(self.table, functions, base, sequential_calls, factories)
        reader.init_helpers = {name: self.info.methods[name] for name in init_helpers if name in self.info.methods}
        if init is not None:
            # `super().__init__(...)` first in an __init__ of its own: the local base's __init__ binds layers too, as
            # where the class inherits it (ParlAI's decoder layer binds a norm, its base the Dropout it uses)
            for inherited in self._super_inits(init):
                reader.read_init(inherited)
            reader.containers.clear()  # an inherited __init__'s containers are the base class's findings
            reader.read_init(init)
            if init is not self.info.methods.get("__init__"):
                reader.containers.clear()
        if sequential_calls:
            for name, method in self.info.methods.items():
                if name != "__init__":
                    reader.read_other(method, self.qualify(name), method=True)
        self.bindings = reader.bindings
        self.containers = reader.containers

    def _super_inits(self, init: cst.FunctionDef) -> list[cst.FunctionDef]:
        """The ``__init__``s of local bases that `init` runs first, through ``super().__init__(...)`` as its first
        statement (docstring aside) and so on up the chain, outermost first; [] where a base is not of this file
        or where the bases are several (which one ``super()`` reaches depends on the MRO)."""
        chain: list[cst.FunctionDef] = []
        info, current = self.info, init
        while _calls_super_init_first(current) and len(info.bases) == 1 and info.bases[0] in self.classes:
            info = self.classes[info.bases[0]]
            found = _find_method(info, self.classes, "__init__", set())
            if found is None or found in chain or found is init:
                break
            chain.insert(0, found)
            current = found
            info = next((c for c in self.classes.values() if c.methods.get("__init__") is found), info)
        return chain

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
            resolved = self.table.resolve(expr) or ""
            if (
                name not in _TRANSPARENT_DECORATORS
                and resolved not in _TRANSPARENT_DECORATORS
                and not f".{resolved}".endswith(_HUB_KERNEL_MARKERS)
            ):
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
        self.shadow("", fn)
        try:
            partials = self.walk_block(fn.body, ctx, [_Partial(FlowSink(graph, (0,)), FlowState(graph))])
        finally:
            self.graph = None
        graph.finish(p.events for p in partials)  # type: ignore[misc]
        graph.parameters = frozenset(self.entry_vids[n] for n in _parameter_names(fn) if n in self.entry_vids)
        graph.reached_elsewhere = _reached_elsewhere(fn)
        graph.closure_reads, graph.reads_every_local = _deferred_reads(fn)
        return graph

    def walk_block(self, suite: cst.BaseSuite, ctx: _Ctx, partials: list[_Partial]) -> list[_Partial]:
        body = _suite_body(suite)
        ctx = ctx.within(suite, tuple(body))
        for stmt in body:
            open_partials = [p for p in partials if p.status == "open"]
            if not open_partials:
                break
            closed = [p for p in partials if p.status != "open"]
            partials = self.merged(closed + self.walk_statement(stmt, ctx, open_partials))
        return partials

    def walk_statement(self, stmt: cst.BaseStatement, ctx: _Ctx, partials: list[_Partial]) -> list[_Partial]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                partials = self._flat_map(partials, lambda p, s=small: self.walk_small(s, stmt, ctx, p))
            return partials
        if not self.is_interesting(stmt):
            return self.folded(stmt, ctx, partials)
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
                    p = self.opaque(ctx.at(item, stmt), p)
                out.extend(self.walk_block(stmt.body, ctx, [p]))
            return out
        if isinstance(stmt, cst.Match):
            return self._flat_map(partials, lambda p: self.walk_match(stmt, ctx, p))
        return self.folded(stmt, ctx, partials)

    def folded(self, stmt: cst.BaseStatement, ctx: _Ctx, partials: list[_Partial]) -> list[_Partial]:
        """A compound statement walked as one opaque event (`FlowGraph.folded`)."""
        assert self.graph is not None
        self.graph.folded.add(id(stmt))
        return [self.opaque(ctx.at(stmt, stmt), p) for p in partials]

    def _flat_map(self, partials: list[_Partial], fn) -> list[_Partial]:  # type: ignore[no-untyped-def]
        out: list[_Partial] = []
        for p in partials:
            if p.status != "open":
                out.append(p)
            else:
                out.extend(fn(p))
        return out

    def opaque(self, at: _Cursor, p: _Partial) -> _Partial:
        """A statement (or header) with no DSL content: one use event for what it reads, fresh ids for what it
        writes."""
        names, _ = self.read_names(at.small)
        site = at.site()
        prefix = at.ctx.prefix
        held = tuple(prefix + n if not n.startswith("self.") else n for n in names)
        vids = tuple(self.lookup(p.state, n) for n in held)
        if vids:
            p.events.append(Use(vids, site, held))
        self.redefine(p, self.written_names(at.small), prefix, site)
        return p

    def is_interesting(self, node: cst.CSTNode) -> bool:
        """Whether a compound statement holds a layer/function/helper call worth separate paths."""
        if _has_dsl_call(self, node):
            return True
        return self.split_guarded_ifs and _guards_ops(node)

    def walk_if(self, stmt: cst.If, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        out: list[_Partial] = []
        for p2 in self.walk_expr_stmt(stmt.test, ctx.at(stmt, stmt), p):
            if p2.status != "open":
                out.append(p2)
                continue
            out.extend(self.walk_block(stmt.body, ctx, [self.fork(p2)]))
            orelse = stmt.orelse
            if orelse is None:
                out.append(self.fork(p2))
            elif isinstance(orelse, cst.If):
                # An elif is the single statement of the else block.
                out.extend(self.walk_if(orelse, ctx.within(orelse, (orelse,)), self.fork(p2)))
            else:
                out.extend(self.walk_block(orelse.body, ctx, [self.fork(p2)]))
        return out

    def walk_loop(self, stmt: cst.For | cst.While, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        header = stmt.iter if isinstance(stmt, cst.For) else stmt.test
        p = self.opaque(ctx.at(header, stmt), p)
        if isinstance(stmt, cst.For):
            p = self.opaque(ctx.at(cst.Assign([cst.AssignTarget(stmt.target)], cst.Name("None")), stmt), p)
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
            h = self.opaque(ctx.at(handler.type, stmt), self.fork(p)) if handler.type is not None else self.fork(p)
            out.extend(self.walk_block(handler.body, ctx, [h]))
        if stmt.finalbody is not None:
            final = stmt.finalbody
            out = [q for q in out if q.status != "open"] + self.walk_block(
                final.body, ctx, [q for q in out if q.status == "open"]
            )
        return out

    def walk_match(self, stmt: cst.Match, ctx: _Ctx, p: _Partial) -> list[_Partial]:
        p = self.opaque(ctx.at(stmt.subject, stmt), p)
        out: list[_Partial] = []
        for case in stmt.cases:
            q = self.opaque(ctx.at(case.pattern, stmt), self.fork(p))
            out.extend(self.walk_block(case.body, ctx, [q]))
        return out

    # ------------------------------------------------------------------ simple statements
    def walk_small(
        self, small: cst.BaseSmallStatement, line: cst.SimpleStatementLine, ctx: _Ctx, p: _Partial
    ) -> list[_Partial]:
        out = self._walk_small(small, line, ctx, p)
        volatile = self.volatile.get(ctx.prefix)
        if volatile and self.read_names(small)[1]:  # a call may run a nested function rebinding them
            site = ctx.at(small, line).site()
            for q in out:
                if q.status == "open":
                    self.redefine(q, sorted(volatile), ctx.prefix, site)
        return out

    def _walk_small(
        self, small: cst.BaseSmallStatement, line: cst.SimpleStatementLine, ctx: _Ctx, p: _Partial
    ) -> list[_Partial]:
        at = ctx.at(small, line)
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            if small.value is None:
                return [p]
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            pairs = syntax.element_wise(targets, small.value)
            if pairs is not None:
                assigned = self.assign_elements(pairs, at, p)
            else:
                assigned = self.assign_each(targets, self.walk_expr(small.value, at, p, None, whole=True), at)
            # `y = (m := m.t())` rebinds `m` too (a target of the same name is bound last and keeps its value).
            walrus = self.walrus_names(small.value)
            if walrus:
                target_names = set().union(*map(syntax._written_names, targets))
                walrus = [n for n in walrus if n not in target_names]
            for q in assigned if walrus else ():
                if q.status == "open":
                    self.redefine(q, walrus, ctx.prefix, at.site())
            return assigned
        receiver = syntax.in_place_masked_fill(small.value) if isinstance(small, cst.Expr) else None
        if receiver is not None:
            assert isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
            walked = self.walk_call(small.value, at, p, None, whole=True, in_place=True)
            return self.assign_each([receiver], walked, at)
        op = syntax.in_place_operator(small)
        if op is not None:
            assert isinstance(small, cst.AugAssign)
            # The statement stands for the node (its `expr`): no expression of the code computes `x + y` alone.
            walked = self.walk_op(op, [small.target, small.value], small, at, p, None, whole=True)  # type: ignore[arg-type]
            return self.assign_each([small.target], walked, at)
        if isinstance(small, cst.Return):
            if small.value is None:
                p.status = "return"
                return [p]
            out = []
            for q, val in self.walk_expr(small.value, at, p, None, whole=True):
                if q.status == "open":
                    # A helper's return value flows into its caller, which records the uses; but an opaque one is
                    # computed here (`return t.view(-1)`): what it reads, by name, as forward's return.
                    if not ctx.prefix or (val.kind == "expr" and val.uses):
                        q.events.append(Use(tuple(v for _, v in val.uses), at.site(), tuple(n for n, _ in val.uses)))
                    q.status, q.ret = "return", val
                out.append(q)
            return out
        if isinstance(small, cst.Expr):
            out = []
            for q, val in self.walk_expr(small.value, at, p, None, whole=True):
                if q.status == "open" and val.kind != "var":
                    if val.uses:
                        q.events.append(Use(tuple(v for _, v in val.uses), at.site()))
                    self.redefine(q, sorted(syntax._written_names(small)), ctx.prefix, at.site())
                elif q.status == "open" and not val.text.startswith("%"):
                    # `self._helper(x)` whose inlined `return h` names a variable: the return still reads it.
                    q.events.append(Use((val.vid,), at.site()))
                out.append(q)
            return out
        if isinstance(small, cst.Raise):
            p = self.opaque(at, p)
            p.status = "raise"
            return [p]
        if isinstance(small, cst.Break):
            p.status = "break"
            return [p]
        if isinstance(small, cst.Continue):
            p.status = "continue"
            return [p]
        return [self.opaque(at, p)]

    def assign_each(
        self, targets: Sequence[cst.BaseAssignTargetExpression], walked: list[tuple[_Partial, Value]], at: _Cursor
    ) -> list[_Partial]:
        """The partial paths after assigning each alternative value of an expression to `targets`."""
        out = []
        for q, val in walked:
            if q.status == "open":
                self.assign(targets, val, at, q)
            out.append(q)
        return out

    def assign_elements(
        self, pairs: list[tuple[cst.Name, cst.BaseExpression]], at: _Cursor, p: _Partial
    ) -> list[_Partial]:
        """`q, k, v = self.q(x), self.k(x), self.v(x)`: every element evaluated first (as Python does), then each
        name bound to its own element's value, as three statements would (the walk of the display as one opaque
        value gave every name a value of its own, so `q` was not the projection's output)."""
        out = []
        for q, vals in self.walk_values([v for _, v in pairs], at, p, None):
            if q.status == "open":
                for (name, _), val in zip(pairs, vals):
                    self.assign([name], val, at, q)
            out.append(q)
        return out

    def walk_expr_stmt(self, expr: cst.BaseExpression, at: _Cursor, p: _Partial) -> list[_Partial]:
        """Evaluate an expression for its effects (an `if` test): DSL nodes plus a use of what it reads, and a new
        value for each name a walrus in it binds (`if (m := f(x)) is not None:`)."""
        out = []
        walrus = self.walrus_names(expr)
        for q, val in self.walk_expr(expr, at, p, None, whole=False):
            if q.status == "open" and val.uses:
                q.events.append(Use(tuple(v for _, v in val.uses), at.site()))
            if q.status == "open":
                self.redefine(q, walrus, at.ctx.prefix, at.site())
            out.append(q)
        return out

    def assign(
        self,
        targets: Sequence[cst.BaseAssignTargetExpression],
        val: Value,
        at: _Cursor,
        p: _Partial,
    ) -> None:
        site, ctx = at.site(), at.ctx
        for target in targets:
            name = self.target_name(target, ctx)
            if name is not None and val.kind == "var":
                if not val.text.startswith("%"):
                    p.events.append(Use((val.vid,), site))  # `b = a` reads `a`: its definition must stay
                p.state[name] = val.vid  # alias (or the DSL node's output): same value id
                p.events.append(Def(name, val.vid, site))
                continue
            if val.kind == "expr" and val.uses:
                p.events.append(Use(tuple(v for _, v in val.uses), site, tuple(n for n, _ in val.uses)))
            elif val.kind == "var" and not val.text.startswith("%"):
                # `a, b = x` reads `x` (unpacking it): its definition must stay
                p.events.append(Use((val.vid,), site, tuple(n for n, _ in val.uses)))
            if name is not None:
                vid = p.state[name] = self.new_vid()
                p.events.append(Def(name, vid, site))
                continue
            reads, _ = syntax._read_names(target)
            held = tuple(self.scoped(n, ctx) for n in reads)
            vids = tuple(self.lookup(p.state, n) for n in held)
            if vids:
                p.events.append(Use(vids, site, held))
            for written in sorted(syntax._written_names(cst.Assign([cst.AssignTarget(target)], cst.Name("None")))):
                scoped = self.scoped(written, ctx)
                vid = p.state[scoped] = self.new_vid()
                p.events.append(Def(scoped, vid, site))


def _reached_elsewhere(fn: cst.FunctionDef) -> bool:
    """`FlowGraph.reached_elsewhere` for `fn`: a `global` declaration, a nested function or lambda changing something
    in place, or a store into (or an in-place call on) the object of a name the function does not bind (a global's:
    `_CACHE["k"] = k`)."""
    local, _ = function_scope(fn)
    for node in cstwalk.walk(fn.body):
        kind = type(node)
        if kind is cst.Global or kind is cst.Nonlocal:
            return True
        if (kind is cst.FunctionDef or kind is cst.Lambda) and (
            syntax.in_place_targets(node) or syntax.calls_in_place(node)
        ):
            return True
        if isinstance(node, cst.BaseSmallStatement):
            if {name.split(".")[0] for name in syntax.in_place_targets(node)} - local:
                return True
    return False


_NESTED_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.GeneratorExp)
# builtins reading the calling function's locals by name; `vars()` and `dir()` only without an argument
_READ_EVERY_LOCAL = frozenset({"locals", "eval", "exec", "vars", "dir"})


def _deferred_reads(fn: cst.FunctionDef) -> tuple[dict[str, cst.CSTNode], Optional[cst.CSTNode]]:
    """`FlowGraph.closure_reads` and `FlowGraph.reads_every_local` for `fn`."""
    reads: dict[str, cst.CSTNode] = {}
    every: Optional[cst.CSTNode] = None
    # a generator handed straight to a call (`tuple(v for v in [h, a])`) is consumed there, as a comprehension is;
    # the walk is pre-order, so the call comes before it
    consumed: set[int] = set()
    for node in cstwalk.walk(fn.body):
        if type(node) is cst.Call:
            consumed.update(id(arg.value) for arg in node.args if type(arg.value) is cst.GeneratorExp)  # type: ignore[attr-defined]
        if isinstance(node, _NESTED_SCOPES) and id(node) not in consumed:
            attributes = {id(sub.attr) for sub in cstwalk.walk(node) if type(sub) is cst.Attribute}  # type: ignore[attr-defined]
            for sub in cstwalk.walk(node):
                if type(sub) is cst.Name and id(sub) not in attributes:
                    reads.setdefault(sub.value, node)  # type: ignore[attr-defined]
        elif (
            every is None and type(node) is cst.Call and type(node.func) is cst.Name  # type: ignore[attr-defined]
            and node.func.value in _READ_EVERY_LOCAL  # type: ignore[attr-defined]
            and not (node.func.value in ("vars", "dir") and node.args)  # type: ignore[attr-defined]
        ):
            every = node
    return reads, every


def _parameter_names(fn: cst.FunctionDef) -> list[str]:
    """The names of a function's parameters, but a method's ``self``. Whatever their annotation or default, a
    caller may pass a tensor or an object holding one (a cache holding the key it also passes)."""
    params = fn.params
    star = [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    every = [*params.posonly_params, *params.params, *params.kwonly_params, *star]
    return [p.name.value for p in every if p.name.value != "self"]


def _guards_ops(node: cst.CSTNode) -> bool:
    """An ``if`` with a test without calls (`fallback_condition`: names, ``self.<attr>`` flags, comparisons; or a
    helper's ``exists(x)``, which ADP010's absorbing reads as ``x is not None`` when the helper is exactly that), no
    else, that updates a name by a tensor op on it, such as ``if head_mask is not None: probs = probs * head_mask``
    (or masks it, also in place: `_masks_itself`, ``scores.masked_fill_(m, float("-inf"))``, ``scores += mask``): walked as separate
    paths, so a rule can tell the paths that run it from the others (ADP010's fallback plan); other ``if``s without
    calls are still folded."""
    if type(node) is not cst.If or node.orelse is not None:
        return False
    if not (fallback_condition(node.test) or _names_call(node.test)):  # type: ignore[attr-defined]
        return False
    for line in _suite_body(node.body):  # type: ignore[attr-defined]
        if type(line) is not cst.SimpleStatementLine:
            return False
        for small in line.body:  # type: ignore[attr-defined]
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                name, value = small.targets[0].target.value, small.value
                if type(value) is cst.BinaryOperation and type(value.operator) in _BINARY_OPS and any(
                    _reshaped_name(side) == name for side in (value.left, value.right)
                ):
                    return True
                if _reshaped_name(value) == name and type(value) is not cst.Name:  # `attn = attn.view(-1, h, n, n)`
                    return True
                if _masks_itself(value, name):
                    return True
            elif type(small) is cst.Expr and syntax.in_place_masked_fill(small.value) is not None:  # type: ignore[attr-defined]
                return True
            elif syntax.in_place_operator(small) is not None:  # `attn += attn_mask`
                return True
    return False


_RESHAPES = frozenset(("view", "reshape", "unflatten", "flatten"))


def _reshaped_name(node: cst.BaseExpression) -> Optional[str]:
    """The name `node` reads, through ``.view``/``.reshape`` calls on it (Swin's windowed mask,
    ``attn.view(-1, nw, h, n, n) + mask``): the value it updates."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _RESHAPES:  # type: ignore[attr-defined]
        node = node.func.value  # type: ignore[attr-defined]
    return node.value if type(node) is cst.Name else None  # type: ignore[attr-defined]


def _masks_itself(value: cst.BaseExpression, name: str) -> bool:
    """``name.masked_fill(...)``: the masking step of ADP010's pattern, as ``name + mask`` is its additive one (the
    vit idiom ``if mask is not None: dots = dots.masked_fill(mask == 0, float('-inf'))``, whose calls are no DSL
    calls `_has_dsl_call` counts)."""
    if type(value) is not cst.Call or type(value.func) is not cst.Attribute:  # type: ignore[attr-defined]
        return False
    func = value.func  # type: ignore[attr-defined]
    return func.attr.value == "masked_fill" and type(func.value) is cst.Name and func.value.value == name


def _names_call(test: cst.BaseExpression) -> bool:
    """``f(x)``: a plain function of one plain name."""
    return (
        type(test) is cst.Call and type(test.func) is cst.Name and len(test.args) == 1  # type: ignore[attr-defined]
        and test.args[0].keyword is None and not test.args[0].star and type(test.args[0].value) is cst.Name  # type: ignore[attr-defined]
    )


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
        elif walker.table.resolve(func) is not None or _tensor_method(node) == "softmax":  # type: ignore[arg-type]
            return True  # `attn = sim.softmax(dim=-1)` in one arm: a whole pattern (ADP004), as `torch.softmax` is
    return False


def _calls_super_init_first(fn: cst.FunctionDef) -> bool:
    """Whether `fn`'s first statement (after a docstring) is ``super().__init__(...)``."""
    for statement in _suite_body(fn.body):
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        small = statement.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
            continue  # the docstring
        return isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and _is_super_init(small.value)
    return False
