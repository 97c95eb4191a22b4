"""Which values of a function may share memory, and which statements change such a value in place.

A fused call reads its inputs where it goes: later than the statements it replaces read them (plan "delete"), or
earlier than the nodes it replaces (plan "hoist"). Code in between may change such an input in place without naming
it: through an alias or a view of it (``z = x.view(-1); z += 1``), an object holding it (``zs = [x]; zs[0] += 1``),
or the tensor it is a view of (``x = h.transpose(1, 2)``, then ``h[0] = 0``). `sharing_memory` finds those values
on a function's graph, `changes_in_place` whether a statement changes one of them.

A value may be, view or hold the values it is computed from, one step at a time (`_derivations`): a DSL node's
result its first argument (the receiver of a tensor method, the input of a layer), unless the node always makes a
new object; a value a statement computes outside DSL nodes the names its expression may return or hold
(`_alias_roots`: a chain of methods, indexing and calls down to a name, the elements of a display, both sides of
``+``/``*``, both arms of a conditional; not metadata such as ``x.shape`` or ``x.size(0)``); a phi its operands; a
name changed in place (``z += 1``) what it held; the function's parameters one another (a caller may pass a tensor and
a view of it). Two values may share memory when both derive from one value (a
view of a view, a tensor and the list holding it), not when only something derived from both does (``x + r`` or
``[x, r]`` does not make ``r`` share memory with ``x``); a loop variable may be what the iterable holds. A compound
statement the walk reads as one event (no layer call inside) changes what it reads wherever its body changes
anything in place. Not followed: what code of unknown type does with arguments other than its first.
"""

from __future__ import annotations

import weakref
from typing import Callable, Iterable, Optional

import libcst as cst

from .. import cstwalk
from ..provider.syntax import (
    METADATA_ATTRIBUTES,
    _is_false,
    _is_self_attr,
    calls_in_place,
    compound_header,
    in_place_targets,
    is_metadata_call,
    passes_inplace,
)
from ..structure import Def, DLNode, Event, LayerBinding, Use, Value
from .graph import FlowGraph, read_vids

# Nodes whose result never shares memory with what they read, whatever the operands: a new tensor (or number).
# Not `+` and `*` (they also concatenate and repeat tuples and lists, which then hold the operands' objects), views,
# `contiguous`/`to` (which may return their input), dropout (its input itself in eval mode), layers with an
# `inplace` option, or code of unknown type.
_FRESH_OPERATORS = frozenset({"-", "/", "@", "neg"})
FRESH_RESULTS = frozenset({
    "torch.nn.Linear", "torch.nn.Bilinear", "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d",
    "torch.nn.ConvTranspose1d", "torch.nn.ConvTranspose2d", "torch.nn.ConvTranspose3d", "torch.nn.Embedding",
    "torch.nn.LayerNorm", "torch.nn.GroupNorm", "torch.nn.RMSNorm", "torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d",
    "torch.nn.BatchNorm3d", "torch.nn.Softmax", "torch.nn.GELU", "torch.nn.Tanh", "torch.nn.Sigmoid",
    "torch.matmul", "torch.bmm", "torch.baddbmm", "torch.einsum", "torch.cat", "torch.stack", "torch.where",
    "torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax", "torch.Tensor.masked_fill",
    "torch.nn.functional.linear", "torch.nn.functional.gelu", "torch.nn.functional.layer_norm", "torch.rsqrt",
    "torch.nn.functional.scaled_dot_product_attention", "torch.tanh", "torch.exp", "torch.sigmoid", "math.sqrt",
    # factories: new storage, whatever tensor they take a shape, dtype or device from (`torch.zeros(x.shape[0], d)`)
    "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.zeros_like", "torch.ones_like",
    "torch.empty_like", "torch.full_like", "torch.rand", "torch.randn", "torch.randint", "torch.rand_like",
    "torch.randn_like", "torch.arange", "torch.eye",
})
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)

