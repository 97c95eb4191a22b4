"""Pattern matching (paper §3.4) plus the safety checks that make a rewrite trustworthy (docs/DESIGN.md §4.4).

1. Sub-sequence matching of the ``forward`` source pattern along the control-flow graph of each function of a
   class (adopter_codemods/flow), with consistent ``$var`` bindings (a variable binds a value *id*, so data flow is
   exact) and ``*`` wildcards.
2. The ``init`` source pattern against the ``__init__`` bindings of the layers the forward match called.
3. A rewrite plan (where the fused call goes, which statements disappear or are copied into branches) and the
   checks on *every* path through the matched statements (reachability and def-use queries on the graph): no intermediate value used outside the match, every
   input of the fused call still holds the same value where the call is placed, no removed layer used elsewhere.

Matches that fail a check are not rewritten: precision first. Each check returns a :class:`Reason` (a category,
a sentence, and the statement that causes it) instead of a bare "no", so ``scan --show-refused`` can say why a
structural match was refused (:class:`Refusal`); collecting them is asked for per call and costs nothing otherwise.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Collection, Literal, Mapping, Optional, Sequence, Union

import libcst as cst

from . import cstwalk
from . import guards as guard_registry
from . import suppression
from .dsl import Atom, CallNode, Const, InPlace, Node, OpNode, Rule, Var, Wildcard
from . import feeders as _feeders  # the module, not its names: it may be importing this one
from .flow import aliasing
from .flow import checks as flow_checks
from .flow.graph import FlowGraph
from .provider import _const_text, _written_names
from .provider.discovery import function_scope
from .provider.syntax import (
    _call_receivers, _is_self_attr, _object_name, _read_names, computes_only, computing_call, fallback_condition,
    in_place_masked_fill, softmax_module_dim,
)
from .qualnames import qualname_matches
from .signatures import SIGNATURES, default_source
from .structure import CERTAIN, POSSIBLE, ClassStructure, Def, DLNode, LayerBinding, LayerType, NodeSummary, Site, Value

if TYPE_CHECKING:
    from .hoist import Hoist

# Sets and dicts here key CST nodes by id(): LibCST nodes hash by identity too, but through a Python-level __hash__
# several times slower than id(), on the graphs of every class (the scan's hot loop).
_COMMUTATIVE = ("+", "*")
_SAFE_TEST_CALLS = ("isinstance", "hasattr", "getattr", "len", "callable")


@dataclass(frozen=True)
class LayerRef:
    """A `$layer` bound to ``self.<attr>`` (and its ``__init__`` bindings)."""

    attr: str
    bindings: tuple[LayerBinding, ...]


@dataclass(frozen=True)
class InitArg:
    """An expression bound to a `$var` as written: an ``__init__`` argument (or a default's source), or the callee
    of a `$fn:Type(...)` node."""

    expr: Optional[cst.BaseExpression]
    default: Optional[str] = None


@dataclass(frozen=True)
class RestArgs:
    """``**$rest``: the arguments the pattern did not name, as written (``call_args``: all of that call's)."""

    args: tuple[cst.Arg, ...]
    call_args: tuple[cst.Arg, ...] = ()

    def positions_kept(self, before: int) -> bool:
        """Whether the positional arguments among ``args``, placed after ``before`` positional arguments of a target
        call, keep the positions they had in the source call (else they would bind other parameters)."""
        source = [id(a) for a in self.call_args if a.keyword is None]
        moved = [id(a) for a in self.args if a.keyword is None]
        return all(source.index(a) == before + i for i, a in enumerate(moved))


Binding = Union[Value, LayerRef, InitArg, RestArgs]
_EMPTY_MODULE = cst.Module([])  # renders a node's code with the default formatting


def _code(node: cst.CSTNode) -> str:
    return _EMPTY_MODULE.code_for_node(node)


# How a match is rewritten (docs/ENGINE.md): "inline" (nested in the anchor call), "block" (statements of the
# anchor's block), "branch" (a prefix copied into the other arm of an `if`), "fallback" (the region kept as written
# under conditions), "hoist" (the call bound to temporaries before the first node), "sink" (statements before an `if`
# copied atop every arm, or after it to their ends; the fusion left to the next round), "init" (an instantiation rule), "container" (an
# nn.Sequential).
Plan = Literal["inline", "block", "branch", "fallback", "hoist", "sink", "init", "container"]
Certainty = Literal["exact", "guarded"]


@dataclass(frozen=True, eq=False)
class Match:
    """What matched: the rule's source pattern bound in one class. Never changed once built (the planner reads it
    and returns a :class:`Placement`); a step that learns more, such as ``__init__`` matching, derives a new one."""

    rule: Rule
    cls: ClassStructure
    graph: Optional[FlowGraph]  # the graph of the matched function (None for an init-only match)
    nodes: tuple[DLNode, ...]  # matched forward nodes, pattern order (wildcards excluded)
    env: Mapping[str, Binding]  # `$var` -> what it is bound to (a read-only copy of the mapping given)
    init_matches: Mapping[str, LayerBinding] = field(default_factory=dict)  # init pattern var -> binding
    container: Optional[LayerBinding] = None  # the nn.Sequential whose elements matched
    skipped: frozenset[int] = frozenset()  # indices of the optional source nodes absent from this match
    # "exact": every matched layer's type is certain; "guarded": some is only possible or unknown, and the rule's
    # kernel checks the modules at run time (rule header `uncertain guarded`, docs/DESIGN.md §4)
    certainty: Certainty = "exact"

    def __post_init__(self) -> None:
        # Read-only copies: the dicts the matcher built stay its own, and no later step can edit the match's.
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "init_matches", MappingProxyType(dict(self.init_matches)))

    def key(self) -> frozenset[tuple[int, Optional[str]]]:
        return frozenset((id(n.expr), n.layer) for n in self.nodes)


@dataclass(frozen=True)
class Placement:
    """Where the rewrite of a :class:`Match` goes, as the planner decided it (``_plan``, ``_plan_fallback``,
    ``_plan_absorbing``, ``hoist.plan_hoist``): the rewriter turns it into CST edits, the reports read the anchor.
    Equal placements place the same statements the same way (CST nodes compare by identity)."""

    plan: Plan
    anchor: Optional[DLNode] = None  # the last matched node, where the fused call goes (the first one for "hoist")
    deleted: tuple[cst.CSTNode, ...] = ()  # forward small statements that disappear
    names: Mapping[int, str] = field(default_factory=dict)  # value id -> variable holding it where the call goes
    # tuple targets: output value id -> the plain copy `alias = name` of it the rewrite deletes, assigning the output
    # to `alias` instead (`_output_copies`)
    output_copies: Mapping[int, cst.Assign] = field(default_factory=dict)
    # plans "branch" and "sink": the `if` whose other arms (every arm: "sink") receive a copy of the prefix
    branch_if: Optional[cst.If] = None
    branch_owner: Optional[cst.CSTNode] = None  # the suite of `branch_if` holding the anchor
    prefix_lines: tuple[cst.BaseStatement, ...] = ()
    unsunk: Optional[Reason] = None  # plan "sink" (sink.py): why the match cannot be placed where it stands
    suffix: bool = False  # plan "sink": the copied lines follow the `if` and go to the end of every arm
    # plan "fallback": the function-body statements from the first matched one to the anchor's (rewritten as
    # `if <any of fallback_tests>: <region as written> else: <region fused>`; no tests: the fused region alone),
    # and the `if`s in it the fused copy drops
    region: tuple[cst.BaseStatement, ...] = ()
    region_ifs: tuple[cst.If, ...] = ()
    fallback_tests: tuple[cst.BaseExpression, ...] = ()
    hoist: Optional[Hoist] = None  # plan "hoist" (hoist.py): the new statement binding the outputs to temporaries
    # plan "fallback" with absorbed `if`s: value id of an argument computed only under an absorbed `if` -> (the `if`'s
    # test, the argument): the fused call passes `(<argument> if <test> else None)` (`_plan_absorbing`)
    conditional: Mapping[int, tuple[cst.BaseExpression, cst.BaseExpression]] = field(default_factory=dict)
    # statements among `deleted` that only fed an argument the target does not pass (feeders.py)
    feeders: tuple[cst.CSTNode, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", MappingProxyType(dict(self.names)))  # read-only copies, as Match's
        object.__setattr__(self, "output_copies", MappingProxyType(dict(self.output_copies)))
        object.__setattr__(self, "conditional", MappingProxyType(dict(self.conditional)))


@dataclass(frozen=True, eq=False)
class PlacedMatch:
    """What travels from the matcher to the rewriter and the reports: a safe match and where its rewrite goes."""

    match: Match
    placement: Placement
    # the copies of a helper's match checked where another call inlines the helper, each placed the same way
    twins: tuple[Match, ...] = ()


# ------------------------------------------------------------------------------------------ refusals


class RefusalCategory(str, Enum):
    """Why a structural match was not rewritten (the ``category`` of a refusal in every report)."""

    INIT_MISMATCH = "init-mismatch"  # a layer's __init__ binding does not fit the rule's init pattern
    LAYER_REBOUND = "layer-rebound"  # the layer is bound again (or may be, from outside): what it is is unknown
    ARGUMENT_POSITION = "argument-position"  # a passed-through positional argument would bind another parameter
    NOT_PLACEABLE = "not-placeable"  # no single place for the fused call / the replaced statements cannot go
    BRANCH_NOT_DUPLICABLE = "branch-not-duplicable"  # statements before an `if` cannot be copied into its arms
    PARTIAL_PATH = "partial-path"  # some path runs only part of the matched calls
    INTERMEDIATE_USED_ELSEWHERE = "intermediate-used-elsewhere"  # a value the fusion hides is read outside it
    OUTPUT_READ_EARLY = "output-read-early"  # an output the fused call produces later is read before
    # on some path a matched call reads another value than the matched one (a variable assigned in a branch)
    OTHER_VALUE_READ = "other-value-read"
    INPUT_REDEFINED = "input-redefined"  # an input holds another value where the fused call goes
    INPUT_MAY_BE_MUTATED = "input-may-be-mutated"  # a call between may modify in place what a moved statement reads
    LAYER_USED_ELSEWHERE = "layer-used-elsewhere"  # a layer the rewrite removes from __init__ is used elsewhere
    GUARD = "guard"  # a rule guard (a semantic precondition) refused
    SUPPRESSED = "suppressed"  # a suppression comment (# noqa, # lint-ignore) silences the site


@dataclass(frozen=True)
class Reason:
    """What a check found wrong: a category, a sentence, and the statement (or node) that causes it, if known.
    ``text`` may be a function returning the sentence where wording it costs a walk (naming a value): it is only
    called when refusals are listed."""

    category: RefusalCategory
    text: Union[str, Callable[[], str]]
    cause: Optional[cst.CSTNode] = None
    listed: bool = True  # False: declined, but not worth listing (a guard returned a bare False)

    @property
    def sentence(self) -> str:
        return self.text if isinstance(self.text, str) else self.text()


@dataclass(frozen=True)
class Refusal:
    """A site a rule matched structurally but did not rewrite. ``statements``: the statements the site is reported
    at (as a finding would be); ``cause``: the node of the line that causes the refusal, when the check knows it."""

    code: str
    rule: str
    cls: str
    function: str
    category: RefusalCategory
    reason: str
    statements: tuple[cst.CSTNode, ...]
    cause: Optional[cst.CSTNode] = None


# refusals being collected: the match refused, its placement if it got one (a container site is reported at the
# container), and the reason
Refused = list[tuple[Match, Optional[Placement], Reason]]
VariantKey = tuple[int, frozenset[tuple[int, Optional[str]]]]  # (id(rule variant), Match.key())


def _site_key(match: Match, placement: Optional[Placement]) -> frozenset[tuple[int, Optional[str]]]:
    """What identifies a site for deduplication: its forward nodes, else its reported ``__init__`` statements."""
    return match.key() or frozenset((id(s), None) for s in reported_statements(match, placement))


def _refusal(match: Match, placement: Optional[Placement], reason: Reason) -> Refusal:
    if match.nodes and (placement is None or placement.plan not in ("init", "container")):
        function = max(match.nodes, key=lambda n: n.index).site.function.split(".")[-1]
    else:
        function = "__init__"
    rule = match.rule
    return Refusal(
        rule.code, rule.name, match.cls.name, function, reason.category, reason.sentence,
        tuple(reported_statements(match, placement)), reason.cause,
    )


def _name_of(vids: set[int], graph: FlowGraph, cls: ClassStructure) -> Optional[str]:
    """The variable one of `vids` was first assigned to in the function (not a later alias such as ``self.map =
    probs``), or the parameter holding it on entry; a name of an inlined helper's scope (its prefix dropped) only
    where the function itself has none: `q`, not the helper's parameter `t` that `self.grow(q)` binds it to."""
    names = [e.name for e in graph.events if isinstance(e, Def) and e.vid in vids and not e.name.startswith("%")]
    own = [n for n in names if "::" not in n]
    names = own or [cls.entry_names[v] for v in vids if v in cls.entry_names] or names
    return names[0].rsplit("::", 1)[-1] if names else None


# ------------------------------------------------------------------------------------------ atoms


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return True


def _literal_mismatch(pattern: CallNode, binding: LayerBinding) -> Optional[str]:
    """Where a direct call's arguments are not all known (``nn.Linear(a, b, bias=False, **dd)``): a keyword it does
    write as a literal that differs from the pattern's constant, in words; None if there is none."""
    if not binding.direct:
        return None  # a factory's own parameters may mean something else
    written = {a.keyword.value: a for a in binding.args if a.keyword is not None and not a.star}
    for name, atom in pattern.args.keywords:
        arg = written.get(name)
        if arg is None or not isinstance(atom, Const):
            continue
        text = _code(arg.value)
        if _is_literal(text) and _literal(text) != atom.value:
            return f"{name}={text}, where the rule needs {name}={atom.value!r}"
    return None


def value_text(value: Value) -> str:
    if value.kind == "expr":
        return _code(value.expr)
    return value.text


def _same(a: Binding, b: Binding) -> bool:
    if isinstance(a, Value) and isinstance(b, Value):
        if a.kind != b.kind:
            return False
        if a.kind == "var":
            return a.vid == b.vid
        if a.kind == "const":
            return _literal(a.text) == _literal(b.text)
        # Expressions: the same text reading the same values (checked on the paths), and not two calls that may
        # each return something else (`self.helper(x)` twice).
        return (a.vid == b.vid or a.pure and b.pure) and value_text(a) == value_text(b)
    if isinstance(a, LayerRef) and isinstance(b, LayerRef):
        return a.attr == b.attr
    return False


def _bind(env: dict[str, Binding], atom: Atom, value: Value) -> Optional[dict[str, Binding]]:
    if isinstance(atom, Const):
        if value.kind == "const" and _literal(value.text) == atom.value:
            return env
        return None
    assert isinstance(atom, Var)  # `in_place(...)` is a target's only (dsl._check_in_place)
    bound = env.get(atom.name)
    if bound is None:
        new = dict(env)
        new[atom.name] = value
        return new
    return env if _same(bound, value) else None


def _bind_output(env: dict[str, Binding], var: Var, node: DLNode) -> Optional[dict[str, Binding]]:
    out = Value("var", f"%{node.out}", node.out, node.expr, ((f"%{node.out}", node.out),))
    return _bind(env, var, out)


# ------------------------------------------------------------------------------------------ forward nodes


def _node_arguments(node: DLNode, params: Optional[tuple[str, ...]]) -> dict[str, Value]:
    """Concrete call arguments by parameter name (by position index when the signature is unknown)."""
    named: dict[str, Value] = {}
    for i, value in enumerate(node.args):
        key = params[i] if params is not None and i < len(params) else str(i)
        named[key] = value
    for name, value in node.kwargs:
        named[name] = value
    return named


@functools.lru_cache(maxsize=None)
def _default_expr(source: str) -> cst.BaseExpression:
    """A parameter's default as an expression (what a target receives for an argument the call left out)."""
    return cst.parse_expression(source)


def _is_method_call(node: DLNode) -> bool:
    """A tensor-method node (``x.softmax(-1)`` as ``torch.Tensor.softmax(x, -1)``): its receiver is no argument of the
    call as written."""
    func = node.call.func if node.call is not None else None
    return isinstance(func, cst.Attribute) and bool(node.args) and node.args[0].expr is func.value


def _written_args(node: DLNode) -> tuple[cst.Arg, ...]:
    """The node's arguments as the code wrote them; ``nn.Softmax(dim=-1)(x)``, read as ``F.softmax(x, dim=-1)``,
    has its module's ``dim`` after the call's own."""
    assert node.call is not None
    inline = type(node.call.func) is cst.Call and node.qualname == "torch.nn.functional.softmax"
    dim = softmax_module_dim(node.call) if inline else None
    return (*node.call.args, dim) if dim is not None else tuple(node.call.args)


def _match_call_args(
    pattern: CallNode, node: DLNode, qualname: Optional[str], env: dict[str, Binding]
) -> Optional[dict[str, Binding]]:
    sig = SIGNATURES.get(qualname) if qualname else None
    params = tuple(n for n, _ in sig) if sig is not None else None
    given = _node_arguments(node, params)
    wanted: list[tuple[str, Atom]] = []
    for i, atom in enumerate(pattern.args.positional):
        wanted.append((params[i] if params is not None and i < len(params) else str(i), atom))
    wanted.extend(pattern.args.keywords)
    for name, atom in wanted:
        if name in given:
            value = given.pop(name)
        else:
            default = default_source(qualname, name) if qualname else None
            if default is None:
                return None
            value = Value("const", default, 0, _default_expr(default), ())
        result = _bind(env, atom, value)
        if result is None:
            return None
        env = result
    if given:
        if pattern.args.rest is None or node.call is None:
            return None
        consumed = {id(v.expr) for n, v in _node_arguments(node, params).items() if n not in given}
        call_args = _written_args(node)
        rest = tuple(a for a in call_args if id(a.value) not in consumed)
        if _is_method_call(node):  # the receiver is the first positional argument of `torch.Tensor.<name>`
            call_args = (cst.Arg(node.args[0].expr), *call_args)
        new = dict(env)
        new[pattern.args.rest.name] = RestArgs(rest, call_args)
        env = new
    elif pattern.args.rest is not None:
        new = dict(env)
        new[pattern.args.rest.name] = RestArgs(())
        env = new
    return env


def _match_node(
    pattern: Node, node: DLNode, env: dict[str, Binding], rule: Rule
) -> Optional[dict[str, Binding]]:
    if isinstance(pattern, Wildcard):
        return env
    if isinstance(pattern, OpNode):
        if node.kind != "op" or node.qualname != pattern.op or len(node.args) != len(pattern.operands):
            return None
        orders = [pattern.operands]
        if pattern.op in _COMMUTATIVE:
            orders.append(tuple(reversed(pattern.operands)))
        for operands in orders:
            result: Optional[dict[str, Binding]] = env
            for atom, value in zip(operands, node.args):
                result = _bind(result, atom, value) if result is not None else None
            if result is not None:
                return _bind_output(result, pattern.outputs[0], node)
        return None
    assert isinstance(pattern, CallNode)
    if pattern.layer is not None:
        if node.kind != "layer" or node.layer is None:
            return None
        ref = LayerRef(node.layer[len("self."):], node.bindings)
        bound = env.get(pattern.layer.name)
        if bound is not None and not _same(bound, ref):
            return None
        init_pattern = _init_pattern_for(rule, pattern.layer.name)
        if init_pattern is not None and not any(
            node.qualname and qualname_matches(t, node.qualname) for t in init_pattern.types
        ):
            # Cheap type filter before argument matching; full init matching happens later.
            if not any(_may_be(b.layer_type, init_pattern.types, rule) for b in node.bindings):
                return None
        env = dict(env)
        env[pattern.layer.name] = ref
        qualname = None
    else:
        if node.qualname is None or not any(qualname_matches(t, node.qualname) for t in pattern.types):
            return None
        qualname = next(t for t in pattern.types if qualname_matches(t, node.qualname))
        if qualname.startswith("*."):
            qualname = None
        if pattern.type_var is not None:
            if node.call is None:
                return None
            # `$fn:F(...)`: the callee as written; an imported dotted name, so it may be re-read at the anchor.
            env = {**env, pattern.type_var.name: InitArg(node.call.func)}
    result = _match_call_args(pattern, node, qualname, env)
    if result is None:
        return None
    return _bind_output(result, pattern.outputs[0], node) if len(pattern.outputs) == 1 else None


def _init_pattern_for(rule: Rule, var: str) -> Optional[CallNode]:
    if rule.init is None:
        return None
    for node in rule.init.source:
        if isinstance(node, CallNode) and any(v.name == var for v in node.outputs):
            return node
    return None


def _may_occur(patterns: tuple[Node, ...], summary: NodeSummary, rule: Rule) -> bool:
    """Whether every required pattern node has a node in the graph that it could match by operator or type (the
    first test of `_match_node`): most graphs lack one, and the search would try every node against the first."""
    for pattern in patterns:
        if isinstance(pattern, Wildcard) or pattern.optional:
            continue
        if isinstance(pattern, OpNode):
            if pattern.op not in summary.ops:
                return False
        elif pattern.layer is not None:
            init = _init_pattern_for(rule, pattern.layer.name)
            if not summary.has_layers or (
                init is not None
                and not _any_matches(init.types, summary.layer_types)
                and not (rule.uncertain and _any_matches(init.types, summary.possible_types))
            ):
                return False
        elif not _any_matches(pattern.types, summary.names):
            return False
    return True


def _may_be(layer_type: LayerType, types: tuple[str, ...], rule: Rule) -> bool:
    """Whether a binding of this type may match one of the pattern's types: certain ones by name; possible ones
    only for a rule whose kernel checks the modules at run time."""
    if layer_type.certainty == CERTAIN or (rule.uncertain and layer_type.certainty == POSSIBLE):
        return _any_matches(types, frozenset(layer_type.candidates))
    return False


@functools.lru_cache(maxsize=1 << 16)
def _any_matches(types: tuple[str, ...], names: frozenset[str]) -> bool:
    # Graphs and classes of one file share their sets of names, and a rule asks the same types of each: asked once
    # per pair (a frozenset hashes once).
    return any(qualname_matches(t, q) for t in types for q in names)


def _pass_through(pattern: Union[CallNode, OpNode], env: dict[str, Binding]) -> Optional[dict[str, Binding]]:
    """An absent optional node: its output binds what its first operand binds (None if that is unbound or the
    output is already bound to something else)."""
    first = pattern.operands[0] if isinstance(pattern, OpNode) else pattern.args.positional[0]
    assert isinstance(first, Var)
    value = env.get(first.name)
    if not isinstance(value, Value):
        return None
    return _bind(env, pattern.outputs[0], value)


# ------------------------------------------------------------------------------------------ init


def _init_arguments(binding: LayerBinding, qualname: str) -> dict[str, cst.Arg]:
    params = tuple(n for n, _ in SIGNATURES.get(qualname, ()))
    named: dict[str, cst.Arg] = {}
    position = 0
    for arg in binding.args:
        if arg.keyword is not None:
            named[arg.keyword.value] = arg
        else:
            named[params[position] if position < len(params) else str(position)] = arg
            position += 1
    return named


def _match_init_node(
    pattern: CallNode,
    binding: LayerBinding,
    env: Mapping[str, Binding],
    why: Optional[list[str]] = None,
    uncertain: bool = False,
    rest_free: bool = False,
    unknown: Optional[list[str]] = None,
) -> Optional[dict[str, Binding]]:
    """The bindings of an ``init`` pattern node matched against a layer binding; None if it does not fit, and then,
    given a `why` list, what does not fit in words appended to it (only then: most bindings do not fit).
    `uncertain`: a binding whose type is only possible may match (its arguments read as the candidate's); an
    unknown type never does (nothing in the code names the pattern's type: every Linear followed by some
    caller-supplied activation would match). `rest_free`: no target reads the pattern's ``**$rest``, so arguments
    that are not all known (``**dd``, a factory computing with its parameters) are no obstacle when the pattern
    names none. `unknown` (given with `uncertain`, for a guarded rule, whose kernel computes the original for any
    module, so its constants only say where fusing pays): a constant the code does not settle (``bias=bias[0]``,
    one that ``**dd`` may pass) is no obstacle either; what was taken on trust is appended to it."""
    layer_type = binding.layer_type
    if binding.subscript != pattern.subscript:
        if why is not None:
            why.append("it is subscripted" if binding.subscript else "it is not subscripted")
        return None
    if layer_type.certainty == CERTAIN:
        types = [t for t in pattern.types if qualname_matches(t, layer_type.candidates[0])]
    elif uncertain and layer_type.certainty == POSSIBLE:
        types = [t for t in pattern.types if any(qualname_matches(t, c) for c in layer_type.candidates)]
    else:
        if why is not None:
            why.append(
                "it is not a call of a known layer type" if not layer_type.candidates
                else f"its type is only possibly {' or '.join(layer_type.candidates)}, and this rule's kernel cannot "
                "check it at run time"
            )
        return None
    if not types:
        if why is not None:
            why.append(f"it builds {' or '.join(layer_type.candidates)}, not {' or '.join(pattern.types)}")
        return None
    qualname = types[0]
    trusting = uncertain and unknown is not None
    if not binding.args_known or any(a.star for a in binding.args):
        if pattern.args.positional or pattern.args.keywords or pattern.type_var is not None or not rest_free:
            atoms = (*pattern.args.positional, *(a for _, a in pattern.args.keywords))
            constants_only = all(isinstance(a, Const) for a in atoms)
            if not (trusting and constants_only and pattern.type_var is None and rest_free):
                if why is not None:
                    why.append("its arguments are not all known (*args, **kwargs, or a factory computing them)")
                return None
            mismatch = _literal_mismatch(pattern, binding)
            if mismatch is not None:
                if why is not None:
                    why.append(mismatch)
                return None
            assert unknown is not None
            unknown.append("its arguments are not all known")
        env = dict(env)
        if pattern.args.rest is not None:
            env[pattern.args.rest.name] = RestArgs((), binding.args)
        return env
    if pattern.type_var is not None and not (binding.direct and layer_type.certainty == CERTAIN):
        if why is not None:
            why.append("the pattern binds the callee as the type, and this call is a factory or parameter")
        return None
    given = _init_arguments(binding, qualname)
    params = tuple(n for n, _ in SIGNATURES.get(qualname, ()))
    wanted: list[tuple[str, Atom]] = [
        (params[i] if i < len(params) else str(i), atom) for i, atom in enumerate(pattern.args.positional)
    ]
    wanted.extend(pattern.args.keywords)
    env = dict(env)
    if pattern.type_var is not None:
        callee = binding.value.value if isinstance(binding.value, cst.Subscript) else binding.value.func  # type: ignore[attr-defined]
        env[pattern.type_var.name] = InitArg(callee)
    consumed: set[str] = set()
    for name, atom in wanted:
        arg = given.get(name)
        consumed.add(name)
        if arg is not None:
            text = _code(arg.value)
            bound: Binding = InitArg(arg.value)
        else:
            text = default_source(qualname, name) or ""
            if not text:
                if why is not None:
                    why.append(f"it leaves out {name}, which has no known default")
                return None
            bound = InitArg(None, text)
        if isinstance(atom, Const):
            if _literal(text) != atom.value:
                if trusting and not _is_literal(text):
                    assert unknown is not None
                    unknown.append(f"{name}={text}")
                    continue
                if why is not None:
                    why.append(f"{name}={text}, where the rule needs {name}={atom.value!r}")
                return None
            continue
        assert isinstance(atom, Var)
        previous = env.get(atom.name)
        if previous is not None:
            if not isinstance(previous, InitArg) or _init_text(previous) != text:
                if why is not None:
                    why.append(f"{name}={text} differs from what another matched layer passes")
                return None
            continue
        env[atom.name] = bound
    rest = tuple(arg for name, arg in given.items() if name not in consumed)
    if rest and pattern.args.rest is None:
        if why is not None:
            why.append(f"it passes {', '.join(n for n in given if n not in consumed)}, which the rule does not take")
        return None
    if pattern.args.rest is not None:
        env[pattern.args.rest.name] = RestArgs(tuple(a for a in binding.args if a in rest), binding.args)
    return env


def _called_by_optional_only(rule: Rule, var: str) -> bool:
    assert rule.forward is not None
    calls = [p for p in rule.forward.source if isinstance(p, CallNode) and p.layer is not None and p.layer.name == var]
    return bool(calls) and all(p.optional for p in calls)


def _init_text(arg: InitArg) -> str:
    return _code(arg.expr) if arg.expr is not None else (arg.default or "")


def _match_init(match: Match) -> Union[Match, Reason]:
    """The match with its ``__init__`` bindings (`init_matches`, the container, the certainty, the variables the
    init pattern binds), or why they do not fit."""
    rule = match.rule
    if rule.init is None:
        return match
    edits = rule.init.target is not None
    env = match.env
    init_matches: dict[str, LayerBinding] = {}
    container: Optional[LayerBinding] = None
    whole: Optional[LayerBinding] = None  # the nn.Sequential the rule's `container` layers make up
    certainty: Certainty = "exact"
    for pattern in rule.init.source:
        assert isinstance(pattern, CallNode)
        var = pattern.outputs[0].name
        ref = env.get(var)
        if ref is None and not edits and _called_by_optional_only(rule, var):
            continue  # only an absent optional node calls this layer: nothing to constrain
        if not isinstance(ref, LayerRef) or not ref.bindings:
            layer = f"self.{ref.attr}" if isinstance(ref, LayerRef) else f"${var}"
            return Reason(RefusalCategory.INIT_MISMATCH, f"{layer} is not bound in __init__")
        element_of = ref.bindings[0].container
        if element_of is not None and var in rule.container:
            # passed on as the whole container (checked below), all in one
            if whole is not None and whole is not element_of:
                return Reason(
                    RefusalCategory.INIT_MISMATCH, "the matched layers are elements of different containers",
                    element_of.statement,
                )
            whole = element_of
        elif element_of is not None:
            # Elements of an nn.Sequential: only a rule with a `sequential` drop-in rewrites them, all in one container.
            if rule.sequential is None:
                return Reason(
                    RefusalCategory.INIT_MISMATCH,
                    f"self.{ref.attr} is an element of an nn.Sequential, which this rule does not rewrite",
                    element_of.statement,
                )
            if container is not None and container is not element_of:
                return Reason(
                    RefusalCategory.INIT_MISMATCH, "the matched layers are elements of different containers",
                    element_of.statement,
                )
            container = element_of
        elif ref.attr in match.cls.rebound or "*" in match.cls.rebound:
            # bound again elsewhere in the class family: what the layer is at the call is unknown
            return Reason(
                RefusalCategory.LAYER_REBOUND,
                f"self.{ref.attr} is bound again other than by an assignment of its own in __init__ (in another method "
                "or class, by setattr, or in a chain `self.a = self.b = ...`), so what it is at the call is unknown",
            )
        elif edits and (ref.attr in match.cls.foreign_stores or "*" in match.cls.foreign_stores):
            # the edited layer may be replaced from outside the class (`model.ln = nn.LayerNorm(8)`)
            stores = match.cls.foreign_stores
            store = stores[ref.attr] if ref.attr in stores else stores["*"]
            return Reason(
                RefusalCategory.LAYER_REBOUND,
                f"this module assigns an attribute {ref.attr!r} on another object, so self.{ref.attr} may be replaced "
                "from outside the class",
                store,
            )
        uncertain = bool(rule.uncertain) and not edits
        rest_free = pattern.args.rest is None or pattern.args.rest.name not in _target_vars(rule)
        why: list[str] = []
        trusted: list[str] = []  # constants and arguments a guarded match takes on trust
        matched = [(b, _match_init_node(pattern, b, env, why, uncertain, rest_free, trusted)) for b in ref.bindings]
        good = [(b, e) for b, e in matched if e is not None]
        if edits and len(ref.bindings) != 1:
            # rewriting __init__ needs exactly one binding of the layer
            return Reason(
                RefusalCategory.LAYER_REBOUND,
                f"self.{ref.attr} is bound {len(ref.bindings)} times in __init__; rewriting it needs exactly one "
                "binding",
                ref.bindings[1].statement,
            )
        if not good:
            return Reason(
                RefusalCategory.INIT_MISMATCH,
                f"the __init__ binding of self.{ref.attr} does not fit the rule: {why[0]}",
                ref.bindings[0].statement,
            )
        if edits and not good[0][0].direct:
            return Reason(
                RefusalCategory.INIT_MISMATCH,
                f"self.{ref.attr} is built by a factory or a partial, whose call this rule's __init__ edit cannot replace",
                ref.bindings[0].statement,
            )
        # Another binding of the layer (other than `None`, which is never called), or its type, may be something else.
        others = [b for b, e in matched if e is None and not (isinstance(b.value, cst.Name) and b.value.value == "None")]
        if others and not uncertain:
            # `self.q = nn.Identity()` in one branch, `nn.Linear(d, d)` in the other: only a guarded kernel checks
            # which one the layer is when the model runs
            failing = [b for b, e in matched if e is None]  # `why` holds one sentence per failing binding
            misfit = why[next(i for i, b in enumerate(failing) if b is others[0])]
            return Reason(
                RefusalCategory.INIT_MISMATCH,
                f"another __init__ binding of self.{ref.attr} does not fit the rule ({misfit}), and this rule's "
                "kernel cannot check at run time which one the layer is",
                others[0].statement,
            )
        if uncertain and (others or trusted or any(b.layer_type.certainty != CERTAIN for b, _ in good)):
            certainty = "guarded"
        binding, env = good[0]
        init_matches[var] = binding
    if container is not None and any(b.container is not container for b in init_matches.values()):
        # the drop-in container fuses its own adjacent children only, not one with a layer outside
        return Reason(RefusalCategory.INIT_MISMATCH, "a layer outside the nn.Sequential follows one of its elements")
    if whole is not None:
        passed = _whole_container(rule, whole, init_matches, match.cls)
        if isinstance(passed, Reason):
            return passed
        env = {name: bound for name, bound in env.items() if name not in passed[1]}
        env[rule.container[0]] = passed[0]
    if edits:
        reason = _moved_init_argument(rule, init_matches, env, match.cls)
        if reason is not None:
            return reason
    return dataclasses.replace(match, env=env, init_matches=init_matches, container=container, certainty=certainty)


def _whole_container(
    rule: Rule, whole: LayerBinding, init_matches: Mapping[str, LayerBinding], cls: ClassStructure
) -> Union[tuple[LayerRef, tuple[str, ...]], Reason]:
    """The container to pass on in place of the rule's `container` layers that are its elements, which must be all
    of its elements, in the header's order, the first layer of the header first; with the variables of those
    elements. Else why not."""
    members = tuple(name for name in rule.container if name in init_matches and init_matches[name].container is whole)
    matched = [init_matches[name].attr for name in members]
    elements = [element.attr for element in whole.elements]
    if not members or members[0] != rule.container[0] or matched != elements:
        return Reason(
            RefusalCategory.INIT_MISMATCH,
            f"self.{whole.attr} is an nn.Sequential that cannot stand for the matched layers: the rule passes one "
            f"on whole only when its elements are exactly those layers, in the order "
            f"{', '.join('$' + name for name in rule.container)}, from the first",
            whole.statement,
        )
    if not whole.attr.isidentifier():
        return Reason(RefusalCategory.INIT_MISMATCH, f"self.{whole.attr} is nested in another container", whole.statement)
    if whole.attr in cls.rebound or "*" in cls.rebound:
        return Reason(
            RefusalCategory.LAYER_REBOUND,
            f"self.{whole.attr} is bound again other than by an assignment of its own in __init__ (in another method "
            "or class, by setattr, or in a chain `self.a = self.b = ...`), so what it is at the call is unknown",
        )
    return LayerRef(whole.attr, (whole,)), members


def _moved_init_argument(
    rule: Rule, init_matches: Mapping[str, LayerBinding], env: Mapping[str, Binding], cls: ClassStructure
) -> Optional[Reason]:
    """An ``__init__`` target call goes where its output layer was bound: an argument it takes from another binding
    (ADP005's dropout probability, from the Dropout's statement) is evaluated there instead. Refused when it makes
    a call, when the two statements are not in one block, or when a name it reads is assigned between them or is the
    receiver of a method call there (``cfg.update(...)``; passing it to a call is assumed not to change it)."""
    assert rule.init is not None and rule.init.target is not None
    for node in rule.init.target:
        assert isinstance(node, CallNode)
        dest = init_matches[node.outputs[0].name].statement
        for atom in [*node.args.positional, *(a for _, a in node.args.keywords)]:
            bound = env.get(atom.name) if isinstance(atom, Var) else None
            if not isinstance(bound, InitArg) or bound.expr is None:
                continue
            source = next(
                (b.statement for b in init_matches.values()
                 if b.statement is not None and any(n is bound.expr for n in cstwalk.walk(b.value))),
                None,
            )
            if source is None or dest is None or source is dest:
                continue
            text = _code(bound.expr)
            names, calls = _read_names(bound.expr)
            if calls:
                return Reason(
                    RefusalCategory.NOT_PLACEABLE,
                    f"`{text}` makes a call, and the rewritten __init__ would evaluate it at another statement", source,
                )
            # The class's own __init__ usually; a local base class's otherwise.
            roots = [r for r in (cls.node, cls.module) if r is not None]
            between = next((b for b in (_statements_between(r, source, dest) for r in roots) if b is not None), None)
            if between is None:
                return Reason(
                    RefusalCategory.NOT_PLACEABLE,
                    f"`{text}` would move to a statement of __init__ in another block", source,
                )
            for stmt in between:
                if set(names) & _written_names(stmt):
                    return Reason(
                        RefusalCategory.INPUT_REDEFINED,
                        f"`{text}` would move to another statement of __init__, and a name it reads is assigned here",
                        stmt,
                    )
                mutated = _call_receivers(stmt)
                if any(n in mutated or (n.startswith("self.") and "self" in mutated) for n in names):
                    return Reason(
                        RefusalCategory.INPUT_REDEFINED,
                        f"`{text}` would move to another statement of __init__, and a method call here may change "
                        "what it reads",
                        stmt,
                    )
    return None


def _statements_between(root: cst.CSTNode, a: cst.CSTNode, b: cst.CSTNode) -> Optional[list[cst.BaseStatement]]:
    """The statements strictly between `a` and `b` when both are statements of one block under `root`, else None."""
    for node in cstwalk.walk(root):
        if isinstance(node, (cst.Module, cst.IndentedBlock)):
            body = list(node.body)
            where = [i for i, stmt in enumerate(body) if stmt is a or stmt is b]
            if len(where) == 2:
                return body[where[0] + 1 : where[1]]
            if where:
                return None
    return None


def _target_vars(rule: Rule) -> frozenset[str]:
    """Variables the rule's targets read (a `**$rest` bound to arguments that are not known must not be)."""
    names: set[str] = set()
    for item in (rule.init, rule.forward):
        for node in (item.target or ()) if item is not None else ():
            if isinstance(node, CallNode):
                names.update(a.name for a in node.args.positional if isinstance(a, Var))
                names.update(a.name for _, a in node.args.keywords if isinstance(a, Var))
                if node.args.rest is not None:
                    names.add(node.args.rest.name)
    return frozenset(names)


# ------------------------------------------------------------------------------------------ plan + checks


def _target_inputs(match: Match) -> list[Value]:
    """Values the fused call reads (bound `$vars` used in the forward target)."""
    assert match.rule.forward is not None and match.rule.forward.target is not None
    target = match.rule.forward.target[0]
    assert isinstance(target, CallNode)
    atoms = list(target.args.positional) + [a for _, a in target.args.keywords]
    values = [match.env.get(a.name) for a in atoms if isinstance(a, Var)]  # unbound: an absent optional node's
    return [v for v in values if isinstance(v, Value)]


def _output_vids(match: Match) -> tuple[set[int], set[int]]:
    """(intermediate value ids, target output ids) of the matched nodes."""
    assert match.rule.forward is not None and match.rule.forward.target is not None
    target_outs = {v.name for v in match.rule.forward.target[0].outputs}  # type: ignore[union-attr]
    inter: set[int] = set()
    outs: set[int] = set()
    for pattern, _ in _matched_steps(match):
        for var in pattern.outputs:  # type: ignore[union-attr]
            bound = match.env.get(var.name)
            if isinstance(bound, Value):
                (outs if var.name in target_outs else inter).add(bound.vid)
    return inter, outs


def _plan(match: Match) -> Union[Placement, Reason]:
    """Decide where the fused call goes and which statements disappear; the reason when no safe plan exists."""
    nodes = match.nodes
    anchor = max(nodes, key=lambda n: n.index)
    sites = {id(n.site.small) for n in nodes}
    if any(n.site.loop_copy != anchor.site.loop_copy for n in nodes):
        return Reason(
            RefusalCategory.NOT_PLACEABLE, "the matched calls run in different loop iterations or loops",
            anchor.site.line,
        )
    by_expr = {id(n.expr): n for n in nodes}
    deleted: list[Site] = []
    for n in sorted(nodes, key=lambda n: n.index, reverse=True):
        if n is anchor or id(n.expr) == id(anchor.expr):
            continue
        if n.parent is not None and id(n.parent) in by_expr:
            continue  # nested inside another matched node: goes away with it
        if n.kind == "layer" and n.call is None and by_expr[id(n.expr)] is not n:
            # an element of an nn.Sequential call (a layer node without a call of its own) whose last element is
            # matched too: goes with the call's statement
            continue
        site = _statement_site(n, anchor, match.cls)
        if isinstance(site, str):
            return Reason(RefusalCategory.NOT_PLACEABLE, site, n.site.line)
        deleted.append(site)
    if any(n.site.inline_stack != anchor.site.inline_stack for n in nodes if n.site not in deleted) and not deleted:
        return Reason(
            RefusalCategory.NOT_PLACEABLE, "the matched calls are split between a method and a helper it calls",
            anchor.site.line,
        )
    output_copies = _output_copies(match, anchor)
    removed = (*{id(s.small): s.small for s in deleted}.values(), *output_copies.values())
    names = _names_at_anchor(match, anchor, removed)
    if not deleted:
        if len(sites) == 1:
            return Placement("inline", anchor, removed, names, output_copies)
        return Reason(
            RefusalCategory.NOT_PLACEABLE, "the matched calls span statements that cannot be removed", anchor.site.line
        )
    anchor_block = anchor.site.block
    if all(s.block is anchor_block for s in deleted):
        fed = tuple(_feeders.feeder_statements(match, anchor, _lines_before(anchor), {id(s) for s in removed}))
        return Placement("block", anchor, (*removed, *fed), names, output_copies, feeders=fed)
    # Paper Fig. 4/5: prefix statements right before an `if` whose branch holds the anchor.
    prefix_lines = [s.line for s in deleted]
    outer = deleted[0]
    if any(s.block is not outer.block for s in deleted):
        return _not_before_if(anchor)
    block = list(outer.block)
    indices = sorted(block.index(line) for line in set(prefix_lines))  # type: ignore[arg-type]
    after = indices[-1] + 1
    if indices != list(range(indices[0], after)):
        return _not_before_if(anchor)
    # Lines between the prefix and the `if` that bind constants to names the prefix does not mention (MBart's
    # `cross_attn_weights = None`) end up before the prefix's copies: the same values, and no call to reorder.
    mentioned = set().union(*(_names_in_node(block[i]) for i in indices))
    while after < len(block) and _binds_constants(block[after], mentioned):
        after += 1
    if after >= len(block) or not isinstance(block[after], cst.If):
        return _not_before_if(anchor)
    if_stmt = block[after]
    assert isinstance(if_stmt, cst.If)
    if if_stmt.orelse is not None and isinstance(if_stmt.orelse, cst.If):
        # elif chains: copying into every arm would reorder the elif tests
        return Reason(
            RefusalCategory.BRANCH_NOT_DUPLICABLE,
            "the statements before this `if` would be copied into every arm of its elif chain, which reorders the "
            "tests",
            if_stmt,
        )
    owner = anchor.site.owner
    if not _is_arm(if_stmt, owner):
        return Reason(
            RefusalCategory.BRANCH_NOT_DUPLICABLE,
            "the fused call would go deeper than an arm of this `if`, so the statements before it cannot be copied "
            "into its arms",
            if_stmt,
        )
    if not _simple_test(if_stmt.test):
        return Reason(
            RefusalCategory.BRANCH_NOT_DUPLICABLE,
            "the test of this `if` makes a call (or assigns), so the statements before it cannot move into its arms",
            if_stmt,
        )
    prefix = tuple(block[i] for i in indices)
    return Placement("branch", anchor, removed, names, output_copies, if_stmt, owner, prefix)


def _output_copies(match: Match, anchor: DLNode) -> dict[int, cst.Assign]:
    """Tuple targets: the copies to delete, by output value id. ``s = <output node>; a = s; ...; s = <anchor>``
    (Whisper/MBart's ``h = residual + h; residual = h; h = ln(h)``) becomes ``s, a = fused(...)``: every name ends
    holding what it held. Only where the output's statement, the copy (alone on its line, the only one) and the
    anchor's statement are statements of one block, the anchor's statement assigns ``s`` again and nothing after
    the copy before the anchor binds or mutates ``a``; a read of ``a`` or ``s`` between is a read of an output the
    call produces later, refused by the path checks as before."""
    assert match.rule.forward is not None and match.rule.forward.target is not None
    outputs = match.rule.forward.target[0].outputs  # type: ignore[union-attr]
    anchor_name = _assigned_name(anchor.site.small)
    block = list(anchor.site.block)
    if len(outputs) < 2 or anchor_name is None or match.graph is None or anchor.site.line not in block:
        return {}
    copies: dict[int, cst.Assign] = {}
    for var in outputs:
        bound = match.env.get(var.name)
        if not isinstance(bound, Value):
            continue
        node = next((n for n in match.nodes if n.out == bound.vid), None)
        if node is None or node is anchor or node.site.inline_stack != anchor.site.inline_stack:
            continue
        if _assigned_name(node.site.small) != anchor_name:
            continue
        if node.site.block is anchor.site.block:
            start = block.index(node.site.line)
        elif _if_arm_follows(node.site, anchor.site.owner):
            start = -1  # plan "branch": the copy is in the arm holding the anchor, before it
        else:
            continue
        stop = block.index(anchor.site.line)
        found = [
            (i, line.body[0]) for i, line in enumerate(block[start + 1 : stop], start + 1)
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
            and isinstance(line.body[0], cst.Assign) and _assigned_name(line.body[0]) not in (None, anchor_name)
            and isinstance(line.body[0].value, cst.Name) and line.body[0].value.value == anchor_name
        ]  # fmt: skip
        if len(found) != 1:
            continue
        at, copy = found[0]
        assert isinstance(copy, cst.Assign)
        alias = _assigned_name(copy)
        copies_output = any(d.site.small is copy for d in match.graph.definitions.get(bound.vid, ()))
        if copies_output and not any(alias in _written_names(line) for line in block[at + 1 : stop]):
            copies[bound.vid] = copy
    return copies


def _if_arm_follows(site: Site, arm: cst.CSTNode) -> bool:
    """Whether `arm` is an arm of an ``if`` after `site`'s line in its block."""
    later = site.block[site.block.index(site.line) + 1 :]
    return any(isinstance(line, cst.If) and _is_arm(line, arm) for line in later)


def _is_arm(if_stmt: cst.If, suite: cst.CSTNode) -> bool:
    """Whether `suite` is the body of `if_stmt` or of its ``else`` (an ``elif``'s bodies are not)."""
    return suite is if_stmt.body or (isinstance(if_stmt.orelse, cst.Else) and suite is if_stmt.orelse.body)


def _assigned_name(small: cst.CSTNode) -> Optional[str]:
    """``name`` of ``name = value``, None for any other statement."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value
    return None


def _binds_constants(line: cst.BaseStatement, avoided: set[str]) -> bool:
    """Whether a line only assigns literal constants (``None``, numbers, strings; tuples of them) to plain names (or
    tuples of them) not in `avoided`."""
    if not isinstance(line, cst.SimpleStatementLine):
        return False
    for small in line.body:
        if not isinstance(small, cst.Assign) or not all(_const_text(v) is not None for v in _tuple_items(small.value)):
            return False
        for target in small.targets:
            if not all(isinstance(n, cst.Name) and n.value not in avoided for n in _tuple_items(target.target)):
                return False
    return True


def _tuple_items(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """A tuple's items (a starred item as itself, which no caller accepts); any other expression alone."""
    if isinstance(expr, cst.Tuple):
        return [e.value if isinstance(e, cst.Element) else e for e in expr.elements]  # type: ignore[misc]
    return [expr]


def _not_before_if(anchor: DLNode) -> Reason:
    return Reason(
        RefusalCategory.NOT_PLACEABLE,
        "the fused call would go in another block than the statements it replaces, which do not directly precede "
        "the `if` holding it (only lines binding constants may stand between)",
        anchor.site.line,
    )


def _statement_site(node: DLNode, anchor: DLNode, cls: ClassStructure) -> Union[Site, str]:
    """The statement that disappears with a non-anchor node, in the anchor's function; else why none can.

    Usually the node's own statement (`x = self.dropout(h)`). A node that is the whole body of a helper method
    (`def _drop(self, h): return self.dropout(h)`) called once, as `x = self._drop(h)`, from the anchor's function
    takes that call statement with it: this is how a pattern split across a helper is rewritten.
    """
    more = "this statement does more than assign a matched call to a name, so it cannot be removed"
    if node.site.inline_stack == anchor.site.inline_stack:
        if node.site.function != anchor.site.function or not node.whole_statement or not _deletable(node.site.small):
            return more
        return node.site
    stack = node.site.inline_stack
    if len(stack) != len(anchor.site.inline_stack) + 1 or stack[:-1] != anchor.site.inline_stack:
        return (
            f"the matched calls are in different methods ({_method_name(node.site)}, {_method_name(anchor.site)}), "
            "so no one statement can take the fused call"
        )
    call_site = stack[-1]
    helper = node.site.function.rpartition(".")[2]
    if (
        not node.whole_statement
        or not isinstance(node.site.small, cst.Return)
        or [s for s in node.site.block if not _is_docstring_line(s)] != [node.site.line]
    ):
        return f"this call is in the helper method `{helper}`, which does more than return it"
    small = call_site.small
    if not _deletable(small) or not isinstance(small, (cst.Assign, cst.AnnAssign)):
        return f"the call of the helper method `{helper}` holding the matched call does more than assign its result"
    call = small.value
    called = _self_attr_name(call.func) if isinstance(call, cst.Call) else None
    if called is None or len(cls.self_references.get(called, [])) != 1:
        # the helper is used elsewhere: it must keep working
        return f"the helper method `{helper}` holding the matched call is called elsewhere too, so its call stays"
    return call_site


def _method_name(site: Site) -> str:
    return f"`{site.function.rpartition('.')[2]}`"


def _self_attr_name(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _is_docstring_line(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _names_at_anchor(match: Match, anchor: DLNode, removed: Sequence[cst.CSTNode]) -> dict[int, str]:
    """Which variable holds each value id where the fused call goes, at `anchor` (the definitions by the `removed`
    statements ignored).

    Needed when a bound value was named differently where it was matched (a helper's parameter).
    """
    deleted = {id(s) for s in removed}
    scope = anchor.site.scope
    assert match.graph is not None
    state = flow_checks.state_at(match.graph, anchor, deleted)
    pairs = list(state.items())
    # Parameters and globals hold their entry value unless assigned before the anchor.
    pairs += [(name, vid) for vid, name in match.cls.entry_names.items() if name not in state]
    holding = dict(pairs)
    names: dict[int, str] = {}
    # A value keeps the name it was matched under while that name still holds it (`identity = x` is an alias).
    # Where several names it was matched under still hold it (a helper's `q` and `v`, handed one tensor by the call
    # the walk inlined), each argument is written as matched: another caller may hand them different ones.
    kept: dict[int, set[str]] = {}
    for bound in match.env.values():
        if isinstance(bound, Value) and bound.kind == "var" and not bound.text.startswith("%"):
            scoped, vid = bound.uses[0]
            visible = scoped.startswith("self.") or (scoped.startswith(scope) and "::" not in scoped[len(scope):])
            if visible and holding.get(scoped) == vid:
                kept.setdefault(vid, set()).add(bound.text)
                names.setdefault(vid, bound.text)
    shared = {vid for vid, texts in kept.items() if len(texts) > 1}
    for name, vid in pairs:
        if name.startswith("self."):
            names.setdefault(vid, name)
        elif name.startswith(scope) and "::" not in name[len(scope):] and not name.startswith("%"):
            names.setdefault(vid, name[len(scope):])
    return {vid: name for vid, name in names.items() if vid not in shared}


def _deletable(small: cst.CSTNode) -> bool:
    if isinstance(small, cst.Assign):
        return len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
    if isinstance(small, (cst.AnnAssign, cst.AugAssign)):  # `s += mask`: syntax.in_place_operator
        return isinstance(small.target, cst.Name)
    return isinstance(small, cst.Expr)


class _CallScan(cst.CSTVisitor):
    def __init__(self) -> None:
        self.unsafe = False

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Name) and node.func.value in _SAFE_TEST_CALLS):
            self.unsafe = True

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.unsafe = True


class _CallBefore(cst.CSTVisitor):
    """Whether a statement makes a call before evaluating `target` (textual order; enclosing calls run after)."""

    def __init__(self, target: cst.CSTNode) -> None:
        self.target = target
        self.reached = False
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.reached = self.reached or node is self.target
        return not self.reached and super().on_visit(node)

    def leave_Call(self, original_node: cst.Call) -> None:
        func = original_node.func
        if not self.reached and not (isinstance(func, cst.Name) and func.value in _SAFE_TEST_CALLS):
            self.found = True


def _simple_test(test: cst.BaseExpression) -> bool:
    scan = _CallScan()
    test.visit(scan)
    return not scan.unsafe


def _check_paths(match: Match, placement: Placement) -> Optional[Reason]:
    """The safety checks on every path of the function that runs any matched statement (adopter_codemods/flow);
    the first failure's reason."""
    assert match.graph is not None
    return flow_checks.check_paths(match, placement, match.graph)


def _value_site_moves(match: Match, value: Value, anchor_stmt: int) -> Optional[cst.CSTNode]:
    """The statement a non-anchor matched node reading `value` (an expression with calls) sits in, if any."""
    for n in match.nodes:
        for v in list(n.args) + [kv for _, kv in n.kwargs]:
            if v is value:
                return n.site.line if id(n.site.small) != anchor_stmt else None
    return None


def _find_init_only(rule: Rule, cls: ClassStructure, refused: Optional[Refused] = None) -> list[PlacedMatch]:
    """Rules without a forward section rewrite each matching ``__init__`` binding (e.g. attention classes)."""
    assert rule.init is not None
    pattern = rule.init.source[0]
    assert isinstance(pattern, CallNode)
    found: list[PlacedMatch] = []
    if not _any_matches(pattern.types, cls.bound_types[0]):
        return found  # only a binding of a certain type matches (`_match_init_node`)
    placement = Placement("init")
    for attr, bindings in cls.init_bindings.items():
        for binding in bindings:
            if binding.container is not None or binding.statement is None:
                continue
            env = _match_init_node(pattern, binding, {})
            if env is None:
                continue
            env[pattern.outputs[0].name] = LayerRef(attr, (binding,))
            match = Match(rule, cls, None, (), env, {pattern.outputs[0].name: binding})
            reason = _rest_args_fit(match) or _guards_refusal(match, placement)
            if reason is None:
                found.append(PlacedMatch(match, placement))
            elif refused is not None:
                refused.append((match, placement, reason))
    return found


def _guards_refusal(match: Match, placement: Placement) -> Optional[Reason]:
    """The reason of the first of the rule's guards that refuses the match (its own words, else its docstring's)."""
    for name in match.rule.guards:
        verdict = guard_registry.get(name)(match, placement)
        if not verdict:
            return guard_registry.reason(name, verdict)
    return None


def _outputs_assigned(match: Match, placement: Placement) -> Optional[Reason]:
    """A tuple target (``q, k, v = fused(...)``) takes the names its outputs were assigned to: each output node must
    be the whole value of ``name = node`` in the anchor's function (``v = self.v(x).view(s)`` would lose the view)."""
    anchor = placement.anchor
    assert match.rule.forward is not None and match.rule.forward.target is not None and anchor is not None
    outputs = match.rule.forward.target[0].outputs  # type: ignore[union-attr]
    if len(outputs) == 1:
        return None
    for var in outputs:
        bound = match.env.get(var.name)
        node = next((n for n in match.nodes if isinstance(bound, Value) and n.out == bound.vid), None)
        small = node.site.small if node is not None else None
        if (
            node is None
            or not node.whole_statement
            or node.site.inline_stack != anchor.site.inline_stack
            or not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name))
        ):
            return Reason(
                RefusalCategory.NOT_PLACEABLE,
                "a matched call here is not the whole value of `name = call`, so the fused call's tuple target "
                "cannot take its name",
                node.site.line if node is not None else anchor.site.line,
            )
    return None


