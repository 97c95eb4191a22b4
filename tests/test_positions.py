"""Positions computed inside a few top-level statements equal LibCST's PositionProvider on the whole module."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from adopter_codemods import cstwalk
from adopter_codemods.positions import count_newlines, positions_within
from test_cstwalk import EVERY_SYNTAX

ODD = (
    "# header comment\n\n"
    "x = (1,\n     2)  # trailing\n"
    "s = '''multi\nline'''; t = f'''{x}\nz'''\n"
    "y = 1 + \\\n    2\n\n\n"
    "class A:\n\n    # inside\n    def f(self):  return (\n        1\n    )\n\n# footer\n"
)


def _assert_same(module: cst.Module) -> None:
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    part = positions_within(module, module.body)
    assert part, "no positions"
    for node, rng in part.items():
        assert full[node] == rng, (type(node).__name__, full[node], rng)
    last = positions_within(module, module.body[-1:])
    assert all(full[node] == rng for node, rng in last.items())
    # Only the members holding wanted statements are rendered; the wanted ones still get their exact positions.
    statements = [n for n in cstwalk.walk(module) if isinstance(n, (cst.BaseSmallStatement, cst.BaseStatement))]
    wanted = statements[1::7] + statements[-1:]
    some = positions_within(module, module.body, wanted)
    assert all(some[node] == full[node] for node in wanted)


@pytest.mark.parametrize("text", [EVERY_SYNTAX, ODD, ODD.replace("\n", "\r\n"), "\ufeff" + ODD], ids=["syntax", "odd", "crlf", "bom"])
def test_same_as_position_provider(text: str) -> None:
    module = cst.parse_module(text)
    _assert_same(module)
    assert count_newlines(module) == module.code.count("\n")


def _corpus_sample() -> list[Path]:
    transformers = pytest.importorskip("transformers")
    return sorted(Path(transformers.__file__).parent.glob("models/*/modeling_*.py"))[3::40]


@pytest.mark.parametrize("path", _corpus_sample(), ids=lambda p: p.parent.name)
def test_transformers_sample(path: Path) -> None:
    _assert_same(cst.parse_module(path.read_bytes()))