# Per graph: value id -> the ids it is computed from (it may be, view or hold them), and the reverse.
_derived: "weakref.WeakKeyDictionary[FlowGraph, tuple[dict[int, set[int]], dict[int, set[int]]]]" = (
    weakref.WeakKeyDictionary()
)


def sharing_memory(graph: FlowGraph, vids: Iterable[int]) -> set[int]:
    """The ids and every id that may share memory with one of them (module docstring): whatever derives from what
    they derive from. Changing one of those objects in place may change what one of `vids` holds."""
    derived = _derived.get(graph)
    if derived is None:
        derived = _derived[graph] = _derivations(graph)
    sources, results = derived
    return _closure(_closure(set(vids), sources), results)


def _closure(start: set[int], edges: dict[int, set[int]]) -> set[int]:
    out = set(start)
    todo = list(out)
    while todo:
        for other in edges.get(todo.pop(), ()):
            if other not in out:
                out.add(other)
                todo.append(other)
    return out


def changes_in_place(graph: FlowGraph, event: Event, vids: set[int]) -> bool:
    """Whether the statement of `event` may change one of `vids` in place: it stores into or augments an object a
    name held before it (``z += 1``, ``z[0] = 0``, ``z.data = w``, ``del z[0]``, ``z.add_(1)``: judged by the value
    the name held), or it makes an in-place call (``f(z, inplace=True)``, ``torch.nn.init.zeros_(z)``) and reads one
    of them."""
    small = event.site.small
    if isinstance(event, DLNode) and event.kind == "layer" and _layer_in_place(event) and read_vids(event) & vids:
        return True
    positions = graph.by_statement.get(id(small), ())
    if id(small) in graph.folded:
        # One event for a whole compound statement: what its body changes is not tied to the values it reads (a
        # loop variable takes elements of a container), so any change in place there counts.
        # A store rebinding an attribute of the module (`self.attention_map = probs`) changes no tensor.
        changed = in_place_targets(small) - _module_attributes_rebound(small)
        return (bool(changed) or calls_in_place(small)) and any(
            read_vids(graph.events[pos]) & vids for pos in positions
        )
    # Another compound statement's own event is its header (an `if` test, a loop's iterable): its body has events.
    scanned = small if isinstance(small, cst.BaseSmallStatement) else compound_header(small)
    if scanned is None:
        return False
    targets = in_place_targets(scanned)
    scope = event.site.scope
    scoped = {name if name.startswith("self.") else scope + name for name in targets}
    for pos in positions:
        other = graph.events[pos]
        if isinstance(other, Def) and other.name in scoped and graph.previous.get((other.name, other.vid)) in vids:
            return True
    if not calls_in_place(scanned):
        return False
    return any(read_vids(graph.events[pos]) & vids for pos in positions)


def _module_attributes_rebound(small: cst.CSTNode) -> set[str]:
    """``self.<attr>`` for each plain ``self.<attr> = ...`` store in `small` (not ``.data``/``.grad``, which change a
    tensor), unless the statement also changes that attribute's object otherwise (``self.x += 1``, ``self.x[0] = 1``)."""
    plain: set[str] = set()
    other: set[str] = set()
    for node in cstwalk.walk(small):
        if type(node) is cst.AssignTarget or type(node) is cst.AnnAssign:
            target = node.target  # type: ignore[attr-defined]
            attr = _is_self_attr(target) if type(target) is cst.Attribute else None
            if attr is not None and "." not in attr and attr not in ("data", "grad"):
                plain.add("self." + attr)
        elif type(node) is cst.AugAssign or type(node) is cst.Del:
            other |= in_place_targets(node)
    return plain - other


def _layer_in_place(node: DLNode) -> bool:
    return any(built_in_place(binding) for binding in node.bindings)


# Layers whose constructor takes `inplace`, and its position (`nn.ReLU(inplace)`, `nn.LeakyReLU(0.2, flag)`).
_INPLACE_POSITION = {
    **dict.fromkeys(("ReLU", "ReLU6", "SiLU", "Hardswish", "Hardsigmoid", "Mish", "SELU"), 0),
    **dict.fromkeys(("ELU", "CELU", "LeakyReLU", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                     "FeatureAlphaDropout"), 1),
    **dict.fromkeys(("Hardtanh", "RReLU", "Threshold"), 2),
}