def _rest_args_fit(match: Match) -> Optional[Reason]:
    """A target call puts ``**$rest`` after its own positional arguments: refuse when that moves a positional
    argument (``F.relu(h, True)`` must not become ``fused(x, linear, F.relu, True)``)."""
    rule = match.rule
    targets = [
        *((rule.init.target or ()) if rule.init else ()),
        *((rule.forward.target or ()) if rule.forward else ()),
    ]
    for target in targets:
        if isinstance(target, CallNode) and target.args.rest is not None:
            rest = match.env.get(target.args.rest.name)
            if isinstance(rest, RestArgs) and not rest.positions_kept(len(target.args.positional)):
                return Reason(
                    RefusalCategory.ARGUMENT_POSITION,
                    "a positional argument the rule passes through would bind another parameter of the fused call",
                )
    return None


def _matched_steps(match: Match) -> list[tuple[Node, DLNode]]:
    """Each forward source step present in the match with the node it matched, in pattern order."""
    assert match.rule.forward is not None
    nodes = iter(match.nodes)
    return [
        (pattern, next(nodes)) for i, pattern in enumerate(match.rule.forward.source)
        if not isinstance(pattern, Wildcard) and i not in match.skipped
    ]  # fmt: skip


def written_in_place(node: DLNode) -> bool:
    """An operator node the code wrote in place, ``s += mask`` (the statement stands for it: syntax.in_place_operator)."""
    return node.kind == "op" and node.whole_statement and isinstance(node.site.small, cst.AugAssign)


