"""The model structure of a module in the paper's DSL (§3.1–3.2), linked back to the CST.

Per ``nn.Module`` class: the layer bindings of ``__init__`` and the ``forward`` control-flow graph
(adopter_codemods/flow/graph.py). Its events (helpers inlined): DSL nodes (layer calls, functional calls, tensor
ops) plus the uses and definitions of every other statement, which the matcher needs to prove a rewrite safe.
Values carry *value ids*: a fresh id per computation, shared by aliases (``a = b``), a phi where a name holds
different ids on the edges into a join, so data flow is exact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Optional, Union

import libcst as cst

from .class_bases import BaseResolver

if TYPE_CHECKING:
    from .flow.graph import FlowGraph
    from .provider.discovery import _Scan


CERTAIN = "certain"
POSSIBLE = "possible"  # one of `candidates`, or something the caller passes instead
UNKNOWN = "unknown"
OPAQUE = "opaque"  # not a layer the code shows: a barrier between list elements whose order is unknown


@dataclass(frozen=True)
class LayerType:
    """What type a layer binding has (adopter_codemods/init_bindings.py): one certain type; possible (one of the
    named candidates, or whatever a caller passes instead); unknown; opaque (a barrier, no layer)."""

    certainty: str
    candidates: tuple[str, ...] = ()

    @property
    def certain(self) -> Optional[str]:
        return self.candidates[0] if self.certainty == CERTAIN else None

    def join(self, other: "LayerType") -> "LayerType":
        """The type of a value that is this one on some paths and `other` on the others."""
        if self == other:
            return self
        names = tuple(sorted(set(self.candidates + other.candidates)))
        return LayerType(POSSIBLE, names) if names else UNKNOWN_TYPE


UNKNOWN_TYPE = LayerType(UNKNOWN)
OPAQUE_TYPE = LayerType(OPAQUE)


def certain(qualname: str) -> LayerType:
    return LayerType(CERTAIN, (qualname,))



@dataclass(eq=False)
class LayerBinding:
    """``self.<attr> = <value>`` in ``__init__`` (or an element of an ``nn.Sequential`` built in the class)."""

    attr: str
    qualname: Optional[str]  # the layer type when certain (`layer_type.certain`); None otherwise
    args: tuple[cst.Arg, ...]  # the constructor's arguments (a factory's returned call, parameters replaced)
    subscript: bool
    value: cst.BaseExpression  # the expression as written in __init__ (`conv3x3(a, b)`, `norm_layer(c)`)
    statement: Optional[cst.SimpleStatementLine]  # None for Sequential elements (but a nested container's line)
    conditional: bool  # assigned under an if/for/try in __init__
    container: Optional["LayerBinding"] = None  # the nn.Sequential binding holding this element
    elements: tuple["LayerBinding", ...] = ()
    layer_type: LayerType = UNKNOWN_TYPE
    direct: bool = True  # `value` calls the type itself: an __init__ edit may rewrite it
    args_known: bool = True  # `args` are what the constructor receives
    where: str = "__init__"  # the function building it (a container may be built in `_make_layer`)


@dataclass(frozen=True, eq=False)
class Site:
    """Where an event's statement lives: the small statement, its line, the block holding it."""

    small: cst.BaseSmallStatement | cst.BaseCompoundStatement
    line: cst.BaseStatement  # the statement as it appears in `block`
    block: tuple[cst.BaseStatement, ...]  # statements of the enclosing block (identity of the suite's body)
    owner: cst.CSTNode  # the node whose body is `block` (FunctionDef, If, Else, For, ...)
    function: str  # qualified method name, e.g. "BertSelfOutput.forward"
    inline_stack: tuple["Site", ...]  # call sites through which a helper was inlined (outermost first)
    loop_copy: tuple[int, ...]  # ids of the enclosing loop-body copies on this path
    scope: str = ""  # variable-name prefix of the inlined helper ("" in forward itself)


# What an operand is: a variable (with its value id), a constant, or an opaque expression.
ValueKind = Literal["var", "const", "expr"]
# What a DSL node calls: a layer bound in __init__, a function (by qualified name), or an operator.
NodeKind = Literal["layer", "func", "op"]


@dataclass(frozen=True, eq=False)
class Value:
    """An operand: a variable (with its value id), a constant, or an opaque expression."""

    kind: ValueKind
    text: str
    vid: int  # value id (constants get one too; they are never redefined)
    expr: cst.BaseExpression
    uses: tuple[tuple[str, int], ...]  # (name, value id) the expression reads; for "var": itself
    pure: bool = True  # no calls inside: safe to evaluate at a later point