def built_in_place(binding: LayerBinding) -> bool:
    """A layer built with ``inplace=`` other than False, with a positional ``True`` (``nn.ReLU(True)``), or, for a
    type taking ``inplace``, with anything but False at its position or with ``*args``/``**kwargs``
    (``nn.ReLU(inplace)``, ``nn.SiLU(**act_kwargs)``: it may be set)."""
    if passes_inplace(binding.args) or any(
        a.keyword is None and type(a.value) is cst.Name and a.value.value == "True" for a in binding.args
    ):
        return True
    qualname = binding.qualname or ""
    position = _INPLACE_POSITION.get(qualname[len("torch.nn."):]) if qualname.startswith("torch.nn.") else None
    if position is None:
        return False
    positional = [a for a in binding.args if a.keyword is None and a.star == ""]
    return any(a.star != "" for a in binding.args) or (
        len(positional) > position and not _is_false(positional[position].value)
    )


def _derivations(graph: FlowGraph) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """Value id -> the ids it may be, view or hold, one step (module docstring); and value id -> the ids that may
    be, view or hold it."""
    sources: dict[int, set[int]] = {}
    results: dict[int, set[int]] = {}

    def link(result: int, source: int) -> None:
        if result != source:
            sources.setdefault(result, set()).add(source)
            results.setdefault(source, set()).add(result)

    for positions in graph.by_statement.values():
        events = [graph.events[pos] for pos in positions]
        node_outs: dict[int, int] = {}
        named: dict[str, int] = {}  # scoped name -> the id it holds where the statement reads it
        reads: set[int] = set()
        for event in events:
            if isinstance(event, DLNode):
                node_outs[id(event.expr)] = event.out
                if not fresh(event):
                    for value in _returnable(event):
                        if value.kind == "var":
                            link(event.out, value.vid)
                        for _, vid in value.uses:
                            link(event.out, vid)
            elif isinstance(event, Use):
                reads.update(event.vids)
                named.update(zip(event.names, event.vids))
        for event in events:
            if not isinstance(event, Def) or event.vid in reads or event.vid in node_outs.values():
                continue  # an alias (`b = a`) or a node's result: no new value here
            line = event.site.line
            held = named
            if type(line) is cst.For and _is_loop_target(event.site.small, line):
                # the loop variable takes the elements of the iterable, read by the loop header's own event
                expr: Optional[cst.BaseExpression] = line.iter
                header = [graph.events[pos] for pos in graph.by_statement.get(id(line.iter), ())]
                held = {n: v for e in header if isinstance(e, Use) for n, v in zip(e.names, e.vids)}
            else:
                expr = _assigned(event.site.small)
            if expr is None:  # `z.add_(1)`, a `with ... as`, a handler's name: what the statement read
                for vid in reads | set(node_outs.values()):
                    link(event.vid, vid)
                continue
            names, outs = _alias_roots(expr, node_outs)
            for out in outs:
                link(event.vid, out)
            scope = event.site.scope
            for name in names:
                source = held.get(name if name.startswith("self.") else scope + name)
                if source is not None:
                    link(event.vid, source)
            _link_changed(graph, event, link)
    for phi, operands in graph.phis.items():
        for vid in operands:
            link(phi, vid)
    # The caller may pass a tensor and a view of it (`k` a view of a KV cache also passed, `cache.zero_()`): the
    # parameters derive from one unknown object, so each may share memory with every other.
    for vid in graph.parameters:
        link(vid, _CALLER)
    return sources, results


_CALLER = -1  # no value id: what the parameters may all be views of


def _is_loop_target(small: cst.CSTNode, loop: cst.For) -> bool:
    """The walk binds a loop's target by a statement of its own, ``<target> = None`` (`provider.walk.walk_loop`)."""
    return type(small) is cst.Assign and small.targets[0].target is loop.target  # type: ignore[attr-defined]


