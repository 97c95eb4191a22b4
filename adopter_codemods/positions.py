"""Line/column positions of a few statements, without generating code for the whole module.

LibCST's ``PositionProvider`` renders the entire module (about 1.2x the parse of a transformers modeling file)
even when a report needs the lines of three statements. A statement's line is the number of newlines before it,
and those can be counted from the tree: whole siblings that come before it (a field walk, no code generation) and
the headers of the blocks around it. Its columns depend only on its own code and the indentation of those blocks,
so ``PositionProvider`` runs on the statement alone, nested in one block with that same indentation.
``tests/test_positions.py`` checks the result against ``PositionProvider`` on real modules.
"""

from __future__ import annotations

import bisect
import re
from typing import Iterable, Optional, Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from . import cstwalk

# Leaves whose text may hold newlines: triple-quoted strings, f-string text, backslash continuations.
_TEXT = (cst.SimpleString, cst.FormattedStringText, cst.SimpleWhitespace)
# One newline each, never more (a comment or trailing whitespace holds none).
_ONE_LINE = (cst.EmptyLine, cst.TrailingWhitespace, cst.Newline)
# Fields of a compound statement that are not between its keyword and its colon.
_NOT_HEADER = frozenset({"leading_lines", "decorators", "lines_after_decorators", "body", "orelse", "handlers", "finalbody"})
_HEADER_FIELDS: dict[type, tuple[str, ...]] = {}
_DEFINITIONS = (cst.ClassDef, cst.FunctionDef)


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
        for name in cstwalk.all_fields(kind):
            value = getattr(node, name)
            if is_node(type(value)):
                stack.append(value)
            elif type(value) is tuple or type(value) is list:
                stack.extend(value)
    return count


def _newlines_in(value: object) -> int:
    """:func:`count_newlines` of a field's value: a node, a sequence of nodes, or nothing (None, a sentinel)."""
    if type(value) is tuple or type(value) is list:
        return sum(count_newlines(item) for item in value)  # type: ignore[union-attr]
    return count_newlines(value) if cstwalk.is_node(type(value)) else 0  # type: ignore[arg-type]


def _header_newlines(clause: cst.CSTNode) -> int:
    """Newlines between a clause's keyword and its colon (a signature or condition over several lines)."""
    fields = _HEADER_FIELDS.get(type(clause))
    if fields is None:
        fields = _HEADER_FIELDS[type(clause)] = tuple(f for f in cstwalk.all_fields(type(clause)) if f not in _NOT_HEADER)
    return sum(_newlines_in(getattr(clause, f)) for f in fields)


