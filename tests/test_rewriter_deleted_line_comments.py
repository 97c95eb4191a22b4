"""Core: comments above a statement the rewrite deletes move to the next statement instead of vanishing.

libcst drops a statement line left without small statements (its comments with it), so the rewriter keeps a
marked placeholder until the enclosing block moves the comments on.
"""

from __future__ import annotations

import libcst as cst

from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import rewrite_module

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

SOURCE = """\
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        # expand phase
        y = self.conv(x)  # trailing comment goes with the statement
        z = self.bn(y)
        return z
"""


def test_comment_of_deleted_line_moves_to_next_statement() -> None:
    outcome = rewrite_module(cst.parse_module(SOURCE), [parse_rule(RULE)])
    assert outcome.applied
    assert "        # expand phase\n        z = kernels.conv_bn(x, self.conv, self.bn)\n" in outcome.module.code
    assert "trailing comment" not in outcome.module.code


def test_comments_inside_the_replaced_call_move_above_its_line() -> None:
    """The fused call takes the place of `self.bn(...)`: comments written inside that call stay, above its line."""
    source = SOURCE.replace(
        "        z = self.bn(y)\n",
        "        z = self.bn(  # normalise\n            y  # the conv's output\n        )  # the line's own comment\n",
    )
    outcome = rewrite_module(cst.parse_module(source), [parse_rule(RULE)])
    assert outcome.applied
    assert (
        "        # expand phase\n        # normalise\n        # the conv's output\n"
        "        z = kernels.conv_bn(x, self.conv, self.bn)  # the line's own comment\n"
    ) in outcome.module.code
