"""Plan "sink": the statements before an ``if`` copied into every arm of it (paper Fig. 4), so that a match split
between them and one arm lies in one block.

BERT's self-attention (and every copy of it, BART's and its copies alike) projects the query before an
``if``/``elif`` chain and the keys and values inside its arms::

    mixed_query_layer = self.query(hidden_states)
    is_cross_attention = encoder_hidden_states is not None
    if is_cross_attention and past_key_value is not None:
        key_layer = past_key_value[0]
        ...
    elif is_cross_attention:
        key_layer = self.transpose_for_scores(self.key(encoder_hidden_states))
        ...
    else:
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))

No plan places ADP009's packed call there: the projections are in two blocks, and on the paths through the other
arms only the query runs. This plan moves the statements holding the matched nodes that stand before the ``if``
(the prefix) to the top of every arm of it, an ``else:`` added where the chain has none::

    is_cross_attention = encoder_hidden_states is not None
    if is_cross_attention and past_key_value is not None:
        mixed_query_layer = self.query(hidden_states)
        key_layer = past_key_value[0]
    ...
    else:
        mixed_query_layer = self.query(hidden_states)
        key_layer = self.transpose_for_scores(self.key(hidden_states))

Every path runs the moved lines once, in their order, as before, only later: after the lines left between them and
the ``if`` and after the tests. That changes nothing the code computes when (checked here):

* the matched nodes are in one function, helper inlining and loop iteration; those before the ``if`` are statements
  of its block, the others statements of one arm of its chain (an ``elif``'s too);
* a line between the first of them and the ``if`` stays when it is a plain assignment of an expression without calls
  (tensor metadata aside: ``x.size(0)``) to names no moved line before it reads or binds, reading none they bind
  (BERT's ``is_cross_attention = ...``), or making calls that only compute where the moved lines before it only
  compute too and read nothing that may share memory with what it reads (timm's SwinV2 bias MLP,
  `_commutes_with_computation`); any other line moves with them (RoFormer's reshape of the query), at most
  ``MAX_DEPENDENT_LINES`` of them, and every moved line is a simple statement without ``return``, ``raise``,
  ``break``, ``continue``, ``del``, ``global`` or ``nonlocal``;
* no test of the chain makes a call or assigns, or reads a name a moved line binds;
* what the moved lines may change besides the names they bind (``_Effects``: an object changed in place or handed
  to a call that may change it, ``seen.append(q)``; an attribute of ``self`` a helper method stores) is read by no
  test (refused) and by no line left before the ``if`` (it moves with them); where they may change any object, any
  name read counts (it may hold a view of it), attributes of ``self`` aside;
* every arm is an indented block (the copies need lines of their own).

Its mirror image (``_plan_suffix``): BLIP-2's Q-Former projects the keys and values in the arms and the query after
the chain. The lines from the ``if`` to the last matched one then go to the end of every arm: each path runs them
right where it ran them, so only their form is checked.

The copy alone does not fuse anything: the next rewrite round finds the match inside the arm, where the usual plans
place it (``hoist.plan_hoist`` for BERT's chained projections). So that a finding is never a bare copy, the engine
confirms each sink before reporting it (``engine.SinkCheck``): it analyses the module with the copies made, and
keeps the sink only if the rule places a match there with the same layers and the same last statement.
"""

from __future__ import annotations

from typing import Optional, Union

import libcst as cst

from . import cstwalk
from .flow import checks as flow_checks  # the module, not its names: it may be importing this one
from .flow import aliasing
from .flow.graph import FlowGraph, read_vids
from .matcher import Match, Placement, Reason, RefusalCategory, _names_at_anchor, _names_in_node, _simple_test
from .provider import _written_names
from .provider.syntax import (
    METADATA_ATTRIBUTES, _is_self_attr, _suite_body, computing_call, in_place_targets, is_metadata_call,
    passes_inplace,
)
from .structure import ClassStructure, DLNode

