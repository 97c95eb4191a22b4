"""Core: a helper called as a bare statement (`self._ffn(x)`) whose inlined body ends in `return h` still reads `h`
there, so a rewrite must not delete the statement defining `h`."""

from __future__ import annotations

import libcst as cst

from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import find_all
from adopter_codemods.provider import build_module_structure

RULE = parse_rule(
    """\
rule Pair
code ADP909
init:
    torch.nn.Dropout(**$d) -> $drop;
    torch.nn.LayerNorm(**$n) -> $norm
forward:
    $drop($x) -> $h;
    $norm($h) -> $y
    =>
    kernels.fused($x, $drop, $norm) -> $y
"""
)

TEMPLATE = """\
from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(4)

    def _ffn(self, x):
        h = self.dropout(x)
        y = self.norm(h)
        return {returned}

    def forward(self, x):
        self._ffn(x)
        return x
"""


def _matches(returned: str) -> int:
    module = cst.parse_module(TEMPLATE.format(returned=returned))
    return len(find_all(build_module_structure(module), [RULE]))


def test_discarded_helper_result_still_reads_the_returned_variable() -> None:
    assert _matches("h") == 0


def test_returning_the_fused_output_is_fine() -> None:
    assert _matches("y") == 1
