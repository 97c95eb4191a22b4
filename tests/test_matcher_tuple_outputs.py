"""Core: a tuple target (`q, k, v = fused(...)`) names its outputs after the statements that assigned them when
every output is the whole value of a `name = node` statement; otherwise (plan "hoist") the outputs are bound to
fresh names before the first node and the wrapping code stays as written around them."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import rewrite_module

RULE = parse_rule(
    """\
rule Pack
code ADP906
init:
    torch.nn.Linear(**$qa) -> $q;
    torch.nn.Linear(**$ka) -> $k
forward:
    $q($x) -> $qo;
    $k($x) -> $ko
    =>
    kernels.packed($x, $q, $k) -> ($qo, $ko)
"""
)

TEMPLATE = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(2, 2)
        self.k = nn.Linear(2, 2)

    def _wrap(self, t):
        return t.float()

    def forward(self, x):
        query = self.q(x)
        {second}
        return query, key
"""


def test_plain_assignments_become_one_tuple_assignment() -> None:
    module = cst.parse_module(TEMPLATE.format(second="key = self.k(x)"))
    code = rewrite_module(module, [RULE]).module.code
    assert "        query, key = kernels.packed(x, self.q, self.k)\n        return query, key\n" in code


@pytest.mark.parametrize(
    "second",
    [
        "key = self.k(x).view(2, -1)",
        "key = self.k(x) * 2",
        "key = self._wrap(self.k(x))",
        "key: torch.Tensor = self.k(x)",
        "key = other = self.k(x)",
    ],
)
def test_output_wrapped_in_more_code_keeps_that_code(second: str) -> None:
    source = TEMPLATE.format(second=second)
    code = rewrite_module(cst.parse_module(source), [RULE]).module.code
    kept = second.replace("self.k(x)", "k_out")
    assert f"        query, k_out = kernels.packed(x, self.q, self.k)\n        {kept}\n        return query, key\n" in code
