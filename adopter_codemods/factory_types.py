"""Layer types built by functions defined in other files (docs/ENGINE.md "Layer types and containers").

timm builds its layers through factories of other modules: ``self.conv_dw = create_conv2d(...)`` (one of
``nn.Conv2d``, ``Conv2dSame``, ``MixedConv2d``, ``CondConv2d``, by its arguments) and
``norm_act_layer = get_norm_act_layer(norm_layer, act_layer)`` (a class looked up in a dict, or the one passed in),
then ``self.bn1 = norm_act_layer(chs)``. :class:`FactoryTypes` reads such a function statically, as
``class_bases`` reads base classes: the file is found with the same look-ups (re-exports, aliases, relative imports;
every file read is recorded for ``scan``'s cache) and read with ``ast``; nothing is imported or run.

A value is described twice (:class:`Value`): what it is as a layer, and what calling it builds (a class builds
itself, a ``functools.partial`` what its function builds, a factory what it returns). Each side is a :class:`Types`:
the types the code names, whether the value may be anything else, and the parameters of the function it may come
from. A function's result joins every ``return``; a local name joins every assignment to it anywhere in the body
(order ignored: an over-approximation); a parameter is what the caller passes, substituted at the call. What is not
modelled is "anything else": other calls, attributes, ``None``, names bound twice at the top level of their file,
decorated functions, generators, recursion. A subscript of a top-level dict (``_NORM_MAP[name]``, ``.get``) may be
any of its values or anything added at run time. So a single named type with nothing else is certain; anything more
is only possible, and a rule then rewrites the site only when its kernel checks the modules (``uncertain guarded``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from .class_bases import BaseResolver, Definition, FileSummary
from .qualnames import ast_dotted_name, canonical_torch_name
from .structure import CERTAIN, POSSIBLE, UNKNOWN_TYPE, LayerType, certain

MAX_DEPTH = 16  # nested function summaries and top-level values followed for one call (timm: 3)


@dataclass(frozen=True)
class Types:
    """Types a value may have: `names`, something else when `other`, or whatever the caller passes as `params`."""

    names: frozenset[str] = frozenset()
    other: bool = False
    params: frozenset[str] = frozenset()

    def join(self, other: "Types") -> "Types":
        return Types(self.names | other.names, self.other or other.other, self.params | other.params)

    def substitute(self, bound: Mapping[str, "Types"]) -> "Types":
        """The parameters replaced by what the call passes (anything, where the call is not understood)."""
        result = Types(self.names, self.other)
        for param in self.params:
            result = result.join(bound.get(param, ANY))
        return result

    def layer_type(self) -> LayerType:
        if not self.names:
            return UNKNOWN_TYPE
        if len(self.names) == 1 and not self.other and not self.params:
            return certain(next(iter(self.names)))
        return LayerType(POSSIBLE, tuple(sorted(self.names)))

    @staticmethod
    def of(layer_type: LayerType) -> "Types":
        if layer_type.certainty == CERTAIN:
            return Types(frozenset(layer_type.candidates))
        if layer_type.certainty == POSSIBLE:
            return Types(frozenset(layer_type.candidates), True)
        return ANY


ANY = Types(other=True)


@dataclass(frozen=True)
class Value:
    """A value as a layer (`layer`) and what calling it builds (`builds`)."""

    layer: Types
    builds: Types

    def join(self, other: "Value") -> "Value":
        return Value(self.layer.join(other.layer), self.builds.join(other.builds))

    def substitute(self, bound: Mapping[str, Types]) -> "Value":
        return Value(self.layer.substitute(bound), self.builds.substitute(bound))


UNKNOWN_VALUE = Value(ANY, ANY)


@dataclass(frozen=True)
class Function:
    """A function found in another file."""

    summary: FileSummary
    node: ast.FunctionDef


class _Scope:
    """The names a function binds: parameters, and every expression assigned to each local (None: not modelled)."""

    def __init__(self, node: Optional[ast.FunctionDef]) -> None:
        self.params: set[str] = set()
        self.assigned: dict[str, list[Optional[ast.expr]]] = {}
        if node is None:
            return
        args = node.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            self.params.add(arg.arg)
        for rest in (args.vararg, args.kwarg):
            if rest is not None:
                self.assigned.setdefault(rest.arg, []).append(None)
        for stmt in _body_nodes(node):
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    self._target(target, stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self._target(stmt.target, stmt.value)
            elif isinstance(stmt, (ast.AugAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
                self._target(stmt.target, None)
            elif isinstance(stmt, ast.withitem) and stmt.optional_vars is not None:
                self._target(stmt.optional_vars, None)
            elif isinstance(stmt, ast.ExceptHandler) and stmt.name:
                self.assigned.setdefault(stmt.name, []).append(None)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.assigned.setdefault(stmt.name, []).append(None)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    self.assigned.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
            elif isinstance(stmt, (ast.Global, ast.Nonlocal)):
                for name in stmt.names:
                    self.assigned.setdefault(name, []).append(None)

    def _target(self, target: ast.expr, value: Optional[ast.expr]) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
            return
        for node in ast.walk(target):  # tuple unpacking, starred: each name is not modelled
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.assigned.setdefault(node.id, []).append(None)

    def binds(self, name: str) -> bool:
        return name in self.params or name in self.assigned


def _body_nodes(fn: ast.FunctionDef) -> Iterator[ast.AST]:
    """Every node of a function's body outside nested functions, classes and lambdas (their own scopes), the
    nested definitions themselves included."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _is_torch(qualname: str) -> bool:
    return qualname == "torch" or qualname.startswith("torch.")


