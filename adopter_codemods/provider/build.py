"""build_module_structure: discovers a file's nn.Module classes and gives each its bindings, scans and lazy walk."""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterable, Optional

import libcst as cst

from ..class_bases import BaseResolver
from ..factory_types import FactoryTypes
from ..gc_pause import collector_paused
from ..init_bindings import InitReader
from ..qualnames import ImportTable, dotted_name
from ..structure import POSSIBLE, UNKNOWN_TYPE, ClassStructure, LayerType, ModuleStructure
from .discovery import (
    _ClassInfo, _descendants, _family, _find_method, _is_module_class, _rebound, _Scan, _scan, _stored_outside_init,
)
from .syntax import _suite_body
from .walk import _ClassWalker

_SEQUENTIAL = "torch.nn.Sequential"


@collector_paused
def build_module_structure(
    module: cst.Module, path: Optional[str] = None, previous: Optional[ModuleStructure] = None,
    only: Optional[str] = None,
) -> ModuleStructure:
    """The model structure of every nn.Module class defined at the top level of a module, plus one unnamed unit
    for the module's top-level functions when any of them holds a DSL node. `path`: the module's file, from which
    bases imported from other files are resolved (`class_bases`); without it only their names decide. `previous`:
    the structure of another version of the same file, sharing the statements that did not change (plan "sink"'s
    check, engine.SinkCheck): its resolver and the scans of those statements are reused, in place of `path`'s.
    `only`: the name of the one class wanted (every class is still scanned: what the others do to it counts)."""
    table = ImportTable.from_module(module)
    resolver = previous.resolver if previous is not None else BaseResolver(path)
    if table.star_modules:  # `from x import *`: names no import binds may come from x (read, never imported)
        table.star_lookup = functools.partial(resolver.star_export, tuple(table.star_modules))
    scanned = _Scans(table, previous.scans if previous is not None else {})
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
    foreign = scanned.foreign
    scans = {name: scanned(info.node, info.node.body) for name, info in classes.items() if info.node is not None}
    # attribute ("*": any) -> a store on another object binding it, the first met
    foreign_stores: dict[str, cst.CSTNode] = {}
    for scan in scans.values():
        _add_stores(foreign_stores, scan.foreign_stores.items())
    function_callees: set[str] = set()
    function_operators: set[str] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.ClassDef):
            scan = scanned(stmt, stmt)
            # Outside a class body `self` is any object (`def _fwd(self, x)` assigned as `forward = _fwd`).
            foreign.update(scan.refs)
            _add_stores(foreign_stores, scan.foreign_stores.items())
            _add_stores(foreign_stores, ((attr, nodes[0]) for attr, nodes in scan.stores.items()))
            if scan.dynamic is not None:
                _add_stores(foreign_stores, [("*", scan.dynamic)])
            if isinstance(stmt, cst.FunctionDef):
                function_callees |= scan.callees
                function_operators |= scan.operators
    subclasses: dict[str, set[str]] = {n: set() for n in classes}
    for name, info in classes.items():
        for base in info.bases:
            if base in subclasses:
                subclasses[base].add(name)
    result: list[ClassStructure] = []
    walrus = any(hit[1].walrus for hit in scanned.done.values())
    class_reads = {k: v for hit in reversed(list(scanned.done.values())) for k, v in hit[1].class_reads.items()}
    walkers: dict[str, _ClassWalker] = {}

    def walker_of(name: str) -> _ClassWalker:
        if name not in walkers:
            walker = walkers[name] = _ClassWalker(classes[name], classes, table)
            walker.walrus_possible = walrus
            walker.collect_bindings(functions, _SEQUENTIAL in scans[name].callees, factories, scans[name].init_helpers)
        return walkers[name]

    for name, info in classes.items():
        if (only is not None and name != only) or not _is_module_class(info, classes, table, memo, resolver):
            continue
        walker = walker_of(name)
        heirs = _heirs_of_forward(name, classes, subclasses)
        if heirs:
            _bind_heirs_layers(walker, [walker_of(h) for h in heirs])
        # An __init__ edit reaches every class sharing the edited statement: the family of local bases and their
        # subclasses sees the layers (and may rebind them, or call the removed ones).
        family = _family(name, classes, subclasses)
        self_refs: dict[str, list[cst.Attribute]] = {}
        for cls_name in family:
            for attr, nodes in scans[cls_name].refs.items():
                self_refs.setdefault(attr, []).extend(nodes)
        structure = ClassStructure(name, info.node, walker.bindings, None, self_refs, walker.entry_names)
        structure.rebound = _rebound(walker.bindings, [scans[c] for c in family])
        structure.stored_outside_init = _stored_outside_init([scans[c] for c in family])
        structure.methods = frozenset().union(*(scans[c].methods for c in family))
        structure.foreign_stores = foreign_stores
        structure.foreign_attributes = frozenset(foreign)
        structure.reached_by_name = {k: v for c in reversed(family) for k, v in scans[c].by_name.items()}
        structure.hooked = {k: v for c in reversed(family) for k, v in scans[c].hooked.items()}
        structure.tensor_attributes = frozenset().union(*(scans[c].tensors for c in family))
        structure.class_reads = class_reads
        # Forward and helpers may come from local bases.
        bases = _family(name, classes, {})
        external = [ref for c in bases for ref in classes[c].external_bases]
        if external:
            # Methods of bases in other files run on this class's instances: a layer they read is not removed, and
            # one they bind is not relied on (they are not walked, so their uses cannot be checked).
            reads, stores = resolver.attributes(external)
            structure.rebound |= stores
            structure.stored_outside_init |= stores
            structure.foreign_attributes |= reads
            structure.methods |= resolver.methods(external)  # a property there runs code when read
        structure.callees = frozenset().union(*(scans[c].callees for c in bases))
        structure.operators = frozenset().union(*(scans[c].operators for c in bases))
        structure.walk = functools.partial(_walk_class, walker)
        structure.containers = walker.containers
        structure.container_graphs = walker.container_graphs()
        result.append(structure)
    if function_callees and only in (None, ""):
        # Top-level functions (helpers such as `def softmax(x, dim)`) as one unnamed unit without layers.
        walker = _ClassWalker(_ClassInfo(None), classes, table)
        walker.walrus_possible = walrus
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
    return ModuleStructure(result, module, resolver, scanned.done)


