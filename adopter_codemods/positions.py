"""Line/column positions of a few statements, without generating code for the whole module.

LibCST's ``PositionProvider`` renders the entire module (about 1.2x the parse of a transformers modeling file)
even when a report needs the lines of three statements. With the source bytes, a statement line is looked up by
its text: rendered with its block's indentation it is the source's text at its place, so a single occurrence at
the start of a line within its top-level class or function (after the statement placed before it) is it; its
columns follow from that text (:class:`_TextLines`). Otherwise a statement's line is the number of newlines before
it, counted from the tree: whole siblings that come before it (a field walk, no code generation) and the headers of
the blocks around it; its columns depend only on its own code and the indentation of those blocks, so
``PositionProvider`` runs on the statement alone, nested in one block with that same indentation.
``tests/test_positions.py`` checks both against ``PositionProvider`` on real modules.
"""

from __future__ import annotations

import bisect
import codecs
import re
from typing import Iterable, Optional, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState
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
            text = node.value  # type: ignore[attr-defined]
            count += text.count("\n")
            if "\r" in text:  # a lone carriage return ends a line too
                count += text.count("\r") - text.count("\r\n")
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
        self.headers: Optional[HeaderLines] = None
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
    # Lines are counted by newlines in the source: where a lone carriage return ends one, the tree counts them.
    lines_end_in_newlines = source is not None and source.count(b"\r") == source.count(b"\r\n")
    headers = placer.headers = HeaderLines(source) if source is not None and holding and lines_end_in_newlines else None
    if headers is not None:
        # The top-level definitions found by their header, in order: each one's lines end before the next one's.
        found = [(top, headers.header(top)) for top in module.body]
        located = [(top, hit) for top, hit in found if hit is not None]
        if render_definitions and codecs.lookup(module.encoding).name == "utf-8":  # rendered code encodes as the source
            lines = _TextLines(module, headers.source, placer.positions)
            for n, (top, (keyword_line, start)) in enumerate(located):
                if id(top) in holding:
                    end = located[n + 1][1][1] if n + 1 < len(located) else len(headers.source)
                    lines.place(top, keyword_line, start, end, on_path)
            # What is left (statements whose text occurs twice, compound statements) is placed by counting.
            left = {key: node for key, node in wanted_ids.items() if node not in placer.positions}
            if not left:
                return placer
            on_path.clear()
            holding = {key: top for key, top in holding.items() if _mark(top, left, on_path)}
            placer.wanted = left
        for n, (top, (keyword_line, _)) in enumerate(located):
            if id(top) not in holding:
                continue
            on_path.discard(id(top))  # placed here: the module-level count below skips it
            placer.region = (keyword_line, located[n + 1][1][0] if n + 1 < len(located) else None)
            placer.statement(top, _first_line(top, keyword_line), "")
        placer.region = None
    if any(key in on_path for key in holding):
        placer.block(module.body, 1 + _newlines_in(module.header), "")
    return placer