def _fills_in_place(node: DLNode) -> bool:
    """``s.masked_fill_(m, v)``, walked as ``s = s.masked_fill(m, v)`` (syntax.in_place_masked_fill)."""
    small = node.site.small
    return node.whole_statement and isinstance(small, cst.Expr) and small.value is node.expr and (
        in_place_masked_fill(small.value) is not None
    )


def in_place_step(match: Match, var: str) -> bool:
    """Whether the operator step whose output is `$var` is in the match and matched code written in place (the
    rewriter's ``in_place($var)``)."""
    return any(
        isinstance(pattern, OpNode) and any(v.name == var for v in pattern.outputs) and written_in_place(node)
        for pattern, node in _matched_steps(match)
    )


def _in_place_steps_fit(match: Match) -> Optional[Reason]:
    """A step written in place (``s += mask``, ``s.masked_fill_(m, v)``) changes the object ``s`` holds, where the
    fused call makes a new one: taken only where that object is one the match made (a new tensor from an earlier
    step, then steps on it), which no other name can hold since the match's intermediates are read nowhere else. An
    operator written in place also keeps the dtype of ``s`` (``+`` promotes a bfloat16 ``s`` and a float32 mask to
    float32): taken only where the target keeps it too (``in_place($s)``)."""
    rule = match.rule
    if rule.forward is None or rule.forward.target is None:
        return None
    target = rule.forward.target[0]
    kept = {a.var.name for _, a in target.args.keywords if isinstance(a, InPlace)} if isinstance(target, CallNode) else set()
    steps = _matched_steps(match)
    made: set[int] = set()  # the objects the match made: results of new-tensor steps, and of steps on them
    for i, (pattern, node) in enumerate(steps):
        operator = written_in_place(node)
        if operator or _fills_in_place(node):
            code = _code(node.site.small)
            if i == len(steps) - 1 or node.args[0].vid not in made:
                return Reason(
                    RefusalCategory.INPUT_MAY_BE_MUTATED,
                    f"`{code}` changes in place a tensor the matched steps did not make, which other code may hold: "
                    "the fused call would leave it unchanged",
                    node.site.small,
                )
            if operator and not (isinstance(pattern, OpNode) and any(v.name in kept for v in pattern.outputs)):
                return Reason(
                    RefusalCategory.INPUT_MAY_BE_MUTATED,
                    f"`{code}` is written in place, which keeps the dtype of its tensor, and the rule's kernel takes "
                    "this step only as written out of place",
                    node.site.small,
                )
            made.add(node.out)
        elif aliasing.fresh(node) or (node.kind == "op" and bool(node.args) and node.args[0].vid in made):
            made.add(node.out)
    return None


