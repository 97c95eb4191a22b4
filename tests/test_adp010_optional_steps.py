"""ADP010 on every combination of its optional steps: scale, divisor, additive mask, the two fills, the dropout layer
and the functional dropout, each present or not (128 attention cores). Each is rewritten, the rewrite run against
the original in float64, eval and training (same dropout draws), under `auto` and with SDPA forced; and SDPA must
run exactly where the kernel documents it (one mask kind at most, no dropout drawing off CUDA)."""

from __future__ import annotations

import itertools
from typing import Iterator

import pytest

from adopter_codemods.api import rewrite_source

torch = pytest.importorskip("torch")

import adopter_kernels  # noqa: E402
from adopter_kernels.equivalence import compare_models, default_dtype, load_source_as_module, seeded  # noqa: E402

STEPS = {
    "scale": "        s = s * self.scale\n",
    "divisor": "        s = s / 2.0\n",
    "mask": "        s = s + bias\n",
    "masked_inf": '        s = s.masked_fill(causal, float("-inf"))\n',
    "masked_min": "        s = s.masked_fill(pad, torch.finfo(s.dtype).min)\n",
    "dropout": "        p = self.drop(p)\n",
    "dropout_p": "        p = F.dropout(p, p=0.2, training=self.training)\n",
}
SCORE_STEPS = ("scale", "divisor", "mask", "masked_inf", "masked_min")
COMBINATIONS = [frozenset(c) for n in range(len(STEPS) + 1) for c in itertools.combinations(STEPS, n)]


def _source(steps: frozenset[str]) -> str:
    def lines(names: tuple[str, ...]) -> str:
        return "".join(STEPS[name] for name in names if name in steps)

    return (
        "import torch\n"
        "import torch.nn.functional as F\n"
        "from torch import nn\n\n\n"
        "class Attention(nn.Module):\n"
        "    def __init__(self, dim=16, heads=2):\n"
        "        super().__init__()\n"
        "        self.heads = heads\n"
        "        self.scale = (dim // heads) ** -0.5\n"
        "        self.qkv = nn.Linear(dim, dim * 3)\n"
        "        self.drop = nn.Dropout(0.1)\n\n"
        "    def forward(self, x, bias, causal, pad):\n"
        "        b, n, c = x.shape\n"
        "        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)\n"
        "        s = q @ k.transpose(-2, -1)\n"
        f"{lines(SCORE_STEPS)}"
        "        p = F.softmax(s, dim=-1)\n"
        f"{lines(('dropout', 'dropout_p'))}"
        "        return p @ v\n"
    )


def _name(steps: frozenset[str]) -> str:
    return "+".join(name for name in STEPS if name in steps) or "bare"


@pytest.fixture(scope="module")
def inputs() -> tuple[torch.Tensor, ...]:
    with default_dtype(torch.float64), seeded(0):
        x = torch.randn(2, 5, 16)
        bias = torch.randn(2, 1, 5, 5)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)  # every query keeps itself
    pad = torch.zeros(2, 1, 1, 5, dtype=torch.bool)
    pad[1, ..., 3:] = True  # the second sample pads its last two keys; the first key stays
    return x, bias, causal, pad


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    calls: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    yield calls


@pytest.mark.parametrize("steps", COMBINATIONS, ids=[_name(c) for c in COMBINATIONS])
def test_every_combination_of_optional_steps_is_rewritten_exactly(
    steps: frozenset[str], inputs: tuple[torch.Tensor, ...], sdpa_calls: list[int]
) -> None:
    source = _source(steps)
    result = rewrite_source(source, ["ADP010"])
    assert [f.code for f in result.findings] == ["ADP010"], source
    assert "attention_core(" in result.code and "softmax(" not in result.code.split("attention_core(")[1]
    tag = _name(steps).replace("+", "_")
    original = load_source_as_module(source, f"adp010_steps_{tag}_o")
    rewritten = load_source_as_module(result.code, f"adp010_steps_{tag}_r")
    with default_dtype(torch.float64), seeded(0):
        model_o, model_r = original.Attention(), rewritten.Attention()
    model_r.load_state_dict(model_o.state_dict(), strict=True)
    for backend in ("auto", "attention_core=sdpa"):
        with adopter_kernels.use_backend(backend):
            compare_models(model_o, model_r, inputs, rtol=1e-9, atol=1e-9).raise_if_failed()
    # SDPA forced, per mode: one mask kind at most, and in training no dropout drawing (CPU)
    one_mask = len(steps & {"mask", "masked_inf", "masked_min"}) <= 1
    for training in (False, True):
        sdpa_calls.clear()
        model_r.train(training)
        with adopter_kernels.use_backend("attention_core=sdpa"), torch.no_grad():
            model_r(*inputs)
        drawing = training and bool(steps & {"dropout", "dropout_p"})
        assert bool(sdpa_calls) == (one_mask and not drawing), (_name(steps), training)
