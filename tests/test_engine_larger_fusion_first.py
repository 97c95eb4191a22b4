"""When one match's calls are a strict part of another's, the engine applies the larger fusion and drops the smaller
(`engine.select_compatible`): ADP012's gated MLP over ADP006's gate and activation (which a guarded ADP006 matches
where the gate's bias is not a literal), ADP010's attention core over ADP004's softmax."""

from __future__ import annotations

from adopter_codemods.api import rewrite_source, scan_source

GATED_MLP = """\
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(8, 32, bias=config.mlp_bias)
        self.up_proj = nn.Linear(8, 32, bias=config.mlp_bias)
        self.down_proj = nn.Linear(32, 8, bias=config.mlp_bias)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
"""

ATTENTION = """\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, q, k, v):
        attn = torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1)
        attn = self.drop(attn)
        return attn @ v
"""


def test_gated_mlp_wins_over_the_bias_activation_inside_it() -> None:
    assert {f.code for f in scan_source(GATED_MLP, ["all"])} == {"ADP006", "ADP012"}  # both match, each on its own
    result = rewrite_source(GATED_MLP, ["all"])
    assert "adopter_kernels.gated_linear_unit(x, self.gate_proj, self.up_proj, self.act_fn)" in result.code
    assert "linear_bias_activation" not in result.code
    assert [f.code for f in result.findings] == ["ADP012"]


def test_attention_core_wins_over_the_softmax_inside_it() -> None:
    result = rewrite_source(ATTENTION, ["all"])
    assert "adopter_kernels.attention_core(" in result.code and "adopter_kernels.softmax" not in result.code
    assert [f.code for f in result.findings] == ["ADP010"]


def test_scan_reports_the_smaller_match_as_part_of_the_larger() -> None:
    """`scan` lists both matches, but only the larger one as fixable: the smaller one's message names it, so the
    report agrees with what `rewrite` changes (it said "2 findings (2 fixable)" where the rewrite made one)."""
    for source, outer, inner in ((ATTENTION, "ADP010", "ADP004"), (GATED_MLP, "ADP012", "ADP006")):
        by_code = {f.code: f for f in scan_source(source, ["all"])}
        assert by_code[outer].fixable and not by_code[inner].fixable
        named = f"; inside the {outer} match at line {by_code[outer].line}, whose rewrite replaces it"
        assert by_code[inner].message.endswith(named)
        alone = scan_source(source, [inner])  # the rule alone: its rewrite is the one that runs
        assert [(f.code, f.fixable) for f in alone] == [(inner, True)]


ATTENTION_WITH_FALLBACK = ATTENTION.replace(
    "    def forward(self, q, k, v):\n        attn = torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1)\n"
    "        attn = self.drop(attn)\n        return attn @ v\n",
    "    def forward(self, q, k, v, output_attentions=False):\n"
    "        attn = torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1)\n        attn = self.drop(attn)\n"
    "        out = attn @ v\n        return (out, attn) if output_attentions else (out,)\n",
)


def test_softmax_in_the_region_a_fallback_keeps_stays_fixable() -> None:
    """ADP010 keeps the region as written for `output_attentions`: the softmax there is rewritten too, in a later
    round, so `scan` reports it fixable and says where it goes."""
    by_code = {f.code: f for f in scan_source(ATTENTION_WITH_FALLBACK, ["all"])}
    assert by_code["ADP010"].fixable and by_code["ADP004"].fixable
    assert "copy kept as written" in by_code["ADP004"].message
    code = rewrite_source(ATTENTION_WITH_FALLBACK, ["all"]).code
    assert "adopter_kernels.attention_core(" in code and "adopter_kernels.torch_softmax(" in code
