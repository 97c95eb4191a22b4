"""Core: the blank line that separated a deleted statement from the lines before it stays, once."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import rewrite_module

RULE = parse_rule(
    """\
rule FusePair
code ADP900
init:
    torch.nn.Linear(**$a) -> $first;
    torch.nn.Linear(**$b) -> $second
forward:
    $first($x) -> $y;
    $second($y) -> $z
    =>
    kernels.pair($x, $first, $second) -> $z
"""
)

TEMPLATE = """\
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)

    def forward(self, x):
        x = x + 1
{body}        return z
"""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # blank line before the deleted statement: kept before the fused call
        ("\n        y = self.a(x)\n        z = self.b(y)\n", "x = x + 1\n\n        z = kernels"),
        # blank lines before both: one stays
        ("\n        y = self.a(x)\n\n        z = self.b(y)\n", "x = x + 1\n\n        z = kernels"),
        # a comment in between keeps its place after the blank line
        ("\n        # project\n        y = self.a(x)\n        z = self.b(y)\n", "x = x + 1\n\n        # project\n        z = kernels"),
        # a comment right above the deleted statement stays right above the fused call
        ("\n        # project\n        y = self.a(x)\n\n        z = self.b(y)\n", "x = x + 1\n\n        # project\n        z = kernels"),
        # a comment set apart by a blank line stays apart
        ("\n        # project\n\n        y = self.a(x)\n\n        z = self.b(y)\n", "x = x + 1\n\n        # project\n\n        z = kernels"),
        # no blank line: none appears
        ("        y = self.a(x)\n        z = self.b(y)\n", "x = x + 1\n        z = kernels"),
    ],
)
def test_separating_blank_line_survives(body: str, expected: str) -> None:
    outcome = rewrite_module(cst.parse_module(TEMPLATE.format(body=body)), [RULE])
    assert outcome.applied
    assert expected in outcome.module.code
    assert "\n\n\n" not in outcome.module.code.split("def forward")[1]