@dataclass(eq=False)
class DLNode:
    """A DSL node on one path: ``Type(args) -> out`` or ``a op b -> out``."""

    kind: NodeKind
    qualname: Optional[str]  # layer type / function name / operator symbol
    layer: Optional[str]  # "self.dropout" for layer calls
    bindings: tuple[LayerBinding, ...]  # __init__ bindings of `layer`
    args: tuple[Value, ...]
    kwargs: tuple[tuple[str, Value], ...]
    call: Optional[cst.Call]
    out: int
    expr: cst.BaseExpression
    parent: Optional[cst.BaseExpression]  # expression of the DSL node this one is nested in
    whole_statement: bool  # `expr` is the entire value of its statement (`x = expr`, `return expr`, `expr`)
    site: Site
    index: int = -1  # position in the function's graph (a topological order)


@dataclass(frozen=True, eq=False)
class Use:
    vids: tuple[int, ...]
    site: Site
    # The scoped names holding `vids`, in step with them, where the walk reads them by name (a statement read as a
    # whole, an assignment's value and target): what `flow.aliasing` follows from name to value.
    names: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Def:
    name: str
    vid: int
    site: Site


Event = Union[DLNode, Use, Def]


@dataclass(frozen=True)
class NodeSummary:
    """What kinds of DSL node a graph holds, for the matcher's cheap test before it searches the graph."""

    ops: frozenset[str]  # operator symbols of its op nodes
    names: frozenset[str]  # qualified names of its nodes (called types, layer types, operator symbols)
    layer_types: frozenset[str]  # types of its layer calls: the node's and its __init__ bindings'
    has_layers: bool
    possible_types: frozenset[str] = frozenset()  # candidates of its layers whose type is only possible


def summarise(nodes: list[DLNode]) -> NodeSummary:
    layers = [n for n in nodes if n.kind == "layer" and n.layer is not None]
    return NodeSummary(
        frozenset(n.qualname for n in nodes if n.kind == "op" and n.qualname),
        frozenset(n.qualname for n in nodes if n.qualname),
        frozenset(q for n in layers for q in (n.qualname, *(b.qualname for b in n.bindings)) if q),
        bool(layers),
        frozenset(q for n in layers for b in n.bindings if b.layer_type.certainty == POSSIBLE for q in b.layer_type.candidates),
    )


