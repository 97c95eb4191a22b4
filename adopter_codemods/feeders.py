"""Statements that only feed an argument the fused call does not pass: they go with the match.

vit-pytorch, Stable Diffusion and imagen name the fill value of their mask before they use it::

    mask_value = -torch.finfo(dots.dtype).max
    dots = dots.masked_fill(~mask, mask_value)

The first line reads the scores, which the fused call hides, so the match used to be refused. But the target does
not pass that value (the rule's guard checked what it is, and the kernel fills with the same): once the masked_fill
is gone, nothing reads `mask_value`, and its statement is dead code. It is removed with the match, as the matched
statements are, where that is certain:

* it is a statement of its own (``name = <expression>`` alone on its line) in the block where the matcher looks
  for it, and in the matched function itself (not an inlined helper);
* every call it makes is a DSL node free of effects (the checks' `may_have_effects`: `torch.finfo` is, a layer
  or a function the walk leaves opaque is not);
* every read of the value it assigns, on any path (through joins too), is an argument of a matched node in a
  statement the rewrite removes, bound to a ``$variable`` the target does not pass.

Reads in a removed feeder are then no reads of the values the fused call hides (`flow.checks._check_complete`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import libcst as cst

from . import cstwalk
from .dsl import CallNode
from .flow import checks as flow_checks
from .structure import Def, DLNode, Value

if TYPE_CHECKING:
    from .matcher import Match


def feeder_statements(
    match: "Match", anchor: DLNode, lines: Sequence[cst.BaseStatement], removed: set[int]
) -> list[cst.BaseSmallStatement]:
    """The statements among `lines` that only feed arguments of the matched nodes in the `removed` statements (ids of
    small statements) that the target does not pass (see the module docstring), in order."""
    graph = match.graph
    rule = match.rule
    if graph is None or rule.forward is None or not rule.forward.target:
        return []
    target = rule.forward.target[0]
    if not isinstance(target, CallNode):
        return []
    atoms = [*target.args.positional, *(a for _, a in target.args.keywords)]
    passed = {getattr(a, "name", None) for a in atoms} | ({target.args.rest.name} if target.args.rest else set())
    by_key = {flow_checks.key(n): n for n in match.nodes}
    out: list[cst.BaseSmallStatement] = []
    for line in lines:
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            continue
        small = line.body[0]
        if id(small) in removed or not _assigns_one_name(small):
            continue
        events = [graph.events[pos] for pos in graph.by_statement.get(id(small), ())]
        defs = [e for e in events if isinstance(e, Def)]
        if not defs or any(
            e is None or e.site.inline_stack != anchor.site.inline_stack or e.site.function != anchor.site.function
            for e in events
        ):
            continue
        if not _calls_without_effects(small, events):
            continue
        if all(_read_only_unpassed(match, d, by_key, passed, removed) for d in defs):
            out.append(small)
    return out


def _calls_without_effects(small: cst.BaseSmallStatement, events: Sequence[object]) -> bool:
    """Whether every call `small` makes is a DSL node free of effects (a call the walk left opaque may have any)."""
    pure = {id(e.expr) for e in events if isinstance(e, DLNode) and not flow_checks.may_have_effects(e)}
    return all(id(node) in pure for node in cstwalk.walk(small) if isinstance(node, cst.Call))


def _assigns_one_name(small: cst.BaseSmallStatement) -> bool:
    return isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)


def _read_only_unpassed(
    match: "Match", definition: Def, by_key: dict[flow_checks.Key, DLNode], passed: set[object], removed: set[int]
) -> bool:
    """Whether every read of the value `definition` assigns (or of a phi it flows into) is an argument of a matched
    node in a removed statement, bound to a variable the target does not pass; False when nothing reads it."""
    graph = match.graph
    assert graph is not None
    vids = graph.flowing({definition.vid})
    readers = [pos for vid in vids for pos in graph.readers.get(vid, ())]
    if not readers:
        return False
    for pos in readers:
        event = graph.events[pos]
        if not isinstance(event, DLNode) or id(event.site.small) not in removed:
            return False
        rep = by_key.get(flow_checks.key(event))
        if rep is None:
            return False
        pairs = [*zip(event.args, rep.args), *zip((v for _, v in event.kwargs), (v for _, v in rep.kwargs))]
        for value, rep_value in pairs:
            if not _reads(value, vids):
                continue
            bound_to = [name for name, bound in match.env.items() if bound is rep_value]
            if not bound_to or any(name in passed for name in bound_to):
                return False
    return True


def _reads(value: Value, vids: set[int]) -> bool:
    return (value.kind == "var" and value.vid in vids) or any(vid in vids for _, vid in value.uses)