def _inputs_read_hidden(match: Match) -> Optional[Reason]:
    """An argument of the fused call computed from a value the call hides (``s + mask.to(s.dtype)``, ``bias[...,
    :s.size(-1)]``: the scores): where the call goes, nothing holds that value any more."""
    if match.rule.forward is None or match.rule.forward.target is None or not isinstance(match.rule.forward.target[0], CallNode):
        return None
    hidden, _ = _output_vids(match)
    for value in _target_inputs(match):
        if value.kind == "expr" and any(vid in hidden for _, vid in value.uses):
            name = next(n for n, vid in value.uses if vid in hidden)
            return Reason(
                RefusalCategory.INTERMEDIATE_USED_ELSEWHERE,
                f"`{_code(value.expr)}` reads `{name}`, an intermediate result the fused call hides, so the call "
                "could not compute that argument",
                next((n.site.line for n in match.nodes if any(a is value for a in (*n.args, *(v for _, v in n.kwargs)))), None),
            )
    return None


# torch functions that set a mode every later call runs under (gradient recording, default dtype or device,
# autocast, determinism) or the random generator's state
_MODE_SETTERS = frozenset({
    "torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled",
    "torch.set_default_dtype", "torch.set_default_device", "torch.set_default_tensor_type",
    "torch.set_autocast_enabled", "torch.use_deterministic_algorithms", "torch.manual_seed", "torch.seed",
    "torch.set_rng_state", "torch.random.manual_seed", "torch.random.seed", "torch.random.set_rng_state",
    "torch.set_float32_matmul_precision", "torch.autograd.set_detect_anomaly",
})


def _mode_set_between(match: Match) -> Optional[Reason]:
    """A call setting a mode (`_MODE_SETTERS`: ``torch.set_grad_enabled(False)``) between the first and the last
    matched node: the fused call runs every matched computation under the mode of one place."""
    if match.graph is None or len(match.nodes) < 2:
        return None
    first, last = min(n.index for n in match.nodes), max(n.index for n in match.nodes)
    setter = next((
        n for n in match.graph.nodes if first < n.index < last and n.kind == "func" and n.qualname in _MODE_SETTERS
    ), None)
    if setter is None:
        return None
    return Reason(
        RefusalCategory.NOT_PLACEABLE,
        f"`{setter.qualname}` runs between the matched calls: the fused call would run them all under one mode",
        setter.site.line,
    )


