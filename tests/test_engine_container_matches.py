"""Core: matches inside one nn.Sequential only edit its constructor, so they are applied (and reported) together:
one finding per matched pair, also when several rules match the same container."""

from __future__ import annotations

import libcst as cst

from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import find_all, rewrite_module
from adopter_codemods.provider import build_module_structure

PAIR_RULE = """\
rule Fuse{name}
code {code}
sequential kernels.FusedSequential
init:
    torch.nn.{first}(**$a) -> $first;
    torch.nn.{second}(**$b) -> $second
forward:
    $first($x) -> $y;
    $second($y) -> $z
    =>
    kernels.fused($x, $first, $second) -> $z
"""
CONV_BN = parse_rule(PAIR_RULE.format(name="ConvBN", code="ADP901", first="Conv2d", second="BatchNorm2d"))
LINEAR_BN = parse_rule(PAIR_RULE.format(name="LinearBN", code="ADP902", first="Linear", second="BatchNorm1d"))

SOURCE = """\
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 4, 3),
            nn.BatchNorm2d(4),
            nn.Conv2d(4, 4, 3),
            nn.BatchNorm2d(4),
            nn.Flatten(),
            nn.Linear(4, 2),
            nn.BatchNorm1d(2),
        )

    def forward(self, x):
        return self.body(x)
"""


def test_all_pairs_of_one_container_apply_in_one_round() -> None:
    module = cst.parse_module(SOURCE)
    assert len(find_all(build_module_structure(module), [CONV_BN, LINEAR_BN])) == 3
    outcome = rewrite_module(module, [CONV_BN, LINEAR_BN])
    assert len(outcome.applied) == 3
    assert outcome.rounds == 1
    assert "self.body = kernels.FusedSequential(\n" in outcome.module.code
    assert outcome.module.code.count("FusedSequential") == 1


def test_container_called_twice_is_one_match_per_pair() -> None:
    source = SOURCE.replace("        return self.body(x)\n", "        return self.body(x), self.body(x + 1)\n")
    module = cst.parse_module(source)
    assert len(find_all(build_module_structure(module), [CONV_BN, LINEAR_BN])) == 3


INHERITED_HELPER = """import torch
from torch import nn


class Base(nn.Module):
    def scores(self, s):
        return torch.softmax(s, dim=-1)

    def forward(self, s):
        return self.scores(s)


class Relative(Base):
    def forward(self, s, bias):
        return self.scores(s + bias)


class Rotary(Base):
    def forward(self, s):
        return self.scores(s * 2)
"""


def test_a_site_in_an_inherited_helper_is_one_finding() -> None:
    """fairseq's ESPnet attentions: three classes inline the helper holding the softmax; it is one site and one edit
    (it was listed three times, and counted so in the summary)."""
    from adopter_codemods.api import rewrite_source, scan_source

    findings = scan_source(INHERITED_HELPER, ["ADP004"])
    assert [(f.code, f.line) for f in findings] == [("ADP004", 7)]
    assert rewrite_source(INHERITED_HELPER, ["ADP004"]).code.count("adopter_kernels.torch_softmax(") == 1


def test_an_unnamed_sequential_is_described_as_one() -> None:
    """tacotron2's Prenet builds its nn.Sequentials in a ModuleList comprehension: the finding names their elements as
    such (it said `self.Sequential.0`, an attribute that does not exist)."""
    from adopter_codemods.api import scan_source

    source = """import torch
from torch import nn


class Prenet(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.ReLU()) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""
    (finding,) = scan_source(source, ["ADP006"])
    assert finding.message.endswith("(nn.Sequential[0], nn.Sequential[1])")
