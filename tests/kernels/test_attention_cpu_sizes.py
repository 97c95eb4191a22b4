"""The CPU size test of the SDPA subclasses (ADP001-ADP003, ADP014) under ``auto``: with bfloat16 or float16
compute (layers in that dtype, or float32 ones under autocast to it) SDPA runs only from the measured size, which the
cached decision cannot see; in float32 it runs at every size. SDPA calls are counted, never forced."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import torch
from torch import Tensor, nn

pytest.importorskip("transformers")

from transformers import BertConfig, GPT2Config, T5Config  # noqa: E402
from transformers.models.bart.modeling_bart import BartAttention  # noqa: E402
from transformers.models.bert.modeling_bert import BertSelfAttention  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

import adopter_kernels as ak  # noqa: E402
from adopter_kernels import _dispatch, attention  # noqa: E402

HIDDEN, HEADS = 16, 4
Build = Callable[[type], nn.Module]
CLASSES: Dict[str, Tuple[type, Callable[[type], type], Build]] = {
    "bert_self_attention": (BertSelfAttention, ak.bert_self_attention_sdpa,
                            lambda c: c(BertConfig(hidden_size=HIDDEN, num_attention_heads=HEADS,
                                                   attention_probs_dropout_prob=0.0))),
    "t5_attention": (T5Attention, ak.t5_attention_sdpa,
                     lambda c: c(T5Config(d_model=HIDDEN, d_kv=HIDDEN // HEADS, num_heads=HEADS, dropout_rate=0.0),
                                 has_relative_attention_bias=True)),
    "gpt2_attention": (GPT2Attention, ak.gpt2_attention_sdpa,
                       lambda c: c(GPT2Config(n_embd=HIDDEN, n_head=HEADS, n_positions=64, attn_pdrop=0.0,
                                              resid_pdrop=0.0))),
    "bart_attention": (BartAttention, ak.bart_attention_sdpa, lambda c: c(HIDDEN, HEADS, dropout=0.0)),
}
# Scaled down for a test: the rule's sizes, not its numbers (those are 4x12x512x512 scores and 512 keys; float16
# 4x12x16x16 and 16 in inference, 4x12x64x64 and 64 in training).
MIN_SCORES, MIN_KEYS = 2 * HEADS * 8 * 8, 8
FP16_MIN_SCORES, FP16_MIN_KEYS = {False: 2 * HEADS * 4 * 4, True: 2 * HEADS * 8 * 8}, {False: 4, True: 8}


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[Tensor]]:
    """Queries of every SDPA call, under ``auto`` with the size test scaled down."""
    monkeypatch.delenv(ak.BACKEND_ENV, raising=False)
    monkeypatch.setattr(attention, "_CPU_BF16_MIN_SCORES", MIN_SCORES)
    monkeypatch.setattr(attention, "_CPU_BF16_MIN_KEYS", MIN_KEYS)
    monkeypatch.setattr(attention, "_CPU_FP16_MIN_SCORES", FP16_MIN_SCORES)
    monkeypatch.setattr(attention, "_CPU_FP16_MIN_KEYS", FP16_MIN_KEYS)
    calls: List[Tensor] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        calls.append(query)
        return real(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    _dispatch.clear_decisions()
    yield calls
    _dispatch.clear_decisions()


def _pair(kernel: str, dtype: torch.dtype) -> Tuple[nn.Module, nn.Module]:
    cls, factory, build = CLASSES[kernel]
    torch.manual_seed(0)
    original = build(cls).to(dtype)
    rewritten = build(factory(cls)).to(dtype)
    rewritten.load_state_dict(original.state_dict(), strict=True)
    return original, rewritten


def _call(module: nn.Module, kernel: str, states: Tensor) -> Tensor:
    batch, length = states.shape[:2]
    mask = torch.zeros(batch, 1, 1, length, dtype=states.dtype)
    mask[-1, ..., -1] = torch.finfo(states.dtype).min
    if kernel == "t5_attention":
        return module(states, mask=mask)[0]
    if kernel == "bart_attention":
        return module(states, attention_mask=mask.expand(batch, 1, length, length))[0]
    return module(states, attention_mask=mask)[0]


@pytest.mark.parametrize("kernel", CLASSES)
@pytest.mark.parametrize(("batch", "length", "sdpa"), [(2, 4, False), (1, 8, False), (2, 8, True), (4, 7, False)],
                         ids=["few-scores-short-rows", "few-scores", "enough", "short-rows"])
def test_bfloat16_inference_takes_sdpa_from_the_size(kernel: str, batch: int, length: int, sdpa: bool,
                                                     sdpa_calls: List[Tensor]) -> None:
    original, rewritten = _pair(kernel, torch.bfloat16)
    states = torch.randn(batch, length, HIDDEN, dtype=torch.bfloat16)
    with torch.inference_mode():
        expected = _call(original.eval(), kernel, states)
        got = _call(rewritten.eval(), kernel, states)
    assert bool(sdpa_calls) is sdpa
    if sdpa:
        torch.testing.assert_close(got, expected, rtol=3e-2, atol=3e-2)
    else:  # the original forward ran
        assert torch.equal(got, expected)


@pytest.mark.parametrize("layers", ["float16", "float32-autocast"])
@pytest.mark.parametrize("kernel", CLASSES)
@pytest.mark.parametrize(
    ("training", "batch", "length", "sdpa"),
    [(False, 1, 4, False), (False, 2, 4, True), (False, 16, 3, False), (True, 2, 4, False), (True, 1, 8, False),
     (True, 2, 8, True)],
    ids=["inference-few-scores", "inference-enough", "inference-short-rows", "training-few-scores",
         "training-few-scores-long-rows", "training-enough"],
)
def test_float16_takes_sdpa_from_the_size_of_its_mode(layers: str, kernel: str, training: bool, batch: int,
                                                      length: int, sdpa: bool, sdpa_calls: List[Tensor]) -> None:
    """float16 compute: float16 layers (``model.half()``) or float32 ones under float16 autocast. SDPA from a size,
    larger in training; T5 too. The original forward ran below it, SDPA above within float16 rounding, in inference
    and in training (gradients)."""
    dtype = torch.float16 if layers == "float16" else torch.float32
    original, rewritten = _pair(kernel, dtype)
    original.train(training)
    rewritten.train(training)
    states = torch.randn(batch, length, HIDDEN, dtype=dtype)
    inputs = [states.clone().requires_grad_(training) for _ in range(2)]
    autocast = torch.autocast("cpu", dtype=torch.float16) if dtype == torch.float32 else contextlib.nullcontext()
    with torch.set_grad_enabled(training), autocast:
        expected = _call(original, kernel, inputs[0])
        got = _call(rewritten, kernel, inputs[1])
        if training:
            for out in (expected, got):
                out.float().sum().backward()
    assert bool(sdpa_calls) is sdpa
    assert not sdpa or sdpa_calls[0].dtype == torch.float16
    if sdpa:
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
        if training:
            torch.testing.assert_close(inputs[1].grad, inputs[0].grad, rtol=5e-2, atol=5e-2)
    else:
        assert torch.equal(got, expected)
        if training:
            assert torch.equal(inputs[1].grad, inputs[0].grad)


@pytest.mark.parametrize("kernel", ["bert_self_attention", "gpt2_attention", "bart_attention"])
@pytest.mark.parametrize(("batch", "length", "sdpa"), [(2, 4, False), (2, 8, True)], ids=["small", "enough"])
def test_autocast_is_bfloat16_compute(kernel: str, batch: int, length: int, sdpa: bool,
                                      sdpa_calls: List[Tensor]) -> None:
    """float32 layers under bfloat16 autocast, in training: the bfloat16 size test, not float32's every size."""
    original, rewritten = _pair(kernel, torch.float32)
    states = torch.randn(batch, length, HIDDEN, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _call(rewritten.train(), kernel, states).float().sum().backward()
    assert bool(sdpa_calls) is sdpa
    assert not sdpa or sdpa_calls[0].dtype == torch.bfloat16


@pytest.mark.parametrize(("training", "batch", "sdpa"), [(False, 2, True), (False, 1, False), (True, 2, False)],
                         ids=["inference", "inference-small", "training"])
def test_t5_under_autocast(training: bool, batch: int, sdpa: bool, sdpa_calls: List[Tensor]) -> None:
    """T5 under bfloat16 autocast: SDPA in inference from the size (measured faster there), never in training
    (slower); float16 autocast takes it in training too (test_float16_takes_sdpa_from_the_size_of_its_mode)."""
    original, rewritten = _pair("t5_attention", torch.float32)
    states = torch.randn(batch, 8, HIDDEN, requires_grad=training)
    with torch.set_grad_enabled(training), torch.autocast("cpu", dtype=torch.bfloat16):
        _call(rewritten.train(training), "t5_attention", states)
    assert bool(sdpa_calls) is sdpa


def test_float64_under_autocast_keeps_the_original(sdpa_calls: List[Tensor]) -> None:
    """Autocast leaves float64 alone, and so does the bfloat16 rule."""
    for kernel in CLASSES:
        original, rewritten = _pair(kernel, torch.float64)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            states = torch.randn(2, 8, HIDDEN, dtype=torch.float64)
            assert torch.equal(_call(rewritten.eval(), kernel, states), _call(original.eval(), kernel, states))
    assert not sdpa_calls


@pytest.mark.parametrize("kernel", ["bert_self_attention", "gpt2_attention", "bart_attention"])
@pytest.mark.parametrize("training", [False, True])
def test_float32_takes_sdpa_at_every_size(kernel: str, training: bool, sdpa_calls: List[Tensor]) -> None:
    original, rewritten = _pair(kernel, torch.float32)
    states = torch.randn(1, 2, HIDDEN, requires_grad=training)
    with torch.set_grad_enabled(training):
        torch.testing.assert_close(_call(rewritten.train(training), kernel, states),
                                   _call(original.train(training), kernel, states))
    assert sdpa_calls


def test_the_measured_size() -> None:
    """The rule itself at its real numbers: 4x12x512x512 scores in rows of 512 keys."""
    def pays(batch: int, queries: int, keys: int, dtype: torch.dtype = torch.bfloat16) -> bool:
        return attention._sdpa_pays("bert_self_attention", torch.empty(batch, queries, 8, dtype=dtype), 12, keys)

    assert pays(4, 512, 512) and pays(1, 1024, 1024) and pays(8, 256, 512)
    assert not pays(4, 256, 256) and not pays(1, 512, 512) and not pays(64, 511, 511)
    assert not pays(4, 1, 4096)  # one query against a long cache: few scores
    assert pays(1, 4, 4, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not pays(1, 4, 4, torch.float32)
    with ak.use_backend("bert_self_attention=sdpa"):
        assert pays(1, 4, 4)
    # float16 layers: 4x12x16x16 scores in rows of 16 keys in inference, 4x12x64x64 in rows of 64 in training
    with torch.no_grad():
        assert pays(4, 16, 16, torch.float16) and pays(1, 32, 32, torch.float16)
        assert not pays(1, 16, 16, torch.float16) and not pays(64, 15, 15, torch.float16)
    assert pays(4, 64, 64, torch.float16) and pays(1, 128, 128, torch.float16)
    assert not pays(4, 32, 32, torch.float16) and not pays(64, 63, 63, torch.float16)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast decides the compute: bfloat16's size
        assert not pays(4, 64, 64, torch.float16)
    with torch.autocast("cpu", dtype=torch.float16):  # ... float16's
        assert pays(4, 64, 64, torch.float32) and pays(4, 64, 64, torch.bfloat16)
        assert not pays(4, 32, 32, torch.float32)
        with torch.no_grad():
            assert pays(4, 16, 16, torch.float32) and not pays(1, 16, 16, torch.float32)