# Statements a copied prefix may not hold: each leaves the block or changes what names mean for the rest of it.
_NOT_COPIED = (cst.Return, cst.Raise, cst.Break, cst.Continue, cst.Del, cst.Global, cst.Nonlocal)
_NOT_COPYABLE = (
    "this statement would have to move with them, and cannot be copied (a compound statement, or one that leaves the "
    "block or changes what names mean: `return`, `del`, `global`, ...)"
)
# Statements that move only because they must run after the matched ones (Gemma 3n's norm, rotation and transpose of the
# query): more would copy a stretch of the function into every arm, not a change to hand a reviewer.
MAX_DEPENDENT_LINES = 3


def plan_sink(match: Match, reason: Reason) -> Union[Placement, Reason, None]:
    """The placement copying `match`'s prefix into every arm of the ``if`` whose arm holds its other nodes (see the
    module docstring); why not, where the match has that shape but a condition fails; None where it has not.
    `reason`: why the match cannot be placed where it stands, kept for the report should the engine not confirm
    the sink."""
    nodes = sorted(match.nodes, key=lambda n: n.index)
    anchor = nodes[-1]
    site = anchor.site
    if any(
        n.site.inline_stack != site.inline_stack or n.site.loop_copy != site.loop_copy or n.site.function != site.function
        for n in nodes
    ):
        return None
    placed = _plan_prefix(match, nodes, reason)
    return placed if placed is not None else _plan_suffix(match, nodes, reason)


def _plan_prefix(match: Match, nodes: list[DLNode], reason: Reason) -> Union[Placement, Reason, None]:
    """Plan "sink" for matched nodes before the ``if`` and in one arm of it (`nodes`: in graph order)."""
    anchor = nodes[-1]
    arm = anchor.site.owner
    site = anchor.site
    outside = [n for n in nodes if n.site.owner is not arm]
    inside = [n for n in nodes if n.site.owner is arm]
    if not outside or not inside or any(n.site.block is not site.block for n in inside):
        return None
    block = list(outside[0].site.block)
    if any(n.site.block is not outside[0].site.block or not any(n.site.line is s for s in block) for n in outside):
        return None
    prefix_at = sorted({next(i for i, s in enumerate(block) if s is n.site.line) for n in outside})
    if_at = next((i for i in range(prefix_at[-1] + 1, len(block)) if _is_arm_of_chain(block[i], arm)), None)
    if if_at is None:
        return None
    top = block[if_at]
    assert isinstance(top, cst.If)
    # A line between that would not leave names as they were if it ran before the moved ones moves with them.
    assert match.graph is not None
    effects = _Effects(match.cls, match.graph)
    moved: list[cst.BaseStatement] = []
    bound: set[str] = set()
    read: set[str] = set()
    for i in range(prefix_at[0], if_at):
        line = block[i]
        if i not in prefix_at and not effects.observed_by(line) and (
            _commutes(line, bound, read) or _commutes_with_computation(line, moved, bound, read, match.graph, match.cls)
        ):
            continue
        if not _copyable(line):
            return _refused(_NOT_COPYABLE, line)
        moved.append(line)
        bound |= _written_names(line)
        read |= _names_in_node(line)
        effects.add(line)
    if len(moved) - len(prefix_at) > MAX_DEPENDENT_LINES:
        return _refused(
            f"{len(moved) - len(prefix_at)} statements between them and the `if` would have to move with them (at "
            f"most {MAX_DEPENDENT_LINES} are copied into every arm)",
            top,
        )
    if _arms(top) is None:
        return _refused("an arm of this `if` is written on its header's line, so no copy can go atop it", top)
    for test in _tests(top):
        if not _simple_test(test):
            return _refused("this test makes a call (or assigns), which would now run before them", test)
        if _names_in_node(test) & bound:
            return _refused(f"this test reads `{sorted(_names_in_node(test) & bound)[0]}`, which would be bound after it", test)
        if effects.observed_by(test):
            return _refused(
                "this test reads an object they may change (in place, or by a call not known to leave what it is "
                "handed as it is), which it would now read before them",
                test,
            )
    return _placement(match, anchor, top, arm, moved, reason, suffix=False)


