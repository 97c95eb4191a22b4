"""CST predicates shared by class discovery, the walk and expression unchaining: literals, ``self.<attr>``, the
names an expression reads or a statement writes, the tensor methods and operators the walk turns into DSL nodes."""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from .. import cstwalk
from ..qualnames import ImportTable, canonical_torch_name

_BINARY_OPS: dict[type, str] = {
    cst.Add: "+",
    cst.Subtract: "-",
    cst.Multiply: "*",
    cst.Divide: "/",
    cst.MatrixMultiply: "@",
}
# ``x += y`` and its kind: walked as the operator node ``x + y`` assigned to ``x`` (`in_place_operator`).
_AUGMENTED_OPS: dict[type, str] = {
    cst.AddAssign: "+",
    cst.SubtractAssign: "-",
    cst.MultiplyAssign: "*",
    cst.DivideAssign: "/",
}
# Tensor methods the walk turns into DSL nodes ``torch.Tensor.<name>(receiver, *args)`` (receiver first), so rules can
# follow data through ``att.masked_fill(m, v)``, ``k.transpose(-2, -1)``, ``att.softmax(dim=-1)`` (ADP010). Only
# these: every other method call stays an opaque expression. A compound statement holding only method calls is still
# folded (they do not count in `_has_dsl_call`), so the walk forks no more often; ``softmax`` aside, a rule's whole
# pattern by itself (ADP004), as ``torch.softmax`` is.
TENSOR_METHODS = frozenset({"masked_fill", "softmax", "transpose"})


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


# What a tensor answers about itself, never a view of it: `n = k.shape[-2]; n += 1` modifies no tensor.
METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "device", "ndim", "layout", "is_cuda", "requires_grad"})
# Tensor methods that only read their receiver's metadata (`q.size(-1)`, `bsz, n, _ = x.size()`), and builtins that
# only convert or compare numbers: calls without effects, whose result changes only with what they read.
METADATA_METHODS = frozenset({"size", "dim", "numel", "stride", "is_contiguous", "get_device"})
NUMBER_BUILTINS = frozenset({"float", "int", "len", "abs", "min", "max", "round"})


def is_metadata_call(call: cst.Call) -> bool:
    """A call that reads tensor metadata or converts a number: `q.size(-1)`, `int(n)` (its arguments aside)."""
    func = call.func
    kind = type(func)
    return (kind is cst.Attribute and func.attr.value in METADATA_METHODS) or (  # type: ignore[attr-defined]
        kind is cst.Name and func.value in NUMBER_BUILTINS  # type: ignore[attr-defined]
    )


# Tensor methods that only compute or reshape: a statement calling only these (and metadata reads) draws nothing.
COMPUTING_METHODS = frozenset({
    "view", "reshape", "transpose", "permute", "contiguous", "unsqueeze", "squeeze", "expand", "expand_as",
    "flatten", "to", "type_as", "float", "half", "bfloat16", "double", "chunk", "split", "unbind", "masked_fill",
    "softmax", "sum", "mean", "clone", "detach", "bool", "long", "int", "logical_not", "t", "unflatten", "movedim",
    "narrow", "flip", "repeat", "repeat_interleave",
})


def computing_call(call: cst.Call) -> bool:
    """A tensor metadata read, a number builtin, a `COMPUTING_METHODS` method call (``view``, ``to``, ...) or a
    function of ``math`` (``math.sqrt(q.shape[-1])``: numbers in, a number out)."""
    func = call.func
    if type(func) is not cst.Attribute:
        return is_metadata_call(call)
    if func.attr.value in COMPUTING_METHODS:  # type: ignore[attr-defined]
        return True
    receiver = func.value  # type: ignore[attr-defined]
    return (type(receiver) is cst.Name and receiver.value == "math") or is_metadata_call(call)  # type: ignore[attr-defined]


