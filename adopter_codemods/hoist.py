"""Plan "hoist": the fused call bound to fresh temporaries in a new statement before the first matched node.

For rules whose target is a tuple of the source nodes' outputs and whose source nodes read only the rule's inputs
(ADP009: ``$q($x) -> $qo; $k($x) -> $ko; $v($x) -> $vo``), when the outputs are not each the whole value of a
``name = node`` statement (``q = self.q_proj(x).view(b, s, h, d).transpose(1, 2)``,
``key_layer = self.transpose_for_scores(self.key(h))``, ``mixed = self.query(h)`` beside those)::

    q_proj_out, k_proj_out, v_proj_out = adopter_kernels.packed_qkv_linear(x, self.q_proj, self.k_proj, self.v_proj)
    q = q_proj_out.view(b, s, h, d).transpose(1, 2)

A first node that is the whole value of ``name = node`` gives that name to its output, and the new statement
replaces it (``mixed, key_out, value_out = ...``). Every other part of the matched statements stays as written.

The nodes now run earlier, at the new statement, so this is sound when (on every path through them, asked on the
function's graph):

* the nodes are small statements of one block (same function, helper inlining and loop iteration), every path
  running one of them runs all of them once, and none sits where it may not run or may run again (lambdas,
  comprehensions, conditional expressions and ``and``/``or`` hold no DSL nodes; chained comparisons are refused);
* every input of the target holds, at the new statement, the value each node reads (a name defined in between,
  a name first defined on the new statement's line, a value computed in a matched statement: refused); no
  statement in between that makes calls reads it (it may mutate it in place), nor changes in place a value that
  may share its memory (``flow.aliasing``: ``z += 1`` after ``z = x.view(-1)``); no call of a node's own statement
  runs before the node;
* the layers the nodes call are not referenced in between other than by those calls (``self.k.weight.mul_(2)``).

The remaining assumption, shared with the rule's other plans, which also move a projection: calling the layers
has no side effect and depends only on their parameters and the input (a forward hook with side effects, or code
in an opaque call in between that replaces a layer's weights, would now run in another order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional, Union

import libcst as cst

from . import cstwalk
from .dsl import Wildcard
from .flow import aliasing
from .flow import checks as flow_checks
from .flow.graph import FlowGraph, read_vids
from .matcher import Match, Placement, Reason, RefusalCategory, _names_at_anchor, _target_inputs
from .provider import syntax
from .provider.syntax import element_wise, is_metadata_call
from .structure import DLNode, Value

# Expressions whose parts may run zero or several times: a matched node inside one cannot move out of it.
_CONDITIONAL_PARTS = (
    cst.Lambda,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
    cst.IfExp,
    cst.BooleanOperation,
)


class _CallsBefore(cst.CSTVisitor):
    """Whether a call of a statement that runs before `target` (textual order; enclosing calls run after it) may
    reach an input: it reads one of the `roots` names, and is not a DSL node known to leave what it is handed as it
    is (`flow_checks.may_change_arguments`: Boltz's `self.p_out(x) * self.g_out(x_in)`, an nn.Linear of the input's
    alias before the projection). The statement's opaque part has a single event, after its DSL nodes, so the path
    checks cannot place such a call before the node."""

    def __init__(
        self, target: cst.CSTNode, matched: set[int], roots: set[str], graph: FlowGraph, hooked: Collection[str]
    ) -> None:
        self.target = target
        self.matched = matched
        self.roots = roots
        self.graph = graph
        self.hooked = hooked  # layers a hook may run on (`ClassStructure.hooked`): their calls may do anything
        self.reached = False
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.reached = self.reached or node is self.target
        return not self.reached and id(node) not in self.matched and super().on_visit(node)

    def leave_Call(self, original_node: cst.Call) -> None:
        if self.reached or id(original_node) in self.matched or is_metadata_call(original_node):
            return
        node = self.graph.by_call.get(id(original_node))
        hooked = node is not None and node.layer is not None and (
            node.layer[len("self."):] in self.hooked or "*" in self.hooked
        )
        if node is not None and not hooked and not flow_checks.may_change_arguments(node):
            return
        read = {n.value for n in cstwalk.walk(original_node, lambda n: id(n) not in self.matched) if isinstance(n, cst.Name)}
        self.found = self.found or bool(read & self.roots)


@dataclass(frozen=True)
class Hoist:
    """Where the fused call goes: before `line`, or in place of `replaces` (the first node's ``name = node``)."""

    line: cst.SimpleStatementLine
    replaces: Optional[cst.Assign]
    names: tuple[str, ...]  # one per target output, in the target's order
    outputs: tuple[DLNode, ...]  # the node computing each target output (same order)
    function: cst.FunctionDef  # where the names are bound: one hoist per function and rewrite round


def plan_hoist(match: Match) -> Union[Placement, Reason, None]:
    """The placement of `match` as a hoist (see the module docstring); why it is unsafe where the nodes can move to
    one statement but something in between forbids it; None when the rule or the code's shape does not allow it."""
    rule = match.rule
    assert rule.forward is not None and rule.forward.target is not None
    target = rule.forward.target[0]
    output_vars = [v.name for v in target.outputs]  # type: ignore[union-attr]
    if len(output_vars) < 2:
        return None
    if any(isinstance(p, Wildcard) or p.optional or any(v.name not in output_vars for v in p.outputs) for p in rule.forward.source):
        return None  # a node reading another node's output cannot run before it
    outputs = []
    for var in output_vars:
        bound = match.env.get(var)
        node = next((n for n in match.nodes if isinstance(bound, Value) and n.out == bound.vid), None)
        if node is None:
            return None
        outputs.append(node)
    nodes = sorted(match.nodes, key=lambda n: n.index)
    first = nodes[0]
    line = first.site.line
    if not isinstance(line, cst.SimpleStatementLine) or not any(s is line for s in first.site.block):
        return None
    inputs = _target_inputs(match)
    if any(v.kind == "expr" and not v.pure for v in inputs):
        return None
    if any(name.startswith("%") for v in inputs for name, _ in v.uses):
        return None  # computed by a DSL node of a matched statement
    graph = match.graph
    assert graph is not None
    # Root names through which a call could reach an input (`self` for an input held in `self.<attr>`), and the
    # names of what may share memory with one (`flat = x.view(-1)`: `torch.sigmoid(flat, out=flat)` changes `x`).
    roots = {name.split(".")[0] for v in inputs for name, _ in v.uses}
    sharing = aliasing.sharing_memory(graph, {vid for v in inputs for _, vid in v.uses})
    roots |= {d.name.rsplit("::", 1)[-1] for vid in sharing for d in graph.definitions.get(vid, ())}
    matched = {id(n.expr) for n in nodes}
    for node in nodes:
        site = node.site
        if (
            site.owner is not first.site.owner
            or site.inline_stack != first.site.inline_stack
            or site.loop_copy != first.site.loop_copy
            or not isinstance(site.small, cst.BaseSmallStatement)
            or not _runs_once(site.small, node.expr)
        ):
            return None
    replaces = _whole_assignment(first, outputs)
    layers = {n.layer[len("self."):] for n in match.nodes if n.layer is not None}
    instances = flow_checks.hoist_instances(match, graph)
    if instances is None:
        return None  # some path runs only part of the nodes or one of them twice, or they read other values
    for node in nodes:
        before = _CallsBefore(node.expr, matched, roots, graph, match.cls.hooked)
        node.site.small.visit(before)
        if before.found:
            return Reason(
                RefusalCategory.INPUT_MAY_BE_MUTATED,
                "a call before this projection in its statement is handed its input or a name reaching it, and may "
                f"change it in place: {_BEFORE_THE_FIRST}",
                node.site.line,
            )
    entry_names = match.cls.entry_names
    for instance in instances:
        reason = _instance_refusal(graph, instance, line, replaces, layers, entry_names)
        if reason is not None:
            return reason
    function = _enclosing_function(match, line)
    if function is None:
        return None
    names = _fresh_names(function, line, outputs, replaces)
    hoist = Hoist(line, replaces, names, tuple(outputs), function)
    return Placement("hoist", anchor=first, names=_names_at_anchor(match, first, ()), hoist=hoist)


def _runs_once(small: cst.BaseSmallStatement, expr: cst.BaseExpression) -> bool:
    """Whether `expr` is evaluated exactly once whenever `small` runs (no conditional part on the way to it)."""
    parent: dict[int, cst.CSTNode] = {}
    for node in cstwalk.walk(small):  # iterative: expressions may nest deeper than Python's recursion limit
        for part in cstwalk.children(node):
            parent[id(part)] = node
    if id(expr) not in parent:
        return False
    child: cst.CSTNode = expr
    while child is not small:
        node = parent[id(child)]
        if isinstance(node, _CONDITIONAL_PARTS):
            return False
        if isinstance(node, cst.Comparison) and any(child is c for c in node.comparisons[1:]):
            return False  # `a < b < c` skips `c` when `a < b` is false
        child = node
    return True


def _whole_assignment(node: DLNode, outputs: list[DLNode]) -> Optional[cst.Assign]:
    """The first node's statement where the fused call can take its place: ``name = node``, or one tuple assignment
    of every output in the target's order (``xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)``, LLaMA's reference
    code), whose names then receive the outputs directly."""
    small = node.site.small
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    target = small.targets[0].target
    if node.whole_statement and isinstance(target, cst.Name) and small.value is node.expr:
        return small
    pairs = element_wise([target], small.value)
    if pairs is not None and len(pairs) == len(outputs) and all(e is o.expr for (_, e), o in zip(pairs, outputs)):
        return small
    return None


_BEFORE_THE_FIRST = "the packed call, before the first projection, would read it as it was"


def _instance_refusal(
    graph: FlowGraph,
    instance: dict[flow_checks.Key, DLNode],
    line: cst.SimpleStatementLine,
    replaces: Optional[cst.Assign],
    layers: set[str],
    entry_names: dict[int, str],
) -> Optional[Reason]:
    """The checks on the paths through one copy of the match (`flow_checks.hoist_instances`), from the new
    statement's place to the last node: the nodes read what their inputs hold there, and nothing in between may
    change it, touch a layer, or leave the block. The first failure's reason."""
    reach = graph.reach
    occ = sorted(instance.values(), key=lambda n: n.index)
    chain = [n.index for n in occ]
    first = occ[0]
    # The new statement's place: the replaced statement's first event, else that of the first node's line.
    small_ids = {id(replaces)} if replaces is not None else {id(s) for s in line.body}
    start = min(
        pos
        for small in small_ids
        for pos in graph.by_statement.get(small, ())
        if graph.events[pos].site.inline_stack == first.site.inline_stack  # type: ignore[union-attr]
        and reach.before(pos, first.index)
    )
    stop = chain[-1]
    # The value each name holds at the new statement: as at the first node, the line's earlier statements undone
    # (with `replaces`, the statements before it on the line run before the new statement too); a name no path to
    # it assigns holds its value on entry (a parameter, a global).
    undone = set() if replaces is not None else small_ids
    holding = flow_checks.state_at(graph, first, undone)
    read: set[int] = set()
    for node in occ:
        for value in (*node.args, *(v for _, v in node.kwargs)):
            for name, vid in value.uses:
                if holding.get(name, vid if entry_names.get(vid) == name else None) != vid:
                    return Reason(
                        RefusalCategory.INPUT_REDEFINED,
                        f"`{name.rsplit('::', 1)[-1]}` is assigned again before this projection, so the packed call, "
                        "before the first projection, would read another value",
                        node.site.line,
                    )
                read.add(vid)
    matched = {id(n.expr) for n in occ}
    carried = reach.carried(read, chain)
    sharing = aliasing.sharing_memory(graph, read)
    carried_sharing = reach.carried(sharing, chain)
    scanned: set[int] = set()
    for pos in range(start, stop + 1):
        event = graph.events[pos]
        if event is None or not (reach.before(start, pos) and reach.before(pos, stop) and reach.on_chain(pos, chain)):
            continue
        if isinstance(event, DLNode) and id(event.expr) in matched:
            continue
        reads = read_vids(event)
        if any(vid in reads and reach.reads_at(pos, chain, joins) for vid, joins in carried.items()):
            if isinstance(event, DLNode):
                impure = flow_checks.may_change_arguments(event)
            else:  # a statement's opaque part: judged by the calls it makes
                impure = flow_checks.statement_may_change_arguments(event.site.small, matched, graph)
            if impure:
                return Reason(
                    RefusalCategory.INPUT_MAY_BE_MUTATED,
                    f"this statement may change the projections' input (a call may modify it in place, `:=` rebinds "
                    f"it); {_BEFORE_THE_FIRST}",
                    event.site.line,
                )
        if any(vid in reads and reach.reads_at(pos, chain, joins) for vid, joins in carried_sharing.items()):
            if aliasing.changes_in_place(graph, event, sharing):
                return Reason(
                    RefusalCategory.INPUT_MAY_BE_MUTATED,
                    "this statement may change the projections' input in place (or a value that may share its "
                    f"memory: a view, an alias, a container holding it); {_BEFORE_THE_FIRST}",
                    event.site.line,
                )
        if id(event.site.small) not in scanned:
            scanned.add(id(event.site.small))
            if syntax.references_layers(event.site.small, layers, matched):
                return Reason(
                    RefusalCategory.NOT_PLACEABLE,
                    "this statement reaches a projected layer other than by calling it; the packed call, before the "
                    "first projection, would use the layer as it was",
                    event.site.line,
                )
            if _may_leave(event.site.small):
                return Reason(
                    RefusalCategory.NOT_PLACEABLE,
                    "this statement may leave the block (a return, break or continue) between the projections, "
                    "which the packed call before the first one would all compute",
                    event.site.line,
                )
    return None


def _may_leave(statement: cst.CSTNode) -> bool:
    """Whether a compound statement in between may end the block early (``if flag: return q``): the walk folds
    statements without layer calls into one event, so such a path is not among the class's paths. An exception
    ends the computation, so ``raise`` is fine: the nodes have no effect of their own."""
    return isinstance(statement, cst.BaseCompoundStatement) and _leaves_early(statement, False)


# The searches below are module-level functions, not recursive closures: such a closure is a reference cycle, left
# with what it captures to the garbage collector (docs/PERFORMANCE.md, "Reference cycles").
def _leaves_early(node: cst.CSTNode, in_loop: bool) -> bool:
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return False
    if isinstance(node, cst.Return) or (isinstance(node, (cst.Break, cst.Continue)) and not in_loop):
        return True
    inner = in_loop or isinstance(node, (cst.For, cst.While))
    return any(_leaves_early(child, inner) for child in cstwalk.children(node))


def _enclosing_function(match: Match, line: cst.CSTNode) -> Optional[cst.FunctionDef]:
    """The innermost function definition holding `line` (a method of the class or of a local base, whose helper
    was inlined, or a top-level function)."""
    for root in (match.cls.node, match.cls.module):  # the class first: most lines are its own
        found = None if root is None else _function_holding(root, line, None)
        if found is not None:
            return found
    return None


def _function_holding(
    node: cst.CSTNode, line: cst.CSTNode, function: Optional[cst.FunctionDef]
) -> Optional[cst.FunctionDef]:
    if node is line:
        return function
    if isinstance(node, (cst.BaseSmallStatement, cst.BaseExpression)):
        return None  # statements and expressions hold no statement lines below them
    inner = node if isinstance(node, cst.FunctionDef) else function
    for child in cstwalk.children(node):
        found = _function_holding(child, line, inner)
        if found is not None:
            return found
    return None


def _fresh_names(
    function: cst.FunctionDef, line: cst.BaseStatement, outputs: list[DLNode], replaces: Optional[cst.Assign]
) -> tuple[str, ...]:
    """``<layer attribute>_out`` per output (``q_proj_out``), numbered where the function already uses the name
    anywhere (a local, a parameter, a global it reads), unless only other arms of an ``if`` chain holding `line` use
    it, each binding it first (`_bound_in_other_arms`: the arms of BERT's chain, packed one per round, all get
    ``key_out``); an output keeps the name of a statement it replaces."""
    taken = {n.value for n in cstwalk.walk(function) if type(n) is cst.Name}  # type: ignore[attr-defined]
    parents: dict[int, cst.CSTNode] = {}  # filled on the first taken name: most outputs' names are free
    chosen: set[str] = set()
    names: list[str] = []
    for node in outputs:
        if replaces is not None and node.site.small is replaces:
            target = replaces.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)):  # every output, in order (`_whole_assignment`)
                element = target.elements[len(names)].value
                assert isinstance(element, cst.Name)
                names.append(element.value)
                continue
            assert isinstance(target, cst.Name)
            names.append(target.value)
            continue
        base = (node.layer or "out").split(".")[-1] + "_out"
        name, number = base, 1
        while name in chosen or (
            name in taken and not _bound_in_other_arms(function, line, name, _parents(function, parents))
        ):
            name, number = f"{base}_{number}", number + 1
        chosen.add(name)
        names.append(name)
    return tuple(names)


