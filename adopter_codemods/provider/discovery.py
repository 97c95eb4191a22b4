"""Which classes of a file are nn.Module classes, their local bases and families, and how their bodies reach and
rebind their own attributes (one scan per class body)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import libcst as cst

from .. import cstwalk
from ..class_bases import BaseResolver, ClassRef
from ..qualnames import ImportTable, canonical_torch_name, dotted_name, qualname_matches
from ..structure import LayerBinding
from .syntax import _BINARY_OPS, _is_self_attr, _tensor_method


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
    dynamic: bool = False  # `setattr(self, name, ...)` with a computed name: any attribute may be rebound
    callees: set[str] = field(default_factory=set)  # qualified names of the imported functions it calls
    operators: set[str] = field(default_factory=set)  # symbols of the op nodes the walk can make of it
    foreign_stores: set[str] = field(default_factory=set)  # attributes bound on other objects ("*": computed)


# `setattr(self, "attr", ...)`, `delattr(self, "attr")`; `self.add_module("attr", ...)` and friends.
_STORE_BUILTINS = ("setattr", "delattr")
_STORE_METHODS = ("add_module", "register_module", "register_buffer", "register_parameter")
_STORE_KINDS = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.Del, cst.For)
# The node types `_scan` looks at.
_SCANNED = frozenset({cst.Attribute, *_STORE_KINDS, cst.WithItem, cst.Call, cst.BinaryOperation, cst.UnaryOperation})


def _scan(root: cst.CSTNode, table: ImportTable, foreign: set[str]) -> _Scan:
    """Self references and rebinding stores of one class; adds to `foreign` every attribute name read on an
    object other than `self` or an imported module (`self.embeddings.dropout`: maybe another class's layer)."""
    scan = _Scan()
    for node in cstwalk.walk(root, prune=cstwalk.LEAVES):
        kind = type(node)
        if kind not in _SCANNED:
            continue  # most nodes (names, arguments, literals): one set look-up
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