def _clauses(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    """The clauses of a compound statement in source order, each with a ``body`` (an `elif` chain flattened).
    A ``match`` is not descended into: statements in its cases are not placed."""
    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        return [stmt] + (_clauses(orelse) if orelse is not None else [])
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        tail = [c for c in (stmt.orelse, stmt.finalbody) if c is not None]
        return [stmt, *stmt.handlers, *tail]
    if isinstance(stmt, (cst.For, cst.While)):
        return [stmt] + ([stmt.orelse] if stmt.orelse is not None else [])
    if isinstance(stmt, (cst.With, cst.Else, cst.FunctionDef, cst.ClassDef)):
        return [stmt]
    return []


def _mark(stmt: cst.CSTNode, wanted: dict[int, cst.CSTNode], on_path: set[int]) -> bool:
    """Add to `on_path` the statements that are or hold a wanted statement; True if `stmt` is one of them."""
    hit = id(stmt) in wanted
    if type(stmt) is cst.SimpleStatementLine:
        hit = any([id(small) in wanted for small in stmt.body]) or hit
    else:
        for clause in _clauses(stmt):
            body = clause.body  # type: ignore[attr-defined]
            if type(body) is cst.IndentedBlock:  # a one-line suite's statements stay unplaced
                hit = any([_mark(child, wanted, on_path) for child in body.body]) or hit
    if hit:
        on_path.add(id(stmt))
    return hit


def _first_line(definition: cst.CSTNode, keyword_line: int) -> int:
    """The line of a class's or function's first decorator, from its keyword's (the same without decorators)."""
    assert isinstance(definition, _DEFINITIONS)
    return keyword_line - _newlines_in(definition.decorators) - _newlines_in(definition.lines_after_decorators)


class _Placer:
    """Walks down to the wanted statements, counting the lines before them, and renders each one alone."""

    def __init__(
        self, module: cst.Module, wanted: dict[int, cst.CSTNode], on_path: set[int], render_definitions: bool = True
    ) -> None:
        self.module = module
        self.wanted = wanted
        self.on_path = on_path
        # False: a wanted class or function only gets its keyword line (rendering it would render its whole body).
        self.render_definitions = render_definitions
        self.positions: dict[cst.CSTNode, CodeRange] = {}
        self.keyword_lines: dict[cst.CSTNode, int] = {}
        # With the source: its header lines, and the lines of the top-level definition being placed (the body of a
        # class found by its header: its methods are then found by theirs, see `block`).
        self.headers: Optional[_HeaderLines] = None
        self.region: Optional[tuple[int, Optional[int]]] = None

    def block(self, statements: Sequence[cst.CSTNode], line: int, indent: str, region: bool = False) -> None:
        """`line`: where the first statement's leading lines start; `indent`: the block's whole indentation;
        `region`: the block is a top-level class's body, whose definitions may be found by their header line.
        Lines are counted only up to a statement that needs them, from the last statement placed."""
        last = max((i for i, s in enumerate(statements) if id(s) in self.on_path), default=-1)
        counted = 0  # `line` is where statements[counted]'s leading lines start
        for i in range(last + 1):
            stmt = statements[i]
            if id(stmt) not in self.on_path:
                continue
            keyword = self._header_line(stmt, indent) if region else None
            if keyword is None:
                line += sum(count_newlines(s) for s in statements[counted:i])
                counted = i
                first = line + _newlines_in(stmt.leading_lines)  # type: ignore[attr-defined]
            else:
                first = _first_line(stmt, keyword)
                line, counted = first - _newlines_in(stmt.leading_lines), i  # type: ignore[attr-defined]
            self.statement(stmt, first, indent)

    def _header_line(self, stmt: cst.CSTNode, indent: str) -> Optional[int]:
        if self.headers is None or self.region is None or not isinstance(stmt, _DEFINITIONS):
            return None
        return self.headers.nested_line(stmt, indent, *self.region)

    def statement(self, stmt: cst.CSTNode, first: int, indent: str) -> None:
        """`first`: the line after the statement's leading lines (its first decorator or its keyword)."""
        definition = isinstance(stmt, _DEFINITIONS)
        if type(stmt) is cst.SimpleStatementLine or (id(stmt) in self.wanted and (self.render_definitions or not definition)):
            self.render(stmt, first, indent)
        clauses = _clauses(stmt)
        line = first
        for i, clause in enumerate(clauses):
            body = clause.body  # type: ignore[attr-defined]
            if i:
                line += _newlines_in(clause.leading_lines)  # type: ignore[attr-defined]
            if isinstance(clause, _DEFINITIONS):
                line += _newlines_in(clause.decorators) + _newlines_in(clause.lines_after_decorators)
                if definition and id(stmt) in self.wanted:
                    self.keyword_lines[stmt] = line  # where PositionProvider starts it: `class`, `def` or `async`
            colon = line + _header_newlines(clause)
            if type(body) is cst.IndentedBlock and any([id(s) in self.on_path for s in body.body]):
                inner = body.indent if body.indent is not None else self.module.default_indent
                self.block(body.body, colon + 1, indent + inner, region=not indent and isinstance(stmt, cst.ClassDef))
            if i < len(clauses) - 1:
                line = colon + count_newlines(body)

    def render(self, stmt: cst.CSTNode, first: int, indent: str) -> None:
        """Positions of `stmt` and its small statements: rendered alone, nested in one block with the statement's
        indentation (continuation lines of brackets repeat it), then moved down to its line."""
        node: cst.CSTNode = stmt
        if indent:
            node = cst.If(test=cst.Name("True"), body=cst.IndentedBlock(body=[stmt], indent=indent))  # type: ignore[list-item]
        alone = self.module.with_changes(body=[node], header=(), footer=(), has_trailing_newline=True)
        # What `MetadataWrapper(alone).resolve(PositionProvider)` does, less the wrapper's visit of the tree (half
        # the cost): the provider's own code generation (tests/test_positions.py checks the result against it).
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=alone.default_indent, default_newline=alone.default_newline, provider=provider
        )
        alone._codegen(state)
        found: dict[cst.CSTNode, CodeRange] = provider._computed  # type: ignore[assignment]
        shift = first - _newlines_in(stmt.leading_lines) - (2 if indent else 1)  # type: ignore[attr-defined]
        inside = list(stmt.body) if type(stmt) is cst.SimpleStatementLine else []
        for target in [stmt, *inside]:
            rng = found[target]
            self.positions[target] = CodeRange(
                CodePosition(rng.start.line + shift, rng.start.column), CodePosition(rng.end.line + shift, rng.end.column)
            )


def statement_positions(
    module: cst.Module, tops: Iterable[cst.CSTNode], wanted: Iterable[cst.CSTNode], source: Optional[bytes] = None
) -> dict[cst.CSTNode, CodeRange]:
    """Positions (as ``PositionProvider`` gives them) of the `wanted` statements (small or compound) inside the
    given top-level statements of `module`, and of the statement lines holding them. With the module's `source`
    bytes, a class or function whose header occurs once in it is placed by that line instead of by counting the
    newlines of everything before it. Statements in a one-line suite (``if x: y = 1``), a ``match`` or outside
    ``module.body`` are left out: callers fall back to ``PositionProvider``."""
    return _place(module, tops, wanted, source, render_definitions=True).positions


