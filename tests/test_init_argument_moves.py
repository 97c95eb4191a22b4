"""An ``__init__`` edit builds the fused module where the LayerNorm was bound, with the Dropout's probability taken
from the Dropout's statement (ADP005's first variant): that argument is evaluated at another statement. Where that
could change its value (a name it reads assigned between, a call, another block), the variant that keeps both
modules applies instead, and the rewrite stays equivalent (`matcher._moved_init_argument`)."""

from __future__ import annotations

import textwrap

import pytest

from rewrite_checks import assert_equivalent_rewrite

TEMPLATE = textwrap.dedent(
    """\
    import types

    import torch
    from torch import nn


    class Output(nn.Module):
        def __init__(self, dim=16, p=0.1, flag=True):
            super().__init__()
            self.dense = nn.Linear(dim, dim)
    {init}

        def forward(self, hidden_states, input_tensor):
            hidden_states = self.dense(hidden_states)
            hidden_states = self.dropout(hidden_states)
            return self.LayerNorm(hidden_states + input_tensor)

        def probability(self, p):
            return p * 2

        def triple(self):
            self.p = self.p * 3


    def make_example():
        return Output().double(), (torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 5, 16, dtype=torch.float64))
    """
)

FUSED_MODULE = "self.LayerNorm = adopter_kernels.FusedDropoutAddLayerNorm(dim, dropout="
MODULES_KEPT = "adopter_kernels.dropout_add_layer_norm_module(hidden_states, input_tensor, self.LayerNorm, self.dropout)"


def _source(init: str) -> str:
    return TEMPLATE.format(init=textwrap.indent(textwrap.dedent(init), " " * 8))


def test_argument_not_reassigned_moves_into_the_fused_module() -> None:
    init = "self.dropout = nn.Dropout(p)\nother = p\nself.LayerNorm = nn.LayerNorm(dim)\n"
    code = assert_equivalent_rewrite(_source(init), ["ADP005"]).code
    assert FUSED_MODULE + "p)" in code


@pytest.mark.parametrize(
    "init",
    [
        # `p` assigned between the two statements: the fused module would get 0.3
        "self.dropout = nn.Dropout(p)\np = p * 3\nself.LayerNorm = nn.LayerNorm(dim)\n",
        # the LayerNorm first: the probability would be read before `p` is assigned
        "p = 0.0\nself.LayerNorm = nn.LayerNorm(dim)\np = 0.2\nself.dropout = nn.Dropout(p)\n",
        # a call would run at another statement
        "self.dropout = nn.Dropout(self.probability(p))\nself.LayerNorm = nn.LayerNorm(dim)\n",
        # the Dropout bound in another block than the LayerNorm
        "if flag:\n    self.dropout = nn.Dropout(p)\nself.LayerNorm = nn.LayerNorm(dim)\n",
        # a method call between changes the object the probability is read from
        "cfg = {'p': p}\nself.dropout = nn.Dropout(cfg['p'])\ncfg.update(p=0.7)\nself.LayerNorm = nn.LayerNorm(dim)\n",
        "self.p = p\nself.dropout = nn.Dropout(self.p)\nself.triple()\nself.LayerNorm = nn.LayerNorm(dim)\n",
        "cfg = types.SimpleNamespace(p=p)\nself.dropout = nn.Dropout(cfg.p)\nsetattr(cfg, 'p', 0.7)\n"
        "self.LayerNorm = nn.LayerNorm(dim)\n",
    ],
    ids=["reassigned-between", "reassigned-before-dropout", "call", "other-block", "method-call", "self-method-call",
         "setattr"],
)
def test_argument_that_could_change_keeps_both_modules(init: str) -> None:
    code = assert_equivalent_rewrite(_source(init), ["ADP005"]).code
    assert FUSED_MODULE not in code and MODULES_KEPT in code
