"""Synthesis-based code transformation (paper §3.5) on the concrete syntax tree.

Given verified matches, build the target calls from the rule's target patterns and the match bindings, and edit
the CST: replace the anchor expression, delete the absorbed statements (their leading comments move to the next
statement), rewrite or delete ``__init__`` statements, copy prefix statements into the other branch when the match
crosses an ``if`` (paper Fig. 4/5), and add ``import adopter_kernels`` once (as a free name where the module binds
that one to something else). Everything else is left byte-for-byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import libcst as cst

from . import cstwalk
from .dsl import Atom, CallNode, Const, InPlace, Var
from .init_bindings import converted_construction
from .matcher import InitArg, LayerRef, Match, PlacedMatch, Placement, RestArgs, in_place_step, layers_to_delete
from .provider import syntax
from .qualnames import ImportTable, dotted_name
from .structure import Value


class RewriteError(Exception):
    """A match whose bindings cannot produce the target code (a rule bug, reported with the rule's path)."""


# ------------------------------------------------------------------------------------------ target synthesis


def _expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def _atom_expr(atom: Atom, found: PlacedMatch) -> cst.BaseExpression:
    if isinstance(atom, Const):
        return _expr(repr(atom.value))
    if isinstance(atom, InPlace):  # only kept where true (`_passed`)
        return cst.Name("True")
    match = found.match
    bound = match.env.get(atom.name)
    if isinstance(bound, Value):
        conditional = found.placement.conditional.get(bound.vid)
        if conditional is not None:  # computed only under an absorbed `if`: `(arg if <test> else None)`
            test, arg = conditional
            # A conditional expression or lambda as the arm keeps (or gets) its parentheses; others need none.
            grouped = isinstance(arg, (cst.IfExp, cst.Lambda))
            body = arg.deep_clone().with_changes(
                lpar=[cst.LeftParen()] if grouped else [], rpar=[cst.RightParen()] if grouped else []
            )
            return cst.IfExp(
                test=test.deep_clone(), body=body, orelse=cst.Name("None"),
                lpar=[cst.LeftParen()], rpar=[cst.RightParen()],
            )
        if bound.kind == "var" and not bound.text.startswith("%"):
            name = found.placement.names.get(bound.vid)
            if name is not None and name != bound.text:
                return _expr(name)  # the variable holding this value where the fused call goes
        return bound.expr  # the original variable, constant, expression or nested DSL node
    if isinstance(bound, LayerRef):
        return _expr("self." + bound.attr)
    if isinstance(bound, InitArg):
        return bound.expr if bound.expr is not None else _expr(bound.default or "None")
    raise RewriteError(f"{match.rule.path}: ${atom.name} cannot be used as an argument")


def _callee(target: CallNode, found: PlacedMatch, imports: set[str]) -> cst.BaseExpression:
    if target.layer is not None:
        return _atom_expr(target.layer, found)
    name = target.types[0]
    imports.add(name)
    return _expr(name)


def build_call(
    target: CallNode, found: PlacedMatch, imports: set[str], original: Optional[cst.Call] = None
) -> cst.Call:
    """The target pattern instantiated with the match's bindings (variables named as where the call goes)."""
    match = found.match
    func = _callee(target, found, imports)
    if target.callee_args is not None:
        func = cst.Call(func, [cst.Arg(_atom_expr(a, found)) for a in target.callee_args.positional])
    rest: tuple[cst.Arg, ...] = ()
    if target.args.rest is not None:
        bound = match.env.get(target.args.rest.name)
        if not isinstance(bound, RestArgs):
            raise RewriteError(f"{match.rule.path}: **${target.args.rest.name} is not bound to arguments")
        rest = bound.args
    if (
        original is not None
        and not target.args.positional
        and not target.args.keywords
        and rest == tuple(original.args)
    ):
        return original.with_changes(func=func)  # same arguments: keep their formatting and comments
    args: list[cst.Arg] = [cst.Arg(_atom_expr(a, found)) for a in target.args.positional]
    args.extend(a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in rest)
    args.extend(
        cst.Arg(_atom_expr(a, found), keyword=cst.Name(k), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        for k, a in target.args.keywords
        if _passed(a, match)
    )
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return cst.Call(func=func, args=args)


def _passed(atom: Atom, match: Match) -> bool:
    """Whether a target keyword argument is given: not one bound only by an absent optional node, nor an
    ``in_place($s)`` whose step was not written in place."""
    if isinstance(atom, Var):
        return atom.name in match.env
    if isinstance(atom, InPlace):
        return in_place_step(match, atom.var.name)
    return True


# ------------------------------------------------------------------------------------------ edit plan


@dataclass
class EditPlan:
    # Keyed by id(node), not the node: LibCST nodes hash by identity too, but through a Python-level __hash__ several
    # times slower than id(), and applying a plan looks up every node of the module.
    # id(original node) -> replacement (a FlattenSentinel puts several statements in the place of one)
    replace: dict[int, Union[cst.CSTNode, cst.FlattenSentinel[cst.BaseStatement]]] = field(default_factory=dict)
    originals: dict[int, cst.CSTNode] = field(default_factory=dict)  # keeps ids alive and checkable
    delete: set[int] = field(default_factory=set)  # id(small statement) to remove
    # id(if) -> (the arm holding the match: the others get the copies; None: every arm gets them, an `else` added
    # where the chain has none, plan "sink"), the statements copied
    branch_copies: dict[int, tuple[Optional[cst.CSTNode], list[cst.BaseStatement]]] = field(default_factory=dict)
    # id(if) -> the statements after it copied to the end of every arm, an `else` added where the chain has none
    # (plan "sink" from below)
    branch_tails: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)
    imports: set[str] = field(default_factory=set)  # the dotted names the new code calls (their roots are imported)
    init_statements: set[int] = field(default_factory=set)  # id(__init__ line) edited: shared edits are merged
    init_nodes: set[int] = field(default_factory=set)  # ids among `replace`/`delete` that are __init__ edits
    remove_lines: set[int] = field(default_factory=set)  # id(statement) dropped from its block (fallback region)
    moved_lines: set[int] = field(default_factory=set)  # id(line) deleted, its comments gone with its copies (sink)
    region: set[int] = field(default_factory=set)  # every statement inside a fallback region: no other edit there
    insert_before: dict[int, cst.SimpleStatementLine] = field(default_factory=dict)  # id(line) -> new line (hoist)
    # id(line) -> comment lines added above it: the comments inside a replaced expression (`# the residual` within
    # a multi-line call the fused call takes the place of)
    comments_above: dict[int, list[cst.EmptyLine]] = field(default_factory=dict)
    # ids of the functions where this plan binds fresh names: one such plan per function and round, so two of them
    # never pick the same name
    scopes: set[int] = field(default_factory=set)

    def footprint(self) -> set[int]:
        """Forward-side nodes this plan edits (``__init__`` edits are compared separately)."""
        edited = set(self.replace) | self.delete | set(self.branch_copies) | self.region | set(self.insert_before)
        edited |= set(self.branch_tails)
        edited |= self.remove_lines | self.moved_lines
        return (edited | self.scopes) - self.init_nodes


def plan_match(found: PlacedMatch) -> EditPlan:
    """The CST edits for one match, where its placement puts them."""
    plan = EditPlan()
    match, placement = found.match, found.placement
    rule = match.rule
    if placement.plan == "container":
        assert match.container is not None and rule.sequential is not None
        value = match.container.value
        # `nn.Sequential(...)` becomes `FusedSequential(...)`; a subclass of nn.Sequential (value: the base in its
        # class line) derives from the drop-in instead.
        callee = value.func if isinstance(value, cst.Call) else value
        plan.imports.add(rule.sequential)
        _put(plan, callee, _expr(rule.sequential))
        # An __init__ edit: matches in the same container (one per pair, or from several rules) apply together.
        plan.init_nodes.add(id(callee))
        if match.container.statement is not None:
            plan.init_statements.add(id(match.container.statement))
        return plan
    if placement.plan == "init":
        _plan_init(found, plan)
        return plan
    if placement.plan == "sink":
        _plan_sink(placement, plan)
        return plan
    assert rule.forward is not None and rule.forward.target is not None and placement.anchor is not None
    target = rule.forward.target[0]
    assert isinstance(target, CallNode)
    anchor = placement.anchor
    call = build_call(target, found, plan.imports, anchor.call)
    if placement.plan == "fallback":
        _plan_fallback(placement, call, plan)
        _plan_init(found, plan)
        return plan
    if placement.plan == "hoist":
        _plan_hoist(placement, call, plan)
        _plan_init(found, plan)
        return plan
    if len(target.outputs) == 1:
        _put(plan, anchor.expr, call)
        _keep_comments(plan, anchor.site.line, anchor.expr, call)
    else:
        _put(plan, anchor.site.small, _tuple_assignment(found, target, call))
        _keep_comments(plan, anchor.site.line, anchor.site.small, call)
    for small in placement.deleted:
        plan.delete.add(id(small))
        plan.originals[id(small)] = small
    if placement.plan == "branch":
        assert placement.branch_if is not None and placement.branch_owner is not None
        plan.branch_copies[id(placement.branch_if)] = (placement.branch_owner, list(placement.prefix_lines))
        plan.originals[id(placement.branch_if)] = placement.branch_if
    _plan_init(found, plan)
    return plan


def _plan_sink(placement: Placement, plan: EditPlan) -> None:
    """The prefix lines moved to the top of every arm of the ``if`` (matcher's plan "sink", sink.py), or the lines
    after it to the end of every arm; the fusion is the next round's."""
    assert placement.branch_if is not None
    for line in placement.prefix_lines:
        plan.moved_lines.add(id(line))
        plan.originals[id(line)] = line
    if placement.suffix:
        plan.branch_tails[id(placement.branch_if)] = list(placement.prefix_lines)
    else:
        plan.branch_copies[id(placement.branch_if)] = (None, list(placement.prefix_lines))
    plan.originals[id(placement.branch_if)] = placement.branch_if


def _plan_fallback(placement: Placement, call: cst.Call, plan: EditPlan) -> None:
    """``if <test>: <region as written> else: <region fused>`` in place of the region (matcher's plan "fallback")."""
    assert placement.anchor is not None
    fused_plan = EditPlan(delete={id(s) for s in placement.deleted})
    _put(fused_plan, placement.anchor.expr, call)
    dropped = {id(i) for i in placement.region_ifs}
    apply = _Apply(fused_plan)
    fused: list[cst.BaseStatement] = []
    for line in placement.region:
        if id(line) in dropped:  # a placeholder, so its comments move on as a deleted line's do
            placeholder = cst.SimpleStatementLine([cst.Pass()], leading_lines=_leading_lines(line))
            apply.emptied[id(placeholder)] = placeholder
            fused.append(placeholder)
        else:
            fused.append(line.visit(apply))  # type: ignore[arg-type]
    region = [*placement.region]
    # The region may start mid-block: lines before it keep their spacing.
    fused_lines, _ = _drop_empty_lines(fused, apply.emptied, top=region[0] is placement.anchor.site.block[0])  # type: ignore[arg-type]
    head = region[0]
    if not placement.fallback_tests:  # only absorbed ifs: the fused copy is all there is
        _put(plan, head, cst.FlattenSentinel(fused_lines))
    else:
        _put(plan, head, _fallback_if(_disjunction(placement.fallback_tests), region, fused_lines))
    for line in region[1:]:
        plan.remove_lines.add(id(line))
        plan.originals[id(line)] = line
    for line in region:
        plan.region |= {id(n) for n in _statements_in(line)}


def _disjunction(tests: Sequence[cst.BaseExpression]) -> cst.BaseExpression:
    """``a or (b and c) or ...``: any of the fallback tests."""
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


def _plan_hoist(placement: Placement, call: cst.Call, plan: EditPlan) -> None:
    """``a_out, b_out, ... = <call>`` before the first matched statement (or in place of its ``name = node``), each
    matched node replaced by its temporary (matcher's plan "hoist", hoist.py)."""
    hoist = placement.hoist
    assert hoist is not None
    names = cst.Tuple([cst.Element(cst.Name(n)) for n in hoist.names], lpar=[], rpar=[])
    assignment = cst.Assign([cst.AssignTarget(names)], call)
    if hoist.replaces is not None:
        _put(plan, hoist.replaces, assignment)
    else:
        plan.insert_before[id(hoist.line)] = cst.SimpleStatementLine([assignment])
        plan.originals[id(hoist.line)] = hoist.line
    for node, name in zip(hoist.outputs, hoist.names):
        if node.site.small is not hoist.replaces:
            _put(plan, node.expr, cst.Name(name))
    plan.scopes.add(id(hoist.function))


def _leading_lines(stmt: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """Every kind of statement has leading lines, but their common base class does not declare them."""
    assert isinstance(stmt, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    return stmt.leading_lines


def _fallback_if(test: cst.BaseExpression, region: list[cst.BaseStatement], fused_lines: list[cst.BaseStatement]) -> cst.If:
    head = region[0]
    kept: list[cst.BaseStatement] = []
    for line in region:
        kept.extend(_same_test_body(line, test) or [line])
    return cst.If(
        test=test.deep_clone(),
        body=cst.IndentedBlock(body=[kept[0].with_changes(leading_lines=[]), *kept[1:]]),  # type: ignore[attr-defined]
        # The comments stay with the code as written, in the first arm.
        orelse=cst.Else(cst.IndentedBlock(body=[line.with_changes(leading_lines=[]) for line in fused_lines])),  # type: ignore[attr-defined]
        leading_lines=head.leading_lines,  # type: ignore[attr-defined]
    )


def _same_test_body(line: cst.BaseStatement, test: cst.BaseExpression) -> Optional[list[cst.BaseStatement]]:
    """The body of ``if <test>:`` (no ``else``, no comment of its own) in a region the fallback keeps under that
    very test, where it is true (the matcher made sure the test answers there as at the head): its lines, the
    first with the ``if``'s leading lines; None for any other line."""
    if not isinstance(line, cst.If) or line.orelse is not None or not isinstance(line.body, cst.IndentedBlock):
        return None
    code = cst.Module([]).code_for_node
    if code(line.test) != code(test) or line.body.header.comment is not None or line.body.footer:
        return None
    body = list(line.body.body)
    first = body[0]
    assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    return [first.with_changes(leading_lines=[*line.leading_lines, *first.leading_lines]), *body[1:]]


def _statements_in(node: cst.CSTNode) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if isinstance(n, (cst.BaseStatement, cst.BaseSmallStatement)):
                out.append(n)
            return True

    node.visit(Collect())
    return out


def _plan_init(found: PlacedMatch, plan: EditPlan) -> None:
    """``__init__`` edits: rewrite the bindings the target keeps, delete the dropped ones."""
    match = found.match
    rule = match.rule
    if rule.init is None or rule.init.target is None:
        return
    for node in rule.init.target:
        assert isinstance(node, CallNode)
        binding = match.init_matches[node.outputs[0].name]
        original = binding.value if isinstance(binding.value, cst.Call) else None
        _put(plan, binding.value, build_call(node, found, plan.imports, original))
        plan.init_nodes.add(id(binding.value))
        if binding.statement is not None:
            plan.init_statements.add(id(binding.statement))
    for _, binding in layers_to_delete(match, found.placement):
        assert binding.statement is not None
        for small in binding.statement.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None and (
                small.value is binding.value or converted_construction(small.value) is binding.value
            ):
                plan.delete.add(id(small))
                plan.originals[id(small)] = small
                plan.init_nodes.add(id(small))
                plan.init_statements.add(id(binding.statement))


def _put(
    plan: EditPlan, original: cst.CSTNode, replacement: Union[cst.CSTNode, cst.FlattenSentinel[cst.BaseStatement]]
) -> None:
    plan.replace[id(original)] = replacement
    plan.originals[id(original)] = original


class _Comments(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.Comment] = []

    def visit_Comment(self, node: cst.Comment) -> None:
        self.found.append(node)


def _comments(node: cst.CSTNode) -> list[cst.Comment]:
    """In source order, which the moved comment lines keep (suppression's field walk does not need it)."""
    collector = _Comments()
    node.visit(collector)
    return collector.found


def _keep_comments(plan: EditPlan, line: cst.CSTNode, replaced: cst.CSTNode, call: cst.Call) -> None:
    """The comments inside `replaced` that the fused call does not keep (it keeps those of arguments it passes on
    as written) go above `line`, in their order."""
    kept = {id(c) for c in _comments(call)}
    lost = [c for c in _comments(replaced) if id(c) not in kept]
    if lost:
        plan.comments_above.setdefault(id(line), []).extend(cst.EmptyLine(comment=c) for c in lost)
        plan.originals[id(line)] = line


def _tuple_assignment(found: PlacedMatch, target: CallNode, call: cst.Call) -> cst.Assign:
    match = found.match
    names: list[str] = []
    for var in target.outputs:
        bound = match.env.get(var.name)
        node = next((n for n in match.nodes if isinstance(bound, Value) and n.out == bound.vid), None)
        if node is None or not isinstance(node.site.small, cst.Assign):
            raise RewriteError(f"{match.rule.path}: output ${var.name} is not assigned to a name")
        copy = found.placement.output_copies.get(node.out)
        name_target = (copy if copy is not None else node.site.small).targets[0].target
        assert isinstance(name_target, cst.Name)
        names.append(name_target.value)  # a deleted copy's name, where the matcher found one (`h, residual = ...`)
    tup = cst.Tuple([cst.Element(cst.Name(n)) for n in names], lpar=[], rpar=[])
    return cst.Assign([cst.AssignTarget(tup)], call)


# ------------------------------------------------------------------------------------------ applying edits


def merge_plans(plans: Sequence[EditPlan]) -> EditPlan:
    merged = EditPlan()
    for plan in plans:
        merged.replace.update(plan.replace)
        merged.originals.update(plan.originals)
        merged.delete |= plan.delete
        merged.branch_copies.update(plan.branch_copies)
        merged.branch_tails.update(plan.branch_tails)
        merged.remove_lines |= plan.remove_lines
        merged.moved_lines |= plan.moved_lines
        merged.insert_before.update(plan.insert_before)
        for line, comments in plan.comments_above.items():
            merged.comments_above.setdefault(line, []).extend(comments)
        merged.imports |= plan.imports
    return merged


class _Apply(cst.CSTTransformer):
    def __init__(self, plan: EditPlan, holding: Optional[set[int]] = None) -> None:
        super().__init__()
        self.plan = plan
        # ids of the edited nodes and their ancestors (None: unknown, visit everything): a LibCST transformer
        # rebuilds every node it descends into, which for a whole module costs about a parse.
        self.holding = holding
        # libcst silently drops a line left without statements, comments included: such lines become marked
        # placeholders instead, removed by _drop_empty_lines after their comments move on.
        # id -> placeholder; holding the placeholder keeps its id from being reused by a later node once dropped
        self.emptied: dict[int, cst.CSTNode] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.holding is None or id(node) in self.holding

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[no-untyped-def]
        if id(original_node) in self.plan.remove_lines and self.plan.originals.get(id(original_node)) is original_node:
            return cst.RemovalSentinel.REMOVE
        if id(original_node) in self.plan.moved_lines and self.plan.originals.get(id(original_node)) is original_node:
            # a deleted line's placeholder: its blank lines stay as those of any deleted line, its comments went
            # with the copies
            blank = [ln for ln in _leading_lines(original_node) if ln.comment is None]  # type: ignore[arg-type]
            placeholder = cst.SimpleStatementLine([cst.Pass()], leading_lines=blank)
            self.emptied[id(placeholder)] = placeholder
            return placeholder
        replacement = self.plan.replace.get(id(original_node))
        if replacement is not None and self.plan.originals.get(id(original_node)) is original_node:
            return replacement
        updated = super().on_leave(original_node, updated_node)
        if isinstance(original_node, cst.If) and id(original_node) in self.plan.branch_copies:
            return self._copy_into_other_branch(original_node, updated)  # type: ignore[arg-type]
        if isinstance(original_node, cst.If) and id(original_node) in self.plan.branch_tails:
            return _copy_into_every_arm(updated, self.plan.branch_tails[id(original_node)], at_end=True)  # type: ignore[arg-type]
        inserted = self.plan.insert_before.get(id(original_node))
        if inserted is not None and self.plan.originals.get(id(original_node)) is original_node:
            # The new line takes the comments and blank lines that stood before the statement.
            assert isinstance(updated, cst.SimpleStatementLine)
            first = inserted.with_changes(leading_lines=updated.leading_lines)
            return cst.FlattenSentinel([first, updated.with_changes(leading_lines=[])])
        return updated

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        above = self.plan.comments_above.get(id(original_node))
        if above is not None and self.plan.originals.get(id(original_node)) is original_node:
            updated_node = updated_node.with_changes(leading_lines=[*updated_node.leading_lines, *above])
        if not any(id(s) in self.plan.delete for s in original_node.body):
            return updated_node
        kept = [u for o, u in zip(original_node.body, updated_node.body) if id(o) not in self.plan.delete]
        if not kept:
            placeholder = updated_node.with_changes(body=[cst.Pass()])
            self.emptied[id(placeholder)] = placeholder
            return placeholder
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(body=kept)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body, orphans = _drop_empty_lines(updated_node.body, self.emptied)
        if not body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()], leading_lines=orphans)])
        return updated_node.with_changes(body=body, footer=[*orphans, *updated_node.footer])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body, orphans = _drop_empty_lines(updated_node.body, self.emptied)
        return updated_node.with_changes(body=body, footer=[*orphans, *updated_node.footer])

    def _copy_into_other_branch(self, original: cst.If, updated: cst.If) -> cst.If:
        owner, prefix = self.plan.branch_copies[id(original)]
        if owner is None:
            return _copy_into_every_arm(updated, prefix)
        copies = _copies(prefix)
        if owner is original.body:
            orelse = updated.orelse
            if orelse is None:
                new_else = cst.Else(body=cst.IndentedBlock(body=copies))
                return updated.with_changes(orelse=new_else)
            assert isinstance(orelse, cst.Else)
            block = orelse.body
            assert isinstance(block, cst.IndentedBlock)
            return updated.with_changes(orelse=orelse.with_changes(body=block.with_changes(body=[*copies, *block.body])))
        body = updated.body
        assert isinstance(body, cst.IndentedBlock)
        return updated.with_changes(body=body.with_changes(body=[*copies, *body.body]))


