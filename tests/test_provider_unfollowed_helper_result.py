"""Core: what a helper method returns where its walk ends without a `return` (adopter_codemods/provider/unchain.py,
`unfollowed_result`). A helper that returns nothing gives None. One whose returns sit in a statement the walk folds
(a branch without layer calls: LeViT's cached attention biases) gives an unknown value: the call as an opaque
expression with calls, a value of its own, so two such calls never pass for one value (two projections of
`self.a(x)` and `self.b(x)` once became one packed projection of `self.a(x)`)."""

from __future__ import annotations

import libcst as cst

from adopter_codemods.provider import build_module_structure
from adopter_codemods.structure import DLNode

SOURCE = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Linear(4, 4)
        self.q = nn.Linear(4, 4)
        self.r = nn.Linear(4, 4)
        self.bias = nn.Parameter(torch.zeros(4))

    def folded(self, x):
        if self.training:
            return x + self.bias
        else:
            return x - self.bias

    def nothing(self, x):
        self.seen = x

    def forward(self, x):
        a = self.p(self.folded(x))
        b = self.q(self.folded(x))
        c = self.r(self.nothing(x))
        return a + b + c
"""


def _layer_inputs() -> dict[str, object]:
    (cls,) = build_module_structure(cst.parse_module(SOURCE)).classes
    nodes = [e for e in cls.graphs[0].events if isinstance(e, DLNode) and e.kind == "layer"]
    return {n.layer: n.args[0] for n in nodes}


def test_an_unfollowed_result_is_an_opaque_call_of_its_own() -> None:
    inputs = _layer_inputs()
    first, second = inputs["self.p"], inputs["self.q"]
    for value in (first, second):
        assert value.kind == "expr" and not value.pure  # type: ignore[attr-defined]
        assert cst.Module([]).code_for_node(value.expr) == "self.folded(x)"  # type: ignore[attr-defined]
    assert first.vid != second.vid  # type: ignore[attr-defined]


def test_a_helper_returning_nothing_gives_none() -> None:
    value = _layer_inputs()["self.r"]
    assert value.kind == "const" and value.text == "None"  # type: ignore[attr-defined]
