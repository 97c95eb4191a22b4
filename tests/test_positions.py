"""Positions computed inside a few top-level statements equal LibCST's PositionProvider on the whole module."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from adopter_codemods import cstwalk
from adopter_codemods.positions import _Placer, count_newlines, definition_lines, statement_positions
from test_cstwalk import EVERY_SYNTAX

ODD = (
    "# header comment\n\n"
    "x = (1,\n     2)  # trailing\n"
    "s = '''multi\nline'''; t = f'''{x}\nz'''\n"
    "y = 1 + \\\n    2\n\n\n"
    "class A:\n\n    # inside\n    def f(self):  return (\n        1\n    )\n\n# footer\n"
)

# Methods found by their header line inside their class: a copy of a header in a docstring, a module-level `if`
# and a later class with the same method names at the same indentation, decorated, async and nested definitions.
METHODS = (
    "class A:\n"
    '    """Example:\n\n    def forward(self, x):\n        return x\n    """\n\n'
    "    def __init__(self):\n        self.x = 1\n\n"
    "    @staticmethod\n    # between\n    def make():\n        return A()\n\n"
    "    async def run(self):\n        return 1\n\n"
    "    class Inner:\n        def forward(self):\n            return 2\n\n"
    "    def forward(self, x):\n        y = x\n        return y\n\n\n"
    "if True:\n    def forward(self, x):\n        return x\n\n\n"
    "class B:\n    def __init__(self):\n        self.y = 2\n\n    def helper(self):\n        pass\n\n"
    "    def forward(self, x):\n        return x\n"
)


def _statements(module: cst.Module) -> list[cst.CSTNode]:
    return [n for n in cstwalk.walk(module) if isinstance(n, (cst.BaseSmallStatement, cst.BaseStatement))]


def _left_out(module: cst.Module) -> set[int]:
    """Statements the fast path leaves out by design (the engine then falls back to PositionProvider); an `elif`
    is a clause, not a statement of a block, and never reported."""
    out: set[int] = set()
    for node in cstwalk.walk(module):
        if isinstance(node, cst.If) and isinstance(node.orelse, cst.If):
            out.add(id(node.orelse))
        if isinstance(node, (cst.SimpleStatementSuite, cst.Match)):
            out |= {id(n) for n in cstwalk.walk(node) if n is not node}
    return out


def _assert_same(module: cst.Module, source: bytes) -> None:
    """Without the source, every top-level statement is placed by counting; with it, classes and functions are
    placed by their header line."""
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    statements = _statements(module)
    skipped = _left_out(module)
    for given in (None, source):
        every = statement_positions(module, module.body, statements, given)
        missing = [s for s in statements if s not in every and id(s) not in skipped]
        assert not missing, [type(s).__name__ for s in missing]
        for node, rng in every.items():
            assert full[node] == rng, (type(node).__name__, module.code_for_node(node)[:60], full[node], rng)
        # Classes and functions (decorated, async, nested) by their keyword line alone, nothing rendered.
        definitions = [s for s in statements if isinstance(s, (cst.ClassDef, cst.FunctionDef))]
        lines = definition_lines(module, module.body, definitions, given)
        assert [d for d in definitions if d not in lines and id(d) not in skipped] == []
        assert {d: full[d].start.line for d in lines} == lines
        # One at a time: siblings after the wanted statement are not counted, so each placement stands alone.
        for stmt in statements[::9] + statements[-1:]:
            one = statement_positions(module, module.body, [stmt], given)
            assert id(stmt) in skipped or one[stmt] == full[stmt], module.code_for_node(stmt)[:60]


# Statement lines whose text occurs more than once in their class: the same two lines in two blocks (told apart by
# the line before them, or only by the line after), a copy in a docstring, a semicolon line, continuation lines.
REPEATED = (
    "class Layer:\n"
    '    """Use as:\n\n        h = self.drop(h)\n    """\n\n'
    "    def forward(self, x, h):\n"
    "        h = self.attn(h)\n        h = self.drop(h)\n        h = x + h\n"
    "        h = self.cross(h)\n        h = self.drop(h)\n        h = x + h\n"
    "        if x:\n            h = self.drop(h)\n            a = 1\n"
    "        if x:\n            h = self.drop(h)\n            a = 2\n"
    "        y = 1; z = (h +\n             y)  # trailing\n"
    "        return self.out(\n            h,\n        )\n"
)


@pytest.mark.parametrize(
    "text",
    [
        EVERY_SYNTAX, ODD, ODD.replace("\n", "\r\n"), "\ufeff" + ODD, METHODS, METHODS.replace("\n", "\r\n"), REPEATED,
        "# -*- coding: latin-1 -*-\n" + REPEATED, REPEATED.replace("\n", "\r"),
    ],
    ids=["syntax", "odd", "crlf", "bom", "methods", "methods-crlf", "repeated", "latin-1", "cr"],
)
def test_same_as_position_provider(text: str) -> None:
    module = cst.parse_module(text)
    _assert_same(module, text.encode("utf-8"))
    if "\r" not in text.replace("\r\n", ""):  # LibCST drops the last lone carriage return from `module.code`
        assert count_newlines(module) == module.code.count("\n")


def test_statement_lines_are_found_by_their_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Statement lines of one small statement are looked up in the source, however often their text repeats in the
    class: nothing is counted or rendered with positions. Others (the semicolon line) still are."""
    module = cst.parse_module(REPEATED)
    lines = [n for n in cstwalk.walk(module) if isinstance(n, cst.SimpleStatementLine)]
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    rendered: list[cst.CSTNode] = []
    monkeypatch.setattr(_Placer, "render", lambda self, stmt, first, indent: rendered.append(stmt))
    found = statement_positions(module, module.body, lines, REPEATED.encode())
    semicolon = [line for line in lines if len(line.body) > 1]
    assert rendered == semicolon
    placed = [node for line in lines if line not in semicolon for node in (line, line.body[0])]
    assert {node: full[node] for node in placed} == {node: found[node] for node in placed}


def _corpus_sample() -> list[Path]:
    transformers = pytest.importorskip("transformers")
    return sorted(Path(transformers.__file__).parent.glob("models/*/modeling_*.py"))[3::40]


@pytest.mark.parametrize("path", _corpus_sample(), ids=lambda p: p.parent.name)
def test_transformers_sample(path: Path) -> None:
    data = path.read_bytes()
    module = cst.parse_module(data)
    _assert_same(module, data)