@dataclass(eq=False)
class ClassStructure:
    name: str  # "" for the unit of the module's top-level functions
    node: Optional[cst.ClassDef]  # None for that unit
    init_bindings: dict[str, list[LayerBinding]]
    # Graphs of forward (helpers inlined), then of each other method not inlined there, walked on its own; for the
    # top-level unit, of each function. None until first read: `walk` computes them then, so classes no rule can
    # match (see `callees`, `init_bindings`) are never walked.
    _graphs: Optional[list["FlowGraph"]]
    self_references: dict[str, list[cst.Attribute]]  # attr -> every `self.<attr>` in the class (and subclasses)
    entry_names: dict[int, str] = field(default_factory=dict)  # value id -> name read before any assignment
    _truncated: bool = False  # forward could not be analysed (nested too deeply): matches are refused in this class
    skipped_reason: Optional[str] = None  # set by the walk, so only for classes some rule needed paths of
    # Units the walk gave up on, with the reason: the class itself (then `skipped_reason`) or one of its other
    # methods / top-level functions. Set by the walk, so only where some rule needed the paths.
    skipped: list[tuple[cst.CSTNode, str]] = field(default_factory=list)
    # Attributes (re)bound in the class family other than by this class's __init__ bindings (`"*"`: any, through
    # a computed setattr name): a forward rewrite must not rely on what such a layer is.
    rebound: frozenset[str] = frozenset()
    # Attributes a method of the class family other than `__init__` (or a function `__init__` defines, such as a hook,
    # or a base in another file) stores on `self` (`"*"`: any): the others hold, while forward runs, what `__init__`
    # (or the caller) left in them.
    stored_outside_init: frozenset[str] = frozenset()
    # Names the class family (local bases and subclasses) defines as methods or properties, or binds to a call's
    # result in a class body: reading `self.<name>` may run code.
    methods: frozenset[str] = frozenset()
    # Attribute names the module reads on objects other than `self` (`self.embeddings.dropout`): such a layer may
    # be used from outside the class, so it is not removed.
    foreign_attributes: frozenset[str] = frozenset()
    # Attributes the class family reaches by their name as a string (`getattr(self, "drop")`), "*": any
    # (`self.children()`), each with the first node reaching it: such a layer is not removed.
    reached_by_name: Mapping[str, cst.CSTNode] = field(default_factory=dict)
    # Attributes whose module the class family registers a hook on (`self.ln.register_forward_pre_hook(f)`), each
    # with the first registration: a rewrite must not change what such a layer is called with.
    hooked: Mapping[str, cst.CSTNode] = field(default_factory=dict)
    # Attributes the class family binds to tensors (registered buffers and parameters, `self.x = torch.<fn>(...)`):
    # a layer handed one when built may change it in place whenever it is called.
    tensor_attributes: frozenset[str] = frozenset()
    # Attribute names the module reads on its classes (`Model.core`), each with the first read: such a method may be
    # called with any arguments, not only through `self`.
    class_reads: Mapping[str, cst.CSTNode] = field(default_factory=dict)
    # Attribute names the module binds on objects other than `self` (`m.ln = nn.LayerNorm(8)`, "*": a computed
    # setattr), each with the first store binding it: a layer whose class an __init__ edit changes must not be
    # replaced from outside. Not counted: stores on a local holding a container its function builds.
    foreign_stores: Mapping[str, cst.CSTNode] = field(default_factory=dict)
    # Qualified names of the functions called in the class and its local bases (module functions for the unit).
    callees: frozenset[str] = frozenset()
    # Symbols of the operators (`@`, `*`, "neg", ...) used in the class and its local bases (module functions for
    # the unit): an op node of a rule's pattern needs its operator among them.
    operators: frozenset[str] = frozenset()
    walk: Optional[Callable[["ClassStructure"], None]] = field(default=None, repr=False)
    # Whether the walk splits `if`s that update a name by an op (`provider.walk._guards_ops`): only a rule with a
    # fallback plan needs them apart; `find_all` clears it for classes no such rule may match.
    split_guarded_ifs: bool = True
    # Every nn.Sequential the class's own methods build (the module's functions, for the unit), elements in order,
    # and one straight-line graph per container calling them in turn (adopter_codemods/init_bindings.py).
    containers: list[LayerBinding] = field(default_factory=list)
    container_graphs: list["FlowGraph"] = field(default_factory=list)
    # The module the class is defined in: guards that judge other top-level definitions (ADP011/ADP013) read it.
    module: Optional[cst.Module] = field(default=None, repr=False)
    # Resolves the module's imported classes in other files (ADP001-003, ADP014 judge an imported attention class).
    resolver: Optional[BaseResolver] = field(default=None, repr=False)
    # The answers of the guards' cheap tests, by guard name (`matcher._guards_may_match`).
    guard_may_match: dict[str, bool] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def layer_bindings(self) -> tuple[LayerBinding, ...]:
        """Every layer the class binds: ``__init__`` bindings, their elements and the containers' elements. Computed
        on first use, after the bindings are read."""
        bindings = [e for bs in self.init_bindings.values() for b in bs for e in (b, *b.elements)]
        return (*bindings, *(e for c in self.containers for e in c.elements))

    @functools.cached_property
    def bound_types(self) -> tuple[frozenset[str], frozenset[str]]:
        """The qualified names of the layer types the class binds (`layer_bindings`): the certain ones; and with the
        candidates of the possible ones too (`matcher.may_match` asks once per rule variant)."""
        bindings = self.layer_bindings
        certain = frozenset(e.qualname for e in bindings if e.qualname)
        candidates = (q for e in bindings if e.layer_type.certainty == POSSIBLE for q in e.layer_type.candidates)
        return certain, certain.union(candidates)

    def _walked(self) -> None:
        if self._graphs is None:
            self._graphs = []
            if self.walk is not None:
                self.walk(self)

    @property
    def graphs(self) -> list["FlowGraph"]:
        self._walked()
        assert self._graphs is not None
        return self._graphs

    @graphs.setter
    def graphs(self, graphs: list["FlowGraph"]) -> None:
        self._graphs = graphs

    @property
    def truncated(self) -> bool:
        self._walked()
        return self._truncated

    @truncated.setter
    def truncated(self, value: bool) -> None:
        self._truncated = value


@dataclass(eq=False)
class ModuleStructure:
    classes: list[ClassStructure]
    module: cst.Module
    resolver: BaseResolver
    # id(top-level statement) -> (it, its scan, the foreign attribute names it reads): reused by a structure of
    # another version of the file for the statements they share (provider.build_module_structure)
    scans: dict[int, tuple[cst.CSTNode, _Scan, frozenset[str]]] = field(default_factory=dict)

    @property
    def dependencies(self) -> dict[str, object]:
        """Besides the module's text, what class discovery and the guards read in other files
        (`class_bases.BaseResolver.dependencies`; empty when nothing was looked up there): `scan`'s cache checks it
        before reusing findings, so it is read after matching."""
        return self.resolver.dependencies()
