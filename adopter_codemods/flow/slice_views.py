"""Whether code calls ``.view`` on a packed projection's output where only a contiguous tensor allows it.

ADP009's kernel returns q, k and v as column slices of one ``[..., dq + dk + dv]`` buffer (``split`` along the last
dim). Their leading dims are laid out as a contiguous tensor's are, their last dim is not: a ``.view`` of such a slice
works when the new shape ends with dims whose product is the last dim (``view(B, S, heads, head_dim)``) and raises
when it merges the last dim with an earlier one (``view(B, -1)``, ``view(B, -1, head_dim)``), which works on the
three Linears' own contiguous outputs: on CPU (three Linears) the rewrite would run, on CUDA (one GEMM) it would raise.

`first_unproven_view` follows the names that may hold an output, or a view of one (the methods in `_SLICE_METHODS`,
indexing, what an object holds, what helpers, layer classes and functions of the file may return by their bodies,
the first argument of other code; not torch's computing functions or ``contiguous()``), and takes a ``.view`` on one
only where the shape provably keeps the last dim (`_Prover.keeps_last_dim`):

- it splits only the last dim: ``x.size()[:-1] + (h, d)``, `x` the tensor viewed;
- it starts with the rows (the projections' input's leading dims, laid out as a contiguous tensor's) in any grouping,
  then anything (which then regroups the last dim alone): ``(*x.shape[:-1], -1, d)``, the names ``b, s, _ =
  x.size()`` in order, ``(b, h * w, heads, d)``; `x` the input or an output, the tensor viewed an output or one that
  kept the rows in front (`_Prover.prefixed`: viewed so, or split along its last dim);
- or, on an output, it ends with dims whose product is the Linear's ``out_features`` as ``__init__`` computes it
  (``self.inner_dim = self.n_heads * self.d_kv``), or as a check there that raises otherwise makes sure (BART's
  ``if self.head_dim * num_heads != self.embed_dim: raise ValueError(...)``); attributes another ``__init__`` of the
  family or another method assigns are not known.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Union

import libcst as cst

from .. import cstwalk
from ..provider.syntax import METADATA_ATTRIBUTES, _is_self_attr, _object_name, element_wise
from ..structure import ClassStructure, Def, DLNode, LayerBinding, Site, Use
from .aliasing import FRESH_RESULTS
from .graph import FlowGraph

# Tensor methods (and torch functions of the same name) whose result may be their receiver or a view of it with the
# receiver's layout: a later `.view` of the result meets the same strides. Any other method makes a new tensor
# (`contiguous()` copies a slice; arithmetic, `softmax`, `masked_fill` compute).
_SLICE_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "unsqueeze", "squeeze", "expand", "expand_as",
    "flatten", "unflatten", "narrow", "select", "split", "split_with_sizes", "tensor_split", "chunk", "unbind",
    "movedim", "moveaxis", "swapaxes", "swapdims", "t", "to", "type", "type_as", "float", "half", "bfloat16",
    "double", "detach", "as_strided", "diagonal", "unfold", "cuda", "cpu", "requires_grad_",
})
_TORCH_MODULES = frozenset({"torch", "F", "nn"})
# Modules whose functions, view methods' names aside, return new objects (``np.zeros((n, r))`` holds none of `r`).
_COMPUTING_MODULES = _TORCH_MODULES | {"np", "numpy", "math"}
PROJECTION = "%projection"  # a root that is one of the tracked expressions themselves
_DEPTH = 4  # names resolved through at most this many assignments


def first_unproven_view(
    graph: FlowGraph,
    outputs: dict[int, DLNode],
    input_vid: Optional[int],
    cls: ClassStructure,
) -> Optional[tuple[str, Site]]:
    """The first ``.view``/``.view_as`` call on a value that may be a column slice of the packed projections whose
    shape is not proven to keep the last dim (module docstring), or call passing one to a function or layer class of
    the file that makes such a view of it (`_Roots.viewed`): the call as written, in backticks, and its site; None if
    there is none.
    `outputs`: output value id -> the matched projection node; `input_vid`: the projections' input, None for
    outputs of another layout (ADP010's, `attention_output_views`): then only a view splitting the last dim alone is
    proven; `cls`: the class (its ``__init__`` states sizes, its helpers and the module's functions and classes may
    return a view of what they are given)."""
    methods = _methods(cls.node)
    facts = _InitFacts(methods.get("__init__"), cls.stored_outside_init, _family_inits(cls))
    prover = _Prover(graph, outputs, input_vid, facts)
    sources = {id(n.expr): n for n in outputs.values()}
    roots = _Roots(graph, frozenset(sources), methods, cls.module)
    holders = {id(n.site.small) for n in outputs.values()}
    defined = frozenset(e.name for e in graph.events if isinstance(e, Def))
    def assigned(event: Def) -> Optional[cst.BaseExpression]:
        # a helper's parameter: the argument passed to it (the whole call statement's value otherwise)
        bound = roots.bound_argument(event) if "::" in event.name[len(event.site.scope):] else None
        return bound if bound is not None else assigned_value(event)

    def roots_at(expr: cst.BaseExpression, site: Site) -> set[str]:
        return roots.of(expr, _defined_at(site, defined))

    inlined = _inlined_calls(graph)
    for site, names in holding_names(graph, prover.tainted, roots_at, assigned):
        if not names and id(site.small) not in holders and not roots.returns_projection(site.small):
            continue

        # a comprehension's names (`for t in qkv`) hold what they iterate over where that may hold an output
        in_comprehensions: set[str] = set()

        def holds(expr: cst.BaseExpression) -> bool:
            return any(
                r == PROJECTION or scoped(r, site) in names or r in in_comprehensions
                for r in roots.of(expr, _defined_at(site, defined))
            )

        loops = [n for n in cstwalk.walk(site.small) if type(n) is cst.CompFor]
        while loops:  # nested comprehensions: until nothing changes
            found = {n for loop in loops if holds(loop.iter) for n in _target_names(loop.target)}  # type: ignore[attr-defined]
            if found <= in_comprehensions:
                break
            in_comprehensions |= found

        for node in cstwalk.walk(site.small):
            if type(node) is not cst.Call:
                continue
            func = node.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute and func.attr.value in ("view", "view_as"):
                if holds(func.value) and not prover.keeps_last_dim(node, func.value, site, sources):  # type: ignore[arg-type]
                    return f"`{_one_line(cst.Module([]).code_for_node(node))}`", site
                continue
            # A function or layer class of the file that views what it is given: its body is not walked here (a
            # helper method inlined at this call is, `inlined`), so its view is judged on its own text.
            callee = roots.callee(node)  # type: ignore[arg-type]
            if callee is None or (type(func) is cst.Attribute and (id(site.small), func.attr.value) in inlined):
                continue
            function, skip_self = callee
            viewed = roots.viewed(function)
            if viewed and any(holds(a) for a in _arguments(function, skip_self, node, viewed)):  # type: ignore[arg-type]
                call = _one_line(cst.Module([]).code_for_node(node))
                return f"`{call}` (its `{function.name.value}` calls `.view` on it)", site
    return None


def _inlined_calls(graph: FlowGraph) -> set[tuple[int, str]]:
    """``(id(statement), helper)`` for each statement calling a helper method the walk inlined there (its parameters
    are bound at the call's statement: ``helper@<n>::<param>``)."""
    found = set()
    for event in graph.events:
        if isinstance(event, Def):
            inner = event.name[len(event.site.scope):]
            if "::" in inner:
                found.add((id(event.site.small), inner.partition("::")[0].partition("@")[0]))
    return found


def _one_line(code: str) -> str:
    """A call written over several lines (comments and all), as one line for a message."""
    if "\n" not in code:
        return code
    try:
        return ast.unparse(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return code


def scoped(name: str, site: Site) -> str:
    return name if name.startswith("self.") else site.scope + name


def _defined_at(site: Site, defined: frozenset[str]) -> Callable[[str], bool]:
    """Whether a name read at `site` is a variable the function assigns."""
    return lambda name: scoped(name, site) in defined


def _methods(node: Optional[cst.ClassDef]) -> dict[str, cst.FunctionDef]:
    if node is None or not isinstance(node.body, cst.IndentedBlock):
        return {}
    return {item.name.value: item for item in node.body.body if isinstance(item, cst.FunctionDef)}


def _family_inits(cls: ClassStructure) -> list[cst.FunctionDef]:
    """The ``__init__`` of the other classes of the module in the class's family (its bases and their subclasses,
    transitively): what they assign to ``self`` may be what the class's forward reads."""
    body = cls.module.body if cls.module is not None else ()
    classes = {s.name.value: s for s in body if isinstance(s, cst.ClassDef)}
    bases = {
        name: {b.value.value for b in node.bases if isinstance(b.value, cst.Name)} for name, node in classes.items()
    }
    family, todo = set(), [cls.name]
    while todo:
        name = todo.pop()
        if name in family or name not in classes:
            continue
        family.add(name)
        todo.extend(bases[name])
        todo.extend(other for other, of in bases.items() if name in of)
    family.discard(cls.name)
    return [init for name in sorted(family) if (init := _methods(classes[name]).get("__init__")) is not None]


def holding_names(
    graph: FlowGraph,
    tainted: set[int],
    roots_at: Callable[[cst.BaseExpression, Site], Iterable[str]],
    assigned: Callable[[Def], Optional[cst.BaseExpression]],
) -> Iterator[tuple[Site, frozenset[str]]]:
    """A may-analysis over the graph: each statement once (at its first event), with the scoped names that may hold
    one of the tracked tensors there, joined over the incoming edges. `tainted`, the value ids that may be one (the
    outputs at first), grows with the assignments walked: a name holds one where its value id is tainted, where
    ``roots_at(<its assigned value>, site)`` (`assigned` gives it; names, or ``PROJECTION``) names a holder, or where
    it is augmented in place (``q += 1`` keeps its object)."""
    holding: list[frozenset[str]] = [frozenset()] * len(graph.events)
    for pos, event in enumerate(graph.events):
        preds = graph.preds[pos]
        names = frozenset().union(*(holding[p] for p in preds)) if preds else frozenset()
        if event is None:
            holding[pos] = names
            continue
        site = event.site
        if all(graph.events[p] is None or graph.events[p].site.small is not site.small for p in preds):  # type: ignore[union-attr]
            yield site, names
        if isinstance(event, Def):
            held = event.vid in tainted or (isinstance(site.small, cst.AugAssign) and event.name in names)
            value = assigned(event)
            if not held and value is not None:
                held = any(r == PROJECTION or scoped(r, site) in names for r in roots_at(value, site))
            if held:
                tainted.add(event.vid)
                names = names | {event.name}
            else:
                names = names - {event.name}
        holding[pos] = names


def assigned_value(event: Def) -> Optional[cst.BaseExpression]:
    """The value an assignment statement gives the name (its own element in ``q, k = self.q(x), self.k(x)``)."""
    small = event.site.small
    if not isinstance(small, (cst.Assign, cst.AnnAssign)):
        return None
    pairs = element_wise([t.target for t in small.targets], small.value) if isinstance(small, cst.Assign) else None
    if pairs is not None:
        name = event.name[len(event.site.scope):]
        return next((value for target, value in pairs if target.value == name), None)
    return small.value


class _Roots:
    """The variables whose tensor an expression may be, or be a view of with its layout (`of`)."""

    def __init__(
        self, graph: FlowGraph, sources: frozenset[int], methods: dict[str, cst.FunctionDef],
        module: Optional[cst.Module],
    ) -> None:
        self.graph, self.sources, self.methods = graph, sources, methods
        body = module.body if module is not None else ()
        self.functions = {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}
        self.classes = {s.name.value: _methods(s) for s in body if isinstance(s, cst.ClassDef)}
        self._returned: dict[int, Optional[frozenset[str]]] = {}
        self._viewed: dict[int, frozenset[str]] = {}
        self._contexts: dict[int, _Roots] = {}  # another class of the file -> the roots read in its context

    def of(self, expr: cst.BaseExpression, held: Callable[[str], bool], depth: int = _DEPTH) -> set[str]:
        """The names (``self.<attr>`` for attributes of self) and ``PROJECTION`` (one of the projection expressions)
        whose tensor `expr` may be, or be a view of: through `_SLICE_METHODS`, indexing, the elements of a display,
        and what a call of a helper, a layer class or a function of the module may return; the first argument of
        other code, torch's aside. Empty for what is surely a new tensor or no tensor. `held`: whether a name is a
        variable (``q.view`` is a method, ``einops.rearrange`` a function)."""
        out: set[str] = set()
        todo = [expr]
        while todo:
            expr = todo.pop()
            if id(expr) in self.sources or expr is _RETURNED_PROJECTION:
                out.add(PROJECTION)
                continue
            kind = type(expr)
            if kind is cst.Name:
                out.add(expr.value)  # type: ignore[attr-defined]
            elif kind is cst.Attribute:
                name = _object_name(expr)
                if name is not None and name.startswith("self."):
                    if held(name):
                        out.add(name)
                elif expr.attr.value not in METADATA_ATTRIBUTES:  # type: ignore[attr-defined]
                    todo.append(expr.value)  # type: ignore[attr-defined]  # `q.T`, or what an object holds
            elif kind is cst.Subscript:
                todo.append(expr.value)  # type: ignore[attr-defined]
            elif kind in (cst.Tuple, cst.List, cst.Set, cst.Dict):
                todo.extend(e.value for e in expr.elements)  # type: ignore[attr-defined]
            elif kind is cst.IfExp:
                todo.extend((expr.body, expr.orelse))  # type: ignore[attr-defined]
            elif kind is cst.BooleanOperation:
                todo.extend((expr.left, expr.right))  # type: ignore[attr-defined]  # `q or k`: either
            elif kind is cst.NamedExpr:
                todo.append(expr.value)  # type: ignore[attr-defined]
            elif kind is cst.Call:
                todo.extend(self.call(expr, held, depth))  # type: ignore[arg-type]
        return out

    def call(self, call: cst.Call, held: Callable[[str], bool], depth: int) -> list[cst.BaseExpression]:
        """The expressions whose tensor a call's result may be, or be a view of."""
        func = call.func
        if isinstance(func, cst.Attribute) and _is_self_attr(func) is None:
            owner = _object_name(func.value)
            if owner is None or held(owner):  # a method of a value: a view of it, or a new tensor
                return [func.value] if func.attr.value in _SLICE_METHODS else []
            if owner in _COMPUTING_MODULES and func.attr.value not in _SLICE_METHODS:
                return []  # torch.matmul(q, k), F.softmax(s): a new tensor
        callee = self.callee(call) if depth > 0 else None
        if callee is not None:
            function, skip_self = callee
            params = self.returned(function, depth - 1)
            if params is not None:
                others: list[cst.BaseExpression] = [_RETURNED_PROJECTION] if PROJECTION in params else []
                others += [cst.parse_expression(name) for name in params if name.startswith("self.")]
                return _arguments(function, skip_self, call, params) + others
        node = self.graph.by_call.get(id(call))
        if node is not None and node.kind == "layer" and node.qualname in FRESH_RESULTS:
            return []
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        return positional[:1]  # torch.transpose(q, 1, 2); unknown code may return its first argument

    def bound_argument(self, event: Def) -> Optional[cst.BaseExpression]:
        """For the binding of an inlined helper's parameter (``m@1::x``, at the call's statement): the argument
        passed to it, where the statement calls that helper once; None otherwise (the whole statement counts)."""
        site = event.site
        method, _, param = event.name[len(site.scope):].partition("::")
        method = method.partition("@")[0]
        function = self.methods.get(method)
        calls = [
            n for n in cstwalk.walk(site.small)
            if type(n) is cst.Call and type(n.func) is cst.Attribute and _is_self_attr(n.func) == method  # type: ignore[attr-defined]
        ]
        if function is None or len(calls) != 1 or "::" in param or any(a.star for a in calls[0].args):  # type: ignore[attr-defined]
            return None
        arguments = _arguments(function, True, calls[0], frozenset({param}))  # type: ignore[arg-type]
        return arguments[0] if arguments else cst.Name("None")  # not passed: its default, no tensor of the caller

    def callee(self, call: cst.Call) -> Optional[tuple[cst.FunctionDef, bool]]:
        """The function a call runs, where it is in this module: a helper method (``self.m(...)``), the forward of a
        layer of a class defined here, a module function. With whether its first parameter is ``self``."""
        func = call.func
        if type(func) is cst.Name:
            function = self.functions.get(func.value)
            return (function, False) if function is not None else None
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in self.classes:
            # `ClassName.merge(q, k, v)`: a method of a class of the file, an instance passed first if any; a
            # classmethod receives the class unpassed
            function = self.classes[func.value.value].get(func.attr.value)
            return (function, _decorated(function, "classmethod")) if function is not None else None
        attr = _is_self_attr(func) if isinstance(func, cst.Attribute) else None
        if attr is None:
            return None
        if attr in self.methods:
            method = self.methods[attr]
            return method, not _decorated(method, "staticmethod")
        node = self.graph.by_call.get(id(call))
        if node is None or node.kind != "layer" or not node.bindings:
            return None
        forwards = set()
        for binding in node.bindings:
            value = binding.value
            name = value.func.value if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) else None
            forward = self.classes.get(name, {}).get("forward") if name is not None else None
            if forward is None:
                return None
            forwards.add(forward)
        return (forwards.pop(), True) if len(forwards) == 1 else None

    def returns_projection(self, statement: cst.CSTNode) -> bool:
        """Whether `statement` calls a helper, a layer class or a function of the file that may return a projection
        itself (``self.attend(q, k, v).view(...)``)."""
        for node in cstwalk.walk(statement):
            callee = self.callee(node) if type(node) is cst.Call else None  # type: ignore[arg-type]
            if callee is not None and PROJECTION in (self.returned(callee[0], _DEPTH) or ()):
                return True
        return False

    def returned(self, function: cst.FunctionDef, depth: int) -> Optional[frozenset[str]]:
        """The parameters whose tensor what `function` returns may be, or be a view of, with the ``self.<attr>``
        it may return and ``PROJECTION`` where it may return a projection itself (a helper method
        ``return self.q(x), self.k(x), self.v(x)``); None if unknown (it may return what a global holds)."""
        key = id(function)
        if key in self._returned:
            return self._returned[key]
        self._returned[key] = None  # recursion: unknown
        params, assigned, returns, _ = _body(function)
        local = set(assigned) | params

        def held(name: str) -> bool:
            return name in local

        reached: set[str] = set()
        todo: list[str] = []
        for value in returns:
            todo.extend(self.of(value, held, depth))
        while todo:
            name = todo.pop()
            if name in reached:
                continue
            reached.add(name)
            if name.startswith("self.") or name == PROJECTION:
                continue
            if name not in local:
                self._returned[key] = None
                return None
            for value in assigned.get(name, ()):
                todo.extend(self.of(value, held, depth))
        found = frozenset(n for n in reached if n in params or n.startswith("self.") or n == PROJECTION)
        self._returned[key] = found
        return found

    def viewed(self, function: cst.FunctionDef, depth: int = _DEPTH) -> frozenset[str]:
        """The parameters whose tensor `function` may ``.view``/``.view_as`` (or a view of it) in a shape not seen to
        keep its leading dims (`_keeps_leading`), itself or through a module function of the file or a method of its
        own class it passes it to (a layer class's ``forward`` read in the context of that class)."""
        key = id(function)
        if key in self._viewed:
            return self._viewed[key]
        if not any(m is function for m in self.methods.values()):
            owner = next((ms for ms in self.classes.values() if any(m is function for m in ms.values())), None)
            if owner is not None:
                context = self._contexts.get(id(owner))
                if context is None:
                    context = self._contexts[id(owner)] = _Roots(self.graph, frozenset(), owner, None)
                    context.functions, context.classes = self.functions, self.classes
                self._viewed[key] = found = context.viewed(function, depth)
                return found
        self._viewed[key] = frozenset()  # recursion: nothing more
        params, assigned, _, calls = _body(function)
        receivers: list[cst.BaseExpression] = []  # what the function views, or passes to a function that does
        for call in calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("view", "view_as"):
                if not _keeps_leading(call, assigned):
                    receivers.append(func.value)
                continue
            inner, skip_self, attr = None, False, _is_self_attr(func)
            if isinstance(func, cst.Name):
                inner = self.functions.get(func.value)
            elif attr is not None:
                inner, skip_self = self.methods.get(attr), True
            if depth > 0 and inner is not None and inner is not function:
                receivers.extend(_arguments(inner, skip_self, call, self.viewed(inner, depth - 1)))
        local = set(assigned) | params
        reached: set[str] = set()
        todo = [n for r in receivers for n in self.of(r, lambda n: n in local, depth)]
        while todo:
            name = todo.pop()
            if name in reached or name not in local:
                continue
            reached.add(name)
            for value in assigned.get(name, ()):
                todo.extend(self.of(value, lambda n: n in local, depth))
        found = frozenset(reached & params)
        self._viewed[key] = found
        return found


# What `_Roots.call` gives for a helper that may return a projection itself: `of` reads it as ``PROJECTION``.
_RETURNED_PROJECTION = cst.Name("projection")


def _decorated(function: cst.FunctionDef, name: str) -> bool:
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value == name for d in function.decorators)


def _body(
    function: cst.FunctionDef,
) -> tuple[set[str], dict[str, list[cst.BaseExpression]], list[cst.BaseExpression], list[cst.Call]]:
    """What `_Roots` reads of a function's own body (nested functions, classes and lambdas aside): its parameters,
    the values assigned to each local name (``for`` targets: the iterable), the returned values, and the calls."""
    params = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
    assigned: dict[str, list[cst.BaseExpression]] = {}
    returns: list[cst.BaseExpression] = []
    calls: list[cst.Call] = []
    for node in cstwalk.walk(function.body, lambda n: type(n) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        if isinstance(node, cst.Call):
            calls.append(node)
            continue
        if isinstance(node, cst.Return):
            if node.value is not None:
                returns.append(node.value)
            continue
        if isinstance(node, cst.Assign):
            value, targets = node.value, [t.target for t in node.targets]
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            value, targets = node.value, [node.target]
        elif isinstance(node, cst.For):
            value, targets = node.iter, [node.target]
        else:
            continue
        for target in targets:
            for name in _target_names(target):
                assigned.setdefault(name, []).append(value)
    return params, assigned, returns, calls


def _keeps_leading(view: cst.Call, assigned: dict[str, list[cst.BaseExpression]]) -> bool:
    """A ``t.view(...)`` whose shape starts with ``t``'s own leading dims: ``t.view(*t.shape[:-1], h, -1)``,
    ``t.view(t.size()[:-1] + (h, d))``, or that sum assigned once to the name passed (BERT's ``new_x_shape``)."""
    receiver = view.func.value  # type: ignore[attr-defined]
    if type(receiver) is not cst.Name or view.func.attr.value != "view" or not view.args:  # type: ignore[attr-defined]
        return False
    first = view.args[0]
    if first.star == "*":
        shape = _shape_of(first.value)
    elif len(view.args) == 1 and first.keyword is None and not first.star:
        value = first.value
        if type(value) is cst.Name and len(assigned.get(value.value, ())) == 1:
            value = assigned[value.value][0]
        shape = _shape_of(value.left) if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add else None
    else:
        return False
    return shape is not None and shape[1] and type(shape[0]) is cst.Name and shape[0].value == receiver.value


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _arguments(
    function: cst.FunctionDef, skip_self: bool, call: cst.Call, params: frozenset[str]
) -> list[cst.BaseExpression]:
    """The arguments of `call` passed to `params` of `function` (their defaults are no tensor of the caller); all
    of them where the call spreads ``*args``/``**kwargs``."""
    if any(a.star for a in call.args):
        return [a.value for a in call.args]
    positional = [p.name.value for p in function.params.params][1 if skip_self else 0:]
    out: list[cst.BaseExpression] = []
    index = 0
    for arg in call.args:
        if arg.keyword is None:
            name = positional[index] if index < len(positional) else None
            index += 1
        else:
            name = arg.keyword.value
        if name is None or name in params:
            out.append(arg.value)
    return out


# ------------------------------------------------------------------------------------------ the shape prover


@dataclass(frozen=True)
class _Dims:
    """A spread of a tensor's dims in a shape: ``x.size()[:-1]`` (`leading`) or ``x.shape``."""

    tensor: cst.BaseExpression
    site: Site  # where the tensor is read
    leading: bool


_Part = Union[_Dims, tuple[cst.BaseExpression, Site], None]  # a spread, one element (as read at a site), unknown


class _Prover:
    def __init__(
        self, graph: FlowGraph, outputs: dict[int, DLNode], input_vid: Optional[int], init: "_InitFacts"
    ) -> None:
        self.graph, self.outputs, self.input_vid, self.init = graph, outputs, input_vid, init
        self.tainted = set(outputs)  # value ids that may be a column slice (`holding_names` adds to it)
        self._reads: dict[int, dict[str, int]] = {}

    def reads(self, site: Site) -> dict[str, int]:
        """Scoped name -> the value id it holds where the statement of `site` reads it."""
        small = site.small
        found = self._reads.get(id(small))
        if found is None:
            found = {}
            for pos in self.graph.by_statement.get(id(small), ()):
                event = self.graph.events[pos]
                if isinstance(event, Use):
                    for name, vid in zip(event.names, event.vids):
                        found.setdefault(name, vid)
                elif isinstance(event, DLNode):
                    for value in (*event.args, *(v for _, v in event.kwargs)):
                        for name, vid in value.uses:
                            found.setdefault(name, vid)
            self._reads[id(small)] = found
        return found

    def vid(self, name: cst.Name, site: Site) -> Optional[int]:
        return self.reads(site).get(scoped(name.value, site))

    def definition(self, name: cst.Name, site: Site) -> Optional[tuple[cst.BaseSmallStatement, Site]]:
        """The one assignment statement giving `name` the value it holds at `site`."""
        vid = self.vid(name, site)
        full = scoped(name.value, site)
        defs = [d for d in self.graph.definitions.get(vid, []) if d.name == full] if vid is not None else []
        smalls = {id(d.site.small) for d in defs}
        if len(smalls) != 1 or not isinstance(defs[0].site.small, cst.BaseSmallStatement):
            return None
        return defs[0].site.small, defs[0].site

    def keeps_last_dim(
        self, call: cst.Call, receiver: cst.BaseExpression, site: Site, sources: dict[int, DLNode]
    ) -> bool:
        """Whether ``receiver.view(<shape>)`` works on the column slices wherever it works on contiguous outputs."""
        if call.func.attr.value != "view":  # type: ignore[attr-defined]
            return False  # view_as: another tensor's shape
        args = call.args
        if not args or any(a.keyword is not None for a in args):
            return False
        if len(args) == 1 and not args[0].star:
            parts = self.parts(args[0].value, site, _DEPTH)
        else:
            parts = []
            for arg in args:
                parts.extend(self.parts(arg.value, site, _DEPTH) if arg.star else [(arg.value, site)])
        if len(parts) < 2:
            return False
        first = parts[0]
        own = self.vid(receiver, site) if type(receiver) is cst.Name else None  # type: ignore[arg-type]
        if isinstance(first, _Dims) and first.leading and own is not None and self.tensor_vid(first) == own:
            return True  # only the last dim is split
        if self.input_vid is None:
            return False
        projection = self.projection_of(receiver, site, sources)
        if (projection is not None or self.prefixed(receiver, site, sources, _DEPTH)) and self.leading_rows(parts):
            return True
        return projection is not None and self.suffix_is_width(parts, projection)

    def tensor_vid(self, dims: _Dims) -> Optional[int]:
        return self.vid(dims.tensor, dims.site) if type(dims.tensor) is cst.Name else None  # type: ignore[arg-type]

    def rows(self, vid: Optional[int]) -> bool:
        """Whether a tensor has the projections' rows as its leading dims: their input, or an output."""
        return vid is not None and (vid == self.input_vid or vid in self.outputs)

    def parts(self, expr: cst.BaseExpression, site: Site, depth: int) -> list[_Part]:
        """A shape expression as its spreads and elements: displays, ``+`` of tuples, names assigned once, a tensor's
        ``size()``/``shape`` (whole, or without its last dim)."""
        kind = type(expr)
        if kind in (cst.Tuple, cst.List):
            out: list[_Part] = []
            for element in expr.elements:  # type: ignore[attr-defined]
                if isinstance(element, cst.StarredElement):
                    out.extend(self.parts(element.value, site, depth))
                else:
                    out.append((element.value, site))
            return out
        if kind is cst.BinaryOperation and type(expr.operator) is cst.Add:  # type: ignore[attr-defined]
            return self.parts(expr.left, site, depth) + self.parts(expr.right, site, depth)  # type: ignore[attr-defined]
        if kind is cst.Name and depth > 0:
            value = self.assigned_value(expr, site)  # type: ignore[arg-type]
            return self.parts(value[0], value[1], depth - 1) if value is not None else [None]
        dims = _shape_of(expr)
        if dims is not None:
            tensor, leading = dims
            return [_Dims(tensor, site, leading)]
        return [None]

    def assigned_value(self, name: cst.Name, site: Site) -> Optional[tuple[cst.BaseExpression, Site]]:
        """The value of ``name = value``, the one assignment giving `name` what it holds at `site`."""
        found = self.definition(name, site)
        if found is None or type(found[0]) is not cst.Assign or len(found[0].targets) != 1:  # type: ignore[attr-defined]
            return None
        if type(found[0].targets[0].target) is not cst.Name:  # type: ignore[attr-defined]
            return None
        return found[0].value, found[1]  # type: ignore[attr-defined]

    def projection_of(self, receiver: cst.BaseExpression, site: Site, sources: dict[int, DLNode]) -> Optional[DLNode]:
        """The matched projection whose own output `receiver` is, if it is one."""
        if id(receiver) in sources:
            return sources[id(receiver)]
        vid = self.vid(receiver, site) if type(receiver) is cst.Name else None  # type: ignore[arg-type]
        if vid is None:
            return None
        # A join: on its paths that carry a column slice, the slice must be one projection's own output.
        operands, todo = set(), [vid]
        while todo:
            current = todo.pop()
            if current in self.graph.phis and current not in operands:
                todo.extend(self.graph.phis[current])
            operands.add(current)
        nodes = {id(self.outputs[o]): self.outputs[o] for o in operands if o in self.outputs}
        slices = {o for o in operands if o in self.tainted and o not in self.graph.phis}
        if len(nodes) != 1 or not slices <= set(self.outputs):
            return None
        return next(iter(nodes.values()))

    def prefixed(self, expr: cst.BaseExpression, site: Site, sources: dict[int, DLNode], depth: int) -> bool:
        """Whether `expr` keeps the projections' rows as its leading dims, as they are, and changed only the last
        dim's layout as the original would: an output, viewed to shapes starting with the rows
        (`leading_rows`), split or sliced along the last dim, converted, or made contiguous. On such a tensor a view
        that keeps the rows and regroups the rest meets the strides the original has there."""
        if depth <= 0:
            return False
        if id(expr) in sources:
            return True
        kind = type(expr)
        if kind is cst.Name:
            vid = self.vid(expr, site)  # type: ignore[arg-type]
            if vid is not None and vid in self.outputs:
                return True
            found = self.definition(expr, site)  # type: ignore[arg-type]
            if found is None or type(found[0]) is not cst.Assign or len(found[0].targets) != 1:  # type: ignore[attr-defined]
                return False
            statement, at = found
            target = statement.targets[0].target  # type: ignore[attr-defined]
            value = statement.value  # type: ignore[attr-defined]
            if type(target) is cst.Name:
                return self.prefixed(value, at, sources, depth - 1)
            # `a, b = q.chunk(2, dim=-1)`: each part of a split along the last dim
            return _splits_last_dim(value) is not None and self.prefixed(_splits_last_dim(value), at, sources, depth - 1)  # type: ignore[arg-type]
        if kind is cst.Subscript:
            inner = expr.value  # type: ignore[attr-defined]
            split = _splits_last_dim(inner)
            if split is not None:  # one part of a split along the last dim
                return self.prefixed(split, site, sources, depth - 1)
            elements = expr.slice  # type: ignore[attr-defined]
            if (
                len(elements) == 2 and type(elements[0].slice) is cst.Index
                and type(elements[0].slice.value) is cst.Ellipsis and type(elements[1].slice) is cst.Slice
            ):
                return self.prefixed(inner, site, sources, depth - 1)  # q[..., a:b]
            return False
        if kind is cst.Call and type(expr.func) is cst.Attribute:  # type: ignore[attr-defined]
            method, receiver = expr.func.attr.value, expr.func.value  # type: ignore[attr-defined]
            if method in ("view", "reshape"):
                args = expr.args  # type: ignore[attr-defined]
                if len(args) == 1 and not args[0].star:
                    parts = self.parts(args[0].value, site, _DEPTH)
                else:
                    parts = [p for a in args for p in (self.parts(a.value, site, _DEPTH) if a.star else [(a.value, site)])]
                return self.leading_rows(parts) and self.prefixed(receiver, site, sources, depth - 1)
            if method in ("to", "float", "half", "bfloat16", "double", "type_as", "detach", "contiguous"):
                return self.prefixed(receiver, site, sources, depth - 1)
        return False

    def leading_rows(self, parts: list[_Part]) -> bool:
        """Whether the shape starts with dims that multiply to the projections' rows (the input's leading dims, as a
        spread ``x.shape[:-1]`` or as the names ``b, s, _ = x.size()`` unpacked, multiplied in any grouping:
        ``(b, h * w, ...)``), has more dims after them, and no ``-1`` among them: the rows, laid out as a contiguous
        tensor's are, regroup freely, and the rest of the shape regroups only the last dim."""
        first = parts[0] if parts else None
        if isinstance(first, _Dims):
            return first.leading and len(parts) > 1 and self.rows(self.tensor_vid(first))
        rows: Optional[Counter[str]] = None
        factors: Counter[str] = Counter()
        for part in parts[:-1]:
            if not isinstance(part, tuple):
                return False
            if type(part[0]) is cst.Integer and part[0].value == "1":
                continue  # a dim of size 1 goes anywhere
            found = self.row_factors(part[0], part[1], _DEPTH)
            if found is None:
                return False
            element, unpacked = found
            if rows is not None and unpacked != rows:
                return False
            rows = unpacked
            factors += element
            if factors == rows:
                return True
        return False

    def row_factors(
        self, expr: cst.BaseExpression, site: Site, depth: int
    ) -> Optional[tuple[Counter[str], Counter[str]]]:
        """A shape element as a product of the rows' dims: its factors (``dim:<statement>:<i>`` for the i-th name of
        an unpacked ``x.size()``), and the factors of all the rows of that statement's tensor."""
        kind = type(expr)
        if kind is cst.BinaryOperation and type(expr.operator) is cst.Multiply:  # type: ignore[attr-defined]
            left = self.row_factors(expr.left, site, depth)  # type: ignore[attr-defined]
            right = self.row_factors(expr.right, site, depth)  # type: ignore[attr-defined]
            if left is None or right is None or left[1] != right[1]:
                return None
            return left[0] + right[0], left[1]
        if kind is not cst.Name or depth <= 0:
            return None
        found = self.definition(expr, site)  # type: ignore[arg-type]
        if found is None or type(found[0]) is not cst.Assign or len(found[0].targets) != 1:  # type: ignore[attr-defined]
            return None
        statement, at = found
        target = statement.targets[0].target  # type: ignore[attr-defined]
        if type(target) is cst.Name:
            return self.row_factors(statement.value, at, depth - 1)  # type: ignore[attr-defined]
        if type(target) not in (cst.Tuple, cst.List):
            return None
        names = [e.value for e in target.elements]  # type: ignore[attr-defined]
        value = statement.value  # type: ignore[attr-defined]
        value_site = at
        if type(value) is cst.Name:  # `b, s = input_shape`, `input_shape = x.shape[:-1]`
            resolved = self.assigned_value(value, at)
            if resolved is None:
                return None
            value, value_site = resolved
        dims = _shape_of(value)
        if dims is None or not all(type(n) is cst.Name for n in names) or not self.rows(self.tensor_vid(_Dims(dims[0], value_site, dims[1]))):
            return None
        count = len(names) if dims[1] else len(names) - 1
        index = next((i for i, n in enumerate(names) if n.value == expr.value), None)  # type: ignore[attr-defined]
        if index is None or index >= count or self.vid(expr, site) != _unpacked_vid(self.graph, names[index], at):  # type: ignore[arg-type]
            return None
        key = f"dim:{id(statement)}"
        return Counter({f"{key}:{index}": 1}), Counter({f"{key}:{i}": 1 for i in range(count)})

    def suffix_is_width(self, parts: list[_Part], projection: DLNode) -> bool:
        """Some trailing elements multiply to the projection Linear's ``out_features`` (`_InitFacts`): the dims
        before them then multiply to the rows, which regroup freely."""
        widths = [self.init.out_features(b) for b in projection.bindings]
        if not widths or any(w is None for w in widths):
            return False
        factors: Counter[str] = Counter()
        for part in reversed(parts):
            if not isinstance(part, tuple):
                return False
            element = self.init.factors(part[0], forward=True)
            if element is None:
                return False
            factors = _times(factors, element)
            if all(self.init.equal(factors, w) for w in widths):  # type: ignore[arg-type]
                return True
        return False


def _unpacked_vid(graph: FlowGraph, name: cst.Name, site: Site) -> int:
    """The value id the assignment at `site` gives `name` (-1 if none)."""
    full = scoped(name.value, site)
    for pos in graph.by_statement.get(id(site.small), ()):
        event = graph.events[pos]
        if isinstance(event, Def) and event.name == full:
            return event.vid
    return -1


def _is_minus_one(expr: Optional[cst.BaseExpression]) -> bool:
    return (
        type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus  # type: ignore[attr-defined]
        and type(expr.expression) is cst.Integer and expr.expression.value == "1"  # type: ignore[attr-defined]
    )


def _splits_last_dim(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The tensor that ``x.chunk(n, dim=-1)``, ``x.split(s, -1)``, ``torch.chunk(x, n, -1)``, ``x.unbind(-1)``
    splits along its last dim, if `expr` is such a call."""
    if type(expr) is not cst.Call or type(expr.func) is not cst.Attribute:  # type: ignore[attr-defined]
        return None
    method = expr.func.attr.value  # type: ignore[attr-defined]
    if method not in ("chunk", "split", "tensor_split", "unbind"):
        return None
    args = expr.args  # type: ignore[attr-defined]
    function = _object_name(expr.func.value) in _TORCH_MODULES  # type: ignore[attr-defined]
    positional = [a.value for a in args if a.keyword is None and not a.star]
    keyword = {a.keyword.value: a.value for a in args if a.keyword is not None}
    tensor = positional.pop(0) if function and positional else (None if function else expr.func.value)  # type: ignore[attr-defined]
    if tensor is None:
        return None
    position = 0 if method == "unbind" else 1
    dim = keyword.get("dim", positional[position] if len(positional) > position else None)
    return tensor if _is_minus_one(dim) else None


def _shape_of(expr: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, bool]]:
    """``(x, leading)`` for ``x.size()``/``x.shape`` (False) or ``x.size()[:-1]``/``x.shape[:-1]`` (True)."""
    leading = False
    if type(expr) is cst.Subscript:
        slices = expr.slice  # type: ignore[attr-defined]
        index = slices[0].slice if len(slices) == 1 else None
        if not (type(index) is cst.Slice and index.lower is None and index.step is None and _is_minus_one(index.upper)):
            return None
        leading, expr = True, expr.value  # type: ignore[attr-defined]
    if type(expr) is cst.Attribute and expr.attr.value == "shape":  # type: ignore[attr-defined]
        return expr.value, leading  # type: ignore[attr-defined]
    if type(expr) is cst.Call and not expr.args and type(expr.func) is cst.Attribute and expr.func.attr.value == "size":  # type: ignore[attr-defined]
        return expr.func.value, leading  # type: ignore[attr-defined]
    return None


# ------------------------------------------------------------------------------------------ facts from __init__


class _InitFacts:
    """What ``__init__`` says about sizes: ``self.<attr>`` and local names assigned once (substituted, so widths
    compare as products of the same factors), and the equalities its checks guarantee (``if a != b: raise``,
    ``assert a == b``, ``if a % b != 0: raise``)."""

    def __init__(
        self, init: Optional[cst.FunctionDef], stored_outside_init: frozenset[str], others: list[cst.FunctionDef]
    ) -> None:
        self.values: dict[str, cst.BaseExpression] = {}
        self.equalities: list[tuple[Counter[str], Counter[str]]] = []
        if init is None or "*" in stored_outside_init:
            return
        counts: Counter[str] = Counter()
        for other in others:  # an attribute another __init__ of the family assigns: not known here
            for node in cstwalk.walk(other.body, lambda n: type(n) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                counts.update(k for k in _assigned_keys(node) if k.startswith("self."))
        assigned: dict[str, cst.BaseExpression] = {}
        checks: list[tuple[cst.BaseExpression, cst.BaseExpression, bool]] = []  # (a, b, is a % b == 0)
        for node in cstwalk.walk(init.body, lambda n: type(n) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            kind = type(node)
            if kind in (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.With, cst.NamedExpr):
                for key in _assigned_keys(node):
                    counts[key] += 1
                single = _key(node.targets[0].target) if kind is cst.Assign and len(node.targets) == 1 else None  # type: ignore[attr-defined]
                if single is not None:
                    assigned[single] = node.value  # type: ignore[attr-defined]
            elif kind is cst.If and _raises(node.body):  # type: ignore[attr-defined]
                checks.extend(_checked_equalities(node.test, negated=True))  # type: ignore[attr-defined]
            elif kind is cst.Assert:
                checks.extend(_checked_equalities(node.test, negated=False))  # type: ignore[attr-defined]
        self.values = {
            k: v for k, v in assigned.items()
            if counts[k] == 1 and not (k.startswith("self.") and k[5:] in stored_outside_init)
        }
        for a, b, modulo in checks:
            if modulo:
                fa, fb = self.factors(a), self.factors(b)
                quotient = self.factors(cst.BinaryOperation(a, cst.FloorDivide(), b))
                if fa is not None and fb is not None and quotient is not None:
                    self.equalities.append((quotient + fb, fa))
            else:
                fa, fb = self.factors(a), self.factors(b)
                if fa is not None and fb is not None:
                    self.equalities.append((fa, fb))

    def out_features(self, binding: LayerBinding) -> Optional[Counter[str]]:
        """The factors of a Linear's ``out_features`` argument, None if unknown."""
        if not binding.args_known or binding.qualname != "torch.nn.Linear" or binding.where != "__init__":
            return None
        positional = [a.value for a in binding.args if a.keyword is None and not a.star]
        keyword = {a.keyword.value: a.value for a in binding.args if a.keyword is not None}
        width = positional[1] if len(positional) > 1 else keyword.get("out_features")
        return self.factors(width) if width is not None else None

    def equal(self, a: Counter[str], b: Counter[str]) -> bool:
        return a == b or any((a, b) in (pair, pair[::-1]) for pair in self.equalities)

    def factors(self, expr: cst.BaseExpression, depth: int = _DEPTH, forward: bool = False) -> Optional[Counter[str]]:
        """`expr` as a product: the multiset of its factors (integers multiplied into one), names and attributes
        assigned once replaced by their value; a quotient or any other expression is one factor, its text with the
        same replacements. Read in forward (`forward`), only ``self.<attr>`` and integers count, as local names
        there may hold anything. None for what cannot be a factor (``-1``, a call)."""
        kind = type(expr)
        if kind is cst.BinaryOperation and type(expr.operator) is cst.Multiply:  # type: ignore[attr-defined]
            left = self.factors(expr.left, depth, forward)  # type: ignore[attr-defined]
            right = self.factors(expr.right, depth, forward)  # type: ignore[attr-defined]
            return None if left is None or right is None else _times(left, right)
        if kind is cst.Integer:
            return Counter({f"#{expr.evaluated_value}": 1})  # type: ignore[attr-defined]
        if kind is cst.Call and type(expr.func) is cst.Name and expr.func.value == "int" and len(expr.args) == 1:  # type: ignore[attr-defined]
            inner = expr.args[0].value  # type: ignore[attr-defined]
            if type(inner) is cst.BinaryOperation and type(inner.operator) is cst.Divide:
                # int(a / b): the quotient rounded towards zero, as a // b for the positive sizes it is used for
                return self.factors(cst.BinaryOperation(inner.left, cst.FloorDivide(), inner.right), depth, forward)
            return self.factors(inner, depth, forward)
        key = _key(expr)
        if key is not None:
            if forward and not key.startswith("self."):
                return None
            value = self.values.get(key)
            if value is not None and depth > 0:
                return self.factors(value, depth - 1)
            return None if forward else Counter({key: 1})
        text = self.text(expr, depth)
        return None if text is None else Counter({text: 1})

    def text(self, expr: cst.BaseExpression, depth: int) -> Optional[str]:
        """A quotient or sum as text, its names and attributes replaced by their values (as factors, sorted)."""
        kind = type(expr)
        if kind is cst.BinaryOperation and type(expr.operator) in (cst.FloorDivide, cst.Add, cst.Subtract):  # type: ignore[attr-defined]
            left = self.factors(expr.left, depth)  # type: ignore[attr-defined]
            right = self.factors(expr.right, depth)  # type: ignore[attr-defined]
            if left is None or right is None:
                return None
            symbol = {cst.FloorDivide: "//", cst.Add: "+", cst.Subtract: "-"}[type(expr.operator)]  # type: ignore[attr-defined]
            return f"({_product(left)}){symbol}({_product(right)})"
        return None


def _times(a: Counter[str], b: Counter[str]) -> Counter[str]:
    out = a + b
    numbers = [k for k in out if k.startswith("#")]
    if len(numbers) > 1 or (numbers and out[numbers[0]] > 1):
        value = 1
        for k in numbers:
            value *= int(k[1:]) ** out.pop(k)
        out[f"#{value}"] = 1
    out.pop("#1", None)
    return out


def _product(factors: Counter[str]) -> str:
    return "*".join(sorted(factors.elements()))


def _key(expr: cst.BaseExpression) -> Optional[str]:
    """``name`` or ``self.attr`` or ``name.attr...`` (a config field) for a plain name or attribute chain."""
    if type(expr) is cst.Name:
        return expr.value  # type: ignore[attr-defined,no-any-return]
    if type(expr) is cst.Attribute:
        inner = _key(expr.value)  # type: ignore[attr-defined]
        return None if inner is None else f"{inner}.{expr.attr.value}"  # type: ignore[attr-defined]
    return None


def _assigned_keys(node: cst.CSTNode) -> list[str]:
    """The names and attribute chains a statement (or loop, ``with``, walrus) binds."""
    targets: list[cst.BaseExpression] = []
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, cst.For):
        targets = [node.target]
    elif isinstance(node, cst.With):
        targets = [i.asname.name for i in node.items if i.asname is not None]
    elif isinstance(node, cst.NamedExpr):
        targets = [node.target]
    out: list[str] = []
    while targets:
        target = targets.pop()
        if isinstance(target, (cst.Tuple, cst.List)):
            targets.extend(e.value for e in target.elements)
        elif isinstance(target, cst.StarredElement):
            targets.append(target.value)
        else:
            key = _key(target)
            if key is not None:
                out.append(key)
    return out


def _raises(body: cst.BaseSuite) -> bool:
    """Whether a block starts with a ``raise``."""
    first = body.body[0] if isinstance(body, cst.IndentedBlock) and body.body else body
    small = first.body[0] if isinstance(first, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else None
    return isinstance(small, cst.Raise)


def _checked_equalities(
    test: cst.BaseExpression, negated: bool
) -> list[tuple[cst.BaseExpression, cst.BaseExpression, bool]]:
    """The equalities a check guarantees once passed: ``a != b`` raising (`negated`) or ``assert a == b`` gives
    ``(a, b, False)``; ``a % b != 0``/``a % b`` raising, or ``assert a % b == 0``, gives ``(a, b, True)``."""
    if negated and type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        return _checked_equalities(test.expression, negated=False)  # type: ignore[attr-defined]
    if negated and type(test) is cst.BinaryOperation and type(test.operator) is cst.Modulo:  # type: ignore[attr-defined]
        return [(test.left, test.right, True)]  # type: ignore[attr-defined]
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:  # type: ignore[attr-defined]
        return []
    comparison = test.comparisons[0]  # type: ignore[attr-defined]
    wanted = cst.NotEqual if negated else cst.Equal
    if type(comparison.operator) is not wanted:
        return []
    left, right = test.left, comparison.comparator  # type: ignore[attr-defined]
    if type(left) is cst.BinaryOperation and type(left.operator) is cst.Modulo and type(right) is cst.Integer and right.value == "0":
        return [(left.left, left.right, True)]
    return [(left, right, False)]