def _parents(function: cst.FunctionDef, parents: dict[int, cst.CSTNode]) -> dict[int, cst.CSTNode]:
    """`parents`, filled with the parent of every node of `function` (by id) unless already done."""
    if not parents:
        parents.update((id(child), node) for node in cstwalk.walk(function) for child in cstwalk.children(node))
    return parents


def _bound_in_other_arms(
    function: cst.FunctionDef, line: cst.BaseStatement, name: str, parents: dict[int, cst.CSTNode]
) -> bool:
    """Whether every use of `name` in the function lies in arms of an ``if``/``elif`` chain holding `line` other than
    `line`'s, and each such arm's first statement naming it binds it (``name = ...``, a tuple target, its value not
    reading it): binding it in `line`'s arm then changes what no other code reads, as the arms exclude each other."""
    uses = [n for n in cstwalk.walk(function) if isinstance(n, cst.Name) and n.value == name]
    node: cst.CSTNode = line
    while id(node) in parents:
        node = parents[id(node)]
        if not isinstance(node, cst.IndentedBlock):
            continue
        owner = parents.get(id(node))
        if not isinstance(owner, (cst.If, cst.Else)):
            continue
        top = owner if isinstance(owner, cst.If) else parents.get(id(owner))
        outer = parents.get(id(top))
        while isinstance(outer, cst.If) and outer.orelse is top:  # an `elif`: the chain starts higher
            top, outer = outer, parents.get(id(outer))
        if not isinstance(top, cst.If):
            continue
        arms = _chain_arms(top)
        holding = {id(b): b for b in arms}
        found: set[int] = set()  # the arms holding a use
        for use in uses:
            up: cst.CSTNode = use
            while id(up) in parents and id(up) not in holding:
                up = parents[id(up)]
            if id(up) not in holding:
                break  # a use outside the chain's arms: try an enclosing chain
            found.add(id(up))
        else:
            if not uses or id(node) in found:
                return False
            return all(_binds_first(holding[key], name) for key in found)
    return False


def _chain_arms(top: cst.If) -> list[cst.IndentedBlock]:
    """The blocks of an ``if``/``elif``/``else`` chain."""
    arms: list[cst.IndentedBlock] = []
    current: Optional[cst.BaseStatement] = top
    while isinstance(current, cst.If):
        if isinstance(current.body, cst.IndentedBlock):
            arms.append(current.body)
        orelse = current.orelse
        current = orelse if isinstance(orelse, cst.If) else None
        if isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock):
            arms.append(orelse.body)
    return arms


def _binds_first(block: cst.IndentedBlock, name: str) -> bool:
    """Whether the first statement of `block` naming `name` is ``<targets> = <value>`` binding it, `value` not
    reading it."""
    for statement in block.body:
        if not any(isinstance(n, cst.Name) and n.value == name for n in cstwalk.walk(statement)):
            continue
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        if not isinstance(small, cst.Assign):
            return False
        bound = any(
            isinstance(n, cst.Name) and n.value == name for t in small.targets for n in cstwalk.walk(t.target)
        )
        return bound and not any(isinstance(n, cst.Name) and n.value == name for n in cstwalk.walk(small.value))
    return False