def _plan_suffix(match: Match, nodes: list[DLNode], reason: Reason) -> Union[Placement, Reason, None]:
    """Plan "sink" for matched nodes in one arm of an ``if`` and after it (BLIP-2's Q-Former projects the query
    after the chain projecting the keys and values): the lines from the ``if`` to the last matched one are copied
    to the end of every arm, an ``else:`` added where the chain has none (not to an arm ending with ``return``,
    ``raise``, ``break`` or ``continue``: its paths never ran them). Each path runs them right where it ran them,
    after the arm it took: nothing to check but that they can be copied.

    Matched nodes before the ``if`` as well (Swin's window attention: the scores before ``if mask is not None:``,
    the softmax in both arms, the dropout and the product after) stay where they are: with the lines after the
    ``if`` copied, the next round copies them as a prefix (`_plan_prefix`), and the one after fuses the arm."""
    block_of = nodes[-1].site.block
    inside = [n for n in nodes if n.site.block is not block_of]
    outside = [n for n in nodes if n.site.block is block_of]
    if not inside or any(n.site.block is not inside[0].site.block for n in inside):
        return None
    arm = inside[0].site.owner
    block = list(block_of)
    if not all(any(n.site.line is s for s in block) for n in outside):
        return None
    if_at = next((i for i, s in enumerate(block) if _is_arm_of_chain(s, arm)), None)
    if if_at is None:
        return None
    suffix_at = sorted(i for i in {next(i for i, s in enumerate(block) if s is n.site.line) for n in outside} if i > if_at)
    if not suffix_at:
        return None
    top = block[if_at]
    assert isinstance(top, cst.If)
    moved = block[if_at + 1 : suffix_at[-1] + 1]
    for line in moved:
        if not _copyable(line):
            return _refused(_NOT_COPYABLE, line, after=True)
    if len(moved) - len(suffix_at) > MAX_DEPENDENT_LINES:
        return _refused(
            f"{len(moved) - len(suffix_at)} statements between the `if` and them would have to move with them (at "
            f"most {MAX_DEPENDENT_LINES} are copied into every arm)",
            top, after=True,
        )
    if _arms(top) is None:
        return _refused("an arm of this `if` is written on its header's line, so no copy can go at its end", top, after=True)
    return _placement(match, nodes[-1], top, arm, moved, reason, suffix=True)


def _placement(
    match: Match, anchor: DLNode, top: cst.If, arm: cst.CSTNode, moved: list[cst.BaseStatement], reason: Reason,
    suffix: bool,
) -> Placement:
    """Plan "sink": the `moved` lines deleted where they stand and copied into every arm of `top`."""
    return Placement(
        "sink",
        anchor=anchor,
        deleted=tuple(s for line in moved for s in line.body),  # type: ignore[attr-defined]
        names=_names_at_anchor(match, anchor, ()),
        branch_if=top,
        branch_owner=arm,
        prefix_lines=tuple(moved),
        unsunk=reason,
        suffix=suffix,
    )


def _refused(why: str, cause: cst.CSTNode, after: bool = False) -> Reason:
    where = "after" if after else "before"
    return Reason(
        RefusalCategory.BRANCH_NOT_DUPLICABLE,
        f"the matched statements {where} the `if` holding the others cannot be copied into its arms: " + why,
        cause,
    )


def _is_arm_of_chain(statement: cst.BaseStatement, arm: cst.CSTNode) -> bool:
    """Whether `arm` is the body of `statement` (an ``if``), of one of its ``elif``s or of its ``else``."""
    node: Optional[cst.BaseStatement] = statement
    while isinstance(node, cst.If):
        if node.body is arm:
            return True
        orelse = node.orelse
        if isinstance(orelse, cst.Else):
            return orelse.body is arm
        node = orelse
    return False


def _arms(top: cst.If) -> Optional[list[cst.IndentedBlock]]:
    """The bodies of the chain's arms, or None if one is not an indented block (a copy needs a line of its own)."""
    bodies: list[cst.BaseSuite] = []
    node: Optional[cst.BaseStatement] = top
    while isinstance(node, cst.If):
        bodies.append(node.body)
        orelse = node.orelse
        if isinstance(orelse, cst.Else):
            bodies.append(orelse.body)
        node = orelse if isinstance(orelse, cst.If) else None
    blocks = [b for b in bodies if isinstance(b, cst.IndentedBlock)]
    return blocks if len(blocks) == len(bodies) else None


