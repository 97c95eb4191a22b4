"""Line/column positions of nodes inside a few top-level statements, without generating code for the whole module.

LibCST's ``PositionProvider`` renders the entire module (about 1.2x the parse of a transformers modeling file)
even when a report needs the lines of three statements. Positions inside one top-level statement only depend on
that statement's own code plus the number of lines before it, so: count the newlines of the preceding statements
(a field walk, no code generation) and run ``PositionProvider`` on a module holding just the statements asked for.
``tests/test_positions.py`` checks the result against ``PositionProvider`` on real modules.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Iterator, Mapping, Optional

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from . import cstwalk

_ALL_FIELDS: dict[type, tuple[str, ...]] = {}
_NOT_NODES = (str, bool, Optional[str])  # field annotations that never hold a node (`Name.value`, `Module.encoding`)
# Leaves whose text may hold newlines: triple-quoted strings, f-string text, backslash continuations.
_TEXT = (cst.SimpleString, cst.FormattedStringText, cst.SimpleWhitespace)
# One newline each, never more (a comment or trailing whitespace holds none).
_ONE_LINE = (cst.EmptyLine, cst.TrailingWhitespace, cst.Newline)


def _all_fields(node_type: type) -> tuple[str, ...]:
    fields = _ALL_FIELDS.get(node_type)
    if fields is None:
        fields = _ALL_FIELDS[node_type] = tuple(f.name for f in dataclasses.fields(node_type) if f.type not in _NOT_NODES)
    return fields


def count_newlines(root: cst.CSTNode) -> int:
    """Newlines in the code of `root` (as in ``Module.code_for_node``), counted from the tree."""
    count = 0
    stack: list[object] = [root]
    is_node = cstwalk.is_node
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in _ONE_LINE:
            count += 1
            continue
        if kind in _TEXT:
            count += node.value.count("\n")  # type: ignore[attr-defined]
        for name in _all_fields(kind):
            value = getattr(node, name)
            if is_node(type(value)):
                stack.append(value)
            elif type(value) is tuple or type(value) is list:
                stack.extend(value)
    return count


def positions_within(
    module: cst.Module,
    tops: Iterable[cst.CSTNode],
    wanted: Iterable[cst.CSTNode] = (),
    source: Optional[bytes] = None,
) -> Mapping[cst.CSTNode, CodeRange]:
    """Positions (as ``PositionProvider`` gives them) of the nodes inside the given top-level statements of
    `module`; statements that are not in ``module.body`` are ignored. With `wanted` nodes, classes and functions are
    rendered with only the members holding one of them (positions elsewhere are then missing). With the module's
    `source` bytes, a class or function whose header occurs once in it is placed by that line instead of by
    counting the newlines of everything before it."""
    todo = {id(t) for t in tops}
    wanted_ids = {id(n) for n in wanted}
    positions: dict[cst.CSTNode, CodeRange] = {}
    if source is not None:
        for top in [t for t in module.body if id(t) in todo]:
            line = _header_line(source, top)
            if line is not None:
                todo.discard(id(top))
                _render_top(module, top, wanted_ids, line, positions)
    line_offset = sum(count_newlines(line) for line in module.header) if todo else 0
    for stmt in module.body:
        if not todo:
            break
        if id(stmt) in todo:
            todo.discard(id(stmt))
            for part, offset, made_up in _parts(stmt, wanted_ids):
                _render(module, part, line_offset + offset, made_up, positions)
        line_offset += count_newlines(stmt)
    return positions


def _parts(stmt: cst.CSTNode, wanted: set[int]) -> Iterator[tuple[cst.CSTNode, int, set[int]]]:
    """What to render for a statement: (statement, lines dropped before the kept part, ids of the nodes made up
    for the rendering). A class or function keeps its header and, one at a time, the members holding a wanted
    node: same indentation, so the same columns, and the lines shift by the dropped members' newlines."""
    body = stmt.body if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) else None
    if not wanted or id(stmt) in wanted or not isinstance(body, cst.IndentedBlock):
        yield stmt, 0, set()
        return
    dropped = 0
    for member in body.body:
        if any(id(node) in wanted for node in cstwalk.walk(member)):
            for inner, inner_dropped, made_up in _parts(member, wanted):
                block = body.with_changes(body=[inner])
                outer = stmt.with_changes(body=block)
                yield outer, dropped + inner_dropped, made_up | {id(block), id(outer)}
        dropped += count_newlines(member)


def _render(
    module: cst.Module, stmt: cst.CSTNode, line_offset: int, made_up: set[int], positions: dict[cst.CSTNode, CodeRange]
) -> None:
    alone = module.with_changes(body=[stmt], header=(), footer=(), has_trailing_newline=True)
    for node, rng in MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider).items():
        if node is alone or id(node) in made_up:
            continue
        positions[node] = CodeRange(
            CodePosition(rng.start.line + line_offset, rng.start.column),
            CodePosition(rng.end.line + line_offset, rng.end.column),
        )


def _header_line(source: bytes, top: cst.CSTNode) -> Optional[int]:
    """1-based line of ``class Name``/``def Name`` for a top-level class or function, when it occurs exactly once at
    the start of a line (a second hit, e.g. in a docstring, means the newline count decides)."""
    if not isinstance(top, (cst.ClassDef, cst.FunctionDef)):
        return None
    keyword = rb"class" if isinstance(top, cst.ClassDef) else rb"(?:async[ \t]+)?def"
    pattern = re.compile(rb"^" + keyword + rb"[ \t]+" + re.escape(top.name.value.encode()) + rb"\b", re.M)
    hits = pattern.finditer(source)
    first = next(hits, None)
    if first is None or next(hits, None) is not None:
        return None
    return source.count(b"\n", 0, first.start()) + 1


def _render_top(
    module: cst.Module, top: cst.CSTNode, wanted: set[int], header_line: int, positions: dict[cst.CSTNode, CodeRange]
) -> None:
    """Render `top`'s parts as if it were first in the file, then shift them so its name sits on `header_line`."""
    name = top.name  # type: ignore[attr-defined]
    for part, offset, made_up in _parts(top, wanted):
        local: dict[cst.CSTNode, CodeRange] = {}
        _render(module, part, 0, made_up, local)
        shift = header_line - local[name].start.line + offset
        for node, rng in local.items():
            positions[node] = CodeRange(
                CodePosition(rng.start.line + shift, rng.start.column),
                CodePosition(rng.end.line + shift, rng.end.column),
            )
