"""Pattern matching (paper §3.4) plus the safety checks that make a rewrite trustworthy (docs/DESIGN.md §4.4).

1. Sub-sequence matching of the ``forward`` source pattern on every path of a class, with consistent ``$var``
   bindings (a variable binds a value *id*, so data flow is exact) and ``*`` wildcards.
2. The ``init`` source pattern against the ``__init__`` bindings of the layers the forward match called.
3. A rewrite plan (where the fused call goes, which statements disappear or are copied into branches) and the
   checks on *every* path through the matched statements: no intermediate value used outside the match, every
   input of the fused call still holds the same value where the call is placed, no removed layer used elsewhere.

Matches that fail a check are dropped, not reported: precision first.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator, Optional, Sequence, Union

import libcst as cst

from . import cstwalk
from . import guards as guard_registry
from . import suppression
from .dsl import Atom, CallNode, Const, Node, OpNode, Rule, Var, Wildcard
from .provider import _written_names, simple_condition
from .qualnames import qualname_matches
from .signatures import SIGNATURES, default_source
from .structure import ClassStructure, Def, DLNode, LayerBinding, Path, Site, Use, Value

if TYPE_CHECKING:
    from .hoist import Hoist

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


@dataclass(eq=False)
class Match:
    rule: Rule
    cls: ClassStructure
    path: Path
    nodes: list[DLNode]  # matched forward nodes, pattern order (wildcards excluded)
    env: dict[str, Binding]
    init_matches: dict[str, LayerBinding] = field(default_factory=dict)  # init pattern var -> binding
    anchor: Optional[DLNode] = None
    plan: str = ""  # "inline" | "block" | "branch" | "fallback" | "hoist" | "init" (init-only rule) | "container" (nn.Sequential)
    deleted: list[cst.CSTNode] = field(default_factory=list)  # forward small statements that disappear
    branch_if: Optional[cst.If] = None
    branch_owner: Optional[cst.CSTNode] = None  # the suite of `branch_if` holding the anchor
    prefix_lines: list[cst.BaseStatement] = field(default_factory=list)
    container: Optional[LayerBinding] = None  # the nn.Sequential whose elements matched
    names: dict[int, str] = field(default_factory=dict)  # value id -> variable holding it where the call goes
    skipped: frozenset[int] = frozenset()  # indices of the optional source nodes absent from this match
    # plan "fallback": the function-body statements from the first matched one to the anchor's (rewritten as
    # `if <fallback_test>: <region as written> else: <region fused>`), and the `if`s in it the fused copy drops
    region: list[cst.BaseStatement] = field(default_factory=list)
    region_ifs: list[cst.If] = field(default_factory=list)
    fallback_test: Optional[cst.BaseExpression] = None
    hoist: Optional[Hoist] = None  # plan "hoist" (hoist.py): the new statement binding the outputs to temporaries

    def key(self) -> frozenset[tuple[int, Optional[str]]]:
        return frozenset((id(n.expr), n.layer) for n in self.nodes)


# ------------------------------------------------------------------------------------------ atoms


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def value_text(value: Value) -> str:
    if value.kind == "expr":
        return cst.Module([]).code_for_node(value.expr)
    return value.text


def _same(a: Binding, b: Binding) -> bool:
    if isinstance(a, Value) and isinstance(b, Value):
        if a.kind != b.kind:
            return False
        if a.kind == "var":
            return a.vid == b.vid
        if a.kind == "const":
            return _literal(a.text) == _literal(b.text)
        return value_text(a) == value_text(b)
    if isinstance(a, LayerRef) and isinstance(b, LayerRef):
        return a.attr == b.attr
    return False


def _bind(env: dict[str, Binding], atom: Atom, value: Value) -> Optional[dict[str, Binding]]:
    if isinstance(atom, Const):
        if value.kind == "const" and _literal(value.text) == atom.value:
            return env
        return None
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
        rest = tuple(a for a in node.call.args if id(a.value) not in consumed)
        new = dict(env)
        new[pattern.args.rest.name] = RestArgs(rest, tuple(node.call.args))
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
            if not any(b.qualname and any(qualname_matches(t, b.qualname) for t in init_pattern.types) for b in node.bindings):
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


def _subsequences(
    patterns: tuple[Node, ...], path: Path, rule: Rule
) -> Iterator[tuple[list[Optional[DLNode]], dict[str, Binding]]]:
    """Matches of the pattern sequence on one path: one node per pattern, None for an absent optional node."""
    if not _may_occur(patterns, path, rule):
        return
    nodes = path.nodes
    readers: dict[int, list[int]] = {}  # value id -> indices of the nodes reading it (as a variable argument)
    for i, node in enumerate(nodes):
        for value in (*node.args, *(v for _, v in node.kwargs)):
            if value.kind == "var":
                readers.setdefault(value.vid, []).append(i)

    def candidates(pattern: Node, env: dict[str, Binding], start: int) -> Iterable[int]:
        # A pattern operand already bound to a variable's value only matches a node reading that value id.
        if isinstance(pattern, (CallNode, OpNode)):
            atoms = pattern.operands if isinstance(pattern, OpNode) else (
                *pattern.args.positional, *(a for _, a in pattern.args.keywords)
            )
            for atom in atoms:
                bound = env.get(atom.name) if isinstance(atom, Var) else None
                if isinstance(bound, Value) and bound.kind == "var":
                    return [i for i in readers.get(bound.vid, ()) if i >= start]
        return range(start, len(nodes))

    def search(
        pi: int, start: int, env: dict[str, Binding], chosen: list[Optional[DLNode]]
    ) -> Iterator[tuple[list[Optional[DLNode]], dict[str, Binding]]]:
        if pi == len(patterns):
            yield chosen, env
            return
        pattern = patterns[pi]
        for ni in candidates(pattern, env, start):
            result = _match_node(pattern, nodes[ni], env, rule)
            if result is not None:
                yield from search(pi + 1, ni + 1, result, chosen + [nodes[ni]])
        if isinstance(pattern, (CallNode, OpNode)) and pattern.optional:
            skipped = _pass_through(pattern, env)
            if skipped is not None:
                yield from search(pi + 1, start, skipped, chosen + [None])

    yield from search(0, 0, {}, [])


def _may_occur(patterns: tuple[Node, ...], path: Path, rule: Rule) -> bool:
    """Whether every required pattern node has a node on the path that it could match by operator or type (the
    first test of `_match_node`): most paths lack one, and the search would try every node against the first."""
    summary = path.summary
    for pattern in patterns:
        if isinstance(pattern, Wildcard) or pattern.optional:
            continue
        if isinstance(pattern, OpNode):
            if pattern.op not in summary.ops:
                return False
        elif pattern.layer is not None:
            init = _init_pattern_for(rule, pattern.layer.name)
            if not summary.has_layers or (init is not None and not _any_matches(init.types, summary.layer_types)):
                return False
        elif not _any_matches(pattern.types, summary.names):
            return False
    return True


@functools.lru_cache(maxsize=4096)
def _any_matches(types: tuple[str, ...], names: frozenset[str]) -> bool:
    # Paths of one class share their names, and a rule asks the same types of each: mostly cache hits.
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
    pattern: CallNode, binding: LayerBinding, env: dict[str, Binding]
) -> Optional[dict[str, Binding]]:
    if binding.qualname is None or binding.subscript != pattern.subscript:
        return None
    types = [t for t in pattern.types if qualname_matches(t, binding.qualname)]
    if not types:
        return None
    qualname = types[0]
    if any(a.star for a in binding.args):
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
            text = cst.Module([]).code_for_node(arg.value)
            bound: Binding = InitArg(arg.value)
        else:
            text = default_source(qualname, name) or ""
            if not text:
                return None
            bound = InitArg(None, text)
        if isinstance(atom, Const):
            if _literal(text) != atom.value:
                return None
            continue
        previous = env.get(atom.name)
        if previous is not None:
            if not isinstance(previous, InitArg) or _init_text(previous) != text:
                return None
            continue
        env[atom.name] = bound
    rest = tuple(arg for name, arg in given.items() if name not in consumed)
    if rest and pattern.args.rest is None:
        return None
    if pattern.args.rest is not None:
        env[pattern.args.rest.name] = RestArgs(tuple(a for a in binding.args if a in rest), binding.args)
    return env


def _called_by_optional_only(rule: Rule, var: str) -> bool:
    assert rule.forward is not None
    calls = [p for p in rule.forward.source if isinstance(p, CallNode) and p.layer is not None and p.layer.name == var]
    return bool(calls) and all(p.optional for p in calls)


def _init_text(arg: InitArg) -> str:
    return cst.Module([]).code_for_node(arg.expr) if arg.expr is not None else (arg.default or "")


def _match_init(match: Match) -> bool:
    rule = match.rule
    if rule.init is None:
        return True
    edits = rule.init.target is not None
    env = match.env
    for pattern in rule.init.source:
        assert isinstance(pattern, CallNode)
        var = pattern.outputs[0].name
        ref = env.get(var)
        if ref is None and not edits and _called_by_optional_only(rule, var):
            continue  # only an absent optional node calls this layer: nothing to constrain
        if not isinstance(ref, LayerRef) or not ref.bindings:
            return False
        container = ref.bindings[0].container
        if container is not None:
            # Elements of an nn.Sequential: only a rule with a `sequential` drop-in rewrites them, all in one container.
            if rule.sequential is None or (match.container is not None and match.container is not container):
                return False
            match.container = container
        elif ref.attr in match.cls.rebound or "*" in match.cls.rebound:
            return False  # bound again elsewhere in the class family: what the layer is at the call is unknown
        elif edits and (ref.attr in match.cls.foreign_stores or "*" in match.cls.foreign_stores):
            return False  # the edited layer may be replaced from outside the class (`model.ln = nn.LayerNorm(8)`)
        matched = [(b, _match_init_node(pattern, b, env)) for b in ref.bindings]
        good = [(b, e) for b, e in matched if e is not None]
        if edits and (len(ref.bindings) != 1 or not good):
            return False  # rewriting __init__ needs exactly one binding of the layer
        if not good:
            return False
        binding, env = good[0]
        match.init_matches[var] = binding
    match.env = env
    return True


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
    inter, outs = set(), set()
    for i, pattern in enumerate(match.rule.forward.source):
        if isinstance(pattern, Wildcard) or i in match.skipped:
            continue
        for var in pattern.outputs:
            bound = match.env.get(var.name)
            if isinstance(bound, Value):
                (outs if var.name in target_outs else inter).add(bound.vid)
    return inter, outs


def _plan(match: Match) -> Optional[str]:
    """Decide where the fused call goes and which statements disappear; None when no safe plan exists."""
    nodes = match.nodes
    anchor = max(nodes, key=lambda n: n.index)
    match.anchor = anchor
    sites = {id(n.site.small) for n in nodes}
    if any(n.site.loop_copy != anchor.site.loop_copy for n in nodes):
        return None
    by_expr = {id(n.expr): n for n in nodes}
    deleted: list[Site] = []
    for n in sorted(nodes, key=lambda n: n.index, reverse=True):
        if n is anchor or id(n.expr) == id(anchor.expr):
            continue
        if n.parent is not None and id(n.parent) in by_expr:
            continue  # nested inside another matched node: goes away with it
        site = _statement_site(n, anchor, match.cls)
        if site is None:
            return None
        deleted.append(site)
    if any(n.site.inline_stack != anchor.site.inline_stack for n in nodes if n.site not in deleted) and not deleted:
        return None
    match.deleted = list({id(s.small): s.small for s in deleted}.values())
    match.names = _names_at_anchor(match)
    if not deleted:
        return "inline" if len(sites) == 1 else None
    anchor_block = anchor.site.block
    if all(s.block is anchor_block for s in deleted):
        return "block"
    # Paper Fig. 4/5: prefix statements right before an `if` whose branch holds the anchor.
    prefix_lines = [s.line for s in deleted]
    outer = deleted[0]
    if any(s.block is not outer.block for s in deleted):
        return None
    block = list(outer.block)
    indices = sorted(block.index(line) for line in set(prefix_lines))  # type: ignore[arg-type]
    after = indices[-1] + 1
    if after >= len(block) or not isinstance(block[after], cst.If):
        return None
    if indices != list(range(indices[0], after)):
        return None
    if_stmt = block[after]
    assert isinstance(if_stmt, cst.If)
    if if_stmt.orelse is not None and isinstance(if_stmt.orelse, cst.If):
        return None  # elif chains: copying into every arm would reorder the elif tests
    owner = anchor.site.owner
    in_body = owner is if_stmt.body
    in_else = if_stmt.orelse is not None and owner is if_stmt.orelse.body
    if not (in_body or in_else) or not _simple_test(if_stmt.test):
        return None
    match.branch_if = if_stmt
    match.branch_owner = owner
    match.prefix_lines = [block[i] for i in indices]
    return "branch"


def _statement_site(node: DLNode, anchor: DLNode, cls: ClassStructure) -> Optional[Site]:
    """The statement that disappears with a non-anchor node, in the anchor's function; None if none can.

    Usually the node's own statement (`x = self.dropout(h)`). A node that is the whole body of a helper method
    (`def _drop(self, h): return self.dropout(h)`) called once, as `x = self._drop(h)`, from the anchor's function
    takes that call statement with it: this is how a pattern split across a helper is rewritten.
    """
    if node.site.inline_stack == anchor.site.inline_stack:
        if node.site.function != anchor.site.function or not node.whole_statement or not _deletable(node.site.small):
            return None
        return node.site
    stack = node.site.inline_stack
    if len(stack) != len(anchor.site.inline_stack) + 1 or stack[:-1] != anchor.site.inline_stack:
        return None
    call_site = stack[-1]
    if not node.whole_statement or not isinstance(node.site.small, cst.Return):
        return None
    if [s for s in node.site.block if not _is_docstring_line(s)] != [node.site.line]:
        return None  # the helper does more than return the node
    small = call_site.small
    if not _deletable(small) or not isinstance(small, (cst.Assign, cst.AnnAssign)):
        return None
    call = small.value
    helper = _self_attr_name(call.func) if isinstance(call, cst.Call) else None
    if helper is None or len(cls.self_references.get(helper, [])) != 1:
        return None  # the helper is used elsewhere: it must keep working
    return call_site


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


def _names_at_anchor(match: Match) -> dict[int, str]:
    """Which variable holds each value id where the fused call goes (deleted statements' definitions ignored).

    Needed when a bound value was named differently where it was matched (a helper's parameter).
    """
    assert match.anchor is not None
    deleted = {id(s) for s in match.deleted}
    scope = match.anchor.site.scope
    state: dict[str, int] = {}
    for event in match.path.events[: match.anchor.index]:
        if isinstance(event, Def) and id(event.site.small) not in deleted:
            state[event.name] = event.vid
    pairs = list(state.items())
    # Parameters and globals hold their entry value unless assigned before the anchor.
    pairs += [(name, vid) for vid, name in match.cls.entry_names.items() if name not in state]
    holding = dict(pairs)
    names: dict[int, str] = {}
    # A value keeps the name it was matched under while that name still holds it (`identity = x` is an alias).
    for bound in match.env.values():
        if isinstance(bound, Value) and bound.kind == "var" and not bound.text.startswith("%"):
            scoped, vid = bound.uses[0]
            visible = scoped.startswith("self.") or (scoped.startswith(scope) and "::" not in scoped[len(scope):])
            if visible and holding.get(scoped) == vid:
                names.setdefault(vid, bound.text)
    for name, vid in pairs:
        if name.startswith("self."):
            names.setdefault(vid, name)
        elif name.startswith(scope) and "::" not in name[len(scope):] and not name.startswith("%"):
            names.setdefault(vid, name[len(scope):])
    return names


def _deletable(small: cst.CSTNode) -> bool:
    if isinstance(small, cst.Assign):
        return len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
    if isinstance(small, cst.AnnAssign):
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


class _EffectScan(_CallScan):
    """Calls in a statement outside the given nodes (the matched statements, judged on their own)."""

    def __init__(self, skip: set[int]) -> None:
        super().__init__()
        self.skip = skip

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.skip and super().on_visit(node)


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


def _check_paths(match: Match) -> bool:
    """The safety checks on every path of the class that runs any matched statement."""
    keys = {(id(n.expr), n.layer) for n in match.nodes}
    anchor_key = (id(match.anchor.expr), match.anchor.layer)  # type: ignore[union-attr]
    deleted = {id(s) for s in match.deleted}
    prefix = {id(n.site.small) for n in match.nodes if id(n.site.small) in deleted}
    for path in match.cls.forward_paths:
        occ = [n for n in path.nodes if (id(n.expr), n.layer) in keys]
        if not occ:
            continue
        present = {(id(n.expr), n.layer) for n in occ}
        if anchor_key not in present:
            if match.plan == "branch" and all(id(n.site.small) in prefix for n in occ):
                continue  # this path takes the other branch, where the prefix is copied unchanged
            # The deleted statements run on this path without the fused call: their results must be unused.
            if _used_outside(path, {n.out for n in occ}, keys, 0, len(path.events)):
                return False
            continue
        if present != keys:
            return False
        if not _check_complete_path(match, path, occ, keys, deleted):
            return False
    return True


def _used_outside(
    path: Path, vids: set[int], keys: set, start: int, stop: int, ignore: frozenset[int] = frozenset()
) -> bool:
    """Whether an event outside the matched nodes reads one of `vids` (events of the statements in `ignore` aside)."""
    for event in path.events[start:stop]:
        if id(event.site.small) in ignore:
            continue
        if isinstance(event, DLNode):
            if (id(event.expr), event.layer) in keys:
                continue
            if any(v.vid in vids or any(u[1] in vids for u in v.uses) for v in event.args):
                return True
            if any(v.vid in vids or any(u[1] in vids for u in v.uses) for _, v in event.kwargs):
                return True
        elif isinstance(event, Use) and vids.intersection(event.vids):
            return True
    return False


def _check_complete_path(
    match: Match, path: Path, occ: list[DLNode], keys: set, deleted: set[int], ignore: frozenset[int] = frozenset()
) -> bool:
    by_key = {(id(n.expr), n.layer): n for n in occ}
    if not matches_on_path(match, by_key):
        return False
    anchor = by_key[(id(match.anchor.expr), match.anchor.layer)]  # type: ignore[union-attr]
    first = min(n.index for n in occ)
    # Re-bind the pattern's values to this path's value ids via the representative match.
    rep_to_path = {n.out: by_key[(id(n.expr), n.layer)].out for n in match.nodes}
    inter_rep, outs_rep = _output_vids(match)
    inter = {rep_to_path.get(v, v) for v in inter_rep}
    outs = {rep_to_path.get(v, v) for v in outs_rep} - {anchor.out}
    # (i) intermediates are used by matched nodes only (and by what disappears with them)
    if _used_outside(path, inter, keys | _absorbed(path, occ, deleted), 0, len(path.events), ignore):
        return False
    # (ii) other target outputs are produced at the anchor now: nothing may read them earlier
    if outs and _used_outside(path, outs, keys, first, anchor.index):
        return False
    # (iii) every input of the fused call holds the same value at the anchor once the deleted statements are gone
    state: dict[str, int] = {}
    for event in path.events[: anchor.index]:
        if isinstance(event, Def) and id(event.site.small) not in deleted:
            state[event.name] = event.vid
        elif isinstance(event, DLNode):
            state[f"%{event.out}"] = event.out
    anchor_stmt = id(anchor.site.small)
    # Value ids differ between paths once they fork: read each input as this path's copy of its matched node saw it.
    twins: dict[int, Value] = {}
    for n in match.nodes:
        twin = by_key[(id(n.expr), n.layer)]
        for rep_value, value in zip([*n.args, *(v for _, v in n.kwargs)], [*twin.args, *(v for _, v in twin.kwargs)]):
            twins[id(rep_value)] = value
    producers = {n.out: n for n in path.nodes}
    todo: list[tuple[str, int]] = []
    for value in _target_inputs(match):
        if value.kind == "expr" and not value.pure and _value_site_moves(match, value, anchor_stmt):
            return False
        twin_value = twins.get(id(value))
        todo.extend(twin_value.uses if twin_value is not None else [(n, rep_to_path.get(v, v)) for n, v in value.uses])
    while todo:
        name, path_vid = todo.pop()
        if name.startswith("%"):
            # A nested DSL node's result: its expression is evaluated at the anchor now, so check its inputs.
            producer = producers.get(path_vid)
            if producer is not None:
                for arg in [*producer.args, *(v for _, v in producer.kwargs)]:
                    todo.extend(arg.uses)
            continue
        if state.get(name, path_vid) != path_vid:
            return False
    return not _moved_reads_touched(path, anchor, keys, deleted)


def matches_on_path(match: Match, by_key: dict[tuple[int, Optional[str]], DLNode]) -> bool:
    """Whether this path's copies of the matched nodes match the pattern with consistent bindings too. A match is
    found on one path; on another, the same statements may read different values (``qk = h; v_in = h`` then
    ``if rotary: qk = rot(qk)``: q/k/v of one input on one path, not on the other)."""
    rule = match.rule
    assert rule.forward is not None
    nodes = iter(match.nodes)
    env: Optional[dict[str, Binding]] = {}
    for i, pattern in enumerate(rule.forward.source):
        if isinstance(pattern, Wildcard):
            continue
        if i in match.skipped:
            assert isinstance(pattern, (CallNode, OpNode))
            env = _pass_through(pattern, env)
        else:
            node = next(nodes)
            env = _match_node(pattern, by_key[(id(node.expr), node.layer)], env, rule)
        if env is None:
            return False
    return True


def _absorbed(path: Path, occ: list[DLNode], deleted: set[int]) -> set[tuple[int, Optional[str]]]:
    """Keys of the unmatched nodes nested in a matched node of a deleted statement (``torch.finfo(s.dtype)`` in
    ``s.masked_fill(m, torch.finfo(s.dtype).min)``): they vanish with it, so their reads are no uses. What the target
    still reads of them is checked as a target input (iii)."""
    inside = {id(n.expr) for n in occ if id(n.site.small) in deleted}
    out: set[tuple[int, Optional[str]]] = set()
    for node in reversed(path.nodes):  # a nested node comes before the node holding it
        if node.parent is not None and id(node.parent) in inside and id(node.site.small) in deleted:
            inside.add(id(node.expr))
            out.add((id(node.expr), node.layer))
    return out


def _moved_reads_touched(path: Path, anchor: DLNode, keys: set, deleted: set[int]) -> bool:
    """(iv) Deleted statements now run at the anchor: what they read must not reach code with calls in between,
    which may mutate it in place (``xs.clear()``, ``nn.ReLU(inplace=True)(x)``, ``nn.init.zeros_(x)``)."""
    moved: set[int] = set()
    start: Optional[int] = None
    for i, event in enumerate(path.events[: anchor.index]):
        if id(event.site.small) in deleted:
            start = i if start is None else start
            moved |= _read_vids(event)
    if start is None:
        return False
    skip = deleted | {id(anchor.site.small)}
    for event in path.events[start + 1 : anchor.index]:
        if id(event.site.small) in deleted or (isinstance(event, DLNode) and (id(event.expr), event.layer) in keys):
            continue
        if isinstance(event, DLNode):
            impure = event.kind != "op" or not all(v.pure for v in [*event.args, *(v for _, v in event.kwargs)])
        else:
            scan = _EffectScan(skip)
            event.site.small.visit(scan)
            impure = scan.unsafe
        if impure and moved & _read_vids(event):
            return True
    before = _CallBefore(anchor.expr)
    anchor.site.small.visit(before)
    return before.found  # opaque calls of the anchor's statement that run before it leave no event to judge


def _read_vids(event: Union[DLNode, Use, Def]) -> set[int]:
    if isinstance(event, DLNode):
        return {vid for v in [*event.args, *(v for _, v in event.kwargs)] for name, vid in v.uses if not name.startswith("%")}
    return set(event.vids) if isinstance(event, Use) else set()


def _value_site_moves(match: Match, value: Value, anchor_stmt: int) -> bool:
    for n in match.nodes:
        for v in list(n.args) + [kv for _, kv in n.kwargs]:
            if v is value:
                return id(n.site.small) != anchor_stmt
    return False


def _find_init_only(rule: Rule, cls: ClassStructure) -> list[Match]:
    """Rules without a forward section rewrite each matching ``__init__`` binding (e.g. attention classes)."""
    assert rule.init is not None
    pattern = rule.init.source[0]
    assert isinstance(pattern, CallNode)
    found = []
    for attr, bindings in cls.init_bindings.items():
        for binding in bindings:
            if binding.container is not None or binding.statement is None:
                continue
            env = _match_init_node(pattern, binding, {})
            if env is None:
                continue
            env[pattern.outputs[0].name] = LayerRef(attr, (binding,))
            match = Match(rule, cls, Path([], []), [], env, {pattern.outputs[0].name: binding}, plan="init")
            if _rest_args_fit(match) and all(guard_registry.get(name)(match) for name in rule.guards):
                found.append(match)
    return found


def _outputs_assigned(match: Match) -> bool:
    """A tuple target (``q, k, v = fused(...)``) takes the names its outputs were assigned to: each output node must
    be the whole value of ``name = node`` in the anchor's function (``v = self.v(x).view(s)`` would lose the view)."""
    assert match.rule.forward is not None and match.rule.forward.target is not None and match.anchor is not None
    outputs = match.rule.forward.target[0].outputs  # type: ignore[union-attr]
    if len(outputs) == 1:
        return True
    for var in outputs:
        bound = match.env.get(var.name)
        node = next((n for n in match.nodes if isinstance(bound, Value) and n.out == bound.vid), None)
        if node is None or not node.whole_statement or node.site.inline_stack != match.anchor.site.inline_stack:
            return False
        small = node.site.small
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
            return False
    return True


def _rest_args_fit(match: Match) -> bool:
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
                return False
    return True


def find_matches(rule: Rule, cls: ClassStructure) -> list[Match]:
    """Every safe, non-overlapping match of `rule` in one class; its variants are tried in file order."""
    found: list[Match] = []
    taken: set[tuple[int, Optional[str]]] = set()
    for variant in (rule, *rule.alternatives):
        for match in _variant_matches(variant, cls, taken):
            # Instantiation matches have no forward nodes: one finding per __init__ binding.
            bindings = {id(b) for b in match.init_matches.values()}
            if match.plan != "init" or all(bindings != {id(b) for b in m.init_matches.values()} for m in found):
                found.append(match)
    # Before the removal check: a declined site keeps calling its layers, so a match deleting them must go too.
    kept = [m for m in found if not suppression.site_suppressed(reported_statements(m), (rule.code, rule.name))]
    return _drop_unremovable_layers(kept)


def reported_statements(match: Match) -> list[cst.CSTNode]:
    """The statement lines a match is reported at (and silenced on): its matched forward statements, else the
    ``__init__`` statements of an instantiation or ``nn.Sequential`` site."""
    if match.nodes and match.plan != "container":
        return [n.site.line for n in match.nodes]
    if match.container is not None and match.container.statement is not None:
        return [match.container.statement]
    return [b.statement for b in match.init_matches.values() if b.statement is not None]


def _variant_matches(rule: Rule, cls: ClassStructure, taken: set[tuple[int, Optional[str]]]) -> list[Match]:
    """The matches of one variant whose forward nodes are not in `taken` (which grows with them)."""
    if rule.forward is None:
        return _find_init_only(rule, cls) if rule.init is not None and len(rule.init.source) == 1 else []
    if not may_match(rule, cls) or cls.truncated:
        return []
    found: list[Match] = []
    for path in cls.forward_paths:
        for nodes, env in _subsequences(rule.forward.source, path, rule):
            real = [n for n, p in zip(nodes, rule.forward.source) if n is not None and not isinstance(p, Wildcard)]
            match = Match(rule, cls, path, real, env, skipped=frozenset(i for i, n in enumerate(nodes) if n is None))
            key = match.key()
            if key & taken:
                continue
            if not _match_init(match) or not _rest_args_fit(match):
                continue
            if match.container is not None:
                # Inside nn.Sequential the data flow is fixed (element i feeds element i+1 only): nothing to check.
                match.plan = "container"
                match.anchor = match.nodes[-1]
                # One match per pair of elements, however many times forward calls the container.
                elements = frozenset((id(match.container), n.layer) for n in match.nodes)
                if not elements & taken and all(guard_registry.get(name)(match) for name in rule.guards):
                    taken |= key | elements
                    found.append(match)
                continue
            plan = _plan(match)
            if plan is None and rule.fallback:
                if not _plan_absorbing(match, nodes):
                    continue
            elif not (plan is not None and _outputs_assigned(match) and _checked(match, plan)) and not hoist.plan_hoist(match):
                continue
            if not all(guard_registry.get(name)(match) for name in rule.guards):
                continue
            taken |= key
            found.append(match)
    return found


def _checked(match: Match, plan: str) -> bool:
    """Whether the statements-deleting plan passes the path checks (or, failing them, a fallback plan does)."""
    match.plan = plan
    return _check_paths(match) or (match.rule.fallback and plan == "block" and _plan_fallback(match))


def may_match(rule: Rule, cls: ClassStructure) -> bool:
    """Whether every called type of the forward pattern occurs in the class (a layer type among its bindings, a
    function among its callees) and every operator among its operators: a cheap test that spares walking the paths of most classes. A guard may add its
    own cheap test as a ``may_match(cls)`` attribute (ADP013: the file defines a rotation helper at all)."""
    assert rule.forward is not None
    for name in rule.guards:
        may_match = getattr(guard_registry.get(name), "may_match", None)
        if may_match is not None and not may_match(cls):
            return False
    types = {e.qualname for bs in cls.init_bindings.values() for b in bs for e in (b, *b.elements) if e.qualname}
    for pattern in rule.forward.source:
        if isinstance(pattern, OpNode) and not pattern.optional and pattern.op not in cls.operators:
            return False  # ADP010's `$q @ $kt`: most classes calling a softmax hold no `@`
        if not isinstance(pattern, CallNode) or pattern.optional:
            continue
        if pattern.layer is not None:
            init = _init_pattern_for(rule, pattern.layer.name)
            wanted, present = (init.types if init is not None else ()), types
        else:
            wanted, present = pattern.types, cls.callees | types  # a function pattern also matches a layer's type
        if wanted and not any(qualname_matches(t, q) for t in wanted for q in present):
            return False
    return True


def _drop_unremovable_layers(matches: list[Match]) -> list[Match]:
    """A layer whose ``__init__`` statement disappears must not be referenced outside the matched calls.

    Judged over all matches together (one Dropout shared by the two arms of an ``if`` is fine when both arms are
    rewritten); dropping a match can invalidate another, so iterate to a fixpoint.
    """
    while True:
        kept = [m for m in matches if _layer_uses_covered(m, matches)]
        if len(kept) == len(matches):
            return kept
        matches = kept


def layers_to_delete(match: Match) -> list[tuple[str, LayerBinding]]:
    """Source layers the ``init`` target drops: (attr, binding).

    A layer still called by a statement the branch plan copies into the other arm of the ``if`` is kept.
    """
    rule = match.rule
    if rule.init is None or rule.init.target is None:
        return []
    kept = {n.outputs[0].name for n in rule.init.target if isinstance(n, CallNode)}
    copied = _copied(match)
    still_called = {n.layer for n in match.nodes if id(_statement_of(n, match)) in copied}
    out = []
    for var, binding in match.init_matches.items():
        ref = match.env[var]
        if var not in kept and isinstance(ref, LayerRef) and "self." + ref.attr not in still_called:
            out.append((ref.attr, binding))
    return out


def _copied(match: Match) -> set[int]:
    """Statements the branch plan copies into the other arm of the ``if`` (they keep their calls there)."""
    return {id(s) for s in match.deleted} if match.plan == "branch" else set()


def _statement_of(node: DLNode, match: Match) -> cst.CSTNode:
    assert match.anchor is not None
    site = _statement_site(node, match.anchor, match.cls)
    return site.small if site is not None else node.site.small


def _layer_uses_covered(match: Match, matches: list[Match]) -> bool:
    for attr, binding in layers_to_delete(match):
        # A call in a statement a branch plan copies into the other arm stays there: it is no covered use.
        allowed = {
            id(n.call.func)
            for m in matches
            for n in m.nodes
            if n.layer == "self." + attr and n.call is not None and id(_statement_of(n, m)) not in _copied(m)
        }
        assert binding.statement is not None
        for small in binding.statement.body:
            if isinstance(small, cst.Assign):
                allowed.update(id(t.target) for t in small.targets)
            elif isinstance(small, cst.AnnAssign):
                allowed.add(id(small.target))
        if any(id(node) not in allowed for node in match.cls.self_references.get(attr, [])):
            return False
        if attr in match.cls.foreign_attributes:
            return False  # maybe reached from outside the class (`self.embeddings.dropout(x)`)
    return True


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
# (names, `is None`, `not`, `and`/`or`: no calls) over names that nothing from the region on assigns, so each test
# has the same value at the top of the region as where it stood; every read after the region of a name the region
# assigns (other than the anchor statement's) sits in the true arm of such a test; and the usual path checks hold on
# every path on which all those tests are false, which is exactly where the fused copy runs.


def _plan_fallback(match: Match, twin: Optional[Match] = None, absorbed: tuple[cst.If, ...] = ()) -> bool:
    """`twin`/`absorbed`: see `_plan_absorbing`."""
    anchor = match.anchor
    assert anchor is not None
    if anchor.site.inline_stack or match.cls.node is None:
        return False
    body = anchor.site.owner
    function = next((fn for fn in _suite(match.cls.node.body) if isinstance(fn, cst.FunctionDef) and fn.body is body), None)
    if function is None:
        return False  # the region must be a run of a method body: what follows it is then the rest of the method
    block = list(anchor.site.block)
    lines = {id(n.site.line) for n in (twin or match).nodes}
    indices = [i for i, line in enumerate(block) if id(line) in lines]
    if len(indices) != len(lines):
        return False
    first, last = indices[0], indices[-1]
    region, after = block[first : last + 1], block[last + 1 :]
    if not all(any(i is line for line in region) for i in absorbed):
        return False
    deleted = {id(s) for s in match.deleted}
    region_ifs: list[cst.If] = []
    assigned: set[str] = set()
    for line in region:
        if id(line) in lines:
            assert isinstance(line, cst.SimpleStatementLine)
            for small in line.body:
                if id(small) in deleted:
                    assigned.update(_written(small))
        elif isinstance(line, cst.If):
            if line.orelse is not None or not simple_condition(line.test):
                return False
            if not any(line is i for i in absorbed):
                region_ifs.append(line)
            assigned.update(_written(line.body))
    if not region_ifs and not assigned:
        return False
    anchor_names = _written(anchor.site.small)
    hidden = assigned - anchor_names  # names the fused copy no longer assigns
    scopes = (cst.Lambda, cst.FunctionDef, cst.ClassDef)
    if any(isinstance(n, scopes) and _names_in_node(n) & hidden for n in cstwalk.walk(function.body)):
        return False  # a nested function may read them whenever it is called
    tests: list[cst.BaseExpression] = [i.test for i in region_ifs]
    guarded_statements: set[int] = set()  # statements after the region whose reads of `hidden` are all guarded
    for stmt in after:
        reads = _guarded_reads(stmt, hidden)
        if reads is None:
            return False
        if reads:
            tests.extend(t for t in reads if not any(t.deep_equals(u) for u in tests))
            guarded_statements.update(_statement_ids(stmt))
    if not tests and not absorbed:
        return False
    written_from_region = set().union(*(_written(s) for s in region + after)) if region + after else set()
    if any(name in written_from_region for t in [*tests, *(i.test for i in absorbed)] for name in _names_in(t)):
        return False
    skip = set().union(*(_statement_ids(i.body) for i in region_ifs)) if region_ifs else set()
    for stmt in after:
        for sub in cstwalk.walk(stmt):
            if isinstance(sub, cst.If) and any(sub.test.deep_equals(t) for t in tests):
                skip |= _statement_ids(sub.body)
    if not _check_fused_paths(match, frozenset(skip), frozenset(guarded_statements), twin):
        return False
    match.plan = "fallback"
    match.region = region
    match.region_ifs = [*region_ifs, *absorbed]
    match.fallback_test = _disjunction(tests) if tests else None
    return True


def _check_fused_paths(
    match: Match, original_only: frozenset[int], guarded: frozenset[int], twin: Optional[Match] = None
) -> bool:
    """The usual checks on the paths where every fallback test is false (no event in the statements only those
    tests reach); reads in `guarded` statements happen only when a test is true, so they are ignored. With a
    `twin`, a path that skips the absorbed nodes is checked as the twin (the match without them)."""
    fused = 0
    for path in match.cls.forward_paths:
        if any(id(e.site.small) in original_only or id(e.site.line) in original_only for e in path.events):
            continue
        candidate = match
        keys = {(id(n.expr), n.layer) for n in match.nodes}
        occ = [n for n in path.nodes if (id(n.expr), n.layer) in keys]
        if twin is not None and {(id(n.expr), n.layer) for n in occ} != keys:
            candidate = twin
            keys = {(id(n.expr), n.layer) for n in twin.nodes}
            occ = [n for n in path.nodes if (id(n.expr), n.layer) in keys]
        if not occ:
            continue
        if {(id(n.expr), n.layer) for n in occ} != keys:
            return False
        deleted = {id(s) for s in candidate.deleted}
        if not _check_complete_path(candidate, path, occ, keys, deleted, guarded):
            return False
        fused += 1
    return fused > 0


def _suite(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else []  # type: ignore[return-value]


def _written(node: cst.CSTNode) -> set[str]:
    return {n for n in _written_names(node) if not n.startswith("self.")}


def _statement_ids(node: cst.CSTNode) -> set[int]:
    return {id(n) for n in cstwalk.walk(node) if isinstance(n, (cst.BaseStatement, cst.BaseSmallStatement))}


def _names_in(expr: cst.BaseExpression) -> set[str]:
    return {n.value for n in cstwalk.walk(expr) if isinstance(n, cst.Name)}


def _guarded_reads(stmt: cst.CSTNode, names: set[str]) -> Optional[list[cst.BaseExpression]]:
    """The simple tests guarding every read of `names` in `stmt` (true arm of an `if`/conditional expression);
    None when some read is not guarded that way (or sits in a nested scope, which may run later)."""
    tests: list[cst.BaseExpression] = []

    def visit(node: cst.CSTNode, guard: Optional[cst.BaseExpression]) -> bool:
        if isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return not (_names_in_node(node) & names)
        if isinstance(node, cst.If):
            return (
                visit(node.test, guard)
                and visit(node.body, node.test if simple_condition(node.test) else guard)
                and (node.orelse is None or visit(node.orelse, guard))
            )
        if isinstance(node, cst.IfExp):
            return (
                visit(node.test, guard)
                and visit(node.body, node.test if simple_condition(node.test) else guard)
                and visit(node.orelse, guard)
            )
        if isinstance(node, cst.Attribute):
            return visit(node.value, guard)
        if isinstance(node, cst.Arg):
            return visit(node.value, guard)
        if isinstance(node, cst.Name) and node.value in names:
            if guard is None:
                return False
            tests.append(guard)
            return True
        return all(visit(child, guard) for child in cstwalk.children(node))

    return tests if visit(stmt, None) else None


def _names_in_node(node: cst.CSTNode) -> set[str]:
    return {n.value for n in cstwalk.walk(node) if isinstance(n, cst.Name)}


def _disjunction(tests: list[cst.BaseExpression]) -> cst.BaseExpression:
    parts = [
        t.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        if isinstance(t, cst.BooleanOperation) and not t.lpar
        else t
        for t in tests
    ]
    out = parts[0]
    for part in parts[1:]:
        out = cst.BooleanOperation(out, cst.Or(), part)
    return out


# Absorbed `if`s: `if X is not None: s = s + X` inside the region is an optional node of the pattern that runs
# exactly when X is not None; the target passes X as the node's keyword either way (None is what an absent optional
# node leaves out), so the `if` is dropped from the fused copy instead of becoming a fallback condition.


def _plan_absorbing(match: Match, aligned: list[Optional[DLNode]]) -> bool:
    """A match whose only nodes outside the anchor's block are optional nodes absorbed as above: checked with its
    twin (the match without them) on the paths that skip them, then planned as a fallback region."""
    rule = match.rule
    assert rule.forward is not None
    anchor = max(match.nodes, key=lambda n: n.index)
    absorbed_ifs: list[cst.If] = []
    absorbed_nodes: set[int] = set()
    twin_env = dict(match.env)
    twin_skipped = set(match.skipped)
    for i, node in enumerate(aligned):
        if node is None or node.site.block is anchor.site.block:
            continue
        pattern = rule.forward.source[i]
        if_stmt = _absorbing_if(node, anchor)
        if not isinstance(pattern, (CallNode, OpNode)) or not pattern.optional or if_stmt is None:
            return False
        first = pattern.operands[0] if isinstance(pattern, OpNode) else pattern.args.positional[0]
        atoms = pattern.operands if isinstance(pattern, OpNode) else pattern.args.positional
        others = [a for a in atoms if isinstance(a, Var) and a != first]
        tested = if_stmt.test.left.value  # type: ignore[attr-defined]
        if not others or any(_bound_name(match.env.get(a.name)) != tested for a in others):
            return False
        absorbed_ifs.append(if_stmt)
        absorbed_nodes.add(id(node))
        twin_skipped.add(i)
        for a in others:
            twin_env.pop(a.name, None)
        assert isinstance(first, Var)
        twin_env[pattern.outputs[0].name] = twin_env[first.name]
    if not absorbed_ifs:
        return False
    twin = Match(rule, match.cls, match.path, [n for n in match.nodes if id(n) not in absorbed_nodes], twin_env)
    twin.skipped = frozenset(twin_skipped)
    if _plan(twin) != "block" or not _outputs_assigned(twin):
        return False
    twin.plan = "block"
    match.anchor, match.deleted = twin.anchor, twin.deleted
    match.names = _names_at_anchor(match)
    return _plan_fallback(match, twin, tuple(absorbed_ifs))


def _absorbing_if(node: DLNode, anchor: DLNode) -> Optional[cst.If]:
    """The ``if X is not None:`` of the anchor's block whose whole body is `node`'s statement ``name = node``."""
    if not node.whole_statement or node.site.inline_stack != anchor.site.inline_stack or not _deletable(node.site.small):
        return None
    for stmt in anchor.site.block:
        if not isinstance(stmt, cst.If) or stmt.body is not node.site.owner or stmt.orelse is not None:
            continue
        test = stmt.test
        if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1):
            return None
        comp = test.comparisons[0]
        if not (isinstance(comp.operator, cst.IsNot) and isinstance(comp.comparator, cst.Name) and comp.comparator.value == "None"):
            return None
        body = _suite(stmt.body)
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or list(body[0].body) != [node.site.small]:
            return None
        return stmt
    return None


def _bound_name(bound: Optional[Binding]) -> Optional[str]:
    return bound.text if isinstance(bound, Value) and bound.kind == "var" and not bound.text.startswith("%") else None


# Plan "hoist" lives in its own module, which reads this one's checks (so it is imported last, as a module).
from . import hoist  # noqa: E402