# Why the next rewrite round would not place a match that plan "sink" copies into an `if`'s arms (sink.py), None
# when it would: the engine analyses the copied code (engine.SinkCheck). Without one, no match is placed that way.
ConfirmSink = Callable[["PlacedMatch"], Optional["Reason"]]


def find_matches(
    rule: Rule, cls: ClassStructure, refusals: Optional[list[Refusal]] = None, confirm_sink: Optional[ConfirmSink] = None
) -> list[PlacedMatch]:
    """Every safe, non-overlapping match of `rule` in one class, with its placement; its variants are tried in file
    order.

    With a `refusals` list, also appends a :class:`Refusal` per site that matched structurally but was refused:
    one per site (its first reason), none for a site that some variant matches safely."""
    # A match dropped because a layer it removes from __init__ is used elsewhere leaves its nodes to the later
    # variants (ADP005's post-LN form that keeps the modules): the variants run again without it.
    dropped: set[VariantKey] = set()
    removals: Refused = []  # the dropped matches, with why
    while True:
        refused: Optional[Refused] = [] if refusals is not None else None
        found: list[PlacedMatch] = []
        taken: set[tuple[int, Optional[str]]] = set()
        for variant in (rule, *rule.alternatives):
            for placed in _variant_matches(variant, cls, taken, refused, confirm_sink, dropped):
                # Instantiation matches have no forward nodes: one finding per __init__ binding.
                bindings = {id(b) for b in placed.match.init_matches.values()}
                if placed.placement.plan != "init" or all(
                    bindings != {id(b) for b in f.match.init_matches.values()} for f in found
                ):
                    found.append(placed)
        # Before the removal check: a declined site keeps calling its layers, so a match deleting them must go too.
        kept = []
        late: Refused = []  # sites refused after they matched safely: their reasons come first
        for f in found:
            reported = reported_statements(f.match, f.placement)
            directive = suppression.suppressing_statement(reported, (rule.code, rule.name))
            if directive is None:
                kept.append(f)
            elif refused is not None:
                reason = Reason(RefusalCategory.SUPPRESSED, "a suppression comment silences this site", directive)
                late.append((f.match, f.placement, reason))
        removed: Refused = []
        accepted = _drop_unremovable_layers(kept, removed)
        removals += removed
        again = {(id(m.rule), m.key()) for m, _, _ in removed if m.nodes} - dropped
        if not again or not rule.alternatives:
            break
        dropped |= again
    late += removals
    if refusals is not None and refused is not None:
        done: set[tuple[int, Optional[str]]] = set().union(*(_site_key(f.match, f.placement) for f in accepted))
        for m, placement, reason in late + refused:
            key = _site_key(m, placement)
            if not key & done:
                done |= key
                if reason.listed:
                    refusals.append(_refusal(m, placement, reason))
    return accepted


def reported_statements(match: Match, placement: Optional[Placement]) -> list[cst.CSTNode]:
    """The statement lines a match is reported at (and silenced on): its matched forward statements, else the
    ``__init__`` statements of an instantiation or ``nn.Sequential`` site (`placement`: None before one is
    decided)."""
    if match.nodes and (placement is None or placement.plan != "container"):
        return [n.site.line for n in match.nodes]
    if match.container is not None and match.container.statement is not None:
        return [match.container.statement]
    return [b.statement for b in match.init_matches.values() if b.statement is not None]


def _variant_matches(
    rule: Rule, cls: ClassStructure, taken: set[tuple[int, Optional[str]]], refused: Optional[Refused] = None,
    confirm_sink: Optional[ConfirmSink] = None,
    dropped: Collection[VariantKey] = (),
) -> list[PlacedMatch]:
    """The matches of one variant whose forward nodes are not in `taken` (which grows with them) and that are not
    `dropped` (``(id(variant), key)``: left to the later variants); the structural matches it refuses go to
    `refused` with their reason, when given."""
    if rule.forward is None:
        if rule.init is None or len(rule.init.source) != 1 or not _guards_may_match(rule, cls):
            return []
        return _find_init_only(rule, cls, refused)
    walker = rule if refused is None else _admitting_possible_types(rule)
    if not may_match(walker, cls):
        return []
    if refused is None and not _binds_distinct_layers(rule, cls):
        return []  # its structural matches would all be refused: nothing to find, and no refusal is listed
    if cls.truncated:  # walks the class
        return []
    found: list[PlacedMatch] = []
    for graph in [*cls.graphs, *cls.container_graphs]:
        for nodes, env in flow_checks.subsequences(rule.forward.source, graph, walker):
            real = tuple(n for n, p in zip(nodes, rule.forward.source) if n is not None and not isinstance(p, Wildcard))
            match = Match(rule, cls, graph, real, env, skipped=frozenset(i for i, n in enumerate(nodes) if n is None))
            key = match.key()
            if key & taken or (id(rule), key) in dropped:
                twin_of = next((i for i, f in enumerate(found) if f.match.key() == key), None)
                if twin_of is not None and _another_call_of_the_helper(found[twin_of].match, match):
                    _check_twin(found, twin_of, match, nodes, refused)
                continue
            placement: Optional[Placement] = None
            initialised = _match_init(match)
            if isinstance(initialised, Reason):
                reason: Optional[Reason] = initialised
            else:
                match = initialised
                reason = (
                    _rest_args_fit(match) or _in_place_steps_fit(match) or _inputs_read_hidden(match)
                    or _mode_set_between(match)
                )
            if reason is None and match.container is not None:
                # Inside nn.Sequential the data flow is fixed (element i feeds element i+1 only): nothing to check.
                placement = Placement("container", anchor=match.nodes[-1])
                # One match per pair of elements, however many times forward calls the container.
                elements = frozenset((id(match.container), n.layer) for n in match.nodes)
                if elements & taken:
                    continue
                reason = _guards_refusal(match, placement)
                if reason is None:
                    taken |= key | elements
                    found.append(PlacedMatch(match, placement))
            elif reason is None:
                outcome = _place_forward(match, nodes)
                if isinstance(outcome, Placement) and outcome.plan == "sink":
                    assert outcome.unsunk is not None
                    unconfirmed = outcome.unsunk if confirm_sink is None else confirm_sink(PlacedMatch(match, outcome))
                    outcome = unconfirmed if unconfirmed is not None else outcome
                if isinstance(outcome, Reason):
                    reason = outcome
                else:
                    taken |= key
                    found.append(PlacedMatch(match, outcome))
            if reason is not None and refused is not None:
                refused.append((match, placement, reason))
    return found


def _another_call_of_the_helper(placed: Match, match: Match) -> bool:
    """Whether `match` holds the nodes of `placed`, aligned with the same pattern nodes, as walked where another call
    inlines their helper method."""
    return (
        len(placed.nodes) > 1  # one call swapped for its drop-in (ADP004) computes the same for any caller
        and any(n.site.inline_stack for n in placed.nodes)
        and [n.site.inline_stack for n in placed.nodes] != [n.site.inline_stack for n in match.nodes]
        and placed.skipped == match.skipped and match.env.keys() <= placed.env.keys()  # (`__init__`'s to come)
    )


def _check_twin(
    found: list[PlacedMatch], index: int, twin: Match, aligned: list[Optional[DLNode]], refused: Optional[Refused]
) -> None:
    """Check `twin`, the copy of ``found[index]``'s match where another call inlines the helper holding it. The
    helper's code is rewritten once for every caller: where the copy is placed the same way, it joins the placed
    match's twins (`helper_callers_checked` counts its call checked); else the placed match is dropped and the
    copy's reason listed."""
    placed = found[index]
    initialised = _match_init(twin)
    if isinstance(initialised, Reason):
        outcome: Union[Placement, Reason] = initialised
    else:
        if initialised.env.keys() != placed.match.env.keys():
            return  # another alignment of the pattern: not a copy of this match
        twin = initialised
        outcome = (
            _rest_args_fit(twin) or _in_place_steps_fit(twin) or _inputs_read_hidden(twin) or _mode_set_between(twin)
            or _place_forward(twin, aligned)
        )
    if isinstance(outcome, Placement) and _same_rewrite(placed, PlacedMatch(twin, outcome)):
        found[index] = dataclasses.replace(placed, twins=(*placed.twins, twin))
        return
    del found[index]
    if refused is not None:
        reason = outcome if isinstance(outcome, Reason) else Reason(
            RefusalCategory.NOT_PLACEABLE,
            "the helper method holding it is called more than once, and its rewrite would not be the same for every "
            "call" + (" (a plan moving or copying statements is checked for one call only)"
                      if outcome.plan in ("hoist", "sink") else ""),
        )
        refused.append((twin, None, reason))


def _same_rewrite(a: PlacedMatch, b: PlacedMatch) -> bool:
    """Whether two copies of one match, walked through different calls of their helper, rewrite its code the same
    way: the same plan over the same statements, passing the same names and expressions. A plan that copies or
    moves statements ("hoist", "sink") is never taken as the same."""
    if a.placement.plan != b.placement.plan or a.placement.plan in ("hoist", "sink"):
        return False
    return _rewrite_signature(a) == _rewrite_signature(b)


def _rewrite_signature(placed: PlacedMatch) -> tuple[object, ...]:
    """What a placed match's rewrite depends on, with the ids of its walk's values replaced by the pattern variables
    and node positions holding them (the same in every copy) and CST nodes by their ids."""
    match, placement = placed.match, placed.placement
    label: dict[int, str] = {}
    for name, bound in match.env.items():
        if isinstance(bound, Value):
            label.setdefault(bound.vid, "$" + name)
    for i, node in enumerate(match.nodes):
        label.setdefault(node.out, f"#{i}")

    def ids(nodes: Sequence[Optional[cst.CSTNode]]) -> tuple[int, ...]:
        return tuple(id(n) for n in nodes)

    def by_label(mapping: Mapping[int, object]) -> frozenset[tuple[str, object]]:
        return frozenset((label.get(vid, "?"), value) for vid, value in mapping.items())

    anchor = placement.anchor
    return (
        None if anchor is None else (id(anchor.site.small), id(anchor.expr)),
        ids(placement.deleted), ids(placement.region), ids(placement.region_ifs), ids(placement.fallback_tests),
        ids(placement.feeders), ids(placement.prefix_lines), ids((placement.branch_if, placement.branch_owner)),
        placement.suffix,
        by_label({vid: id(copy) for vid, copy in placement.output_copies.items()}),
        by_label({vid: ids(pair) for vid, pair in placement.conditional.items()}),
        frozenset((name, _binding_text(bound, placement)) for name, bound in match.env.items()),
        frozenset((name, id(binding.statement)) for name, binding in match.init_matches.items()),
    )


def _binding_text(bound: Binding, placement: Placement) -> object:
    """What a binding renders as in a rewrite (`rewriter._atom_expr`): a value's expression or the variable holding
    it where the call goes, a layer's attribute."""
    if isinstance(bound, Value):  # (a walk's temporary, `%3`, is named per copy: its expression is the same)
        named = placement.names.get(bound.vid) if bound.kind == "var" and not bound.text.startswith("%") else None
        return bound.kind, None if bound.text.startswith("%") else named or bound.text, id(bound.expr)
    if isinstance(bound, LayerRef):
        return bound.attr
    if isinstance(bound, InitArg):
        return id(bound.expr), bound.default
    return tuple(map(id, bound.args)), tuple(map(id, bound.call_args))


_WALKERS: dict[int, tuple[Rule, Rule]] = {}  # by id, as `_NEEDS`


def _admitting_possible_types(rule: Rule) -> Rule:
    """The rule the structural walk uses when refusals are listed: one whose walk lets a layer of an only possible
    type through (``self.norm = norm_layer(d)``, ``norm_layer=nn.LayerNorm``). The walk of `rule` itself passes such
    a site by in silence; `_match_init`, which judges with `rule`, then refuses it in words. The walk only admits
    more candidates, so the matches it accepts are the same."""
    if rule.uncertain:
        return rule
    entry = _WALKERS.get(id(rule))
    if entry is None:
        entry = _WALKERS[id(rule)] = (rule, dataclasses.replace(rule, uncertain="guarded"))
    return entry[1]


# Why a match cannot be placed where it stands that plan "sink" may remedy.
_SINKABLE = (RefusalCategory.NOT_PLACEABLE, RefusalCategory.BRANCH_NOT_DUPLICABLE)


def _place_forward(match: Match, aligned: list[Optional[DLNode]]) -> Union[Placement, Reason]:
    """Plan a forward match and run the checks on it (and the rule's guards): its placement, or the reason it is
    refused."""
    rule = match.rule
    planned = _plan(match)
    if isinstance(planned, Reason):
        # Where the fused call cannot go matters less than a hidden result read later, which every plan refuses.
        planned = flow_checks.intermediate_read_later(match) or planned
    placement: Optional[Placement] = None
    if isinstance(planned, Reason) and rule.fallback:
        absorbing = _plan_absorbing(match, aligned)
        if isinstance(absorbing, Placement):
            placement = absorbing
        elif planned.category is RefusalCategory.INTERMEDIATE_USED_ELSEWHERE:
            return planned  # a hidden result read later, which every plan refuses
        elif absorbing is not None:
            return absorbing  # why an `if` holding a step could not be absorbed
        # else: the hoist and the sink below, as for any rule
    if placement is None:
        reason = planned if isinstance(planned, Reason) else _outputs_assigned(match, planned)
        if reason is None:
            assert isinstance(planned, Placement)
            placement = planned
            reason = _check_paths(match, planned)
            if reason is not None and rule.fallback and planned.plan == "block":
                fallback = _plan_fallback(match, planned)
                if isinstance(fallback, Placement):  # else the block plan's reason stands
                    placement, reason = fallback, None
        if reason is not None:
            moved = hoist.plan_hoist(match)
            if not isinstance(moved, Placement):
                # The hoist is the rule's last resort in place: where it could place the nodes but something in
                # between forbids it, that is why, unless the statement-deleting plans failed for another reason
                # than where their call could go.
                why = moved if moved is not None and reason.category is RefusalCategory.NOT_PLACEABLE else reason
                # Split between statements before an `if` and one arm: copied into the arms, the next round may
                # place it there; where it has that shape but cannot be copied, that is why.
                moved = sink.plan_sink(match, why) if reason.category in _SINKABLE else None
                if not isinstance(moved, Placement):
                    return moved if moved is not None else why
            placement = moved
    assert placement is not None
    if placement.plan == "sink":
        return placement  # only copies statements: the helpers and guards judge the match the next round places
    return (
        flow_checks.helper_refusal(match, placement) or _guards_refusal(match, placement)
        or _read_by_name_later(match, placement) or placement
    )


def _read_by_name_later(match: Match, placement: Placement) -> Optional[Reason]:
    """A name a deleted statement binds that a nested function, lambda or generator of the function reads (when it
    runs, the rewrite no longer binds it, or binds it to another value), or a call reading every local
    (``locals()``, ``eval(...)``) in a function losing statements."""
    graph = match.graph
    if graph is None or not placement.deleted:
        return None
    if graph.reads_every_local is not None:
        return Reason(
            RefusalCategory.INTERMEDIATE_USED_ELSEWHERE,
            "this call reads the function's local names, which the rewrite would change",
            graph.reads_every_local,
        )
    names = set().union(*(_written(small) for small in placement.deleted))
    read = next((name for name in sorted(names) if name in graph.closure_reads), None)
    if read is None:
        return None
    return Reason(
        RefusalCategory.INTERMEDIATE_USED_ELSEWHERE,
        f"`{read}`, which a replaced statement binds, is read by this nested function when it runs",
        graph.closure_reads[read],
    )


