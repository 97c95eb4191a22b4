"""Which classes of a file are nn.Module classes, their local bases and families, and how their bodies reach and
rebind their own attributes (one scan per class body)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import libcst as cst

from .. import cstwalk
from ..class_bases import BaseResolver, ClassRef
from ..qualnames import ImportTable, canonical_torch_name, dotted_name, qualname_matches
from ..structure import LayerBinding
from .syntax import _BINARY_OPS, _is_self_attr, _suite_body, _tensor_method, built_softmax_dim, in_place_operator


@dataclass
class _ClassInfo:
    node: Optional[cst.ClassDef]  # None: the module's top-level functions
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)  # local base class names
    external_bases: list[ClassRef] = field(default_factory=list)  # bases resolved to classes of other files

    @property
    def name(self) -> str:
        return self.node.name.value if self.node is not None else ""


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


@dataclass
class _Scan:
    """One walk over a class body: how it reaches and rebinds its own attributes."""

    refs: dict[str, list[cst.Attribute]] = field(default_factory=dict)  # every `self.<attr>`
    stores: dict[str, list[cst.CSTNode]] = field(default_factory=dict)  # attr -> target node / setattr-like call
    # attrs of `stores` stored by a unit other than `__init__`, or by an `__init__` that defines a function (a hook
    # it registers may store them while forward runs)
    stored_outside_init: set[str] = field(default_factory=set)
    init_helpers: frozenset[str] = frozenset()  # methods of a class body only its `__init__` calls (`_init_helpers`)
    # `setattr(self, name, ...)` with a computed name (the first): any attribute may be rebound
    dynamic: Optional[cst.CSTNode] = None
    callees: set[str] = field(default_factory=set)  # qualified names of the imported functions it calls
    operators: set[str] = field(default_factory=set)  # symbols of the op nodes the walk can make of it
    # attributes bound on other objects ("*": a computed name) -> the first store (target or call)
    foreign_stores: dict[str, cst.CSTNode] = field(default_factory=dict)
    # names the class body defines as functions (methods, properties) or binds to a call's result (`x = property(f)`,
    # maybe a descriptor): reading such an attribute may run code
    methods: set[str] = field(default_factory=set)
    walrus: bool = False  # it holds a `:=` (the walk then looks for the names they bind)
    # attrs reached by their name as a string (`getattr(self, "drop")`, `self.get_submodule("drop")`), "*": any
    # (`self.children()`, `self._modules`, `vars(self)`), with the first node reaching each
    by_name: dict[str, cst.CSTNode] = field(default_factory=dict)
    hooked: dict[str, cst.CSTNode] = field(default_factory=dict)  # attr -> a hook registration on `self.<attr>`
    # attrs bound to tensors: registered buffers and parameters, `self.x = nn.Parameter(...)`, `= torch.<fn>(...)`
    tensors: set[str] = field(default_factory=set)
    # attribute names read on a class of the module (`Model.core`: its function, callable with any arguments)
    class_reads: dict[str, cst.CSTNode] = field(default_factory=dict)


# `setattr(self, "attr", ...)`, `delattr(self, "attr")`; `self.add_module("attr", ...)` and friends.
_STORE_BUILTINS = ("setattr", "delattr")
_STORE_METHODS = ("add_module", "register_module", "register_buffer", "register_parameter")
_STORE_KINDS = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.Del, cst.For)
# The node types `_scan` looks at.
_SCANNED = frozenset({
    cst.Attribute, *_STORE_KINDS, cst.WithItem, cst.Call, cst.BinaryOperation, cst.UnaryOperation, cst.FunctionDef,
    cst.Lambda, cst.NamedExpr, cst.Assign,
})
# What `seq = nn.Sequential()` and the like build: a torch container, never an instance of a class of the file.
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.Module"})


def _scan(root: cst.CSTNode, table: ImportTable, foreign: set[str]) -> _Scan:
    """Self references and rebinding stores of one class (`root`: its body) or top-level statement; adds to
    `foreign` every attribute name read on an object other than `self` or an imported module
    (`self.embeddings.dropout`: maybe another class's layer)."""
    scan = _Scan()
    # Stores on other objects (`other.ln = ...`, `m.add_module(f"x{i}", ...)`: maybe some class's layer), with the
    # receiver and the method or function (the statement of the class body or module) holding them.
    stored: list[tuple[str, cst.BaseExpression, cst.CSTNode, cst.CSTNode]] = []
    builds: set[int] = set()  # ids of the units calling a container constructor (`nn.Sequential()`)
    in_class = isinstance(root, cst.BaseSuite)
    units = _suite_body(root) if isinstance(root, cst.BaseSuite) else (root,)
    init_helpers = scan.init_helpers = _init_helpers(units) if in_class else frozenset()
    for unit in units:
        in_init = type(unit) is cst.FunctionDef and (
            unit.name.value == "__init__" or unit.name.value in init_helpers  # type: ignore[attr-defined]
        )
        if in_class:
            scan.methods.update(_code_running_names(unit))
        # `__init__`'s stores, and whether it defines a function (a hook may run one during forward)
        init_stores: list[str] = []
        defines_function = False
        for node in cstwalk.walk(unit, prune=cstwalk.LEAVES):
            kind = type(node)
            if kind not in _SCANNED:
                continue  # most nodes (names, arguments, literals): one set look-up
            if kind is cst.Attribute:
                attr = _is_self_attr(node)  # type: ignore[arg-type]
                if attr is not None:
                    scan.refs.setdefault(attr, []).append(node)  # type: ignore[arg-type]
                    if attr in _EVERY_CHILD:
                        scan.by_name.setdefault("*", node)
                elif table.resolve(node) is None:  # type: ignore[arg-type]
                    foreign.add(node.attr.value)  # type: ignore[attr-defined]
                elif type(node.value) is cst.Name and node.value.value in table.local_classes:  # type: ignore[attr-defined]
                    scan.class_reads.setdefault(node.attr.value, node)  # type: ignore[attr-defined]
            elif (kind in _STORE_KINDS and not (kind is cst.AnnAssign and node.value is None)) or (  # type: ignore[attr-defined]
                kind is cst.WithItem and node.asname is not None  # type: ignore[attr-defined]
            ):  # (a bare annotation, `self.bn: nn.Module`, binds nothing)
                target = node.asname.name if kind is cst.WithItem else node.target  # type: ignore[attr-defined]
                if kind is cst.AugAssign:  # `s += mask`: the walk's `s + mask` node (syntax.in_place_operator)
                    op = in_place_operator(node)  # type: ignore[arg-type]
                    if op is not None:
                        scan.operators.add(op)
                for attr, sub in _attribute_targets(target):
                    if _is_self_attr(sub) is not None:
                        scan.stores.setdefault(attr, []).append(sub)
                        if in_init:
                            init_stores.append(attr)
                        else:
                            scan.stored_outside_init.add(attr)
                    else:
                        stored.append((attr, sub.value, sub, unit))
            elif kind is cst.Call:
                named = _reached_by_name(node)  # type: ignore[arg-type]
                if named is not None:
                    scan.by_name.setdefault(named, node)
                hooked = _hooked_layer(node)  # type: ignore[arg-type]
                if hooked is not None:
                    scan.hooked.setdefault(hooked, node)
                callee = table.resolve(node.func)  # type: ignore[attr-defined]
                if callee is not None:
                    callee = canonical_torch_name(callee)
                    scan.callees.add(callee)
                    if callee in _CONTAINERS:
                        builds.add(id(unit))
                elif type(node.func) is cst.Call:  # type: ignore[attr-defined]
                    if built_softmax_dim(node, table) is not None:  # type: ignore[arg-type]
                        scan.callees.add("torch.nn.functional.softmax")
                else:
                    method = _tensor_method(node)  # type: ignore[arg-type]
                    if method is not None:
                        scan.callees.add("torch.Tensor." + method)
                by_call = _stored_by_call(node)  # type: ignore[arg-type]
                if by_call is not None:
                    receiver, name = by_call
                    if not (isinstance(receiver, cst.Name) and receiver.value == "self"):
                        stored.append((name or "*", receiver, node, unit))
                    elif name:
                        if _registers_a_tensor(node):  # type: ignore[arg-type]
                            scan.tensors.add(name)
                        scan.stores.setdefault(name, []).append(node)
                        if in_init:
                            init_stores.append(name)
                        else:
                            scan.stored_outside_init.add(name)
                    else:
                        scan.dynamic = node
            elif kind is cst.Assign:  # `self.x = nn.Parameter(...)`, `self.x = torch.zeros(...)`: a tensor
                value = node.value  # type: ignore[attr-defined]
                callee = table.resolve(value.func) if type(value) is cst.Call else None  # type: ignore[attr-defined]
                if callee is not None and callee.startswith("torch."):
                    scan.tensors.update(
                        attr for t in node.targets  # type: ignore[attr-defined]
                        if (attr := _is_self_attr(t.target)) is not None
                    )
            elif kind is cst.NamedExpr:
                scan.walrus = True
            elif kind is cst.BinaryOperation:
                op = _BINARY_OPS.get(type(node.operator))  # type: ignore[attr-defined]
                if op is not None:
                    scan.operators.add(op)
            elif kind is cst.UnaryOperation and type(node.operator) is cst.Minus:  # type: ignore[attr-defined]
                scan.operators.add("neg")
            elif kind is cst.Lambda or (kind is cst.FunctionDef and node is not unit):
                defines_function = defines_function or not (in_init and _called_only_here(node, unit))  # type: ignore[arg-type]
        if defines_function:
            scan.stored_outside_init.update(init_stores)
    fresh: dict[int, frozenset[str]] = {}  # by id(function)
    for attr, receiver, node, unit in stored:
        if isinstance(receiver, cst.Name) and isinstance(unit, cst.FunctionDef) and id(unit) in builds:
            if id(unit) not in fresh:
                fresh[id(unit)] = _fresh_containers(unit, table)
            if receiver.value in fresh[id(unit)]:
                continue  # a container the function builds (`seq.add_module(f"conv_{i}", ...)`): no class's instance
        scan.foreign_stores.setdefault(attr, node)
    return scan


def _registers_a_tensor(call: cst.Call) -> bool:
    """``self.register_buffer(name, ...)`` or ``self.register_parameter(name, ...)``."""
    return type(call.func) is cst.Attribute and call.func.attr.value in ("register_buffer", "register_parameter")


# `self.<attr>` reaching every child module by name (a removed layer among them)
_EVERY_CHILD = frozenset({"children", "named_children", "_modules", "__dict__"})
_BY_NAME_BUILTINS = frozenset({"getattr", "hasattr"})


def _reached_by_name(call: cst.Call) -> Optional[str]:
    """The attribute of ``self`` a call reaches by a string: ``getattr(self, "drop")``, ``hasattr(self, "drop")``,
    ``self.get_submodule("drop.p")`` (its first part); "*" for a computed name or ``vars(self)``."""
    func, args = call.func, call.args
    if type(func) is cst.Name and (func.value in _BY_NAME_BUILTINS or func.value == "vars") and args:  # type: ignore[attr-defined]
        if not (type(args[0].value) is cst.Name and args[0].value.value == "self"):  # type: ignore[attr-defined]
            return None
        if func.value == "vars":  # type: ignore[attr-defined]
            return "*"
        name = args[1].value if len(args) > 1 else None
    elif type(func) is cst.Attribute and _is_self_attr(func) == "get_submodule" and args:
        name = args[0].value
    else:
        return None
    if type(name) is cst.SimpleString:
        text = name.evaluated_value  # type: ignore[attr-defined]
        return text.split(".")[0] if isinstance(text, str) else "*"
    return "*"


def _hooked_layer(call: cst.Call) -> Optional[str]:
    """The attribute of ``self`` whose module a call registers a hook on: ``self.ln.register_forward_pre_hook(f)``."""
    func = call.func
    if type(func) is not cst.Attribute or not func.attr.value.startswith("register_") or not func.attr.value.endswith("hook"):  # type: ignore[attr-defined]
        return None
    return _is_self_attr(func.value)  # type: ignore[attr-defined]


def _attribute_targets(target: cst.BaseExpression) -> Iterator[tuple[str, cst.Attribute]]:
    """Attributes bound by an assignment target (`x.a = `, `self.a, *self.b = `): the outermost one of a chain."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _attribute_targets(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _attribute_targets(target.value)
    elif isinstance(target, cst.Attribute):
        yield target.attr.value, target


def _called_only_here(fn: cst.CSTNode, unit: cst.CSTNode) -> bool:
    """Whether `fn`, a function `unit` defines, runs only while `unit` does: an undecorated ``def`` that `unit` only
    calls by name (rtdl's `make_kv_compression()` in ``__init__``), never hands on or stores, nor mentions in a
    nested function or lambda. A lambda, or a function handed on (a hook), may run later."""
    if not isinstance(fn, cst.FunctionDef) or fn.decorators:
        return False
    name = fn.name.value
    called: set[int] = set()
    for node in cstwalk.walk(unit, lambda n: n is unit or n is fn or not isinstance(n, (cst.FunctionDef, cst.Lambda))):
        if node is not unit and node is not fn and isinstance(node, (cst.FunctionDef, cst.Lambda)):
            if name in {n.value for n in cstwalk.walk(node) if isinstance(n, cst.Name)}:
                return False
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name:
            called.add(id(node.func))
        elif isinstance(node, cst.Name) and node.value == name and node is not fn.name and id(node) not in called:
            return False
    return True


def _stored_by_call(call: cst.Call) -> Optional[tuple[cst.BaseExpression, str]]:
    """For a setattr-like call: (the object it binds on, the attribute's name or "" when computed)."""
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
    if isinstance(name_arg, cst.SimpleString) and name_arg.prefix.lower() in ("", "u"):
        return receiver, name_arg.raw_value
    return receiver, ""


def _fresh_containers(fn: cst.FunctionDef, table: ImportTable) -> frozenset[str]:
    """Names that, wherever `fn` reads them, hold a torch container `fn` built: assigned only
    ``name = nn.Sequential(...)`` (or ModuleList, ModuleDict, Module, resolved through the imports) in its own
    scope, and bound no other way anywhere in it, nested scopes included (a parameter, `global`, a loop target, any
    other value; in a nested scope, any binding at all)."""
    built: dict[str, set[str]] = {}  # name -> the root names of the constructors assigned to it
    other: set[str] = set()
    nested: list[cst.CSTNode] = []
    for node in cstwalk.walk(fn, lambda n: n is fn or type(n) not in _SCOPES, cstwalk.LEAVES):
        if type(node) not in _BINDERS:
            continue
        if node is not fn and type(node) in _SCOPES:
            nested.append(node)
            continue
        for name, value in _bindings(node):
            qual = table.resolve(value.func) if isinstance(value, cst.Call) else None
            if qual is not None and canonical_torch_name(qual) in _CONTAINERS:
                assert isinstance(value, cst.Call)
                built.setdefault(name, set()).add(_head(value.func))
            else:
                other.add(name)
    for scope in nested:
        other.update(name for node in cstwalk.walk(scope, prune=cstwalk.LEAVES) if type(node) in _BINDERS
                     for name, _ in _bindings(node))
    bound = other.union(built)
    # `def f(nn): seq = nn.Sequential()`: a constructor named through a local is no torch container.
    return frozenset(name for name, heads in built.items() if name not in other and not heads & bound)


def function_scope(fn: cst.FunctionDef) -> tuple[frozenset[str], frozenset[str]]:
    """The names `fn` binds in its own scope (a parameter `F`, `nn = ...`, a loop variable): Python makes such a
    name local in the whole function, so there it names no import (lambda parameters and comprehension variables
    count too: a name they shadow is then not resolved in `fn`, conservative); and those of them that a function
    nested in it rebinds (``nonlocal name``), which any call may change."""
    bound: set[str] = set()
    nested: list[cst.CSTNode] = []
    for node in cstwalk.walk(fn, lambda n: n is fn or type(n) not in _SCOPES, cstwalk.LEAVES):
        if type(node) in _BINDERS and node is not fn:
            bound.update(name for name, _ in _bindings(node))
            if type(node) in _SCOPES:
                nested.append(node)
    rebound = {
        item.name.value  # type: ignore[attr-defined]
        for scope in nested for node in cstwalk.walk(scope, prune=cstwalk.LEAVES) if type(node) is cst.Nonlocal
        for item in node.names  # type: ignore[attr-defined]
    }
    return frozenset(bound), frozenset(rebound)


_SCOPES = (cst.FunctionDef, cst.ClassDef)  # the nested scopes an assignment statement can be in
# The node types `_bindings` finds names in.
_BINDERS = frozenset({
    cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.Del, cst.AsName,
    cst.ImportAlias, cst.Global, cst.Nonlocal, cst.FunctionDef, cst.ClassDef, cst.Param, cst.TypeAlias, cst.TypeVar,
    cst.TypeVarTuple, cst.ParamSpec, cst.MatchAs, cst.MatchStar, cst.MatchMapping,
})


def _bindings(node: cst.CSTNode) -> Iterator[tuple[str, Optional[cst.BaseExpression]]]:
    """The names a node binds in its scope, each with the value assigned to it alone (`name = value`) or None."""
    if isinstance(node, cst.Assign):
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                yield target.target.value, node.value
            else:
                yield from ((name, None) for name in _target_names(target.target))
    elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name):
        yield node.target.value, node.value
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.Del)):
        yield from ((name, None) for name in _target_names(node.target))
    elif isinstance(node, cst.AsName):  # `with ... as x`, `except E as x`, `import a as x`
        yield from ((name, None) for name in _target_names(node.name))
    elif isinstance(node, cst.ImportAlias) and node.asname is None:  # `import a.b` binds `a`
        yield _head(node.name), None
    elif isinstance(node, (cst.Global, cst.Nonlocal)):
        yield from ((item.name.value, None) for item in node.names)
    elif isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Param, cst.TypeAlias, cst.TypeVar, cst.TypeVarTuple,
                           cst.ParamSpec)):
        yield node.name.value, None
    elif isinstance(node, (cst.MatchAs, cst.MatchStar)) and node.name is not None:
        yield node.name.value, None
    elif isinstance(node, cst.MatchMapping) and node.rest is not None:
        yield node.rest.value, None