def _copies(prefix: Sequence[cst.BaseStatement], blank: bool = False) -> list[cst.BaseStatement]:
    """Fresh copies of `prefix` for the top of an arm: a copied statement keeps its own comments; the first copy
    must not repeat a blank line (`blank`: copies for the end of an arm keep their blank lines too)."""
    copies = [line.deep_clone() for line in prefix]
    if blank:
        return copies
    return [c.with_changes(leading_lines=[ln for ln in c.leading_lines if ln.comment is not None]) for c in copies]  # type: ignore[attr-defined]


def _copy_into_every_arm(if_stmt: cst.If, lines: Sequence[cst.BaseStatement], at_end: bool = False) -> cst.If:
    """`if_stmt` with copies of `lines` atop (`at_end`: at the end of) the body of it, of each ``elif`` and of its
    ``else`` (added if missing): every path through the chain runs them once (at the end: every path that ran them
    after the chain; an arm ending with ``return``, ``raise``, ``break`` or ``continue`` gets no copy)."""

    def put(block: cst.IndentedBlock) -> cst.IndentedBlock:
        if not at_end:
            return block.with_changes(body=[*_copies(lines), *block.body])
        if _leaves_block(block):
            return block
        return block.with_changes(body=[*block.body, *_copies(lines, blank=True)])

    body = if_stmt.body
    assert isinstance(body, cst.IndentedBlock)
    orelse = if_stmt.orelse
    if orelse is None:
        orelse = cst.Else(body=cst.IndentedBlock(body=_copies(lines)))
    elif isinstance(orelse, cst.If):
        orelse = _copy_into_every_arm(orelse, lines, at_end)
    else:
        block = orelse.body
        assert isinstance(block, cst.IndentedBlock)
        orelse = orelse.with_changes(body=put(block))
    return if_stmt.with_changes(body=put(body), orelse=orelse)


