"""Core: a deleted statement runs later, at the fused call, so what it reads must not be mutated in between.

Calls between the two statements may change an operand in place without rebinding it (``xs.clear()``, an
in-place layer, ``nn.init.zeros_(x)``); rewriting would then feed the fused call the changed value.
"""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.dsl import parse_rule
from adopter_codemods.matcher import find_matches
from adopter_codemods.provider import build_module_structure

RULE = """\
rule FusePair
code ADP900
init:
    torch.nn.Conv2d(**$c) -> $conv;
    torch.nn.BatchNorm2d(**$b) -> $bn
forward:
    $conv($x) -> $y;
    $bn($y) -> $z
    =>
    kernels.conv_bn($x, $conv, $bn) -> $z
"""

HEADER = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(3, 3, 1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x, xs):
"""


def _matches(body: str) -> int:
    structure = build_module_structure(cst.parse_module(HEADER + body))
    (cls,) = structure.classes
    return len(find_matches(parse_rule(RULE), cls))


@pytest.mark.parametrize(
    "between",
    [
        "xs.clear()",  # mutating method without a trailing underscore
        "r = self.act(x)",  # in-place layer
        "torch.nn.init.zeros_(x)",  # function mutating its argument
        "for t in xs:\n            t.mul_(0)",  # in-place call inside a compound statement
    ],
)
def test_moved_operand_touched_by_a_call_is_refused(between: str) -> None:
    body = f"        y = self.conv(torch.cat([x, *xs], dim=1))\n        {between}\n        z = self.bn(y)\n        return z\n"
    assert _matches(body) == 0


@pytest.mark.parametrize("between", ["n = len(xs)", "w = x * 2", "print('unrelated')"])
def test_statement_without_calls_on_the_operands_is_fine(between: str) -> None:
    body = f"        y = self.conv(torch.cat([x, *xs], dim=1))\n        {between}\n        z = self.bn(y)\n        return z\n"
    assert _matches(body) == 1


def test_call_before_the_fused_call_in_its_statement_is_refused() -> None:
    body = "        y = self.conv(torch.cat([x, *xs], dim=1))\n        z = xs.pop() + self.bn(y)\n        return z\n"
    assert _matches(body) == 0


def test_call_after_the_fused_call_in_its_statement_is_fine() -> None:
    body = "        y = self.conv(torch.cat([x, *xs], dim=1))\n        z = torch.relu(self.bn(y)).flatten(1) + xs.pop()\n        return z\n"
    assert _matches(body) == 1
