"""Core: `$fn:Type(...)` in a forward pattern binds the callee as written, and a `**$rest` positional argument that
the target call would move to another position is refused."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.dsl import Rule, parse_rule
from adopter_codemods.engine import find_all, rewrite_module
from adopter_codemods.provider import build_module_structure

RULE = parse_rule(
    """\
rule FuseLinearAct
code ADP904
init:
    torch.nn.Linear(**$l) -> $lin
forward:
    $lin($x) -> $h;
    $fn:(torch.nn.functional.gelu | torch.nn.functional.relu)($h, **$kw) -> $y
    =>
    kernels.fused($x, $lin, $fn, **$kw) -> $y
"""
)

VERBATIM = parse_rule(
    """\
rule Softmax
code ADP905
forward:
    torch.nn.functional.softmax(**$args) -> $y
    =>
    kernels.softmax(**$args) -> $y
"""
)

TEMPLATE = """\
import torch
from torch import nn
import torch.nn.functional as F
from torch.nn.functional import gelu as g


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return {call}
"""


def _rewrite(call: str, rule: Rule = RULE) -> str:
    return rewrite_module(cst.parse_module(TEMPLATE.format(call=call)), [rule]).module.code


@pytest.mark.parametrize(
    ("call", "fused"),
    [
        ("F.gelu(self.fc(x))", "kernels.fused(x, self.fc, F.gelu)"),
        ('nn.functional.gelu(self.fc(x), approximate="tanh")', 'kernels.fused(x, self.fc, nn.functional.gelu, approximate="tanh")'),
        ("g(self.fc(x))", "kernels.fused(x, self.fc, g)"),
        ("torch.nn.functional.relu(self.fc(x), inplace=True)", "kernels.fused(x, self.fc, torch.nn.functional.relu, inplace=True)"),
    ],
)
def test_callee_is_bound_as_written(call: str, fused: str) -> None:
    assert f"return {fused}\n" in _rewrite(call)


def test_positional_rest_argument_that_would_move_is_refused() -> None:
    source = TEMPLATE.format(call="F.relu(self.fc(x), True)")
    module = cst.parse_module(source)
    assert find_all(build_module_structure(module), [RULE]) == []
    assert rewrite_module(module, [RULE]).module.code == source


def test_positional_rest_arguments_at_their_own_positions_are_kept() -> None:
    assert "return kernels.softmax(x, -1, 3, torch.float32)\n" in _rewrite("F.softmax(x, -1, 3, torch.float32)", VERBATIM)