def _tests(top: cst.If) -> list[cst.BaseExpression]:
    tests: list[cst.BaseExpression] = []
    node: Optional[cst.BaseStatement] = top
    while isinstance(node, cst.If):
        tests.append(node.test)
        node = node.orelse if isinstance(node.orelse, cst.If) else None
    return tests


def _copyable(line: cst.BaseStatement) -> bool:
    return isinstance(line, cst.SimpleStatementLine) and not any(isinstance(s, _NOT_COPIED) for s in line.body)


def _commutes(line: cst.BaseStatement, bound: set[str], read: set[str], pure: bool = True) -> bool:
    """Whether `line`, run before moved lines (which bind `bound`, read `read`) instead of after them, leaves every
    name as it was: plain assignments of expressions without calls (tensor metadata aside: `x.size(0)`; with `pure`
    false, any) to names the moved lines neither read nor bind, reading none they bind."""
    if not isinstance(line, cst.SimpleStatementLine):
        return False
    for small in line.body:
        if isinstance(small, cst.Pass):
            continue
        if not isinstance(small, (cst.Assign, cst.AnnAssign)) or small.value is None or pure and not _pure(small.value):
            return False
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        if not all(isinstance(t, cst.Name) for t in targets):
            return False
    return not (_written_names(line) & (bound | read)) and not (_names_in_node(line) & bound)


def _commutes_with_computation(
    line: cst.BaseStatement, moved: list[cst.BaseStatement], bound: set[str], read: set[str], graph: FlowGraph,
    cls: ClassStructure,
) -> bool:
    """Whether `line`, an assignment making calls (timm's SwinV2: `logit_scale = torch.clamp(...).exp()`, its
    relative position bias by `self.cpb_mlp(...)`), may run before the moved lines instead of after them: its calls
    only compute (`_only_computing_calls`), the moved lines only compute (operators and effect-free functions, no
    random draw, no attribute of ``self`` read, `_computes`) and read nothing that may share memory with what `line`
    reads; names as `_commutes` asks."""
    if not moved or graph.reached_elsewhere or not _commutes(line, bound, read, pure=False):
        return False
    if not _only_computing_calls(line, graph, cls):
        return False  # it may change what the moved lines read, through an alias, `self` or a global
    moved_reads: set[int] = set()
    for statement in moved:
        if not _computes(statement, graph) or any(
            _is_self_attr(n) is not None for n in cstwalk.walk(statement) if type(n) is cst.Attribute
        ):
            return False
        moved_reads |= _read_vids(statement, graph)
    return not (_read_vids(line, graph) & aliasing.sharing_memory(graph, moved_reads))


# Tensor methods that return a new tensor computed from their receiver and arguments (besides `computing_call`'s).
_PURE_METHODS = frozenset({
    "exp", "log", "log1p", "expm1", "sigmoid", "tanh", "relu", "abs", "sqrt", "rsqrt", "neg", "reciprocal", "pow",
    "clamp", "mul", "add", "sub", "div", "square", "amax", "amin", "max", "min", "norm", "std", "var", "cumsum",
})


def _only_computing_calls(line: cst.BaseStatement, graph: FlowGraph, cls: ClassStructure) -> bool:
    """Whether every call of `line` computes a result and changes nothing, draws nothing: an operator, a torch
    function without effects that leaves its arguments as they are, a layer of a type known to only compute (not
    built in place, no hook of the class on it; an ``nn.Sequential`` of such layers, SwinV2's ``cpb_mlp``), a call
    that only computes (`computing_call`) or a pure tensor method (``.exp()``)."""
    for node in cstwalk.walk(line):
        if type(node) is not cst.Call:
            continue
        made = graph.by_call.get(id(node))
        func = node.func  # type: ignore[attr-defined]
        layer = _is_self_attr(func)
        if made is not None and made.kind == "func":
            if flow_checks.may_have_effects(made) or flow_checks.may_change_arguments(made):
                return False
        elif layer is not None:
            if layer in cls.methods or not _computing_layer(layer, cls):
                return False
        elif made is None and not computing_call(node) and not (  # type: ignore[arg-type]
            type(func) is cst.Attribute and func.attr.value in _PURE_METHODS  # type: ignore[attr-defined]
        ):
            return False
    return True