class FactoryTypes:
    """Summaries of the functions of other files that one analysed file calls (one per ``BaseResolver``)."""

    def __init__(self, resolver: BaseResolver) -> None:
        self.resolver = resolver
        self._functions: dict[str, Optional[Function]] = {}
        self._summaries: dict[tuple[str, str], Value] = {}
        self._active: set[tuple[str, str]] = set()  # summaries and top-level values being computed: cycles

    # ------------------------------------------------------------------ public
    def function(self, qualname: str) -> Optional[Function]:
        """The function an imported name of the analysed file names (``timm.layers.create_conv2d``); None for a
        class, anything else, a name not found, and torch's own names (classes, read by name)."""
        if qualname not in self._functions:
            found = None if _is_torch(qualname) else self.resolver.definition(qualname)
            self._functions[qualname] = self._function_of(found)
        return self._functions[qualname]

    def call(self, function: Function, args: Optional[Sequence[tuple[Optional[str], Types]]]) -> Value:
        """What calling `function` returns, given what the call passes (keyword or None, and what each argument
        builds; None when the call is not understood, `*args`/`**kwargs`)."""
        return self.summary(function).substitute(self._bind(function, args) if args is not None else {})

    def summary(self, function: Function) -> Value:
        """What the function returns, its parameters left symbolic."""
        key = (function.summary.path, function.node.name)
        if key in self._summaries:
            return self._summaries[key]
        if key in self._active or len(self._active) >= MAX_DEPTH:
            return UNKNOWN_VALUE  # recursion or too deep: not cached, the outer computation decides
        self._active.add(key)
        try:
            result = self._returns(function)
        finally:
            self._active.discard(key)
        self._summaries[key] = result
        return result

    # ------------------------------------------------------------------ functions
    def _bind(self, function: Function, args: Sequence[tuple[Optional[str], Types]]) -> dict[str, Types]:
        """Parameter -> what the call passes to it, or its default (read in the function's file)."""
        spec = function.node.args
        positional = [*spec.posonlyargs, *spec.args]
        bound: dict[str, Types] = {}
        index = 0
        for keyword, types in args:
            if keyword is None:
                if index >= len(positional):
                    return {}  # into *args: not modelled
                bound[positional[index].arg] = types
                index += 1
            else:
                bound[keyword] = types
        defaults = list(zip(positional[len(positional) - len(spec.defaults):], spec.defaults))
        defaults += [(a, d) for a, d in zip(spec.kwonlyargs, spec.kw_defaults) if d is not None]
        for param, default in defaults:
            if param.arg not in bound:
                bound[param.arg] = self._eval(default, function.summary, _Scope(None), frozenset()).builds
        return bound

    def _function_of(self, found: Optional[Definition]) -> Optional[Function]:
        if found is None or found.kind != "function":
            return None
        summary = self.resolver.file(found.path)
        node = summary.functions.get(found.name) if summary is not None else None
        if summary is None or node is None or found.name in summary.ambiguous:
            return None
        return Function(summary, node)

    def _returns(self, function: Function) -> Value:
        node = function.node
        if node.decorator_list:
            return UNKNOWN_VALUE  # a decorator may return anything in the function's place
        scope = _Scope(node)
        result: Optional[Value] = None
        for sub in _body_nodes(node):
            if isinstance(sub, (ast.Yield, ast.YieldFrom)):
                return UNKNOWN_VALUE  # a generator
            if isinstance(sub, ast.Return):
                value = self._eval(sub.value, function.summary, scope, frozenset()) if sub.value else UNKNOWN_VALUE
                result = value if result is None else result.join(value)
        return result if result is not None else UNKNOWN_VALUE  # falls off the end: None

    # ------------------------------------------------------------------ expressions
    def _eval(self, expr: ast.expr, summary: FileSummary, scope: _Scope, locals_active: frozenset[str]) -> Value:
        if isinstance(expr, ast.Name):
            if scope.binds(expr.id):
                return self._local(expr.id, summary, scope, locals_active)
            return self._global(summary, expr.id)
        if isinstance(expr, ast.Attribute):
            dotted = ast_dotted_name(expr)
            if dotted is None or scope.binds(dotted.split(".")[0]):
                return UNKNOWN_VALUE
            return self._global(summary, dotted)
        if isinstance(expr, ast.Call):
            return self._call(expr, summary, scope, locals_active)
        if isinstance(expr, ast.Subscript):
            values = self._dict_values(expr.value, summary, scope)
            return values if values is not None else UNKNOWN_VALUE
        if isinstance(expr, ast.IfExp):
            return self._eval(expr.body, summary, scope, locals_active).join(
                self._eval(expr.orelse, summary, scope, locals_active))
        if isinstance(expr, ast.BoolOp):
            result = self._eval(expr.values[0], summary, scope, locals_active)
            for operand in expr.values[1:]:
                result = result.join(self._eval(operand, summary, scope, locals_active))
            return result
        return UNKNOWN_VALUE  # None, constants, containers, operators, lambdas: no layer the code names

    def _local(self, name: str, summary: FileSummary, scope: _Scope, locals_active: frozenset[str]) -> Value:
        if name in locals_active:
            return UNKNOWN_VALUE  # `x = partial(x, ...)`: the other assignments give what x may start as
        result = Value(ANY, Types(params=frozenset({name}))) if name in scope.params else None
        for value in scope.assigned.get(name, ()):
            got = UNKNOWN_VALUE if value is None else self._eval(value, summary, scope, locals_active | {name})
            result = got if result is None else result.join(got)
        return result if result is not None else UNKNOWN_VALUE

    def _call(self, call: ast.Call, summary: FileSummary, scope: _Scope, locals_active: frozenset[str]) -> Value:
        func = call.func
        dotted = ast_dotted_name(func)
        local = dotted is not None and scope.binds(dotted.split(".")[0])
        qualified = self.resolver.qualified(summary, dotted) if dotted is not None and not local else None
        if qualified == "functools.partial" and call.args:
            wrapped = self._eval(call.args[0], summary, scope, locals_active)
            return Value(ANY, wrapped.builds)
        if dotted is not None and not local and not (qualified is not None and _is_torch(qualified)):
            found = self._definition(summary, dotted)
            if found is not None and found.kind == "function":
                function = self._function_of(found)
                if function is None:
                    return UNKNOWN_VALUE
                args = self._call_args(call, summary, scope, locals_active)
                return self.call(function, args)
        if isinstance(func, ast.Attribute) and func.attr == "get" and call.args:
            values = self._dict_values(func.value, summary, scope)
            if values is not None:
                default = self._eval(call.args[1], summary, scope, locals_active) if len(call.args) > 1 \
                    else UNKNOWN_VALUE
                return values.join(default)
        return Value(self._eval(func, summary, scope, locals_active).builds, ANY)

    def _call_args(self, call: ast.Call, summary: FileSummary, scope: _Scope,
                   locals_active: frozenset[str]) -> Optional[list[tuple[Optional[str], Types]]]:
        args: list[tuple[Optional[str], Types]] = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                return None
            args.append((None, self._eval(arg, summary, scope, locals_active).builds))
        for keyword in call.keywords:
            if keyword.arg is None:
                return None
            args.append((keyword.arg, self._eval(keyword.value, summary, scope, locals_active).builds))
        return args

    # ------------------------------------------------------------------ top-level names
    def _definition(self, summary: FileSummary, dotted: str) -> Optional[Definition]:
        if dotted.split(".")[0] in summary.ambiguous:
            return None
        return self.resolver.lookup(summary, dotted)

    def _global(self, summary: FileSummary, dotted: str) -> Value:
        """A top-level or imported name of a file: a class builds itself, a function what it returns."""
        qualified = self.resolver.qualified(summary, dotted)
        if qualified is not None and _is_torch(qualified):
            # torch's classes by name (its sources are not read for this): `nn.Conv2d` builds a Conv2d.
            is_class = qualified.rsplit(".", 1)[-1][:1].isupper()
            return Value(ANY, Types(frozenset({canonical_torch_name(qualified)}))) if is_class else UNKNOWN_VALUE
        found = self._definition(summary, dotted)
        if found is None:
            return UNKNOWN_VALUE
        if found.kind == "class":
            owner = self.resolver.file(found.path)
            module = owner.module_name if owner is not None else ""
            return Value(ANY, Types(frozenset({f"{module}.{found.name}" if module else found.name})))
        if found.kind == "function":
            function = self._function_of(found)
            return Value(ANY, self.summary(function).layer.substitute({})) if function is not None else UNKNOWN_VALUE
        value = self._top_level_value(found)
        return value if value is not None else UNKNOWN_VALUE

    def _top_level_value(self, found: Definition) -> Optional[Value]:
        owner = self.resolver.file(found.path)
        expr = owner.values.get(found.name) if owner is not None and found.name not in owner.ambiguous else None
        key = (found.path, "=" + found.name)
        if owner is None or expr is None or key in self._active or len(self._active) >= MAX_DEPTH:
            return None
        self._active.add(key)
        try:
            return self._eval(expr, owner, _Scope(None), frozenset())
        finally:
            self._active.discard(key)

    def _dict_values(self, expr: ast.expr, summary: FileSummary, scope: _Scope) -> Optional[Value]:
        """Any value of a top-level dict (``dict(a=X, ...)``, ``{"a": X}``) named by `expr`, or anything added to
        it at run time; None when `expr` is not such a dict."""
        dotted = ast_dotted_name(expr)
        if dotted is None or scope.binds(dotted.split(".")[0]):
            return None
        found = self._definition(summary, dotted)
        if found is None or found.kind != "value":
            return None
        owner = self.resolver.file(found.path)
        literal = owner.values.get(found.name) if owner is not None and found.name not in owner.ambiguous else None
        if owner is None or literal is None:
            return None
        if isinstance(literal, ast.Dict) and all(k is not None for k in literal.keys):
            items = list(literal.values)
        elif (
            isinstance(literal, ast.Call) and isinstance(literal.func, ast.Name) and literal.func.id == "dict"
            and "dict" not in owner.bindings and not literal.args and all(k.arg for k in literal.keywords)
        ):
            items = [k.value for k in literal.keywords]
        else:
            return None
        key = (found.path, "[]" + found.name)
        if key in self._active or len(self._active) >= MAX_DEPTH:
            return UNKNOWN_VALUE
        self._active.add(key)
        try:
            result = UNKNOWN_VALUE  # a registry may be extended at run time
            for item in items:
                result = result.join(self._eval(item, owner, _Scope(None), frozenset()))
            return result
        finally:
            self._active.discard(key)