def _link_changed(graph: FlowGraph, event: Def, link: Callable[[int, int], None]) -> None:
    """A name whose object the statement changes in place (``z += y``, ``z[0] = y``) still holds that object: its
    new value derives from the one it held."""
    small = event.site.small
    name = event.name if event.name.startswith("self.") else event.name[len(event.site.scope):]
    if name in in_place_targets(small):
        before = graph.previous.get((event.name, event.vid))
        if before is not None:
            link(event.vid, before)


def fresh(node: DLNode) -> bool:
    """Whether the node's result is always a new object (`_FRESH_OPERATORS`, `FRESH_RESULTS`)."""
    if node.kind == "op":
        return node.qualname in _FRESH_OPERATORS
    return node.qualname in FRESH_RESULTS


def _returnable(node: DLNode) -> list[Value]:
    """The operands a node of unknown result may return or view: both of an operator's, else the first argument
    (a method's receiver; the first keyword argument of a call without positional ones)."""
    if node.kind == "op":
        return list(node.args)
    if node.args:
        return [node.args[0]]
    return [node.kwargs[0][1]] if node.kwargs else []


def _assigned(small: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The expression whose value a statement assigns (for ``z += y``, ``y``: the target's link is added apart)."""
    if type(small) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
        return small.value  # type: ignore[attr-defined,no-any-return]
    return None


def _alias_roots(expr: cst.BaseExpression, node_outs: dict[int, int]) -> tuple[set[str], set[int]]:
    """The names (``self.<attr>`` for attributes of self) and DSL node results whose object `expr` may be, be a view
    of, or hold."""
    names: set[str] = set()
    outs: set[int] = set()
    todo = [expr]
    while todo:
        node = todo.pop()
        out = node_outs.get(id(node))
        if out is not None:
            outs.add(out)
            continue
        kind = type(node)
        if kind is cst.Name:
            names.add(node.value)  # type: ignore[attr-defined]
        elif kind is cst.Attribute:
            attr = _is_self_attr(node)  # type: ignore[arg-type]
            if attr is not None:
                names.add("self." + attr)
            elif node.attr.value not in METADATA_ATTRIBUTES:  # type: ignore[attr-defined]
                todo.append(node.value)  # type: ignore[attr-defined]
        elif kind is cst.Subscript:
            todo.append(node.value)  # type: ignore[attr-defined]
        elif kind is cst.Call:
            if is_metadata_call(node):  # type: ignore[arg-type]
                continue
            func = node.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute and _is_self_attr(func) is None:
                todo.append(func.value)  # a method: its receiver, or a view of it (`contiguous()`, `view(...)`)
            else:  # a function, a layer, a helper: its first argument
                args = node.args  # type: ignore[attr-defined]
                positional = [a.value for a in args if a.keyword is None]
                todo.extend(positional[:1] or [a.value for a in args[:1]])
        elif kind in (cst.Tuple, cst.List, cst.Set):
            todo.extend(element.value for element in node.elements)  # type: ignore[attr-defined]
        elif kind is cst.Dict:
            todo.extend(element.value for element in node.elements)  # type: ignore[attr-defined]
        elif kind is cst.BinaryOperation and type(node.operator) in (cst.Add, cst.Multiply):  # type: ignore[attr-defined]
            todo.extend((node.left, node.right))  # type: ignore[attr-defined]
        elif kind is cst.BooleanOperation:
            todo.extend((node.left, node.right))  # type: ignore[attr-defined]
        elif kind is cst.IfExp:
            todo.extend((node.body, node.orelse))  # type: ignore[attr-defined]
        elif kind is cst.NamedExpr or kind is cst.Await:
            todo.append(node.value)  # type: ignore[attr-defined]
        elif kind in _COMPREHENSIONS:
            part: Optional[cst.CompFor] = node.for_in  # type: ignore[attr-defined]
            while part is not None:
                todo.append(part.iter)  # the elements it takes
                part = part.inner_for_in
    return names, outs