class _TextLines:
    """Places statement lines of one small statement by finding their code in the source (module docstring): no
    newline of the statements before them is counted and no position is tracked while rendering."""

    def __init__(self, module: cst.Module, source: bytes, positions: dict[cst.CSTNode, CodeRange]) -> None:
        self.module = module
        self.source = source
        self.positions = positions
        # A known line's number and the offset where it starts (the last one placed): statements come in source
        # order, so the next one is looked up after it, and its line is counted from it.
        self.line = self.offset = 0
        self.start = self.end = 0  # where the top-level definition being placed starts and ends

    def place(self, top: cst.CSTNode, line: int, start: int, end: int, on_path: set[int]) -> None:
        """Every statement line on the path inside the top-level definition `top`, whose keyword starts line `line`
        at offset `start` of the source, before offset `end` (the next definition's)."""
        self.line, self.offset, self.start, self.end = line, start, start, end
        self._statement(top, "", on_path)

    def _statement(self, stmt: cst.CSTNode, indent: str, on_path: set[int]) -> None:
        for clause in _clauses(stmt):
            body = clause.body  # type: ignore[attr-defined]
            if type(body) is cst.IndentedBlock:
                inner = indent + (body.indent if body.indent is not None else self.module.default_indent)
                statements = body.body
                for i, child in enumerate(statements):
                    if id(child) not in on_path:
                        continue
                    if type(child) is cst.SimpleStatementLine:
                        self._line(statements, i, inner)
                    else:
                        self._statement(child, inner, on_path)

    def _line(self, statements: Sequence[cst.BaseStatement], i: int, indent: str) -> None:
        """Places ``statements[i]``, a statement line. A line whose text occurs more than once (the same dropout in
        two attention blocks) is looked up with the statement before it, then also the one after it."""
        line = statements[i]
        assert type(line) is cst.SimpleStatementLine
        if len(line.body) != 1 or isinstance(line.body[0].semicolon, cst.Semicolon):
            return  # a small statement's range ends before its semicolon: placed by counting
        small = line.body[0]
        state = self._state(indent)
        for empty in line.leading_lines:
            empty._codegen(state)
        leading = "".join(state.tokens)
        state.tokens.clear()
        state.add_indent_tokens()
        small._codegen(state)
        code = "".join(state.tokens)[len(indent) :]
        line.trailing_whitespace._codegen(state)
        core = "".join(state.tokens)
        # The line starts after the last one placed; with the statement before it, the text starts before that.
        encoding, hi = self.module.encoding, self.end
        prefix = ""
        hits, at = _line_starts(self.source, core.encode(encoding), self.offset + 1, hi)
        if hits > 1 and i > 0:
            prefix = self._render(statements[i - 1], indent) + leading
            hits, at = _line_starts(self.source, (prefix + core).encode(encoding), self.start, hi)
        if hits > 1 and i + 1 < len(statements):
            suffix = self._render(statements[i + 1], indent)
            lo = self.start if prefix else self.offset + 1
            hits, at = _line_starts(self.source, (prefix + core + suffix).encode(encoding), lo, hi)
        if hits != 1:
            return
        at += len(prefix.encode(encoding))
        first = self.line + self.source.count(b"\n", self.offset, at)
        self.line, self.offset = first, at  # statements come in source order: the next count starts here
        breaks = code.count("\n")
        end_column = len(code) - code.rfind("\n") - 1 if breaks else len(indent) + len(code)
        self.positions[line] = self.positions[small] = CodeRange(
            CodePosition(first, len(indent)), CodePosition(first + breaks, end_column)
        )

    def _state(self, indent: str) -> CodegenState:
        state = CodegenState(default_indent=self.module.default_indent, default_newline=self.module.default_newline)
        state.indent_tokens.append(indent)  # continuation lines and comment lines repeat the block's indentation
        return state

    def _render(self, stmt: cst.CSTNode, indent: str) -> str:
        """A statement's code where it stands in a block indented by `indent`, its leading lines included."""
        state = self._state(indent)
        stmt._codegen(state)
        return "".join(state.tokens)


def _line_starts(source: bytes, needle: bytes, lo: int, hi: int) -> tuple[int, int]:
    """How many occurrences of `needle` in `source[lo:hi]` start a line (0, 1 or 2: several), and the first one's
    offset."""
    hits, first = 0, -1
    at = source.find(needle, lo, hi)
    while at >= 0:
        if at == 0 or source[at - 1] == 10:  # b"\n"
            hits += 1
            if hits == 2:
                break
            first = at
        at = source.find(needle, at + 1, hi)
    return hits, first


# Every line starting a top-level `class` or `def` header, with the name: one scan of the source serves every top.
_TOP_HEADER = re.compile(rb"^(?:(class)|(?:async[ \t]+)?def)[ \t]+(\w+)", re.M)
_DECORATOR_LINE = re.compile(rb"^@", re.M)


class HeaderLines:
    """1-based lines of the top-level ``class Name``/``def Name`` headers of a source, found on first use."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.lines: Optional[dict[tuple[bool, bytes], list[tuple[int, int]]]] = None  # (line, offset) per header
        self.offsets: Optional[list[int]] = None
        self.starts: Optional[list[int]] = None  # offsets of every header line, in order

    def header(self, top: cst.CSTNode) -> Optional[tuple[int, int]]:
        """The line of ``class Name``/``def Name`` for a top-level class or function, when it occurs exactly once at
        the start of a line (a second hit, e.g. in a docstring, means the newline count decides), and the offset
        where that line starts."""
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
                self.lines.setdefault((hit.group(1) is not None, hit.group(2)), []).append((line, offset))
        hits = self.lines.get((isinstance(top, cst.ClassDef), top.name.value.encode()), [])
        return hits[0] if len(hits) == 1 else None

    def span(self, top: cst.CSTNode) -> Optional[tuple[int, int]]:
        """Offsets of the text of a top-level class or function without decorators: from its header line (found
        once, see :meth:`header`) to the next line that starts with a ``class``/``def`` header or a decorator (or
        the end). That line starts the next top-level statement or lies inside a string or brackets; text cut there
        does not parse, so a caller that parses the text knows which. None where the header is not found."""
        found = self.header(top)
        if found is None:
            return None
        assert self.lines is not None  # filled by `header`
        if self.starts is None:
            self.starts = sorted(offset for hits in self.lines.values() for _, offset in hits)
        after = bisect.bisect_right(self.starts, found[1])
        end = self.starts[after] if after < len(self.starts) else len(self.source)
        decorator = _DECORATOR_LINE.search(self.source, found[1], end)
        return found[1], decorator.start() if decorator is not None else end

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
