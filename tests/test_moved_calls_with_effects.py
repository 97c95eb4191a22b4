"""A fused call evaluates its arguments where it goes. An argument computed in a removed statement by a call that may
have effects (a random draw, a layer, a function of other code) then runs later than it did, after whatever stands
between, and every argument runs before the matched computation: the engine refuses that unless only removed
statements stand between and no call with effects changes order with it (`flow/checks._moved_effect`,
`_effect_keeps_its_order`, `_input_after_an_effect`); nor may a matched dropout move past another call with effects
(`_draw_moved_past_another`). The engine of b529c32 rewrote the refused cases below into different models (those
after a matched dropout, the engine of 623b915)."""

from __future__ import annotations

import textwrap

import pytest

from adopter_codemods.api import refused_sites, rewrite_source
from rewrite_checks import assert_equivalent_rewrite

HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"


def _module(init: str, forward: str, example: str) -> str:
    return HEADER + "".join(
        [
            "class M(nn.Module):\n",
            "    def __init__(self):\n",
            "        super().__init__()\n",
            textwrap.indent(textwrap.dedent(init), " " * 8),
            "\n    def forward(self, *args):\n",
            textwrap.indent(textwrap.dedent(forward), " " * 8),
            f"\n\ndef make_example():\n    return M().double(), {example}\n",
        ]
    )


ATTENTION_INIT = (
    "self.drop = nn.Dropout(0.5)\nself.temperature = nn.Sequential(nn.Linear(4, 1), nn.Dropout(0.5))\n"
    "self.value = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))\n"
)
ATTENTION_ARGS = "(torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 5, 4))"
MLP_INIT = "self.noise_drop = nn.Dropout(0.5)\nself.fc = nn.Linear(4, 4)\n"
MLP_ARGS = "(torch.randn(2, 3, 4),)"

REFUSED = {
    # a layer call in the divisor (its dropout draws in training), moved past an unmatched draw
    "layer-past-a-draw": (ATTENTION_INIT, """\
        q, k, v = args
        attn = (q @ k) / (self.temperature(q).mean() + 2)
        noise = torch.randn_like(v)
        attn = attn.softmax(dim=-1)
        attn = self.drop(attn)
        return attn @ v + noise.sum()
        """, ATTENTION_ARGS, "ADP010"),
    # a value from a layer with a dropout, called after the matched dropout: the fused call would call it first
    "value-layer-after-the-dropout": (ATTENTION_INIT, """\
        q, k, v = args
        attn = (q @ k).softmax(dim=-1)
        attn = self.drop(attn)
        return attn @ self.value(v)
        """, ATTENTION_ARGS, "ADP010"),
    # ADP006: a Linear's input from a dropout layer, moved past an unmatched draw (training draws swap)
    "dropout-input-past-a-draw": (MLP_INIT, """\
        (x,) = args
        h = self.fc(self.noise_drop(x))
        noise = torch.rand(4)
        return F.gelu(h) + noise
        """, MLP_ARGS, "ADP006"),
    # a draw between the matched dropout and the product: the fused call would run the dropout after it
    "draw-after-the-dropout": (ATTENTION_INIT, """\
        q, k, v = args
        attn = (q @ k).softmax(dim=-1)
        attn = self.drop(attn)
        noise = torch.rand_like(v)
        return attn @ v + noise.sum()
        """, ATTENTION_ARGS, "ADP010"),
    # a layer holding a dropout called between the matched dropout and the product
    "dropout-layer-after-the-dropout": (ATTENTION_INIT, """\
        q, k, v = args
        attn = (q @ k).softmax(dim=-1)
        attn = self.drop(attn)
        w = self.value(v)
        return attn @ w
        """, ATTENTION_ARGS, "ADP010"),
}

REWRITTEN = {
    # the random draw comes before the scores: nothing with effects changes order
    "draw-before-the-scores": (ATTENTION_INIT, """\
        q, k, v = args
        noise = torch.randn_like(v)
        attn = (q @ k) / (torch.rand(1) + 1)
        attn = attn.softmax(dim=-1)
        attn = self.drop(attn)
        return attn @ v + noise.sum()
        """, ATTENTION_ARGS, "ADP010"),
    # a layer call moved past removed statements only (diffusers' `self.linear_1(self.norm(x))`)
    "layer-past-removed-statements": (MLP_INIT, """\
        (x,) = args
        h = self.fc(self.noise_drop(x))
        return F.gelu(h)
        """, MLP_ARGS, "ADP006"),
    # a layer with a dropout computing the key before the matched dropout: both keep their order
    "key-layer-before-the-dropout": (ATTENTION_INIT, """\
        q, k, v = args
        attn = (q @ self.value(k.transpose(1, 2)).transpose(1, 2)).softmax(dim=-1)
        attn = self.drop(attn)
        return attn @ v
        """, ATTENTION_ARGS, "ADP010"),
    # a Linear and reshaping methods between the matched dropout and the product: they draw nothing
    "computing-calls-after-the-dropout": (ATTENTION_INIT + "self.proj = nn.Linear(4, 4)\n", """\
        q, k, v = args
        attn = (q @ k).softmax(dim=-1)
        attn = self.drop(attn)
        w = self.proj(v).transpose(1, 2).contiguous().transpose(1, 2)
        return attn @ w
        """, ATTENTION_ARGS, "ADP010"),
    # pure calls: `math.sqrt` of tensor metadata
    "metadata": (ATTENTION_INIT, """\
        q, k, v = args
        attn = (q @ k) / math.sqrt(q.size(-1))
        noise = torch.randn_like(v)
        attn = attn.softmax(dim=-1)
        attn = self.drop(attn)
        return attn @ v + noise.sum()
        """, ATTENTION_ARGS, "ADP010"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_moved_call_with_effects_is_refused(name: str) -> None:
    init, forward, example, code = REFUSED[name]
    source = _module(init, forward, example)
    assert not rewrite_source(source, [code]).findings
    reasons = [site.reason for site in refused_sites(source, [code])]
    assert any("may have effects" in reason for reason in reasons), reasons


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_call_that_keeps_its_order_is_rewritten(name: str) -> None:
    init, forward, example, code = REWRITTEN[name]
    source = _module(init, forward, example)
    assert rewrite_source(source, [code]).findings
    assert_equivalent_rewrite(source, [code])