def _leaves_block(block: cst.IndentedBlock) -> bool:
    """Whether the block's last statement is a ``return``, ``raise``, ``break`` or ``continue``."""
    last = block.body[-1] if block.body else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(
        last.body[-1], (cst.Return, cst.Raise, cst.Break, cst.Continue)
    )


def _drop_empty_lines(
    body: Sequence[cst.BaseStatement], emptied: dict[int, cst.CSTNode], top: bool = True
) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine]]:
    """Remove the placeholders (ids in `emptied`) of lines whose small statements were all deleted; their comments
    move to the next statement (or, after the last one, to the block's footer), with the blank lines around them
    (a run of blank lines kept as one). A comment written right above a deleted line stays right above the next
    statement; one separated from it by a blank line stays separated. Where removed lines open the block (`top`:
    `body` is a whole block) without a blank line, the next statement opens it without one too."""
    out: list[cst.BaseStatement] = []
    carry: list[cst.EmptyLine] = []
    tight_top = False  # removed lines open the block, the first with no blank line above
    for stmt in body:
        if emptied.get(id(stmt)) is stmt:
            lines = list(_leading_lines(stmt))
            if top and not out and not carry and not tight_top:
                tight_top = not (lines and lines[0].comment is None)
            for ln in lines:
                if ln.comment is not None or not carry or carry[-1].comment is not None:
                    carry.append(ln)
            continue
        if carry or tight_top:
            own = list(_leading_lines(stmt))
            if tight_top:
                carry, own = [ln for ln in carry if ln.comment is not None], [ln for ln in own if ln.comment is not None]
            elif carry and carry[-1].comment is not None:
                # the comment was written for the deleted code, which the next statement now does (or follows)
                own = own[next((i for i, ln in enumerate(own) if ln.comment is not None), len(own)):]
            elif carry and own and own[0].comment is None:
                carry = carry[:-1]  # one separating blank line is enough
            stmt = stmt.with_changes(leading_lines=[*carry, *own])  # type: ignore[attr-defined]
            carry, tight_top = [], False
        out.append(stmt)
    return out, [ln for ln in carry if ln.comment is not None]


