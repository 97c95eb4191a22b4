"""Line/column positions of nodes inside a few top-level statements, without generating code for the whole module.

LibCST's ``PositionProvider`` renders the entire module (about 1.2x the parse of a transformers modeling file)
even when a report needs the lines of three statements. Positions inside one top-level statement only depend on
that statement's own code plus the number of lines before it, so: count the newlines of the preceding statements
(a field walk, no code generation) and run ``PositionProvider`` on a module holding just the statements asked for.
``tests/test_positions.py`` checks the result against ``PositionProvider`` on real modules.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

_ALL_FIELDS: dict[type, tuple[str, ...]] = {}
# Leaves whose text may hold newlines: triple-quoted strings, f-string text, backslash continuations.
_TEXT = (cst.SimpleString, cst.FormattedStringText, cst.SimpleWhitespace)


def _all_fields(node_type: type) -> tuple[str, ...]:
    fields = _ALL_FIELDS.get(node_type)
    if fields is None:
        fields = _ALL_FIELDS[node_type] = tuple(f.name for f in dataclasses.fields(node_type))
    return fields


def count_newlines(root: cst.CSTNode) -> int:
    """Newlines in the code of `root` (as in ``Module.code_for_node``), counted from the tree."""
    count = 0
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Newline:
            count += 1
            continue
        if kind in _TEXT:
            count += node.value.count("\n")  # type: ignore[attr-defined]
        for name in _all_fields(kind):
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                stack.append(value)
            elif type(value) is tuple or type(value) is list:
                stack.extend(value)
    return count


def positions_within(module: cst.Module, tops: Iterable[cst.CSTNode]) -> Mapping[cst.CSTNode, CodeRange]:
    """Positions (as ``PositionProvider`` gives them) of every node inside the given top-level statements of
    `module`; statements that are not in ``module.body`` are ignored."""
    wanted = {id(t) for t in tops}
    positions: dict[cst.CSTNode, CodeRange] = {}
    line_offset = sum(count_newlines(line) for line in module.header)
    for stmt in module.body:
        if not wanted:
            break
        if id(stmt) in wanted:
            wanted.discard(id(stmt))
            alone = module.with_changes(body=[stmt], header=(), footer=(), has_trailing_newline=True)
            for node, rng in MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider).items():
                if node is alone:
                    continue
                positions[node] = CodeRange(
                    CodePosition(rng.start.line + line_offset, rng.start.column),
                    CodePosition(rng.end.line + line_offset, rng.end.column),
                )
        line_offset += count_newlines(stmt)
    return positions
