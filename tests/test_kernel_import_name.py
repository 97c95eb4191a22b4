"""The rewritten code reaches the kernels through ``import adopter_kernels``; where the module binds that name to
something else (a module-level variable or function, a parameter, a loop variable), the import is
``import adopter_kernels as adopter_kernels_`` (or the first such name the module does not use) and the rewritten
calls go through it, so the rewrite still runs; a later rewrite reuses that import."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from adopter_codemods.api import rewrite_source  # noqa: E402
from rewrite_checks import assert_equivalent_rewrite  # noqa: E402

_BLOCK = '''
import torch
from torch import nn
{before}

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, r{parameter}):
        q = self.q(x)
        k = self.k(x)
        v = self.v(x)
        y = self.dropout(q + k + v)
        return self.norm(y + r)


def make_example():
    return Block(4), (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
'''


@pytest.mark.parametrize(
    "before, parameter",
    [
        ("adopter_kernels = 'a name of this module'", ""),
        ("def adopter_kernels():\n    return None", ""),
        ("adopter_kernels_ = None\nfrom os import path as adopter_kernels", ""),
        ("", ", adopter_kernels=None"),
    ],
    ids=["variable", "function", "imported-name-and-first-alias-taken", "parameter"],
)
def test_a_name_taken_by_the_module_gets_an_alias(before: str, parameter: str) -> None:
    source = _BLOCK.format(before=before, parameter=parameter)
    result = assert_equivalent_rewrite(source, ["ADP005", "ADP009"], findings=2)
    alias = "adopter_kernels__" if "adopter_kernels_ =" in before else "adopter_kernels_"
    assert f"import adopter_kernels as {alias}\n" in result.code
    assert f"{alias}.FusedDropoutAddLayerNorm(" in result.code and f"{alias}.packed_qkv_linear(" in result.code
    assert "import adopter_kernels\n" not in result.code


def test_a_later_rewrite_reuses_the_alias() -> None:
    source = _BLOCK.format(before="adopter_kernels = None", parameter="")
    first = rewrite_source(source, ["ADP005"])
    second = rewrite_source(first.code, ["ADP005", "ADP009"])
    assert len(second.findings) == 1
    assert second.code.count("import adopter_kernels") == 1
    assert "adopter_kernels_.packed_qkv_linear(" in second.code


def test_a_free_name_keeps_the_plain_import() -> None:
    result = rewrite_source(_BLOCK.format(before="", parameter=""), ["ADP005"])
    assert "\nimport adopter_kernels\n" in result.code
    assert "adopter_kernels.FusedDropoutAddLayerNorm(" in result.code