def may_match(rule: Rule, cls: ClassStructure) -> bool:
    """Whether every called type of the forward pattern occurs in the class (a layer type among its bindings, a
    function among its callees) and every operator among its operators: a cheap test that spares walking most
    classes. A guard may add its own cheap test (:func:`_guards_may_match`)."""
    needs = _needs_of(rule)
    if not all(op in cls.operators for op in needs.operators) or not _guards_may_match(rule, cls):
        return False
    certain, possible = cls.bound_types
    types = possible if rule.uncertain else certain
    if not all(_any_matches(layer, types) for layer in needs.layer_types):
        return False
    # A function pattern also matches a layer's type.
    return all(_any_matches(called, types) or _any_matches(called, cls.callees) for called in needs.called_types)


@dataclass(frozen=True)
class _Needs:
    """What a rule variant's forward pattern needs of a class (:func:`may_match`), read once per variant."""

    operators: tuple[str, ...]  # ADP010's `$q @ $kt`: most classes calling a softmax hold no `@`
    layer_types: tuple[tuple[str, ...], ...]  # per layer call: the class binds a layer of one of these types
    called_types: tuple[tuple[str, ...], ...]  # per function call: a bound layer or a callee of one of these


_NEEDS: dict[int, tuple[Rule, _Needs]] = {}  # by id: rules are mutable; the entry keeps its rule (and id) alive


def _needs_of(rule: Rule) -> _Needs:
    entry = _NEEDS.get(id(rule))
    if entry is None:
        assert rule.forward is not None
        operators, layers, called = [], [], []
        for pattern in rule.forward.source:
            if isinstance(pattern, OpNode) and not pattern.optional:
                operators.append(pattern.op)
            elif isinstance(pattern, CallNode) and not pattern.optional:
                if pattern.layer is not None:
                    init = _init_pattern_for(rule, pattern.layer.name)
                    if init is not None and init.types:
                        layers.append(init.types)
                elif pattern.types:
                    called.append(pattern.types)
        entry = _NEEDS[id(rule)] = (rule, _Needs(tuple(operators), tuple(layers), tuple(called)))
    return entry[1]


def _binds_distinct_layers(rule: Rule, cls: ClassStructure) -> bool:
    """For a rule with a guard that refuses one layer standing for two of its pattern's layers (a ``distinct_layers``
    attribute, ADP009's): whether the class binds at least as many different layers of the pattern's types as the
    pattern calls. A class with fewer (an MLP with two Linears) would give the rule only refusals."""
    if not any(getattr(guard_registry.get(name), "distinct_layers", False) for name in rule.guards):
        return True
    needs = _needs_of(rule)
    attrs = {
        b.attr
        for b in cls.layer_bindings
        if any((b.qualname and _any_matches(types, frozenset((b.qualname,)))) or _may_be(b.layer_type, types, rule)
               for types in needs.layer_types)
    }
    return len(attrs) >= len(needs.layer_types)


def _guards_may_match(rule: Rule, cls: ClassStructure) -> bool:
    """False when one of the rule's guards has a cheap test (a ``may_match(cls)`` attribute) that rules the class
    out: ADP013's (the file defines a rotation helper at all), ADP011's (the class instantiates an RMSNorm-shaped
    class). Each test runs once per class."""
    for name in rule.guards:
        answer = cls.guard_may_match.get(name)
        if answer is None:
            may_match = getattr(guard_registry.get(name), "may_match", None)
            answer = cls.guard_may_match[name] = may_match is None or bool(may_match(cls))
        if not answer:
            return False
    return True


def helper_callers_checked(found: list[PlacedMatch], refusals: Optional[list[Refusal]] = None) -> list[PlacedMatch]:
    """The matches of one rule over a whole module, less those in a helper method some caller was not checked with.

    A match in a helper (`DLNode.site.inline_stack`) was checked where the helper is inlined, but its rewrite
    changes the helper for every caller: each `self.<helper>` of the class family must be a call through which an
    accepted match of the same nodes was checked (in this class or another: a subclass's forward inlines the
    inherited helper too). Another method walked on its own calls the helper as an opaque call, and a subclass may
    refuse the site (it changes the output in place): such a match is dropped, with a refusal naming the call."""
    # One call swapped for a drop-in (ADP004's softmax) computes what it replaced for any caller, and so does an
    # nn.Sequential replaced in __init__ (plan "container"): only fusions rewritten in the helper's code count.
    helper_matches = [
        f for f in found
        if len(f.match.nodes) > 1 and f.placement.plan not in ("container", "init")
        and any(n.site.inline_stack for n in f.match.nodes)
    ]
    if not helper_matches:
        return found
    # match key -> statement id -> the inlined calls through it (one Site per call walked, as a statement may hold
    # two calls of the helper, or one call and another reference, `cp.checkpoint(self.core, ...)`)
    checked: dict[frozenset[tuple[int, Optional[str]]], dict[int, set[int]]] = {}
    for f in found:
        through = checked.setdefault(f.match.key(), {})
        for copy in (f.match, *f.twins):
            for node in copy.nodes:
                for site in node.site.inline_stack:
                    through.setdefault(id(site.small), set()).add(id(site))
    dropped: set[int] = set()
    for f in helper_matches:
        unchecked = _unchecked_helper_call(f.match, checked[f.match.key()])
        if unchecked is None:
            continue
        dropped.add(id(f))
        if refusals is not None:
            helper, statement = unchecked
            reason = Reason(
                RefusalCategory.NOT_PLACEABLE,
                f"the helper method `{helper}` holding it is called here too, where its result is not checked (a "
                "method walked on its own, a call whose arguments the match does not hold for, a subclass refusing "
                "the site, another object, a reference by name or through the class, or one the walk does not "
                "inline): the rewrite would change the helper for this caller as well",
                statement,
            )
            refusals.append(_refusal(f.match, f.placement, reason))
    # The classes inheriting the helper each hold a copy of the match: one rewrite of the helper serves them all
    # where every copy rewrites it the same way, else none may.
    by_key: dict[frozenset[tuple[int, Optional[str]]], list[PlacedMatch]] = {}
    for f in helper_matches:
        if id(f) not in dropped:
            by_key.setdefault(f.match.key(), []).append(f)
    for group in by_key.values():
        first, others = group[0], group[1:]
        if all(_same_rewrite(first, f) for f in others):
            dropped.update(id(f) for f in others)
            continue
        dropped.update(id(f) for f in group)
        if refusals is not None:
            refusals.append(_refusal(first.match, first.placement, Reason(
                RefusalCategory.NOT_PLACEABLE,
                "the helper method holding it serves classes whose rewrites of it would differ (other layers, "
                "arguments or plans): one rewrite of the helper cannot serve them all",
            )))
    return [f for f in found if id(f) not in dropped]


def _unchecked_helper_call(
    match: Match, checked: dict[int, set[int]]
) -> Optional[tuple[str, Optional[cst.CSTNode]]]:
    """A helper holding the match's nodes, with a statement referring to it more often than accepted copies were
    checked through it, or referring to it by name or through a class (`ClassStructure.class_reads`); None for the
    statement: the helper is read on another object, or where no statement holds it."""
    helpers = {
        site.function.rpartition(".")[2]
        for n in match.nodes
        for site in (n.site, *n.site.inline_stack[1:])
        if n.site.inline_stack
    }
    cls = match.cls
    wanted = {id(ref): helper for helper in helpers for ref in cls.self_references.get(helper, [])}
    statements = _statements_holding(cls, set(wanted))
    for helper in sorted(helpers):
        if helper in cls.foreign_attributes:
            return helper, None
        # reached by its name (`getattr(self, "core")`) or through the class (`Model.core(self, ...)`)
        other = cls.reached_by_name.get(helper) or cls.class_reads.get(helper)
        if other is not None:
            return helper, _statements_holding(cls, {id(other)}).get(id(other))
    references: dict[int, int] = {}  # statement id -> references to a helper in it
    for ref_id, helper in wanted.items():
        statement = statements.get(ref_id)
        if statement is None:
            return helper, None
        references[id(statement)] = references.get(id(statement), 0) + 1
        if references[id(statement)] > len(checked.get(id(statement), ())) and not _returned_by_itself(
            cls, helper, statement
        ):
            return helper, statement
    return None


def _returned_by_itself(cls: ClassStructure, helper: str, statement: cst.CSTNode) -> bool:
    """``return self.<helper>(...)`` in the helper's own body: a recursion whose result goes where the checked
    calls' results go."""
    if not (isinstance(statement, cst.Return) and isinstance(statement.value, cst.Call)):
        return False
    if _self_attr_name(statement.value.func) != helper or cls.module is None:
        return False
    return any(
        isinstance(fn, cst.FunctionDef) and fn.name.value == helper and any(n is statement for n in cstwalk.walk(fn))
        for top in cls.module.body if isinstance(top, cst.ClassDef)
        for fn in top.body.body
    )


def _statements_holding(cls: ClassStructure, wanted: set[int]) -> dict[int, cst.CSTNode]:
    """Node id (of `wanted`) -> the statement the walk reports it at: its small statement, or the compound statement
    whose header holds it. Over the module's classes (`self_references` spans the class family)."""
    out: dict[int, cst.CSTNode] = {}
    if cls.module is None or not wanted:
        return out
    todo: list[cst.CSTNode] = [s for s in cls.module.body if isinstance(s, cst.ClassDef)]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                out.update((id(n), small) for n in cstwalk.walk(small) if id(n) in wanted)
        elif isinstance(node, cst.BaseCompoundStatement) and not isinstance(node, (cst.ClassDef, cst.FunctionDef)):
            for child in cstwalk.children(node):
                if isinstance(child, (cst.BaseSuite, cst.If, cst.Else)):
                    todo.append(child)
                else:
                    out.update((id(n), node) for n in cstwalk.walk(child) if id(n) in wanted)
        else:
            todo.extend(cstwalk.children(node))
    return out


def _drop_unremovable_layers(matches: list[PlacedMatch], refused: Optional[Refused] = None) -> list[PlacedMatch]:
    """A layer whose ``__init__`` statement disappears must not be referenced outside the matched calls, and one
    whose statement is rewritten must be rewritten the same way by every match (`_init_edit_conflict`).

    Judged over all matches together (one Dropout shared by the two arms of an ``if`` is fine when both arms are
    rewritten); dropping a match can invalidate another, so iterate to a fixpoint. Dropped matches go to `refused`.
    """
    edits = {id(f): _init_edits(f.match) for f in matches}  # once: the loop only drops matches
    while True:
        covered = _covered_calls(matches)
        kept = []
        for f in matches:
            reason = _layer_uses_covered(f, covered, edits[id(f)]) or _init_edit_conflict(f, matches, edits)
            if reason is None:
                kept.append(f)
            elif refused is not None:
                refused.append((f.match, f.placement, reason))
        if len(kept) == len(matches):
            return kept
        matches = kept


def _init_edits(match: Match) -> dict[int, tuple[str, str]]:
    """id(``__init__`` statement) -> (the layer's attribute, what its new call is built from) for each layer the
    ``init`` target rebuilds in place (ADP005's LayerNorm made a FusedDropoutAddLayerNorm with the Dropout's `p`)."""
    rule = match.rule
    if rule.init is None or rule.init.target is None:
        return {}
    edits: dict[int, tuple[str, str]] = {}
    for target in rule.init.target:
        if not isinstance(target, CallNode):
            continue
        ref = match.env.get(target.outputs[0].name)
        binding = match.init_matches.get(target.outputs[0].name)
        if not isinstance(ref, LayerRef) or binding is None or binding.statement is None:
            continue
        parts = []
        for name in sorted(_atom_names(target)):
            bound = match.env.get(name)
            if isinstance(bound, InitArg):
                parts.append(f"{name}={_init_text(bound)}")
            elif isinstance(bound, RestArgs):
                parts.append(f"{name}=({', '.join(_code(a) for a in bound.args)})")
            else:
                parts.append(f"{name}={bound!r}")
        edits[id(binding.statement)] = (ref.attr, "; ".join(parts))
    return edits


def _init_edit_conflict(
    found: PlacedMatch, matches: list[PlacedMatch], edits: dict[int, dict[int, tuple[str, str]]]
) -> Optional[Reason]:
    """Why `found` cannot rebuild a layer in ``__init__``: another match rebuilds the same statement from other
    arguments (one LayerNorm closing two residual blocks whose Dropouts differ: it cannot hold both), None if none
    does. Both are then left to a variant that keeps the layers. `edits`: `_init_edits` of each match, by id."""
    mine = edits[id(found)]
    if not mine:
        return None
    for other in matches:
        if other is found:
            continue
        for key, (attr, made) in edits[id(other)].items():
            if key in mine and mine[key][1] != made:
                return Reason(
                    RefusalCategory.LAYER_USED_ELSEWHERE,
                    f"self.{attr} is fused at another site too, with other arguments for its __init__ statement, "
                    "which can hold only one of them",
                    reported_statements(other.match, other.placement)[0],
                )
    return None


def layers_to_delete(match: Match, placement: Placement) -> list[tuple[str, LayerBinding]]:
    """Source layers the ``init`` target drops: (attr, binding). A layer still called by a statement the branch plan
    copies into the other arm of the ``if`` counts too: the target takes over what it does (ADP005's post-LN form
    builds the LayerNorm's own Dropout), so keeping it for the copy would leave two modules where the code had one,
    which a later ``self.dropout.p = 0`` would tell apart; its call in the copy then refuses the match
    (`_layer_uses_covered`), leaving it to a variant that keeps the layers."""
    rule = match.rule
    if rule.init is None or rule.init.target is None:
        return []
    kept = {n.outputs[0].name for n in rule.init.target if isinstance(n, CallNode)}
    out = []
    for var, binding in match.init_matches.items():
        ref = match.env[var]
        if var not in kept and isinstance(ref, LayerRef):
            out.append((ref.attr, binding))
    return out


def _copied(placement: Placement) -> set[int]:
    """Statements the branch plan copies into the other arm of the ``if`` (they keep their calls there)."""
    return {id(s) for s in placement.deleted} if placement.plan == "branch" else set()


def _statement_of(node: DLNode, match: Match, placement: Placement) -> cst.CSTNode:
    assert placement.anchor is not None
    site = _statement_site(node, placement.anchor, match.cls)
    return site.small if not isinstance(site, str) else node.site.small


def _covered_calls(matches: list[PlacedMatch]) -> dict[Optional[str], set[int]]:
    """Layer ("self.<attr>") -> the calls of it rewritten by the matches that remove it. A call in a statement a
    branch plan copies into the other arm stays there: it is no covered use. Nor is a call matched by a rewrite that
    keeps the layer (ADP005's pre-LN form passes the Dropout on)."""
    out: dict[Optional[str], set[int]] = {}
    for f in matches:
        removed = {"self." + attr for attr, _ in layers_to_delete(f.match, f.placement)}
        copied = _copied(f.placement)
        for n in f.match.nodes:
            if n.layer in removed and n.call is not None and id(_statement_of(n, f.match, f.placement)) not in copied:
                out.setdefault(n.layer, set()).add(id(n.call.func))
    return out


def _layer_uses_covered(
    found: PlacedMatch, covered: dict[Optional[str], set[int]], edits: dict[int, tuple[str, str]]
) -> Optional[Reason]:
    """Why a match's `__init__` edits cannot stand (`edits`: its `_init_edits`): a layer it rebuilds carries a hook, or
    one it removes is used elsewhere."""
    match = found.match
    for attr, _ in edits.values():
        hook = match.cls.hooked.get(attr)
        if hook is not None:
            return Reason(
                RefusalCategory.LAYER_USED_ELSEWHERE,
                f"a hook is registered on self.{attr} here, and the rewrite changes what that layer is called with",
                hook,
            )
    for attr, binding in layers_to_delete(match, found.placement):
        allowed = set(covered.get("self." + attr, ()))
        assert binding.statement is not None
        for small in binding.statement.body:
            if isinstance(small, cst.Assign):
                allowed.update(id(t.target) for t in small.targets)
            elif isinstance(small, cst.AnnAssign):
                allowed.add(id(small.target))
        other = next((node for node in match.cls.self_references.get(attr, []) if id(node) not in allowed), None)
        if other is not None:
            return Reason(
                RefusalCategory.LAYER_USED_ELSEWHERE,
                f"self.{attr}, which the rewrite removes from __init__, is also used here",
                other,
            )
        by_name = match.cls.reached_by_name.get(attr) or match.cls.reached_by_name.get("*")
        if by_name is not None:
            return Reason(
                RefusalCategory.LAYER_USED_ELSEWHERE,
                f"self.{attr}, which the rewrite removes from __init__, may be reached by name here",
                by_name,
            )
        if attr in match.cls.foreign_attributes:
            # maybe reached from outside the class (`self.embeddings.dropout(x)`)
            return Reason(
                RefusalCategory.LAYER_USED_ELSEWHERE,
                f"self.{attr}, which the rewrite removes from __init__, may be used from outside the class (this "
                f"module reads an attribute {attr!r} of another object)",
            )
    return None


