"""ADP010 on every combination of its optional steps: scale, divisor, additive mask, the two fills, the dropout layer
and the functional dropout, each present or not, with the softmax written three ways: `F.softmax`, an
`nn.Softmax(dim=-1)` layer, and an `nn.Sequential` of that layer and the dropout layer (320 attention cores). Each
is rewritten, the rewrite run against the original in float64, eval and training (same dropout draws), under `auto`
and with SDPA forced; and SDPA must run exactly where the kernel documents it (one mask kind at most, no dropout
drawing off CUDA)."""

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
# softmax form -> (its __init__ line, its forward line); the Sequential holds the dropout layer
FORMS = {
    "functional": ("", "        p = F.softmax(s, dim=-1)\n"),
    "layer": ("        self.attend = nn.Softmax(dim=-1)\n", "        p = self.attend(s)\n"),
    "sequential": (
        "        self.attend = nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1))\n", "        p = self.attend(s)\n"
    ),
}
COMBINATIONS = [
    (form, frozenset(c))
    for form in FORMS
    for n in range(len(STEPS) + 1)
    for c in itertools.combinations(STEPS, n)
    if not (form == "sequential" and "dropout" in c)
]


def _source(form: str, steps: frozenset[str]) -> str:
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
        "        self.drop = nn.Dropout(0.1)\n"
        f"{FORMS[form][0]}\n"
        "    def forward(self, x, bias, causal, pad):\n"
        "        b, n, c = x.shape\n"
        "        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)\n"
        "        s = q @ k.transpose(-2, -1)\n"
        f"{lines(SCORE_STEPS)}"
        f"{FORMS[form][1]}"
        f"{lines(('dropout', 'dropout_p'))}"
        "        return p @ v\n"
    )


def _name(form: str, steps: frozenset[str]) -> str:
    return f"{form}-" + ("+".join(name for name in STEPS if name in steps) or "bare")


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


@pytest.mark.parametrize("form,steps", COMBINATIONS, ids=[_name(*c) for c in COMBINATIONS])
def test_every_combination_of_optional_steps_is_rewritten_exactly(
    form: str, steps: frozenset[str], inputs: tuple[torch.Tensor, ...], sdpa_calls: list[int]
) -> None:
    source = _source(form, steps)
    result = rewrite_source(source, ["ADP010"])
    assert [f.code for f in result.findings] == ["ADP010"], source
    fused = result.code.split("attention_core(")[1]
    assert "softmax(" not in fused and "self.attend(" not in fused
    assert (", softmax=self.attend" in fused) == (form != "functional")
    tag = _name(form, steps).replace("+", "_").replace("-", "_")
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
        drawing = training and (bool(steps & {"dropout", "dropout_p"}) or form == "sequential")
        assert bool(sdpa_calls) == (one_mask and not drawing), (_name(form, steps), training)
