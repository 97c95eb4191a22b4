"""Core: besides forward, the provider walks a class's other methods (those not inlined into forward) and the
module's top-level functions, each on its own, so a one-call rewrite such as FastSoftmax reaches them too."""

from __future__ import annotations

import libcst as cst

from adopter_codemods.dsl import Rule, parse_rule
from adopter_codemods.engine import Finding, find_all, findings_for, rewrite_module, skips_for
from adopter_codemods.provider import build_module_structure

SOFTMAX = parse_rule(
    """\
rule Softmax
code ADP907
forward:
    torch.nn.functional.softmax(**$args) -> $y
    =>
    kernels.softmax(**$args) -> $y
"""
)

PAIR = parse_rule(
    """\
rule Pair
code ADP908
init:
    torch.nn.Linear(**$a) -> $first;
    torch.nn.Linear(**$b) -> $second
forward:
    $first($x) -> $y;
    $second($y) -> $z
    =>
    kernels.pair($x, $first, $second) -> $z
"""
)

SOURCE = """\
import torch
from torch import nn
import torch.nn.functional as F


def softmax(x, dim, onnx_trace=False):
    if onnx_trace:
        return F.softmax(x.float(), dim=dim)
    return F.softmax(x, dim=dim, dtype=torch.float32)


@torch.jit.script
def scripted(x: torch.Tensor) -> torch.Tensor:
    return F.softmax(x, dim=-1)


async def later(x):
    return F.softmax(x, dim=-1)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)

    def _probs(self, x):
        return F.softmax(x, dim=-1)

    def forward(self, x):
        return self._probs(x)

    @torch.no_grad()
    def generate(self, x):
        return F.softmax(self.b(self.a(x)), dim=-1)

    @property
    def probs(self):
        return F.softmax(self.a.weight, dim=-1)
"""


def _findings(rule: Rule) -> list[Finding]:
    module = cst.parse_module(SOURCE)
    return findings_for(module, find_all(build_module_structure(module), [rule]), "m.py")


def test_softmax_in_top_level_functions_and_other_methods() -> None:
    found = [(f.cls, f.function, f.line) for f in _findings(SOFTMAX)]
    assert found == [
        ("", "softmax", 8),
        ("", "softmax", 9),
        ("Head", "_probs", 28),  # inlined into forward: found once
        ("Head", "generate", 35),
    ]


def test_compiled_async_and_property_bodies_are_left_alone() -> None:
    code = rewrite_module(cst.parse_module(SOURCE), [SOFTMAX]).module.code
    assert "def scripted(x: torch.Tensor) -> torch.Tensor:\n    return F.softmax(x, dim=-1)" in code
    assert "async def later(x):\n    return F.softmax(x, dim=-1)" in code
    assert "return F.softmax(self.a.weight, dim=-1)" in code
    assert "return kernels.softmax(x, dim=dim, dtype=torch.float32)" in code


def test_layer_patterns_match_in_other_methods() -> None:
    code = rewrite_module(cst.parse_module(SOURCE), [PAIR]).module.code
    assert "return F.softmax(kernels.pair(x, self.a, self.b), dim=-1)" in code


def test_a_function_with_many_paths_is_analysed() -> None:
    branches = "".join(f"        if x > {i}:\n            x = torch.relu(x)\n" for i in range(12))
    source = SOURCE + f"\n    def busy(self, x):\n{branches}        return F.softmax(x, dim=0)\n"
    module = cst.parse_module(source)
    structure = build_module_structure(module)
    found = [(f.cls, f.function) for f in findings_for(module, find_all(structure, [SOFTMAX]), "m.py")]
    assert ("Head", "busy") in found  # 4096 paths: no longer left out
    assert ("Head", "generate") in found
    assert skips_for(structure, "m.py") == []
