"""Expression unchaining: nested calls and tensor ops become DSL nodes in evaluation order (temporaries ``%n``),
``nn.Sequential`` calls one layer node per element, and calls to ``self`` helper methods are inlined (parameters bound
as aliases, returns joined; a helper already being inlined is not inlined again: recursion-safe)."""

from __future__ import annotations

import dataclasses

from abc import ABC, abstractmethod
from typing import Optional, Sequence

import libcst as cst

from .. import cstwalk
from ..qualnames import canonical_torch_name
from ..structure import OPAQUE, Def, DLNode, LayerBinding, NodeKind, Use, Value
from .state import _Ctx, _Cursor, _Partial, _WalkState
from .syntax import (
    _BINARY_OPS,
    _const_text,
    _is_self_attr,
    _sub_expressions,
    _suite_body,
    _tensor_method,
    built_softmax_dim,
)


class _Unchainer(_WalkState, ABC):
    """The expression half of the walk; the statement half (walk.py) provides `walk_block`, which inlining needs."""

    @abstractmethod
    def walk_block(self, suite: cst.BaseSuite, ctx: _Ctx, partials: list[_Partial]) -> list[_Partial]:
        """The partial paths after a block of statements."""

    def walk_expr(
        self,
        expr: cst.BaseExpression,
        at: _Cursor,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        """Unchain an expression: DSL nodes in evaluation order; returns (partial, value) alternatives."""
        const = _const_text(expr)
        if const is not None:
            return [(p, Value("const", const, 0, expr, ()))]
        if isinstance(expr, cst.Name):
            name = at.ctx.prefix + expr.value
            vid = self.lookup(p.state, name)
            return [(p, Value("var", expr.value, vid, expr, ((name, vid),)))]
        attr = _is_self_attr(expr)
        if attr is not None and attr not in self.bindings and "." not in attr and self.find_method(attr) is not None:
            # a property (or a bound method) of the class: reading it runs code, as a call does
            name = "self." + attr
            vid = self.lookup(p.state, name)
            return [(p, Value("expr", "", self.new_vid(), expr, ((name, vid),), pure=False))]
        if attr is not None:
            name = "self." + attr
            vid = self.lookup(p.state, name)
            return [(p, Value("var", name, vid, expr, ((name, vid),)))]
        if isinstance(expr, cst.Call):
            return self.walk_call(expr, at, p, parent, whole)
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _BINARY_OPS:
            return self.walk_op(_BINARY_OPS[type(expr.operator)], [expr.left, expr.right], expr, at, p, parent, whole)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            return self.walk_op("neg", [expr.expression], expr, at, p, parent, whole)
        return self.walk_opaque_expr(expr, at, p, parent)

    def walk_opaque_expr(
        self,
        expr: cst.BaseExpression,
        at: _Cursor,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
    ) -> list[tuple[_Partial, Value]]:
        """An expression that is no DSL node: still unchain DSL nodes nested in it, except where they may not run
        (lambdas, comprehensions, conditional expressions, `and`/`or`): those are read as a whole."""
        children = _sub_expressions(expr)
        alternatives = [(p, [])] if children is None else self.walk_values(children, at, p, parent)
        names, has_call = self.read_names(expr)
        out = []
        for q, vals in alternatives:
            if children is None:
                uses = {(self.scoped(n, at.ctx), self.lookup(q.state, self.scoped(n, at.ctx))) for n in names}
            else:
                uses = {u for v in vals for u in v.uses}  # what the parts read (a DSL node's result for nodes)
            out.append((q, Value("expr", "", self.new_vid(), expr, tuple(sorted(uses)), pure=not has_call)))
        return out

    def walk_op(
        self,
        op: str,
        operands: list[cst.BaseExpression],
        expr: cst.BaseExpression,
        at: _Cursor,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        out = []
        for q, vals in self.walk_values(operands, at, p, expr):
            if q.status != "open":
                out.append((q, Value("const", "None", 0, expr, ())))
                continue
            out.append((q, self.emit_node("op", op, None, (), vals, (), None, expr, parent, whole, at, q)))
        return out

    def walk_values(
        self,
        exprs: Sequence[cst.BaseExpression],
        at: _Cursor,
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
                for q2, v in self.walk_expr(e, at, q, parent, whole=False):
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
        at: _Cursor,
        p: _Partial,
    ) -> Value:
        temp = f"%{next(self._temp)}"
        vid = self.new_vid()  # read through the node's value, never by name: not in the state
        node = DLNode(kind, qualname, layer, bindings, tuple(args), kwargs, call, vid, expr, parent, whole, at.site())
        p.events.append(node)
        p.events.graph.states[id(node)] = dict(p.state)
        return Value("var", temp, vid, expr, ((temp, vid),))

    def walk_call(
        self,
        call: cst.Call,
        at: _Cursor,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
        in_place: bool = False,
    ) -> list[tuple[_Partial, Value]]:
        """`in_place`: the call is a statement ``x.masked_fill_(m, v)``, walked as the ``x.masked_fill(m, v)`` whose
        result the caller assigns to ``x`` (syntax.in_place_masked_fill)."""
        if any(a.star for a in call.args):
            return self.walk_opaque_expr(call, at, p, parent)
        attr = _is_self_attr(call.func)
        if attr is not None and attr not in self.bindings and not self.on_its_own:
            method = self.find_method(attr)
            if method is not None and attr not in at.ctx.helper_stack and _inlinable(method):
                return self.inline(method, call, at, p, parent)
        qualname: Optional[str] = None
        bindings: tuple[LayerBinding, ...] = ()
        kind: NodeKind = "func"
        if attr is not None and attr in self.bindings:
            kind = "layer"
            bindings = tuple(self.bindings[attr])
            types = {b.qualname for b in bindings}
            qualname = types.pop() if len(types) == 1 else None
        elif attr is None:
            qualname = self.resolve_import(call.func, at.ctx)
            if qualname is not None:
                qualname = canonical_torch_name(qualname)
        positional = [a.value for a in call.args if a.keyword is None]
        keyword = [a for a in call.args if a.keyword is not None]
        tensor_method = _tensor_method(call, in_place) if kind == "func" and qualname is None else None
        if tensor_method is not None:
            qualname, positional = "torch.Tensor." + tensor_method, [call.func.value, *positional]  # type: ignore[attr-defined]
        dim = built_softmax_dim(call, self.table) if kind == "func" and qualname is None else None
        if dim is not None:
            qualname, keyword = "torch.nn.functional.softmax", [dim]
        if kind == "func" and qualname is None:
            return self.walk_opaque_expr(call, at, p, parent)
        if kind == "layer" and len(bindings) == 1 and bindings[0].elements and _fixed_order(bindings[0]):
            return self.walk_sequential(bindings[0], call, at, p, parent, whole)
        out = []
        for q, vals in self.walk_values(positional + [a.value for a in keyword], at, p, call):
            if q.status != "open":
                out.append((q, Value("const", "None", 0, call, ())))
                continue
            kwargs = tuple((a.keyword.value, v) for a, v in zip(keyword, vals[len(positional):]))  # type: ignore[union-attr]
            layer = "self." + attr if attr is not None else None
            value = self.emit_node(
                kind, qualname, layer, bindings, vals[: len(positional)], kwargs, call, call, parent, whole, at, q
            )
            out.append((q, value))
        return out

    def walk_sequential(
        self,
        binding: LayerBinding,
        call: cst.Call,
        at: _Cursor,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
        whole: bool,
    ) -> list[tuple[_Partial, Value]]:
        """``self.block(x)`` on an ``nn.Sequential``: one layer node per element, in order, without a call of their
        own (all have the container's call as their expression); the last one's value is the call's, so it is the
        whole statement where the call is."""
        if len(call.args) != 1 or call.args[0].keyword is not None:
            return self.walk_opaque_expr(call, at, p, parent)
        out = []
        last = len(binding.elements) - 1
        for q, val in self.walk_expr(call.args[0].value, at, p, call, whole=False):
            if q.status != "open":
                out.append((q, val))
                continue
            for i, element in enumerate(binding.elements):
                layer = "self." + element.attr
                val = self.emit_node(
                    "layer", element.qualname, layer, (element,), [val], (), None, call, parent, whole and i == last, at, q
                )
            out.append((q, val))
        return out

    def inline(
        self,
        method: cst.FunctionDef,
        call: cst.Call,
        at: _Cursor,
        p: _Partial,
        parent: Optional[cst.BaseExpression],
    ) -> list[tuple[_Partial, Value]]:
        """Inline a helper method: bind parameters as aliases, walk its paths, continue with its return value."""
        params = [prm for prm in method.params.params][1:]  # drop `self`
        kwonly = list(method.params.kwonly_params)
        positional = [a for a in call.args if a.keyword is None]
        keyword = {a.keyword.value: a for a in call.args if a.keyword is not None}  # type: ignore[union-attr]
        if len(positional) > len(params):
            return self.walk_opaque_expr(call, at, p, parent)
        prefix = f"{at.ctx.prefix}{method.name.value}@{next(self._inline)}::"
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
                return self.walk_opaque_expr(call, at, p, parent)
        if set(keyword) - {n for n, _ in bound}:
            return self.walk_opaque_expr(call, at, p, parent)
        self.inlined.add(method.name.value)
        self.shadow(prefix, method)
        helper_ctx = _Ctx(
            self.qualify(method.name.value),
            prefix,
            at.ctx.inline_stack + (at.site(),),
            at.ctx.loop_copy,
            method,
            tuple(_suite_body(method.body)),
            at.ctx.helper_stack + (method.name.value,),
        )
        out: list[tuple[_Partial, Value]] = []
        for q, vals in self.walk_values([e for _, e in bound], at, p, call):
            if q.status != "open":
                out.append((q, Value("const", "None", 0, call, ())))
                continue
            site = at.site()
            for (name, _), val in zip(bound, vals):
                if val.kind == "var" and not val.text.startswith("%"):
                    q.events.append(Use((val.vid,), site))  # the call reads its argument, used in the helper or not
                scoped = prefix + name
                vid = q.state[scoped] = val.vid if val.kind == "var" else self.new_vid()
                q.events.append(Def(scoped, vid, site))
            for r in self.walk_block(method.body, helper_ctx, [q]):
                if r.status == "return" and r.ret is not None:
                    ret = r.ret
                    if ret.kind == "var" and ret.text.startswith("%"):
                        # A DSL node's result, written in the caller as the helper's call (kornia's RT-DETR:
                        # `self.dropout4(self._ffn(tgt))`): what a fused call passing it writes again.
                        ret = dataclasses.replace(ret, expr=call)
                    r.status, r.ret = "open", None
                    out.append((r, ret))
                elif r.status in ("open", "return"):
                    r.status = "open"
                    out.append((r, self.unfollowed_result(method, call, at, r)))
                else:
                    out.append((r, Value("const", "None", 0, call, ())))
        return self.joined_returns(out, call)

    def unfollowed_result(self, method: cst.FunctionDef, call: cst.Call, at: _Cursor, p: _Partial) -> Value:
        """What a helper returns on a path whose walk ended without a return: None, unless a `return <value>` sits in
        a statement the walk folded (LeViT's cached `get_attention_biases`). Then the result is unknown: the call as
        an opaque expression, a value of its own (two such calls are not the same value)."""
        body = cstwalk.walk(method.body, lambda n: type(n) is not cst.FunctionDef and type(n) is not cst.ClassDef)
        if not any(type(n) is cst.Return and n.value is not None for n in body):  # type: ignore[attr-defined]
            return Value("const", "None", 0, call, ())
        names, _ = self.read_names(call)
        uses = {(self.scoped(n, at.ctx), self.lookup(p.state, self.scoped(n, at.ctx))) for n in names}
        return Value("expr", "", self.new_vid(), call, tuple(sorted(uses)), pure=False)

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