def _holding(root: cst.CSTNode, targets: set[int]) -> Optional[set[int]]:
    """The ids of `targets` and of every node on the way down to them from `root`; None if some target is not in
    the tree's syntax fields (then everything is visited). Found with a field walk, about 20x faster than a visit."""
    parent: dict[int, cst.CSTNode] = {}
    for node in cstwalk.walk(root):
        for child in cstwalk.children(node):
            parent[id(child)] = node
    holding = {id(root)}
    for target in targets:
        if target not in parent:
            return None
        key = target
        while key not in holding:
            holding.add(key)
            key = id(parent[key])
    return holding


def apply_plan(module: cst.Module, plan: EditPlan, within: Optional[cst.BaseStatement] = None) -> cst.Module:
    """`module` with the plan's edits made and its imports added. `within`: a statement of the module's body that
    holds every edit of a plan adding no import (plan "sink" in one class): only it is walked."""
    targets = set(plan.replace) | plan.delete | set(plan.branch_copies) | set(plan.branch_tails) | set(plan.insert_before)
    targets |= plan.remove_lines | plan.moved_lines
    if within is not None:
        assert not plan.imports and any(s is within for s in module.body)
        edited = within.visit(_Apply(plan, _holding(within, targets)))
        return module.with_changes(body=[edited if s is within else s for s in module.body])
    new = module.visit(_Apply(plan, _holding(module, targets)))
    assert isinstance(new, cst.Module)
    for root in sorted({name.split(".")[0] for name in plan.imports}):
        local = root
        if _binds_elsewhere(module, root, root):  # `adopter_kernels = ...`, `def adopter_kernels(...)`, a parameter
            table = ImportTable.from_module(new)
            reused = sorted(n for n, q in table.names.items() if q == root and not _binds_elsewhere(module, n, root))
            local = reused[0] if reused else _unused_name(module, root)
            generated = {name for name in plan.imports if name.startswith(root + ".")}
            new = new.visit(_RenameRoot(generated, local))
        new = add_import(new, root, local)
    return new