def _heirs_of_forward(name: str, classes: dict[str, _ClassInfo], subclasses: dict[str, set[str]]) -> list[str]:
    """The classes of the file that run `name`'s own ``forward`` (subclasses that do not define another)."""
    forward = classes[name].methods.get("forward")
    if forward is None:
        return []
    return [c for c in _descendants(name, subclasses) if c != name and _find_method(classes[c], classes, "forward", set()) is forward]


def _bind_heirs_layers(walker: _ClassWalker, heirs: list[_ClassWalker]) -> None:
    """A forward that calls layers only its subclasses bind (pretrainedmodels' and timm's SENet ``Bottleneck``, whose
    ``SEBottleneck``/``SEResNetBottleneck`` build ``conv1``/``bn1``): each attribute every heir binds and the class
    does not is bound to what the heirs bind, its type only possible (a subclass elsewhere may bind another layer),
    so that only rules whose kernels check their modules at run time rewrite that forward."""
    for attr in set.intersection(*(set(h.bindings) for h in heirs)) - set(walker.bindings):
        bound = [b for h in heirs for b in h.bindings[attr]]
        joined = functools.reduce(lambda a, b: a.join(b), (b.layer_type for b in bound))
        possible = LayerType(POSSIBLE, joined.candidates) if joined.candidates else UNKNOWN_TYPE
        walker.bindings[attr] = [
            dataclasses.replace(b, qualname=None, layer_type=possible, direct=False, args_known=False) for b in bound
        ]


class _Scans:
    """`_scan` per top-level statement, reusing those of another version of the file for the very same nodes (a
    scan reads only its statement and the imports); `foreign` gathers what every scan adds to it."""

    def __init__(self, table: ImportTable, reused: dict[int, tuple[cst.CSTNode, _Scan, frozenset[str]]]) -> None:
        self.table = table
        self.reused = reused
        self.foreign: set[str] = set()
        self.done: dict[int, tuple[cst.CSTNode, _Scan, frozenset[str]]] = {}

    def __call__(self, statement: cst.CSTNode, root: cst.CSTNode) -> _Scan:
        hit = self.reused.get(id(statement))
        if hit is None or hit[0] is not statement:
            names: set[str] = set()
            hit = (statement, _scan(root, self.table, names), frozenset(names))
        self.done[id(statement)] = hit
        self.foreign |= hit[2]
        return hit[1]


def _add_stores(stores: dict[str, cst.CSTNode], found: Iterable[tuple[str, cst.CSTNode]]) -> None:
    """The first store met per attribute stays: the one a refusal names."""
    for attr, node in found:
        stores.setdefault(attr, node)


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
