"""Core: a deleted statement runs later, at the fused call, so what it reads must not be mutated in between.

Calls between the two statements may change an operand in place without rebinding it (``xs.clear()``, an
in-place layer, ``nn.init.zeros_(x)``, ``F.relu(x, True)``); rewriting would then feed the fused call the changed
value. Calls known to leave what they are handed as it is do not count (`flow.checks.may_change_arguments`): an
operator, a layer of a computing type, a ``torch``/``math`` function not named ``*_`` and not passed ``out=`` or
``inplace=``, a computing tensor method (``view``, ``to``).
"""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.dsl import parse_rule
from adopter_codemods.matcher import find_matches
from adopter_codemods.provider import build_module_structure
from rewrite_checks import assert_equivalent_rewrite

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
        self.norm = nn.LayerNorm(3)
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
        "w = torch.nn.functional.relu(x, True)",  # `inplace` passed positionally
        "w = torch.nn.functional.dropout(x, 0.1, True, True)",
        "w = torch.nn.functional.relu(x, inplace=flag)",
        "w = torch.add(x, 1, out=x)",
        "w = torch.relu_(x)",
        "w = helper(x)",  # a function of unknown effect
        "w = x.view(-1).mul_(2)",  # an in-place tensor method on a view
    ],
)
def test_moved_operand_touched_by_a_call_is_refused(between: str) -> None:
    body = f"        y = self.conv(torch.cat([x, *xs], dim=1))\n        {between}\n        z = self.bn(y)\n        return z\n"
    assert _matches(body) == 0


@pytest.mark.parametrize(
    "between",
    [
        "n = len(xs)",
        "w = x * 2",
        "print('unrelated')",
        "w = torch.matmul(x, x)",  # torch functions leave their arguments as they are
        "w = torch.einsum('bchw->bhwc', x)",
        "w = torch.nn.functional.dropout(x, p=0.1, training=self.training)",
        "w = torch.nn.functional.gelu(x)",
        "w = self.norm(x)",  # a layer of a computing type
        "w = x.view(-1).to(x.dtype)",  # computing tensor methods
    ],
)
def test_statement_without_calls_on_the_operands_is_fine(between: str) -> None:
    body = f"        y = self.conv(torch.cat([x, *xs], dim=1))\n        {between}\n        z = self.bn(y)\n        return z\n"
    assert _matches(body) == 1


def test_call_before_the_fused_call_in_its_statement_is_refused() -> None:
    body = "        y = self.conv(torch.cat([x, *xs], dim=1))\n        z = xs.pop() + self.bn(y)\n        return z\n"
    assert _matches(body) == 0


def test_call_after_the_fused_call_in_its_statement_is_fine() -> None:
    body = "        y = self.conv(torch.cat([x, *xs], dim=1))\n        z = torch.relu(self.bn(y)).flatten(1) + xs.pop()\n        return z\n"
    assert _matches(body) == 1


def test_calls_leaving_the_input_as_it_is_keep_the_rewrite_equivalent() -> None:
    """ADP007 moves the conv's statement to the BatchNorm's: a LayerNorm, `torch.matmul` and a dropout read the
    input in between without changing it (before, any call there refused the site)."""
    source = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.bn = nn.BatchNorm2d(3)
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        y = self.conv(x)
        w = self.norm(x) + torch.matmul(x, x.transpose(-1, -2))
        w = w + torch.nn.functional.dropout(x, p=0.5, training=self.training)
        z = self.bn(y)
        return z + w


def make_example():
    return Block(), (torch.randn(2, 3, 4, 4),), {}
"""
    result = assert_equivalent_rewrite(source, ["ADP007"])
    assert "conv_bn2d(x, self.conv, self.bn)" in result.code