# ------------------------------------------------------------------------------------------ plan "fallback"
#
# Rules with `fallback original` (ADP010): where intermediates of the match are read outside it, but only under
# simple conditions (`if head_mask is not None: probs = probs * head_mask` inside the region, `(ctx, probs) if
# output_attentions else (ctx,)` after it), the region runs as written when any of those conditions holds and
# fused otherwise:
#
#     if head_mask is not None or output_attentions:
#         <the region as written>
#     else:
#         <the region with the block plan's edits, its `if`s left out>
#
# Sound because: the region is a run of statements of the function body whose `if`s (no else) have simple tests
# (names, `is None`, `not`, `and`/`or`: no calls) over names that nothing from the region on assigns or changes in
# place (nor, for a test reading a value or a `self` flag, anything up to its last reading), so each test has the
# same value at the top of the region as where it stood; every read after the region of a name the region
# assigns (other than the anchor statement's) sits in the true arm of such a test; and the usual path checks hold on
# every path on which all those tests are false, which is exactly where the fused copy runs.


def _plan_fallback(
    match: Match, block: Placement, twin: Optional[PlacedMatch] = None, absorbed: tuple[cst.If, ...] = (),
    kept_ifs: frozenset[int] = frozenset(),
) -> Union[Placement, Reason, None]:
    """The fallback placement of a match whose `block` placement fails the path checks, if it is safe: else the
    reason the fused copy fails the path checks, if one is worth listing, or None. `twin`/`absorbed`/`kept_ifs` (ids
    of the absorbed `if`s that keep statements): see `_plan_absorbing`."""
    anchor = block.anchor
    assert anchor is not None
    # The class's methods; for the unit of the module's top-level functions, those functions.
    owner = match.cls.node if match.cls.node is not None else match.cls.module
    if owner is None:
        return None
    body = anchor.site.owner
    methods = [fn for fn in (_suite(owner.body) if isinstance(owner, cst.ClassDef) else owner.body)
               if isinstance(fn, cst.FunctionDef)]
    function = next((fn for fn in methods if fn.body is body), None)
    nested = function is None
    if nested and absorbed:
        # Only absorbed `if`s may sit in a nested block (no fallback test: nothing after the block is told apart,
        # and the path checks cover every read of the hidden names, there as anywhere).
        function = next((fn for fn in methods if any(n is body for n in cstwalk.walk(fn.body))), None)
    if function is None:
        return None  # a fallback region must be a run of a method body: what follows it is the rest of the method
    statements = list(anchor.site.block)
    lines = {id(n.site.line) for n in (twin.match if twin is not None else match).nodes}
    indices = [i for i, line in enumerate(statements) if id(line) in lines]
    if len(indices) != len(lines):
        return None
    first, last = indices[0], indices[-1]
    region, after = statements[first : last + 1], statements[last + 1 :]
    if not all(any(i is line for line in region) for i in absorbed):
        return None
    deleted = {id(s) for s in block.deleted}
    region_ifs: list[cst.If] = []
    assigned: set[str] = set()
    for line in region:
        if id(line) in lines:
            assert isinstance(line, cst.SimpleStatementLine)
            for small in line.body:
                if id(small) in deleted:
                    assigned.update(_written(small))
        elif isinstance(line, cst.If):
            is_absorbed = any(line is i for i in absorbed)  # its test was checked by `_not_none_test`
            if line.orelse is not None or not (is_absorbed or _fallback_test(line.test, match.cls)):
                return _region_if_reason(line)
            if not is_absorbed:
                region_ifs.append(line)
            assigned.update(_written_by(line, deleted) if id(line) in kept_ifs else _written(line.body))
    if not region_ifs and not assigned:
        return None
    anchor_names = _written(anchor.site.small)
    hidden = assigned - anchor_names  # names the fused copy no longer assigns
    scopes = (cst.Lambda, cst.FunctionDef, cst.ClassDef)
    if any(isinstance(n, scopes) and _names_in_node(n) & hidden for n in cstwalk.walk(function.body)):
        return None  # a nested function may read them whenever it is called
    tests: list[cst.BaseExpression] = [i.test for i in region_ifs]
    # statements whose reads of `hidden` all happen under a fallback test: after the region, and the region's `if`s
    guarded_statements: set[int] = set()
    for stmt in after:
        reads = _guarded_reads(stmt, hidden, match.cls)
        if reads is None:
            return None
        if reads:
            tests.extend(t for t in reads if not any(t.deep_equals(u) for u in tests))
            guarded_statements.update(_statement_ids(stmt))
    if not tests and not absorbed or nested and tests:
        return None
    writes = {id(s): _written(s) for s in region + after}
    written_from_region = set().union(*writes.values())
    if any(name in written_from_region for t in tests for name in _names_in_node(t)):
        return None
    # A test is evaluated once more, elsewhere than its `if`: a name of it must be the function's own local that no
    # nested function can rebind (`nonlocal`); a global or a closure's name may change in any call in between.
    for test in (*tests, *(i.test for i in absorbed)):
        if not _test_names_local(test, function):
            return Reason(
                RefusalCategory.NOT_PLACEABLE,
                f"the test `{_code(test)}` reads a name that is not this function's own local (a global, or one a "
                "nested function may rebind): it would be tested again elsewhere, where a call in between may have "
                "changed it",
                next((i for i in (*region_ifs, *absorbed) if i.test is test), None),
            )
    # A test that reads a value (a comparison, a truth test; not `is None`) of an object the code may change in
    # place from the region on (`n.add_(1)`, `f(n)`, `n[0] = 0`) could see another value at the top of the region.
    if tests and set().union(*map(_value_names, tests)) & _changed_in_place(region + after):
        return None
    # Nor through another way to the object: an alias (`g = flag; g.add_(1)`), a `self` flag changed in place
    # (`self.causal.logical_not_()`) or stored unseen (`vars(self)["causal"] = ...`). Where a test reads a value or
    # a `self` attribute, the statements from the top of the region to the last one reading a test, matched ones
    # aside, may call only what computes and store into nothing.
    if any(_value_names(t) or _self_attributes(t) for t in tests):
        last = max((i for i, stmt in enumerate(after) if id(stmt) in guarded_statements), default=-1)
        busy = _disturbing_statement(region + after[: last + 1], lines, tests, match.graph)
        if busy is not None:
            return Reason(
                RefusalCategory.NOT_PLACEABLE,
                "this statement runs between the top of the region, where the fallback tests "
                f"({', '.join(f'`{_code(t)}`' for t in tests)}) would be evaluated, and where they stand: a call or "
                "a store there could change what they read",
                busy,
            )
    for absorbed_if in absorbed:
        # Its own kept statements may assign X (`_retested_name_kept` vetted them); nothing else from the region on.
        # Another test (`layer_past is None`) is evaluated again at the fused call: nothing from the region on may
        # assign its names or change the objects whose value it reads.
        flag = _not_none_test(absorbed_if.test, match.cls.module) is None
        own = (_written_by(absorbed_if, deleted) if id(absorbed_if) in kept_ifs and not flag
               else writes[id(absorbed_if)])
        written = set().union(own, *(w for key, w in writes.items() if key != id(absorbed_if)))
        if _names_in_node(absorbed_if.test) & written:
            return None
        if flag and _value_names(absorbed_if.test) & _changed_in_place(region + after):
            return None
    skip = set().union(*(_statement_ids(i.body) for i in region_ifs)) if region_ifs else set()
    # An `if` the walk folds (no call in it) is one statement on every path, holding its body's reads: they happen
    # only where its test is true, and the fused copy drops it.
    guarded_statements.update(id(i) for i in region_ifs)
    for stmt in after:
        for sub in cstwalk.walk(stmt):
            if isinstance(sub, cst.If) and any(sub.test.deep_equals(t) for t in tests):
                skip |= _statement_ids(sub.body)
    failed = _check_fused_paths(match, block, frozenset(skip), frozenset(guarded_statements), twin)
    if failed is not None:
        return failed if failed.listed else None
    dropped = (*region_ifs, *(i for i in absorbed if id(i) not in kept_ifs))
    return dataclasses.replace(
        block, plan="fallback", region=tuple(region), region_ifs=dropped, fallback_tests=tuple(tests)
    )


def _test_names_local(test: cst.BaseExpression, function: cst.FunctionDef) -> bool:
    """Whether every name whose value `test` reads (``self`` of ``self.<flag>`` aside, vetted by `_fallback_test`;
    and the helper of `exists(x)`, vetted by `_not_none_test`) is bound in `function`'s own scope and read or bound
    in none of its nested functions, lambdas or classes."""
    nodes = list(cstwalk.walk(test, lambda n: type(n) is not cst.Attribute))
    helpers = {id(n.func) for n in nodes if type(n) is cst.Call}  # type: ignore[attr-defined]
    names = {n.value for n in nodes if type(n) is cst.Name and id(n) not in helpers}  # type: ignore[attr-defined]
    names -= {"self", "None", "True", "False"}
    if not names:
        return True
    if not names <= function_scope(function)[0]:
        return False
    nested = (n for n in cstwalk.walk(function.body) if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)))
    return not any(names & _names_in_node(scope) for scope in nested)


def _region_if_reason(if_stmt: cst.If) -> Reason:
    """Why an `if` between the matched statements keeps a fallback plan from keeping them as written."""
    why = (
        "has an else arm" if if_stmt.orelse is not None
        else "its test cannot be evaluated before them (a call, or a value the code may change from there on)"
    )
    return Reason(
        RefusalCategory.NOT_PLACEABLE,
        f"this `if` stands between the matched statements and {why}, so they cannot be kept as written where it "
        "applies and fused elsewhere",
        if_stmt,
    )


def _lines_before(node: DLNode) -> Sequence[cst.BaseStatement]:
    """The statements of `node`'s block before its line (none where the line is not one of them)."""
    block = node.site.block
    return block[: block.index(node.site.line)] if node.site.line in block else ()


def _written_by(if_stmt: cst.If, deleted: set[int]) -> set[str]:
    """The names the `deleted` statements in the body of `if_stmt` assign."""
    return set().union(*(_written(n) for n in cstwalk.walk(if_stmt.body) if id(n) in deleted))


def _check_fused_paths(
    match: Match, placement: Placement, original_only: frozenset[int], guarded: frozenset[int],
    twin: Optional[PlacedMatch] = None,
) -> Optional[Reason]:
    """The usual checks on the paths where every fallback test is false (no event in the statements only those
    tests reach); reads in `guarded` statements happen only when a test is true, so they are ignored. With a
    `twin`, a path that skips the absorbed nodes is checked as the twin (the match without them). None when they
    hold, else the reason."""
    assert match.graph is not None
    return flow_checks.check_fused_paths(match, placement, match.graph, original_only, guarded, twin)


def _suite(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else []  # type: ignore[return-value]


def _written(node: cst.CSTNode) -> set[str]:
    return {n for n in _written_names(node) if not n.startswith("self.")}


def _statement_ids(node: cst.CSTNode) -> set[int]:
    return {id(n) for n in cstwalk.walk(node) if isinstance(n, (cst.BaseStatement, cst.BaseSmallStatement))}


def _fallback_test(test: cst.BaseExpression, cls: ClassStructure) -> bool:
    """Whether a fallback plan may evaluate `test` before its region (`fallback_condition`): the ``self.<attr>`` it
    reads keep their value while forward runs, no method but ``__init__`` storing them and none a method or property
    of the class family (which runs code); in the unit of top-level functions `self` is any object: never."""
    if not fallback_condition(test):
        return False
    attributes = _self_attributes(test)
    if not attributes:
        return True
    if cls.node is None or "*" in cls.stored_outside_init:
        return False
    return not attributes & (cls.stored_outside_init | cls.methods)


def _guarded_reads(stmt: cst.CSTNode, names: set[str], cls: ClassStructure) -> Optional[list[cst.BaseExpression]]:
    """The fallback tests (`_fallback_test`) guarding every read of `names` in `stmt` (true arm of an
    `if`/conditional expression); None when some read is not guarded that way (or sits in a nested scope, which may
    run later)."""
    tests: list[cst.BaseExpression] = []
    return tests if _reads_guarded(stmt, None, names, cls, tests) else None


def _reads_guarded(
    node: cst.CSTNode,
    guard: Optional[cst.BaseExpression],
    names: set[str],
    cls: ClassStructure,
    tests: list[cst.BaseExpression],
) -> bool:
    """`_guarded_reads` below `node`, under the fallback test `guard` (None: none), collecting the tests in `tests`.
    A module-level function rather than a recursive closure: that closure would be a reference cycle holding the
    class structure, and with it the module's tree, until the next garbage collection."""
    if isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
        return not (_names_in_node(node) & names)
    if isinstance(node, (cst.If, cst.IfExp)):
        if not _reads_guarded(node.test, guard, names, cls, tests):
            return False
        inner = node.test if _fallback_test(node.test, cls) else guard
        return _reads_guarded(node.body, inner, names, cls, tests) and (
            node.orelse is None or _reads_guarded(node.orelse, guard, names, cls, tests)
        )
    if isinstance(node, (cst.Attribute, cst.Arg)):
        return _reads_guarded(node.value, guard, names, cls, tests)
    if isinstance(node, cst.Name) and node.value in names:
        if guard is None:
            return False
        tests.append(guard)
        return True
    return all(_reads_guarded(child, guard, names, cls, tests) for child in cstwalk.children(node))


def _names_in_node(node: cst.CSTNode) -> set[str]:
    return {n.value for n in cstwalk.walk(node) if isinstance(n, cst.Name)}


def _value_names(test: cst.BaseExpression) -> set[str]:
    """The names whose value `test` reads: all but the operands of an identity test (`x is None`, `x is not y`)
    and `self` of a ``self.<attr>`` flag (`_fallback_test` vets those)."""
    skipped = {id(n.value) for n in cstwalk.walk(test) if isinstance(n, cst.Attribute)}
    for n in cstwalk.walk(test):
        if isinstance(n, cst.Comparison) and all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in n.comparisons):
            skipped.update(id(operand) for operand in (n.left, *(c.comparator for c in n.comparisons)))
    return {n.value for n in cstwalk.walk(test) if isinstance(n, cst.Name) and id(n) not in skipped}


def _changed_in_place(statements: Sequence[cst.BaseStatement]) -> set[str]:
    """The names whose object `statements` may change without rebinding them: a call's receiver (`n.add_(1)`,
    `_call_receivers`), a name in a call's arguments (`f(n)`, `f([n])`), the object of a subscript or attribute store
    (`n[0] = 0`)."""
    names: set[str] = set()
    for stmt in statements:
        names |= _call_receivers(stmt)
        for n in cstwalk.walk(stmt):
            if isinstance(n, cst.Call):
                for arg in n.args:
                    names |= _names_in_node(arg.value)
            elif isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and isinstance(
                n.target, (cst.Attribute, cst.Subscript)
            ):
                name = _object_name(n.target)
                if name is not None:
                    names.add(name)
    return names