def _binds_elsewhere(module: cst.Module, name: str, package: str) -> bool:
    """Whether the module binds `name`, in any scope, other than by importing `package` (``import package``,
    ``import package.sub``, ``import package as name``): an import of `package` as `name` added for the rewritten
    code would not be what the name holds everywhere. A statement changing an object through the name counts too."""
    if name in syntax._written_names(module, imports=False):  # assignment, loop, `with`, `except`, `del`, walrus
        return True
    for node in cstwalk.walk(module):
        kind = type(node)
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Param, cst.MatchAs, cst.MatchStar):
            bound = node.name  # type: ignore[attr-defined]
            if type(bound) is cst.Name and bound.value == name:  # type: ignore[attr-defined]
                return True
        elif kind is cst.Import:
            for alias in node.names:  # type: ignore[attr-defined]
                imported = dotted_name(alias.name) or ""
                local = alias.asname.name.value if alias.asname is not None else imported.split(".")[0]
                if local == name and (imported if alias.asname is not None else local) != package:
                    return True
        elif kind is cst.ImportFrom and not isinstance(node.names, cst.ImportStar):  # type: ignore[attr-defined]
            for alias in node.names:  # type: ignore[attr-defined]
                local = alias.asname.name.value if alias.asname is not None else dotted_name(alias.name)
                if local == name:
                    return True
    return False


