"""The guards of ADP001-003/ADP011/ADP013/ADP014 read a top-level definition as a Python AST
(structural_guards._ParsedModule.definition). With the source bytes it is parsed from its own lines, cut from its
header to the next header or decorator line; otherwise, or wherever that cut is not certain, from code rendered from
the tree. Both must give the same AST."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional, Union

import libcst as cst
import pytest

from adopter_codemods import files
from adopter_codemods.structural_guards import _parsed

CLASS = "class N(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
HEAD = "import torch\nfrom torch import nn\n\n\n"


def _definitions(source: bytes, name: str, kind: type) -> tuple[Optional[ast.AST], Optional[ast.AST], ast.AST]:
    """(parsed from the source, what `definition` returns, parsed from rendered code) for the one definition."""
    module = cst.parse_module(source)
    node = next(s for s in module.body if isinstance(s, kind) and s.name.value == name)
    rendered = ast.parse(module.code_for_node(node)).body[0]
    with files.analysing(module, source):
        parsed = _parsed(module)
        return parsed._from_source(node), parsed.definition(name, kind), rendered


def _same(a: Optional[ast.AST], b: ast.AST) -> bool:
    return a is not None and ast.dump(a) == ast.dump(b)


def test_cut_from_the_source_between_headers() -> None:
    source = (
        HEAD + CLASS + "\n\nX = 1  # a statement after it\n\n\ndef helper(t):\n    return t\n\n\n"
        "@torch.jit.script  # a decorator of what follows ends the text too\ndef f(x):\n    return x\n"
    ).encode()
    cut, found, rendered = _definitions(source, "N", cst.ClassDef)
    assert _same(cut, rendered) and _same(found, rendered)
    cut, found, rendered = _definitions(source, "helper", cst.FunctionDef)
    assert _same(cut, rendered) and _same(found, rendered)


FALLS_BACK = {
    # the next header line lies in a string: the cut text ends inside it and does not parse
    "header text in a later string": CLASS + 'DOC = """\nclass Example:\n    pass\n"""\n',
    "header text in its own docstring": 'class N(nn.Module):\n    """\nclass Example:\n"""\n\n    def forward(self, x):\n'
    "        return x\n",
    # `class N` twice at the start of a line: which one is the definition is not known from the text
    "header repeated in a string before it": 'DOC = """\nclass N:\n"""\n\n\n' + CLASS,
    "decorated": "@torch.no_grad()\n" + CLASS,
    # a line starting with `@` inside its brackets (a matrix product continued): the cut text does not parse
    "matrix product at column 0": CLASS.replace("x * 2", "(x\n@ x)"),
    "form feed after the keyword": CLASS.replace("class N", "class\fN"),
    "continuation after the keyword": CLASS.replace("class N", "class \\\nN"),
}


@pytest.mark.parametrize("tail", FALLS_BACK.values(), ids=FALLS_BACK.keys())
def test_falls_back_to_rendering_where_the_cut_is_not_certain(tail: str) -> None:
    cut, found, rendered = _definitions((HEAD + tail).encode(), "N", cst.ClassDef)
    assert cut is None
    assert _same(found, rendered)


def test_other_encodings_and_unknown_source_are_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    source = ("# -*- coding: latin-1 -*-\n" + HEAD + "NAME = 'caf\xe9'\n\n\n" + CLASS).encode("latin-1")
    cut, found, rendered = _definitions(source, "N", cst.ClassDef)
    assert cut is None and _same(found, rendered)
    module = cst.parse_module(HEAD + CLASS)
    with files.analysing(module):  # no bytes
        parsed = _parsed(module)
        with monkeypatch.context() as patch:  # nor is the whole module rendered to find that out
            patch.setattr(files, "source_of", lambda module: pytest.fail("rendered the module"))
            assert parsed._from_source(module.body[-1]) is None  # type: ignore[arg-type]
        found = parsed.definition("N", cst.ClassDef)
    assert _same(found, ast.parse(CLASS).body[0])


def _real_files() -> list[Path]:
    import transformers

    models = Path(transformers.__file__).parent / "models"
    return [models / d / f"modeling_{d}.py" for d in ("bert", "t5", "llama", "gpt2", "bart", "whisper", "gpt_neox")]


@pytest.mark.parametrize("path", _real_files(), ids=lambda p: p.stem)
def test_every_definition_of_real_files_is_the_rendered_one(path: Path) -> None:
    source = path.read_bytes()
    module = cst.parse_module(source)
    definitions: list[Union[cst.ClassDef, cst.FunctionDef]] = [
        s for s in module.body if isinstance(s, (cst.ClassDef, cst.FunctionDef))
    ]
    with files.analysing(module, source):
        parsed = _parsed(module)
        for node in definitions:
            cut = parsed._from_source(node)
            if node.decorators:
                assert cut is None
            else:  # each one is cut from the source here, and is what rendering gives
                assert _same(cut, ast.parse(module.code_for_node(node)).body[0]), node.name.value
