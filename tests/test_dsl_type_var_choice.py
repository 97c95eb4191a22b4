"""Core: a callee-binding variable over a type choice, ``$cls:(A | B)(...)`` (instantiation rules for a class and
its copies)."""

from __future__ import annotations

from pathlib import Path

from adopter_codemods.api import rewrite_source
from adopter_codemods.dsl import CallNode, Var, parse_rule

RULE = """\
rule WrapAttention
code ADP900
init:
    $cls:(*.AAttention |
          *.BAttention)(**$args) -> $attn
    =>
    kernels.wrap($cls)(**$args) -> $attn
"""

SOURCE = """\
from torch import nn
from models import AAttention, BAttention as BA, CAttention


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.a = AAttention(config, layer_idx=0)
        self.b = BA(config)
        self.c = CAttention(config)
"""


def test_type_var_binds_over_a_choice() -> None:
    rule = parse_rule(RULE)
    assert rule.init is not None
    node = rule.init.source[0]
    assert isinstance(node, CallNode)
    assert node.types == ("*.AAttention", "*.BAttention")
    assert node.type_var == Var("cls")


def test_each_choice_is_rewritten_with_its_own_callee(tmp_path: Path) -> None:
    rule_file = tmp_path / "wrap.adopter"
    rule_file.write_text(RULE, encoding="utf-8")
    result = rewrite_source(SOURCE, [], rule_files=[rule_file])
    assert [f.code for f in result.findings] == ["ADP900", "ADP900"]
    assert "self.a = kernels.wrap(AAttention)(config, layer_idx=0)" in result.code
    assert "self.b = kernels.wrap(BA)(config)" in result.code
    assert "self.c = CAttention(config)" in result.code