def _unused_name(module: cst.Module, name: str) -> str:
    """`name` followed by as many underscores as make it a name the module uses nowhere."""
    used = {node.value for node in cstwalk.walk(module) if type(node) is cst.Name}  # type: ignore[attr-defined]
    local = name + "_"
    while local in used:
        local += "_"
    return local


class _RenameRoot(cst.CSTTransformer):
    """``adopter_kernels.attention_core`` -> ``adopter_kernels_.attention_core`` for the dotted names the plan wrote."""

    def __init__(self, dotted: set[str], local: str) -> None:
        super().__init__()
        self.dotted = dotted
        self.local = local

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        if dotted_name(original_node) not in self.dotted:
            return updated_node
        chain = [updated_node]
        while type(chain[-1].value) is cst.Attribute:
            chain.append(chain[-1].value)  # type: ignore[arg-type]
        node: cst.BaseExpression = chain[-1].value.with_changes(value=self.local)  # the root Name
        for attribute in reversed(chain):
            node = attribute.with_changes(value=node)
        return node  # type: ignore[return-value]


def add_import(module: cst.Module, name: str, local: Optional[str] = None) -> cst.Module:
    """``import <name>`` (``as <local>``) after the module's leading imports, unless already imported so."""
    local = local or name
    table = ImportTable.from_module(module)
    if table.names.get(local) == name:
        return module
    body = list(module.body)
    insert_at = 0
    for i, stmt in enumerate(body):
        if i == 0 and _is_docstring(stmt):
            insert_at = 1
            continue
        if isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            insert_at = i + 1
            continue
        if isinstance(stmt, (cst.If, cst.Try)) and insert_at == i and _only_imports(stmt):
            insert_at = i + 1  # `try: import x except ImportError:` blocks belong to the import section
            continue
        break
    asname = None if local == name else cst.AsName(cst.Name(local))
    line = cst.SimpleStatementLine([cst.Import([cst.ImportAlias(cst.Name(name), asname=asname)])])
    body.insert(insert_at, line)
    return module.with_changes(body=body)


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class _NotOnlyImports(Exception):
    """Stops the scan in :func:`_only_imports` (not StopIteration: LibCST visits children through generators,
    where PEP 479 turns it into a RuntimeError)."""


def _only_imports(stmt: cst.CSTNode) -> bool:
    found = False

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            nonlocal found
            for s in node.body:
                if not isinstance(s, (cst.Import, cst.ImportFrom, cst.Pass, cst.Assign, cst.Expr)):
                    raise _NotOnlyImports
                found = found or isinstance(s, (cst.Import, cst.ImportFrom))

    try:
        stmt.visit(V())
    except _NotOnlyImports:
        return False
    return found