def definition_lines(
    module: cst.Module, tops: Iterable[cst.CSTNode], definitions: Iterable[cst.CSTNode], source: Optional[bytes] = None
) -> dict[cst.CSTNode, int]:
    """The start line (as ``PositionProvider`` gives it: the ``class``, ``def`` or ``async`` keyword) of each of the
    `definitions` (classes and functions) inside the given top-level statements, without rendering any code.
    Left out as by :func:`statement_positions`."""
    return _place(module, tops, definitions, source, render_definitions=False).keyword_lines


def _place(
    module: cst.Module,
    tops: Iterable[cst.CSTNode],
    wanted: Iterable[cst.CSTNode],
    source: Optional[bytes],
    render_definitions: bool,
) -> _Placer:
    wanted_ids = {id(n): n for n in wanted}
    on_path: set[int] = set()
    body_ids = {id(s) for s in module.body}
    holding = {id(t): t for t in tops if id(t) in body_ids}
    holding = {key: top for key, top in holding.items() if _mark(top, wanted_ids, on_path)}
    placer = _Placer(module, wanted_ids, on_path, render_definitions)
    headers = placer.headers = _HeaderLines(source) if source is not None and holding else None
    if headers is not None:
        # The top-level definitions found by their header, in order: each one's lines end before the next one's.
        found = [(top, headers.line(top)) for top in module.body]
        located = [(top, line) for top, line in found if line is not None]
        for n, (top, keyword_line) in enumerate(located):
            if id(top) not in holding:
                continue
            on_path.discard(id(top))  # placed here: the module-level count below skips it
            placer.region = (keyword_line, located[n + 1][1] if n + 1 < len(located) else None)
            placer.statement(top, _first_line(top, keyword_line), "")
        placer.region = None
    if any(key in on_path for key in holding):
        placer.block(module.body, 1 + _newlines_in(module.header), "")
    return placer


# Every line starting a top-level `class` or `def` header, with the name: one scan of the source serves every top.
_TOP_HEADER = re.compile(rb"^(?:(class)|(?:async[ \t]+)?def)[ \t]+(\w+)", re.M)


class _HeaderLines:
    """1-based lines of the top-level ``class Name``/``def Name`` headers of a source, found on first use."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.lines: Optional[dict[tuple[bool, bytes], list[int]]] = None
        self.offsets: Optional[list[int]] = None

    def line(self, top: cst.CSTNode) -> Optional[int]:
        """The line of ``class Name``/``def Name`` for a top-level class or function, when it occurs exactly once at
        the start of a line (a second hit, e.g. in a docstring, means the newline count decides)."""
        if not isinstance(top, _DEFINITIONS):
            return None
        after_keyword = top.whitespace_after_class if isinstance(top, cst.ClassDef) else top.whitespace_after_def
        if "\\" in after_keyword.value:  # `def \<newline> name`: the pattern would miss it and might hit a docstring
            return None
        if self.lines is None:
            self.lines = {}
            line, offset = 1, 0
            for hit in _TOP_HEADER.finditer(self.source):
                line += self.source.count(b"\n", offset, hit.start())
                offset = hit.start()
                self.lines.setdefault((hit.group(1) is not None, hit.group(2)), []).append(line)
        hits = self.lines.get((isinstance(top, cst.ClassDef), top.name.value.encode()), [])
        return hits[0] if len(hits) == 1 else None

    def nested_line(self, stmt: cst.CSTNode, indent: str, start: int, end: Optional[int]) -> Optional[int]:
        """The line of a class's method (or nested class) `stmt` whose body is indented by `indent`, when its
        ``def name``/``class name`` header occurs exactly once at that indentation after line `start` (the class's
        own) and before line `end` (the next top-level definition's; None: the end of the file). Its real header
        is there, so a single hit is it."""
        assert isinstance(stmt, _DEFINITIONS)
        after_keyword = stmt.whitespace_after_class if isinstance(stmt, cst.ClassDef) else stmt.whitespace_after_def
        if "\\" in after_keyword.value:
            return None
        keyword = rb"class" if isinstance(stmt, cst.ClassDef) else rb"(?:async[ \t]+)?def"
        pattern = re.compile(rb"^" + re.escape(indent.encode()) + keyword + rb"[ \t]+" + stmt.name.value.encode() + rb"\b", re.M)
        offsets = self._line_offsets()
        lo = offsets[start] if start < len(offsets) else len(self.source)
        hi = offsets[end - 1] if end is not None and end - 1 < len(offsets) else len(self.source)
        hits = list(pattern.finditer(self.source, lo, hi))
        if len(hits) != 1:
            return None
        return bisect.bisect_right(offsets, hits[0].start())

    def _line_offsets(self) -> list[int]:
        """Offset of the start of each line: index 0 holds line 1."""
        if self.offsets is None:
            self.offsets = [0] + [m.end() for m in re.finditer(rb"\n", self.source)]
        return self.offsets
