"""The CST rewriter: edits stay local, comments and formatting elsewhere survive, the import is added once, and a
second run changes nothing."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.api import rewrite_source
from adopter_codemods.rewriter import add_import

HEADER = "import torch\nfrom torch import nn\n"

BLOCK = '''

class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.1)  # drop
        # the norm
        self.LayerNorm = nn.LayerNorm(8, eps=1e-12)  # norm

    def forward(self, x, r):
        # before dropout
        h = self.dropout(x)
        n = 1; h = self.LayerNorm(h   +   r)  # keep me
        return h * n
'''


def _rewrite(source: str) -> str:
    result = rewrite_source(source, ["ADP005"])
    assert result.findings, "expected a rewrite"
    return result.code


def test_edits_only_the_matched_statements_and_keeps_comments() -> None:
    odd = "X   =  [1,2,\n   3]  # odd formatting\n\n\ndef   f( a ,b ) :\n\treturn a+b\n"
    source = HEADER + odd + BLOCK
    code = _rewrite(source)
    assert code == HEADER + "import adopter_kernels\n" + odd + '''

class A(nn.Module):
    def __init__(self):
        super().__init__()
        # the norm
        self.LayerNorm = adopter_kernels.FusedDropoutAddLayerNorm(8, eps=1e-12, dropout=0.1)  # norm

    def forward(self, x, r):
        # before dropout
        n = 1; h = self.LayerNorm(x, r)  # keep me
        return h * n
'''


def test_second_run_changes_nothing() -> None:
    code = _rewrite(HEADER + BLOCK)
    again = rewrite_source(code)
    assert again.code == code and not again.findings


def test_import_added_once_for_several_matches_and_not_when_present() -> None:
    two = HEADER + BLOCK + BLOCK.replace("class A", "class B")
    code = _rewrite(two)
    assert code.count("import adopter_kernels\n") == 1
    present = "import adopter_kernels\n" + HEADER + BLOCK
    code = _rewrite(present)
    assert code.count("import adopter_kernels") == 1 and code.startswith("import adopter_kernels\nimport torch\n")


def test_import_goes_after_docstring_future_and_optional_import_blocks() -> None:
    prefix = '"""Doc."""\nfrom __future__ import annotations\n\n' + HEADER
    optional = "\ntry:\n    import apex  # optional\nexcept ImportError:\n    apex = None\n"
    code = _rewrite(prefix + optional + BLOCK)
    assert code.startswith(prefix + optional + "import adopter_kernels\n\n\nclass A")


def test_conditional_block_with_functions_is_not_an_import_block() -> None:
    # Regression: the import-section scan raised StopIteration inside a LibCST visit (RuntimeError under PEP 479)
    # on `if ...: import x / else: def fallback(): raise ...`, as in transformers' modeling_dinat.py.
    optional = (
        "\nif torch.cuda.is_available():\n    import math\nelse:\n\n"
        "    def natten(*args, **kwargs):\n        raise RuntimeError()\n"
    )
    code = _rewrite(HEADER + optional + BLOCK)
    assert code.startswith(HEADER + "import adopter_kernels\n" + optional)


def test_nested_form_keeps_the_surrounding_call_layout() -> None:
    source = HEADER + '''

class B(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.Dropout(p=0.2)
        self.ln = nn.LayerNorm(8)

    def forward(self, x, r):
        out = torch.relu(
            self.ln(self.d(x) + r)
        )  # wrapped
        return out
'''
    code = _rewrite(source)
    assert "        out = torch.relu(\n            self.ln(x, r)\n        )  # wrapped\n" in code
    assert "self.ln = adopter_kernels.FusedDropoutAddLayerNorm(8, dropout=0.2)\n" in code


def test_comment_of_a_deleted_last_statement_moves_to_the_block_footer() -> None:
    source = HEADER + '''

class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        # dropout kept last on purpose
        self.drop = nn.Dropout(0.0)

    def forward(self, x, r):
        return self.ln(self.drop(x) + r)
'''
    code = _rewrite(source)
    assert "        self.ln = adopter_kernels.FusedDropoutAddLayerNorm(8, dropout=0.0)\n        # dropout kept last on purpose\n" in code
    cst.parse_module(code)


def test_crlf_tabs_and_bom_round_trip() -> None:
    body = BLOCK.replace("    ", "\t")
    source = "\ufeff" + (HEADER + body).replace("\n", "\r\n")
    code = _rewrite(source)
    assert code.startswith("\ufeffimport torch\r\n")
    assert "\n" not in code.replace("\r\n", "")
    assert "\t\tself.LayerNorm = adopter_kernels.FusedDropoutAddLayerNorm(8, eps=1e-12, dropout=0.1)  # norm\r\n" in code


@pytest.mark.parametrize(
    "module,expected",
    [
        ('"""Only a docstring."""\n', '"""Only a docstring."""\nimport adopter_kernels\n'),
        ("import adopter_kernels as ak\n", "import adopter_kernels as ak\nimport adopter_kernels\n"),
        ("import adopter_kernels\nx = 1\n", "import adopter_kernels\nx = 1\n"),
    ],
)
def test_add_import(module: str, expected: str) -> None:
    assert add_import(cst.parse_module(module), "adopter_kernels").code == expected