def _target_names(target: cst.BaseExpression) -> Iterator[str]:
    """Names an assignment target binds (`a`, `a, *b`; not the roots of `a.x`, `a[i]`, which syntax's target
    collector counts as mutated)."""
    if type(target) is cst.Name:
        yield target.value  # type: ignore[attr-defined]
    elif isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _target_names(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)


def _head(chain: cst.BaseExpression) -> str:
    """The name a dotted chain starts at (`nn` of `nn.Sequential`), for chains known to be one."""
    name = dotted_name(chain)
    assert name is not None
    return name.split(".")[0]


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


def _code_running_names(unit: cst.CSTNode) -> set[str]:
    """The names a class-body statement defines as a function, or binds to a call's result."""
    if isinstance(unit, cst.FunctionDef):
        return {unit.name.value}
    if isinstance(unit, cst.SimpleStatementLine):
        return {
            target.target.value
            for small in unit.body
            if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
            for target in small.targets
            if isinstance(target.target, cst.Name)
        }
    return set()


def _init_helpers(units: Sequence[cst.CSTNode]) -> frozenset[str]:
    """The methods of a class body that only its ``__init__`` calls (BEiT's ``self._init_rel_pos_embedding()``): what
    they store on ``self`` is stored while ``__init__`` runs. Each must be referenced as ``self.<name>`` in the
    class body, and only by calls in ``__init__``."""
    methods = {u.name.value: u for u in units if type(u) is cst.FunctionDef}  # type: ignore[attr-defined]
    init = methods.get("__init__")
    if init is None:
        return frozenset()
    called: set[str] = set()
    # Not in a function `__init__` defines (a hook may run it later, during forward).
    for node in cstwalk.walk(init, descend=lambda n: n is init or type(n) not in (cst.FunctionDef, cst.Lambda)):
        if type(node) is cst.Call and (name := _is_self_attr(node.func)) in methods:  # type: ignore[attr-defined]
            called.add(name)  # type: ignore[arg-type]
    elsewhere = {
        _is_self_attr(node)  # type: ignore[arg-type]
        for unit in units if unit is not init
        for node in cstwalk.walk(unit) if type(node) is cst.Attribute
    }
    return frozenset(called - elsewhere - {"__init__"})


def _stored_outside_init(scans: list[_Scan]) -> frozenset[str]:
    """Attributes some method of the family other than an ``__init__`` stores on `self` ("*": any, through a computed
    setattr name)."""
    stored = set().union(*(scan.stored_outside_init for scan in scans))
    if any(scan.dynamic is not None for scan in scans):
        stored.add("*")
    return frozenset(stored)


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
    if any(scan.dynamic is not None for scan in scans):
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
