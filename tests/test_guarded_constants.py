"""A guarded rule's `__init__` constants (ADP006's `bias=True`) only say where fusing pays, since its kernel computes
the original for any module: a constant the code does not settle is taken on trust and the site is guarded; a
different literal still refuses it (`matcher._match_init_node`'s `unknown`)."""

from __future__ import annotations

import pytest

from adopter_codemods.api import refused_sites, scan_source

MLP = """\
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, d, h, bias=True, act_layer=nn.GELU, device=None, dtype=None):
        super().__init__()
        dd = {{"device": device, "dtype": dtype}}
        self.fc1 = nn.Linear(d, h, {args})
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc1(x))
"""


@pytest.mark.parametrize(
    "args, certainty",
    [
        ("bias=True", "exact"),
        ("bias=bias", "guarded"),  # timm: `bias=bias[0]`
        ("bias=True, **dd", "guarded"),  # timm's `**dd` may pass anything
        ("**dd", "guarded"),
    ],
)
def test_unsettled_constants_are_taken_on_trust(args: str, certainty: str) -> None:
    findings = scan_source(MLP.format(args=args), ["ADP006"])
    assert [(f.code, f.certainty) for f in findings] == [("ADP006", certainty)]


@pytest.mark.parametrize("args", ["bias=False", "bias=False, **dd"])
def test_a_different_literal_still_refuses(args: str) -> None:
    source = MLP.format(args=args)
    assert scan_source(source, ["ADP006"]) == []
    (site,) = refused_sites(source, ["ADP006"])
    assert "bias=False, where the rule needs bias=True" in site.reason

