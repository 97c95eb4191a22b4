"""Core: the "inputs unchanged at the anchor" check compares value ids of the path being checked.

Value ids differ between paths once control flow forks before the match (e.g. DPT's second conditional
BatchNorm follows a first ``if``), so the check must read each input as that path's copy of the node saw it.
"""

from __future__ import annotations

import libcst as cst

from adopter_codemods.dsl import parse_rule
from adopter_codemods.flow import checks as flow_checks
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

# A class with conv, bn and another layer, up to its forward's signature (also the head of tests/test_flow.py's).
CLASS_HEAD = """\
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.conv = nn.Conv2d(3, 3, 1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x, flag: bool):
"""
HEADER = CLASS_HEAD + """\
        if flag:  # a layer call inside: two paths from here on
            x = self.act(x)
        x = x * 2
"""


def _matches(body: str) -> int:
    structure = build_module_structure(cst.parse_module(HEADER + body))
    (cls,) = structure.classes
    return len(find_matches(parse_rule(RULE), cls))


def test_match_after_a_fork_is_accepted() -> None:
    assert _matches("        y = self.conv(x)\n        if flag:\n            y = self.bn(y)\n        return y\n") == 1


def test_input_rebound_after_a_fork_is_refused() -> None:
    assert _matches("        y = self.conv(x)\n        x = x + 1\n        z = self.bn(y)\n        return z + x\n") == 0


SUM_RULE = """\
rule SumPair
code ADP901
init:
    torch.nn.Conv2d(**$c) -> $conv;
    torch.nn.BatchNorm2d(**$b) -> $bn
forward:
    $conv($x) -> $y;
    $bn($x) -> $w;
    $y + $w -> $z
    =>
    kernels.sum_pair($x, $conv, $bn) -> $z
"""


def _sum_matches(body: str) -> int:
    structure = build_module_structure(cst.parse_module(HEADER + body))
    (cls,) = structure.classes
    return len(find_matches(parse_rule(SUM_RULE), cls))


def test_one_input_on_every_path_is_accepted() -> None:
    assert _sum_matches("        u = x\n        w = x\n        return self.conv(u) + self.bn(w)\n") == 1


def test_one_input_on_some_paths_only_is_refused() -> None:
    # Found where `u` and `w` alias one value; where `flag` rebinds `u`, the two layers read different values and
    # `sum_pair(u, ...)` would feed the BatchNorm the changed one.
    body = "        u = x\n        w = x\n        if flag:\n            u = self.act(u)\n        return self.conv(u) + self.bn(w)\n"
    assert _sum_matches(body) == 0


TRIPLE_RULE = """\
rule FuseThreeProjections
code ADP901
init:
    torch.nn.Linear(**$a) -> $p;
    torch.nn.Linear(**$b) -> $q;
    torch.nn.Linear(**$c) -> $r
forward:
    $p($x) -> $po;
    $q($x) -> $qo;
    $r($x) -> $ro
    =>
    kernels.three($x, $p, $q, $r) -> ($po, $qo, $ro)
"""


def test_one_call_reading_a_phi_never_stands_for_two_pattern_nodes() -> None:
    # `mlp` reads a phi of the `x` that `skip` read: the search matches a copy of it reading `x` itself, which must
    # not count again for the third pattern node (gluonts' GatedResidualNetwork: a "triple" of two calls, refused
    # as if its nn.Sequential element were the problem).
    layers = "self.skip = nn.Linear(3, 3)\n        self.mlp = nn.Linear(3, 3)"
    source = CLASS_HEAD.replace("self.bn = nn.BatchNorm2d(3)", layers) + """\
        s = self.skip(x)
        if flag:
            x = self.act(x)
        y = self.mlp(x)
        return y + s
"""
    structure = build_module_structure(cst.parse_module(source))
    (cls,) = structure.classes
    rule = parse_rule(TRIPLE_RULE)
    assert rule.forward is not None
    chosen = [
        [n.index for n in nodes if n is not None]
        for graph in cls.graphs
        for nodes, _ in flow_checks.subsequences(rule.forward.source, graph, rule)
    ]
    assert chosen == [], chosen  # two calls only: no match of three
