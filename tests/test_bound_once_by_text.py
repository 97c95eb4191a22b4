"""The text test that spares parsing a whole file for ADP001-003/ADP011/ADP013's "bound once" check
(structural_guards._bound_once_by_text): whenever it says True, the AST walk says True too; every way of binding,
deleting or patching a name again makes it say False (the AST then decides)."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods import files
from adopter_codemods.structural_guards import _bound_once_by_text, _parsed

HEAD = "import torch\nfrom torch import nn\n\n\nclass N(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"

SHOWN = {
    "calls": "class A(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.n = N()\n        self.m = N (1)\n",
    "comment": "# Copied from models.N with N->M\nx = N()\n",
    "module path": "from .N import thing\ny = pkg.N()\nz = pkg . N\n",
    "quoted": '__all__ = ["N", \'N\']\n',
    "docstring line": 'def f():\n    """\n    # N is built like this\n    """\n    return N()\n',
}

NOT_SHOWN = {
    "defined twice": "class N(nn.Module):\n    pass\n",
    "method of that name": "class B:\n    def N(self):\n        pass\n",
    "assigned": "N = None\n",
    "annotated": "N: type = object\n",
    "augmented": "N += 1\n",
    "deleted": "del N\n",
    "patched": "N.forward = lambda self, x: x\n",
    "setattr": "setattr(N, 'forward', None)\n",
    "imported": "from elsewhere import N\n",
    "imported as": "import elsewhere as N\n",
    "star import": "from elsewhere import *\n",
    "loop target": "for N in range(3):\n    pass\n",
    "with target": "with open('f') as N:\n    pass\n",
    "except target": "try:\n    pass\nexcept Exception as N:\n    pass\n",
    "walrus": "if (N := 3):\n    pass\n",
    "global": "def g():\n    global N\n    N = 1\n",
    "parameter": "def g(x, N):\n    return x\n",
    "keyword argument": "torch.ones(N=1)\n",
    "decorator": "@N\ndef g():\n    pass\n",
    "continuation": "class \\\nN(nn.Module):\n    pass\n",
    "form feed": "class\fN(nn.Module):\n    pass\n",
    "other spelling": "class \uff2e(nn.Module):\n    pass\n",  # fullwidth N: the same identifier after NFKC
    "tuple target": "(a,\n N) = (1, 2)\n",
}


def _exact(source: str) -> bool:
    module = cst.parse_module(source)
    with files.analysing(module):  # no bytes: the AST walk, not the text test
        return _parsed(module).bound_once("N")


@pytest.mark.parametrize("tail", SHOWN.values(), ids=SHOWN.keys())
def test_shown_by_the_text(tail: str) -> None:
    source = HEAD + tail
    assert _bound_once_by_text(source.encode(), "utf-8", "N")
    assert _exact(source)


@pytest.mark.parametrize("tail", NOT_SHOWN.values(), ids=NOT_SHOWN.keys())
def test_left_to_the_ast(tail: str) -> None:
    source = HEAD + tail
    assert not _bound_once_by_text(source.encode(), "utf-8", "N")


def test_non_utf8_file_with_other_bytes_is_left_to_the_ast() -> None:
    source = ("# -*- coding: latin-1 -*-\n" + HEAD + "# caf\xe9\nx = N()\n").encode("latin-1")
    assert not _bound_once_by_text(source, "latin-1", "N")
    assert _bound_once_by_text(source.replace(b"\xe9", b"e"), "latin-1", "N")
