"""Core: a statement whose value only feeds an argument the target does not pass goes with the match (feeders.py),
when every call it makes is free of effects; otherwise it stays, and the match is refused if it reads a hidden
value."""

from __future__ import annotations

import libcst as cst

from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import rewrite_module

# The target drops `$other`: what only computed it is dead once the match is rewritten.
RULE = parse_rule(
    """\
rule DropOther
code ADP901
forward:
    torch.add($x, $other) -> $y;
    torch.relu($y) -> $z
    =>
    kernels.relu_of($x) -> $z
"""
)

TEMPLATE = """\
import torch
from torch import nn


def noisy(t):
    print("called")
    return t


class Block(nn.Module):
    def forward(self, x):
        other = {other}
        y = torch.add(x, other)
        z = torch.relu(y)
        return z
"""


def _rewrite(other: str) -> str:
    outcome = rewrite_module(cst.parse_module(TEMPLATE.format(other=other)), [RULE])
    return outcome.module.code if outcome.applied else ""


def test_an_effect_free_feeder_goes_with_the_match() -> None:
    code = _rewrite("torch.zeros_like(x)")
    assert "z = kernels.relu_of(x)" in code
    assert "other =" not in code


def test_a_feeder_of_torch_calls_and_operators_goes_too() -> None:
    code = _rewrite("-torch.finfo(x.dtype).max")
    assert "other =" not in code and "z = kernels.relu_of(x)" in code


def test_a_call_the_walk_cannot_see_into_keeps_its_statement() -> None:
    code = _rewrite("noisy(x)")  # may print: it must still run
    assert "other = noisy(x)" in code and "z = kernels.relu_of(x)" in code


def test_a_value_read_elsewhere_keeps_its_statement() -> None:
    source = TEMPLATE.format(other="torch.zeros_like(x)").replace("return z", "return z, other")
    code = rewrite_module(cst.parse_module(source), [RULE]).module.code
    assert "other = torch.zeros_like(x)" in code