# Absorbed `if`s: `if X is not None: s = s + X` inside the region is an optional node of the pattern that runs
# exactly when X is not None; the target passes X as the node's keyword either way (None is what an absent optional
# node leaves out), so the `if` is dropped from the fused copy instead of becoming a fallback condition. The test
# may also be `exists(X)` for a helper of the file that is exactly `return X is not None`, and the argument an
# expression of X alone without calls (`s.masked_fill(~X, ...)`): the call then passes `(~X if <test> else None)`,
# which evaluates the test and the expression once, as the `if` did, at the fused call where X still holds the
# same value (the usual path checks); arguments the target does not pass (a fill value the rule's guard checked)
# may read anything.


def _plan_absorbing(match: Match, aligned: list[Optional[DLNode]]) -> Union[Placement, Reason, None]:
    """A match whose only nodes outside the anchor's block are optional nodes absorbed as above: checked with its
    twin (the match without them) on the paths that skip them, then placed as a fallback region. A Reason when such
    an `if` holds a step but its test or the step's argument rules the absorbing out, or when the path checks fail
    for a reason they name (an argument with a call the fused call would evaluate later); None when no `if` is a
    candidate (or the checks fail otherwise: the block plan's reason stands)."""
    rule = match.rule
    assert rule.forward is not None
    anchor = max(match.nodes, key=lambda n: n.index)
    absorbed_ifs: list[cst.If] = []
    absorbed_nodes: set[int] = set()
    # What goes from the absorbed `if`s: each step's statement and its feeders; an `if` keeping other statements
    # stays without them.
    removed: list[cst.CSTNode] = []
    fed: list[cst.CSTNode] = []
    kept_ifs: set[int] = set()
    conditional: dict[int, tuple[cst.BaseExpression, cst.BaseExpression]] = {}
    twin_env = dict(match.env)
    twin_skipped = set(match.skipped)
    target = rule.forward.target[0] if rule.forward.target else None
    passed = _atom_names(target) if isinstance(target, CallNode) else set()
    for i, node in enumerate(aligned):
        if node is None or node.site.block is anchor.site.block:
            continue
        pattern = rule.forward.source[i]
        found = _absorbing_if(node, anchor, match.cls.module)
        if not isinstance(pattern, (CallNode, OpNode)) or not pattern.optional or found is None:
            return None
        if_stmt, tested, prefix = found
        test = _code(if_stmt.test)
        # Another test without calls (`layer_past is None`, `self.causal`): evaluated again at the fused call, where
        # `_plan_fallback` makes sure it gives the same answer.
        flag = tested is None and _fallback_test(if_stmt.test, match.cls)
        if tested is None and not flag:
            return Reason(
                RefusalCategory.NOT_PLACEABLE,
                f"the `if` around this step tests `{test}`, which is neither `X is not None`, a call of a helper "
                "of this file that is exactly that test, nor a condition without calls (names, comparisons, `self` "
                "flags only `__init__` sets), so the step cannot become an optional argument of the fused call",
                if_stmt,
            )
        first = pattern.operands[0] if isinstance(pattern, OpNode) else pattern.args.positional[0]
        atoms = pattern.operands if isinstance(pattern, OpNode) else pattern.args.positional
        unbound = [a for a in atoms if isinstance(a, Var) and a != first]  # absent from the twin
        others = [a for a in unbound if a.name in passed]
        if not others:
            return None
        if isinstance(pattern, OpNode) and pattern.op in ("*", "/"):
            # The kernel multiplies by what it is given, None included (`scores * None` raises, as the code's
            # would), so None cannot stand for "the `if` did not run" there.
            return Reason(
                RefusalCategory.NOT_PLACEABLE,
                f"this `{pattern.op}` step runs only under `if {test}:`, and the fused call applies the operand it is "
                f"passed, None included, so the step cannot become `... if {test} else None`",
                node.site.line,
            )
        feeders = _feeders.feeder_statements(match, anchor, prefix, {id(node.site.small)})
        kept = [line for line in prefix if not any(f in line.body for f in feeders)]
        if tested is not None:
            reason = _retested_name_kept(match, kept, tested, test)
            if reason is not None:
                return reason
        else:
            # Evaluated again at the fused call: between the `if` and there, nothing but the matched statements may
            # call or store anything (a method storing the flag through an alias, `type(self).flag = ...`, ...).
            busy = _busy_statement(if_stmt, anchor, {id(n.site.line) for n in match.nodes})
            if busy is not None:
                return Reason(
                    RefusalCategory.NOT_PLACEABLE,
                    f"this statement runs between `if {test}:` and the fused call, which would test it again: a "
                    "call or a store there could change what the test reads",
                    busy,
                )
        # The argument reads X, or names the kept statements bound for it (`dots_mask = ...`): they hold the same
        # at the fused call (the path checks), where the test still tells whether the `if` ran. Under another test
        # it may read any name bound before the `if` too (minGPT's `self.mask[:, :, :T, :T] == 0`), not one only a
        # deleted feeder binds.
        allowed = {name for line in kept for name in _written(line)} | ({tested} if tested is not None else set())
        fed_names = set().union(*(_written(f) for f in feeders))
        for a in others:
            bound = match.env.get(a.name)
            if tested is not None and _bound_name(bound) == tested:
                continue  # X itself: None exactly where the `if` did not run
            # Anything else, a name the kept lines bind included, is passed only where the `if` ran: on the other
            # paths such a name is unbound or holds an older value.
            # (names as the statements spell them: a helper's inlined locals carry its scope, `attend::mask`)
            scope = node.site.scope
            uses = {
                name[len(scope):] if scope and name.startswith(scope) else name for name, _ in bound.uses
            } if isinstance(bound, Value) else set()
            # tensor methods that only compute (`~mask.unsqueeze(1)`, joeynmt's) give the same at the fused call
            computes = isinstance(bound, Value) and (bound.pure or computes_only(bound.expr))
            if not (isinstance(bound, Value) and computes and bound.kind in ("expr", "var") and (
                (uses and uses <= allowed) or (flag and not uses & fed_names)
            )):
                text = _code(bound.expr) if isinstance(bound, Value) else f"${a.name}"
                why = ("makes a call" if isinstance(bound, Value) and not computes
                       else "reads a name the step's own statements bind" if flag else f"reads more than `{tested}`")
                return Reason(
                    RefusalCategory.NOT_PLACEABLE,
                    f"`{text}`, computed under `if {test}:`, {why}: the fused call could not pass it "
                    f"as `{text} if {test} else None`",
                    node.site.line,
                )
            conditional[bound.vid] = (if_stmt.test, bound.expr)
        absorbed_ifs.append(if_stmt)
        absorbed_nodes.add(id(node))
        removed += [node.site.small, *feeders]
        fed += feeders
        if kept:
            kept_ifs.add(id(if_stmt))
        else:
            removed.append(if_stmt)
        twin_skipped.add(i)
        for a in unbound:
            twin_env.pop(a.name, None)
        assert isinstance(first, Var)
        twin_env[pattern.outputs[0].name] = twin_env[first.name]
    if not absorbed_ifs:
        return None
    assert match.graph is not None
    kept_nodes = [n for n in match.nodes if id(n) not in absorbed_nodes]
    rebound = tuple(flow_checks.rebound(match.graph, kept_nodes, twin_env))
    twin = Match(rule, match.cls, match.graph, rebound, twin_env, skipped=frozenset(twin_skipped))
    twin_placement = _plan(twin)
    if not isinstance(twin_placement, Placement) or twin_placement.plan != "block":
        return None
    if _outputs_assigned(twin, twin_placement) is not None:
        return None
    # The match goes where its twin goes: at its own last node (the twin's is a copy of it, read under the twin's
    # environment), with the names it reads taken there.
    assert twin_placement.anchor is not None and twin_placement.anchor.index == anchor.index
    # A fill value named before the absorbed `if`s (DALL-E 2's `max_neg_value = -torch.finfo(sim.dtype).max`) feeds
    # their steps alone: it goes too, on the twin's paths as well, where nothing reads it.
    gone = {id(s) for s in (*twin_placement.deleted, *removed)}
    outer = _feeders.feeder_statements(match, anchor, _lines_before(anchor), gone)
    if outer:
        twin_placement = dataclasses.replace(
            twin_placement, deleted=(*twin_placement.deleted, *outer), feeders=(*twin_placement.feeders, *outer)
        )
    names = _names_at_anchor(match, anchor, twin_placement.deleted)
    # The fused copy drops the absorbed statements and their feeders, and the `if`s left empty: what they read for
    # the node alone (a fill value reading the scores) is no read of a hidden result, and their tests (`exists(X)`)
    # run in the fused call.
    block = dataclasses.replace(
        twin_placement, anchor=anchor, names=names, conditional=conditional,
        deleted=(*twin_placement.deleted, *removed), feeders=(*twin_placement.feeders, *fed),
    )
    return _plan_fallback(match, block, PlacedMatch(twin, twin_placement), tuple(absorbed_ifs), frozenset(kept_ifs))


def _self_attributes(test: cst.BaseExpression) -> set[str]:
    return {attr for n in cstwalk.walk(test) if (attr := _is_self_attr(n)) is not None}  # type: ignore[arg-type]


def _stores(node: cst.CSTNode) -> bool:
    """Whether `node` stores into an attribute or a subscript, augments or deletes anything."""
    return isinstance(node, (cst.AugAssign, cst.Del)) or (
        isinstance(node, (cst.AssignTarget, cst.AnnAssign)) and isinstance(node.target, (cst.Attribute, cst.Subscript))
    )


def _disturbing_statement(
    statements: Sequence[cst.BaseStatement], matched: set[int], tests: Sequence[cst.BaseExpression],
    graph: Optional[FlowGraph],
) -> Optional[cst.CSTNode]:
    """The first statement of `statements` (or line inside one), other than the `matched` lines and the bodies of
    `if`s on one of `tests` (they run only where a test is true, where the region runs as written), that stores
    (`_stores`) or makes a call that may change what it reaches: any but the computing calls (`computing_call`)
    and the DSL nodes `may_change_state` clears (a helper method's call is none of them). None when there is
    none."""
    nodes = graph.by_call if graph is not None else {}
    skipped = set(matched)
    for stmt in statements:
        line: cst.CSTNode = stmt
        for node in cstwalk.walk(stmt, lambda n: id(n) not in skipped):
            if id(node) in skipped:
                continue
            if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                line = node
            if isinstance(node, cst.If) and any(node.test.deep_equals(t) for t in tests):
                skipped.add(id(node.body))
            elif _stores(node) or (
                isinstance(node, cst.Call) and not computing_call(node)
                and (id(node) not in nodes or flow_checks.may_change_state(nodes[id(node)]))
            ):
                return line
    return None


def _busy_statement(if_stmt: cst.If, anchor: DLNode, matched: set[int]) -> Optional[cst.BaseStatement]:
    """The first statement strictly between `if_stmt` and the anchor's line (one block), other than a matched one,
    that makes a call or stores into an attribute or a subscript (or augments anything); None when there is none."""
    for line in _statements_between(anchor.site.owner, if_stmt, anchor.site.line) or ():
        if id(line) in matched:
            continue
        if any(isinstance(node, cst.Call) or _stores(node) for node in cstwalk.walk(line)):
            return line
    return None


def _retested_name_kept(
    match: Match, kept: Sequence[cst.SimpleStatementLine], tested: str, test: str
) -> Optional[Reason]:
    """Where statements kept in an absorbed `if` assign X, the X its test reads (``mask = rearrange(mask, ...)``):
    the fused call tests X again after them, so each must give X a value that is never None when the `if` ran, or
    the test would answer otherwise. A subscript, an operator, a call of torch or einops or a tensor method that
    reshapes or converts (they return tensors) do; anything else is refused."""
    graph = match.graph
    assert graph is not None
    for line in kept:
        for small in line.body:
            if tested not in _written(small):
                continue
            value = small.value if isinstance(small, cst.Assign) and _assigned_name(small) == tested else None
            if value is not None and _never_none(value, graph):
                continue
            return Reason(
                RefusalCategory.NOT_PLACEABLE,
                f"`{tested}` is assigned here, under `if {test}:`, and the fused call would test it again: only a "
                "subscript, an operator, a call of torch or einops or a tensor method that reshapes or converts is "
                "sure not to make it None",
                line,
            )
    return None


# Tensor methods that return None rather than a tensor.
_RETURNS_NONE = frozenset({"torch.Tensor.backward", "torch.Tensor.retain_grad", "torch.Tensor.record_stream"})
# Tensor methods that reshape or convert a mask (the walk keeps them opaque): on a tensor they return one.
_MASK_METHODS = frozenset({
    "reshape", "view", "flatten", "unsqueeze", "squeeze", "expand", "expand_as", "repeat", "repeat_interleave",
    "permute", "transpose", "contiguous", "bool", "to", "float", "long", "int", "type_as", "logical_not",
})


def _never_none(value: cst.BaseExpression, graph: FlowGraph) -> bool:
    """Whether `value`, computed from a tensor, is never None: see `_retested_name_kept`. (Where the `if`'s X is not
    a tensor, its masked_fill fails in the original anyway.)"""
    if isinstance(value, (cst.Subscript, cst.UnaryOperation, cst.BinaryOperation, cst.Comparison)):
        return True
    if not isinstance(value, cst.Call):
        return False
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value in _MASK_METHODS and not _self_attr_name(func):
        return True
    nodes = graph.by_key.get((id(value), None), [])
    name = nodes[0].qualname if nodes and nodes[0].kind == "func" else None
    return name is not None and name.startswith(("torch.", "einops.")) and name not in _RETURNS_NONE


def _atom_names(target: CallNode) -> set[str]:
    """The ``$variables`` a target call passes (positionally or by keyword)."""
    atoms = [*target.args.positional, *(a for _, a in target.args.keywords)]
    return {a.name for a in atoms if isinstance(a, Var)}


def _absorbing_if(
    node: DLNode, anchor: DLNode, module: Optional[cst.Module]
) -> Optional[tuple[cst.If, Optional[str], list[cst.SimpleStatementLine]]]:
    """The ``if`` of the anchor's block (no else) whose body ends with `node`'s statement ``name = node``, alone on
    its line, after simple statements that assign or call (vit-pytorch's ``mask = rearrange(mask, ...)``), with X
    when its test is ``X is not None`` (or ``exists(X)``, see above), and those statements; else None."""
    if not node.whole_statement or node.site.inline_stack != anchor.site.inline_stack or not _deletable(node.site.small):
        return None
    for stmt in anchor.site.block:
        if not isinstance(stmt, cst.If) or stmt.body is not node.site.owner or stmt.orelse is not None:
            continue
        body = _suite(stmt.body)
        if not body or not isinstance(body[-1], cst.SimpleStatementLine) or list(body[-1].body) != [node.site.small]:
            return None
        prefix = body[:-1]
        if not all(
            isinstance(line, cst.SimpleStatementLine)
            and all(isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Expr)) for small in line.body)
            for line in prefix
        ):
            return None
        return stmt, _not_none_test(stmt.test, module), list(prefix)  # type: ignore[arg-type]
    return None


def _not_none_test(test: cst.BaseExpression, module: Optional[cst.Module]) -> Optional[str]:
    """X of a test ``X is not None``, or of ``helper(X)`` where the file's `helper` is exactly that test."""
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        if isinstance(comp.operator, cst.IsNot) and isinstance(comp.comparator, cst.Name) and comp.comparator.value == "None":
            return test.left.value
        return None
    if (
        isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and len(test.args) == 1
        and test.args[0].keyword is None and not test.args[0].star and isinstance(test.args[0].value, cst.Name)
        and module is not None
    ):
        from .structural_guards import is_not_none_helper  # that module builds on this one

        if is_not_none_helper(module, test.func.value):
            return test.args[0].value.value
    return None


def _bound_name(bound: Optional[Binding]) -> Optional[str]:
    return bound.text if isinstance(bound, Value) and bound.kind == "var" and not bound.text.startswith("%") else None


# Plans "hoist" and "sink" live in their own modules, which read this one's checks (so they are imported last).
from . import hoist, sink  # noqa: E402