def computes_only(expr: cst.BaseExpression) -> bool:
    """Whether every call in `expr` only computes (`computing_call`): evaluated later, with the names it reads
    holding the same, it gives the same (`~mask.unsqueeze(1)`)."""
    return all(computing_call(n) for n in cstwalk.walk(expr) if type(n) is cst.Call)  # type: ignore[arg-type]


def _read_names(node: cst.CSTNode) -> tuple[list[str], bool]:
    """Names read by an expression: plain names and ``self.<attr>``; and whether it calls (impure). Metadata calls
    (`is_metadata_call`) do not count: `q.size(-1) ** -0.5` is as pure as `q.shape[-1] ** -0.5`."""
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
        elif kind is cst.Call:
            has_call = has_call or not is_metadata_call(sub)  # type: ignore[arg-type]
        elif kind in (cst.Await, cst.NamedExpr):
            has_call = True  # a walrus assigns inside: never move it either
    return names, has_call


class _TargetCollector:
    """Names (re)bound or mutated anywhere inside a statement: assignment targets, for targets, del, augassign,
    walrus targets, `def`/`class` names, `match` captures and (with `imports`) the names an import binds."""

    def __init__(self, imports: bool = True) -> None:
        self.names: set[str] = set()
        self.imports = imports

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
            elif kind is cst.FunctionDef or kind is cst.ClassDef:
                self.names.add(node.name.value)  # type: ignore[attr-defined]
            elif kind is cst.MatchAs or kind is cst.MatchStar:  # `case m:`, `case [*m]:` capture into `m`
                if node.name is not None:  # type: ignore[attr-defined]
                    self.names.add(node.name.value)  # type: ignore[attr-defined]
            elif kind is cst.MatchMapping:  # `case {**m}:`
                if node.rest is not None:  # type: ignore[attr-defined]
                    self.names.add(node.rest.value)  # type: ignore[attr-defined]
            elif kind is cst.ImportAlias and self.imports:
                bound = node.asname.name if node.asname is not None else node.name  # type: ignore[attr-defined]
                while isinstance(bound, cst.Attribute):  # `import a.b` binds `a`
                    bound = bound.value
                self._targets(bound)
            elif kind is cst.Call:
                # `x.add_(y)`: in-place tensor methods mutate their receiver.
                func = node.func  # type: ignore[attr-defined]
                if isinstance(func, cst.Attribute) and is_in_place_name(func.attr.value):
                    self._targets(func.value)
                elif type(func) is cst.Name and func.value in ("setattr", "delattr"):
                    # `setattr(self, "mask", m)` rebinds `self.mask`, as `self.mask = m` does.
                    args = node.args  # type: ignore[attr-defined]
                    if len(args) >= 2 and type(args[0].value) is cst.Name and type(args[1].value) is cst.SimpleString:
                        receiver, name = args[0].value.value, args[1].value.evaluated_value
                        if isinstance(name, str):
                            self.names.add(f"self.{name}" if receiver == "self" else receiver)

    def _targets(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            self.names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._targets(el.value)
        elif isinstance(node, cst.StarredElement):
            self._targets(node.value)
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            name = _object_name(node)  # mutation of the object the name refers to
            if name is not None:
                self.names.add(name)


def _object_name(expr: cst.BaseExpression) -> Optional[str]:
    """The name whose object `expr` is or is part of: ``self.<attr>`` for ``self.<attr>...``, else the root name of
    an attribute/subscript chain (``cfg`` for ``cfg.a[0]``); None for anything else."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        attr = _is_self_attr(expr) if isinstance(expr, cst.Attribute) else None
        if attr is not None:
            return "self." + attr
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def walrus_targets(expr: cst.CSTNode) -> list[str]:
    """The names `(name := ...)` expressions in `expr` bind in the enclosing function (comprehensions included,
    lambdas being their own scope)."""
    return [
        n.target.value  # type: ignore[attr-defined]
        for n in cstwalk.walk(expr, lambda n: type(n) is not cst.Lambda)
        if type(n) is cst.NamedExpr and type(n.target) is cst.Name  # type: ignore[attr-defined]
    ]


def _written_names(node: cst.CSTNode, imports: bool = True) -> set[str]:
    collector = _TargetCollector(imports)
    collector.visit(node)
    return collector.names


def compound_header(statement: cst.CSTNode) -> Optional[cst.CSTNode]:
    """What the event of a compound statement whose body is walked reads: an ``if``/``while`` test, a loop's
    iterable, a ``match`` subject (None for other statements: their events are their body's)."""
    kind = type(statement)
    if kind is cst.If or kind is cst.While:
        return statement.test  # type: ignore[attr-defined,no-any-return]
    if kind is cst.For:
        return statement.iter  # type: ignore[attr-defined,no-any-return]
    if kind is cst.Match:
        return statement.subject  # type: ignore[attr-defined,no-any-return]
    return None


def in_place_targets(small: cst.CSTNode) -> set[str]:
    """Names whose object a statement modifies in place: ``x += y``, ``x[i] = y``, ``x.a = y``, ``del x[i]``,
    ``x.add_(y)``, ``f(x, inplace=True)`` (``self.<attr>`` for ``self.<attr>...``; a store to ``self.<attr>`` itself
    counts too)."""
    names: set[str] = set()
    roots: list[cst.BaseExpression] = []
    # A field walk rather than a LibCST visitor, which made the ADP009 guard reading this cost more than parsing.
    for node in cstwalk.walk(small):
        kind = type(node)
        if kind is cst.AugAssign:
            roots.append(node.target)  # type: ignore[attr-defined]
        elif kind is cst.AssignTarget or kind is cst.Del:
            target = node.target  # type: ignore[attr-defined]
            if type(target) is cst.Subscript or type(target) is cst.Attribute:
                roots.append(target)
        elif kind is cst.Call:
            func = node.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute and is_in_place_name(func.attr.value):  # type: ignore[attr-defined]
                roots.append(func.value)
            args = node.args  # type: ignore[attr-defined]
            if passes_inplace(args):
                roots.extend(a.value for a in args if a.keyword is None)
    for root in roots:
        name = _object_name(root)
        if name is not None:
            names.add(name)
    return names


def _is_false(node: cst.BaseExpression) -> bool:
    return type(node) is cst.Name and node.value == "False"  # type: ignore[attr-defined]


def is_in_place_name(name: str) -> bool:
    """``add_``, ``zeros_``: torch's spelling of a call that changes its receiver or argument (not a dunder)."""
    return name.endswith("_") and not name.endswith("__")


def calls_in_place(node: cst.CSTNode) -> bool:
    """Whether `node` holds a call of a function or method whose name ends in ``_`` (not a dunder), or one passing
    ``inplace=`` other than False."""
    for sub in cstwalk.walk(node):
        if type(sub) is not cst.Call:
            continue
        func = sub.func  # type: ignore[attr-defined]
        name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""  # type: ignore[attr-defined]
        if is_in_place_name(name) or passes_inplace(sub.args):  # type: ignore[attr-defined]
            return True
    return False


def passes_inplace(args: Sequence[cst.Arg]) -> bool:
    """An ``inplace=`` argument other than the constant False."""
    return any(a.keyword is not None and a.keyword.value == "inplace" and not _is_false(a.value) for a in args)


def _call_receivers(node: cst.CSTNode) -> set[str]:
    """Names whose object a call inside `node` may mutate: the receiver of a method call (``cfg.update(...)``;
    ``self.<attr>`` for ``self.<attr>.m(...)``, and ``self`` for ``self.m(...)``, which may set any attribute), and
    the object ``setattr``/``delattr`` change. Objects passed as plain arguments are not counted."""
    names: set[str] = set()
    for sub in cstwalk.walk(node):
        if type(sub) is not cst.Call:
            continue
        func = sub.func  # type: ignore[attr-defined]
        if type(func) is cst.Name and func.value in ("setattr", "delattr") and sub.args:  # type: ignore[attr-defined]
            root: cst.BaseExpression = sub.args[0].value  # type: ignore[attr-defined]
        elif type(func) is cst.Attribute:
            root = func.value  # type: ignore[attr-defined]
        else:
            continue
        name = _object_name(root)
        if name is not None:
            names.add(name)
    return names


def _tensor_method(call: cst.Call, in_place: bool = False) -> Optional[str]:
    """``name`` for ``<expr>.name(...)`` with ``name`` in TENSOR_METHODS and a receiver other than ``self`` (whose
    methods are helpers or layers); the caller has checked the callee is no imported name (``torch.transpose``).
    With `in_place` (a statement ``x.masked_fill_(...)``, `in_place_masked_fill`), ``masked_fill``."""
    func = call.func
    if in_place:
        return "masked_fill" if in_place_masked_fill(call) is not None else None
    if type(func) is not cst.Attribute or func.attr.value not in TENSOR_METHODS:  # type: ignore[attr-defined]
        return None
    receiver = func.value  # type: ignore[attr-defined]
    if type(receiver) is cst.Name and receiver.value == "self":  # type: ignore[attr-defined]
        return None
    return func.attr.value  # type: ignore[attr-defined]


def in_place_operator(small: cst.BaseSmallStatement) -> Optional[str]:
    """``+`` for a statement ``x += y`` (``-``, ``*``, ``/`` for ``-=``, ``*=``, ``/=``), ``x`` a plain name other than
    ``self`` (open_clip's and fairseq's ``attn_weights += attn_mask``): the walk reads it as ``x = x + y``, one node
    standing for the whole statement, which the matcher takes only where a rule's target keeps the step in place
    (dsl.InPlace) and the object it changes is one the match made. None for any other statement."""
    if type(small) is not cst.AugAssign or type(small.target) is not cst.Name:  # type: ignore[attr-defined]
        return None
    if small.target.value == "self":  # type: ignore[attr-defined]
        return None
    return _AUGMENTED_OPS.get(type(small.operator))  # type: ignore[attr-defined]


def in_place_masked_fill(expr: cst.BaseExpression) -> Optional[cst.Name]:
    """``x`` for a statement ``x.masked_fill_(m, v)`` (Stable Diffusion's and perceiver-pytorch's ``sim.masked_fill_(~mask,
    max_neg_value)``): the walk reads it as ``x = x.masked_fill(m, v)``, what it leaves in ``x``. None for any other
    expression."""
    if type(expr) is not cst.Call or type(expr.func) is not cst.Attribute:  # type: ignore[attr-defined]
        return None
    func = expr.func  # type: ignore[attr-defined]
    if func.attr.value != "masked_fill_" or type(func.value) is not cst.Name or func.value.value == "self":
        return None
    return func.value  # type: ignore[no-any-return]


def softmax_module_dim(call: cst.Call) -> Optional[cst.Arg]:
    """``dim=D`` for ``Softmax(dim=D)(x)`` or ``Softmax(D)(x)``, a module built and called at once (BERT-era code's
    ``nn.Softmax(dim=-1)(attention_scores)``), D a literal other than None; None for any other shape. The caller
    checks that the inner callee is ``torch.nn.Softmax`` (`built_softmax_dim`): such a call is then
    ``F.softmax(x, dim=D)``, its forward (a module built here has no hooks of its own)."""
    inner = call.func
    if type(inner) is not cst.Call or len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    if len(inner.args) != 1 or inner.args[0].star:  # type: ignore[attr-defined]
        return None
    arg: cst.Arg = inner.args[0]  # type: ignore[attr-defined]
    if arg.keyword is not None and arg.keyword.value != "dim":
        return None
    if _const_text(arg.value) in (None, "None"):  # Softmax(dim=None) picks a legacy dim by rank and warns
        return None
    if arg.keyword is not None:
        return arg
    tight = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    return cst.Arg(arg.value, keyword=cst.Name("dim"), equal=tight)


def built_softmax_dim(call: cst.Call, table: ImportTable) -> Optional[cst.Arg]:
    """`softmax_module_dim` where the module built is ``torch.nn.Softmax`` under the file's imports: the walk reads
    such a call as ``F.softmax`` (unchain.py), so class discovery counts it among the callees."""
    dim = softmax_module_dim(call)
    if dim is None:
        return None
    built = table.resolve(call.func.func)  # type: ignore[attr-defined]  # softmax_module_dim saw a Call there
    return dim if built is not None and canonical_torch_name(built) == "torch.nn.Softmax" else None


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


def fallback_condition(test: cst.BaseExpression) -> bool:
    """What `simple_condition` accepts, and also a flag read as ``self.<attr>`` and comparisons of names,
    ``self.<attr>`` and literals (BERT's ``self.position_embedding_type == "relative_key"``): no call, so the value
    changes only where a name or an attribute is rebound. A fallback plan tests them before its region; the matcher
    checks that none of the names is assigned from there on and that no method but ``__init__`` stores the
    attributes."""
    kind = type(test)
    if kind is cst.Name:
        return test.value not in ("True", "False", "None")  # type: ignore[attr-defined]
    if _is_self_attr(test) is not None:
        return True
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        return fallback_condition(test.expression)  # type: ignore[attr-defined]
    if kind is cst.BooleanOperation:
        return fallback_condition(test.left) and fallback_condition(test.right)  # type: ignore[attr-defined]
    if kind is cst.Comparison:
        operands = (test.left, *(c.comparator for c in test.comparisons))  # type: ignore[attr-defined]
        return all(_comparand(o) for o in operands)
    return False


def _comparand(node: cst.BaseExpression) -> bool:
    """A name, ``self.<attr>``, a literal, or a tuple or list of them (``x in ("a", "b")``)."""
    kind = type(node)
    if kind is cst.Name or kind is cst.ConcatenatedString:
        return True
    if _const_text(node) is not None or _is_self_attr(node) is not None:
        return True
    if kind is cst.Tuple or kind is cst.List:
        return all(not isinstance(e, cst.StarredElement) and _comparand(e.value) for e in node.elements)  # type: ignore[attr-defined]
    return False


def _suite_body(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if isinstance(suite, cst.IndentedBlock):
        return suite.body
    return [suite]  # type: ignore[list-item]  # SimpleStatementSuite: one "line" of small statements


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


def element_wise(
    targets: Sequence[cst.BaseAssignTargetExpression], value: cst.BaseExpression
) -> Optional[list[tuple[cst.Name, cst.BaseExpression]]]:
    """The (name, element) pairs of one tuple of plain names assigned a display of as many plain elements; None for
    anything else (chained targets, starred elements, attributes or subscripts among the targets)."""
    if len(targets) != 1 or type(targets[0]) not in (cst.Tuple, cst.List) or type(value) not in (cst.Tuple, cst.List):
        return None
    names, elements = targets[0].elements, value.elements  # type: ignore[attr-defined]
    if len(names) != len(elements) or len(names) < 2:
        return None
    if any(type(n) is not cst.Element or type(n.value) is not cst.Name for n in names):
        return None
    if any(type(e) is not cst.Element for e in elements):
        return None
    return [(n.value, e.value) for n, e in zip(names, elements)]


def references_layers(small: cst.CSTNode, layers: set[str], matched: set[int]) -> bool:
    """Whether `small` reaches ``self.<layer>`` for one of `layers` other than by calling it (``self.k.weight.mul_(2)``,
    passing the layer on): that might change the layer. Calls are fine: calling a layer changes nothing. `matched`:
    ids of expressions not looked into."""
    callees = {id(n.func) for n in cstwalk.walk(small) if isinstance(n, cst.Call)}
    for node in cstwalk.walk(small, lambda n: id(n) not in matched):
        if (
            id(node) not in matched
            and id(node) not in callees
            and isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
            and node.attr.value in layers
        ):
            return True
    return False