def _computing_layer(attr: str, cls: ClassStructure) -> bool:
    """Whether calling ``self.<attr>`` only computes: a layer bound once in ``__init__``, not rebound, with no hook
    of the class on it, of a type known to only compute (`flow_checks.COMPUTING_LAYERS`) and not built in place, or
    an ``nn.Sequential`` of such layers (an in-place one after the first works on its predecessor's result)."""
    bindings = cls.init_bindings.get(attr, [])
    if len(bindings) != 1 or attr in cls.hooked or "*" in cls.hooked or attr in cls.rebound or "*" in cls.rebound:
        return False
    binding = bindings[0]
    if binding.qualname in flow_checks.COMPUTING_LAYERS:
        return not aliasing.built_in_place(binding)
    elements = binding.elements
    return (
        binding.qualname == "torch.nn.Sequential" and bool(elements)
        and all(e.qualname in flow_checks.COMPUTING_LAYERS and not e.elements for e in elements)
        and not aliasing.built_in_place(elements[0])
    )


def _computes(line: cst.BaseStatement, graph: FlowGraph) -> bool:
    """Whether every call `line` makes is a DSL node without effects (`flow_checks.may_have_effects`) or a call that
    only computes (`computing_call`), and it holds no assignment expression, lambda, yield or await."""
    if not isinstance(line, cst.SimpleStatementLine):
        return False
    for node in cstwalk.walk(line):
        if isinstance(node, (cst.NamedExpr, cst.Lambda, cst.Yield, cst.Await)):
            return False
        if type(node) is cst.Call:
            made = graph.by_call.get(id(node))
            if made is None and not computing_call(node) or made is not None and flow_checks.may_have_effects(made):
                return False
    return True


def _read_vids(line: cst.BaseStatement, graph: FlowGraph) -> set[int]:
    """The value ids the events of `line`'s small statements read."""
    out: set[int] = set()
    for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
        for pos in graph.by_statement.get(id(small), ()):
            event = graph.events[pos]
            if event is not None:
                out |= read_vids(event)
    return out


def _pure(expr: cst.BaseExpression) -> bool:
    """No call but tensor metadata reads and number conversions, no assignment, nothing deferred or suspended."""
    return not any(
        (isinstance(n, cst.Call) and not is_metadata_call(n))
        or isinstance(n, (cst.NamedExpr, cst.Lambda, cst.Yield, cst.Await))
        for n in cstwalk.walk(expr)
    )


