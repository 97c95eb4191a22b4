"""Core: one rule file holding several variants of its pattern (`variant "label"` blocks sharing the header)."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.dsl import RuleSyntaxError, parse_rule
from adopter_codemods.engine import find_all, rewrite_module
from adopter_codemods.provider import build_module_structure

RULE = """\
rule FuseAct
code ADP901
summary "linear then activation"

variant "activation module"
init:
    torch.nn.Linear(**$l) -> $lin;
    torch.nn.ReLU(**$r) -> $act
forward:
    $lin($x) -> $h;
    $act($h) -> $y
    =>
    kernels.fused($x, $lin, $act) -> $y

variant "any layer after a linear"
init:
    torch.nn.Linear(**$l) -> $lin;
    (torch.nn.ReLU | torch.nn.Tanh)(**$r) -> $act
forward:
    $lin($x) -> $h;
    $act($h) -> $y
    =>
    kernels.other($x, $lin, $act) -> $y
"""

SOURCE = """\
from torch import nn


class WithRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class WithTanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x))
"""


def test_variants_share_the_header() -> None:
    rule = parse_rule(RULE)
    assert rule.variant == "activation module"
    assert [v.variant for v in rule.alternatives] == ["any layer after a linear"]
    other = rule.alternatives[0]
    assert (other.name, other.code, other.summary) == (rule.name, rule.code, rule.summary)
    assert other.alternatives == ()


def test_each_site_is_matched_once_by_the_first_variant_that_fits() -> None:
    rule = parse_rule(RULE)
    module = cst.parse_module(SOURCE)
    matches = find_all(build_module_structure(module), [rule])
    assert sorted((f.match.cls.name, f.match.rule.variant) for f in matches) == [
        ("WithRelu", "activation module"),
        ("WithTanh", "any layer after a linear"),
    ]
    code = rewrite_module(module, [rule]).module.code
    assert "return kernels.fused(x, self.fc, self.act)" in code
    assert "return kernels.other(x, self.fc, self.act)" in code


def test_a_rule_without_variants_has_no_alternatives() -> None:
    rule = parse_rule("rule R\ncode ADP902\nforward:\n    torch.relu($x) -> $y\n    =>\n    k.relu($x) -> $y\n")
    assert rule.variant == "" and rule.alternatives == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "rule R\ncode ADP903\nforward:\n torch.relu($x) -> $y => k($x) -> $y\n"
            'variant "b"\nforward:\n torch.tanh($x) -> $y => k($x) -> $y\n',
            "sections before the first 'variant' line",
        ),
        ('rule R\ncode ADP903\nvariant "a"\nvariant "b"\nforward:\n torch.relu($x) -> $y => k($x) -> $y\n', "in variant 'a'"),
        ("rule R\ncode ADP903\nvariant b\n", "expected a quoted label after 'variant'"),
    ],
)
def test_malformed_variants_are_reported(text: str, message: str) -> None:
    with pytest.raises(RuleSyntaxError, match=message):
        parse_rule(text)