class _Effects:
    """What the moved lines may change besides the names they bind, which a test or a line left before them could
    read: objects they change in place or hand to a call that may change them (``x.add_(1)``, ``x[0] = v``,
    ``seen.append(1)``, ``f(x)``), by name; and attributes of ``self`` (stored, changed in place, or any where a call
    may reach ``self``). A call the function's graph holds as a DSL node is judged by
    ``checks.may_change_arguments`` (a layer of a computing type without ``inplace=``, a ``torch``/``math`` function
    not named ``*_``: none); tensor metadata reads and computing tensor methods change nothing (``checks.other_calls``
    passes them over); a helper method of the class is judged by its body (two levels deep); any other call may
    change whatever it is handed (not ``self`` where it is a layer's: its forward has its own)."""

    def __init__(self, cls: ClassStructure, graph: FlowGraph) -> None:
        self.cls = cls
        self.graph = graph
        self.objects: set[str] = set()
        self.attributes: Optional[set[str]] = set()  # None: any attribute of `self`

    def add(self, line: cst.CSTNode) -> None:
        objects, attributes = self._changes(line, 0)
        self.objects |= objects
        if attributes is None or self.attributes is None:
            self.attributes = None
        else:
            self.attributes |= attributes

    def observed_by(self, node: cst.CSTNode) -> bool:
        """Whether `node` reads an object or attribute of ``self`` the moved lines so far may change (the operands
        of an identity test read no object). Where they may change any object, any name read counts: it may hold a
        view of it, or a container holding it (``flat.add_(1)`` after ``flat = h.view(-1)`` changes ``h``)."""
        names, attributes = _reads(node)
        if names and self.objects:
            return True
        return bool(attributes) and (self.attributes is None or bool(attributes & self.attributes))

    def _changes(self, node: cst.CSTNode, depth: int) -> tuple[set[str], Optional[set[str]]]:
        objects: set[str] = set()
        attributes: Optional[set[str]] = set()
        for name in in_place_targets(node):
            if name.startswith("self."):
                attributes.add(name[len("self.") :])  # type: ignore[union-attr]
            else:
                objects.add(name)
        for call in flow_checks.other_calls(node):
            effect = self._effect(call, depth)
            if effect is None:
                continue
            if isinstance(effect, set):
                attributes = None if attributes is None else attributes | effect
                continue
            names = {n.value for arg in call.args for n in cstwalk.walk(arg.value) if isinstance(n, cst.Name)}
            if isinstance(call.func, cst.Attribute) and not self._is_layer(call.func):
                # a method's receiver too; a layer's forward has a `self` of its own
                names |= {n.value for n in cstwalk.walk(call.func.value) if isinstance(n, cst.Name)}
            objects |= names - {"self"}
            if "self" in names:
                attributes = None
        return objects, attributes

    def _effect(self, call: cst.Call, depth: int) -> Union[bool, set[str], None]:
        """None: the call changes none of its arguments (a DSL node `checks.may_change_state` clears); True: it
        may change what it is handed (``self`` too, where handed it); a set: a helper method of the class that
        changes no object but these attributes of ``self`` (judged from its body: one changing any object in place,
        or calling what may change ``self``, is True)."""
        if passes_inplace(call.args):
            return True
        node = self.graph.by_call.get(id(call))
        if node is not None:
            return True if flow_checks.may_change_state(node) else None  # a dropout draws, changes nothing
        attr = _is_self_attr(call.func) if isinstance(call.func, cst.Attribute) else None
        helper = self._method(attr) if attr is not None and depth < 2 else None
        if helper is None:
            return True
        changed, attributes = self._changes(helper.body, depth + 1)
        if changed or attributes is None:
            return True
        return attributes or None

    def _is_layer(self, func: cst.Attribute) -> bool:
        """Whether `func` is ``self.<attr>`` for a layer bound in ``__init__``."""
        attr = _is_self_attr(func)
        return attr is not None and bool(self.cls.init_bindings.get(attr))

    def _method(self, name: str) -> Optional[cst.FunctionDef]:
        node = self.cls.node
        if node is None:
            return None
        found = [s for s in _suite_body(node.body) if isinstance(s, cst.FunctionDef) and s.name.value == name]
        return found[0] if len(found) == 1 else None


def _reads(node: cst.CSTNode) -> tuple[set[str], set[str]]:
    """The names whose object `node` reads (not the operands of an identity test: ``x is None`` reads no object,
    nor a tensor's metadata ``x.shape``, which a change of its values leaves as it is (a change of its shape in
    place, ``x.unsqueeze_(0)``, is not followed), nor ``self`` of ``self.<attr>``), and the attributes of ``self``
    it reads."""
    skipped: set[int] = set()
    attributes: set[str] = set()
    for n in cstwalk.walk(node):
        if isinstance(n, cst.Comparison) and all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in n.comparisons):
            skipped.update(id(o) for o in (n.left, *(c.comparator for c in n.comparisons)) if isinstance(o, cst.Name))
        elif isinstance(n, cst.Attribute):
            skipped.add(id(n.attr))  # an attribute's name is no variable
            attr = _is_self_attr(n)
            if attr is not None:
                attributes.add(attr)
                skipped.add(id(n.value))
            elif n.attr.value in METADATA_ATTRIBUTES and isinstance(n.value, cst.Name):
                skipped.add(id(n.value))
    return {n.value for n in cstwalk.walk(node) if isinstance(n, cst.Name) and id(n) not in skipped}, attributes
