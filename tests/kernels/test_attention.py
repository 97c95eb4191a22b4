"""ADP001-ADP003: the SDPA attention subclasses against the real transformers classes (CPU, float64).

Every equivalence check also asserts whether SDPA ran, so a subclass that silently always fell back would fail.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import torch
from torch import Tensor, nn

pytest.importorskip("transformers")

from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, T5Config, T5Model  # noqa: E402
from transformers.models.bert.modeling_bert import BertSelfAttention  # noqa: E402
from transformers.models.electra.modeling_electra import ElectraSelfAttention  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention  # noqa: E402
from transformers.models.roberta.modeling_roberta import RobertaSelfAttention  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

import adopter_kernels as ak  # noqa: E402
from adopter_kernels.attention import (  # noqa: E402
    bert_self_attention_sdpa,
    gpt2_attention_sdpa,
    t5_attention_sdpa,
)

DT = torch.float64
Factory = Callable[[type], type]
Calls = List[Dict[str, Any]]
# Batch 0 attends everywhere, batch 1 has padding, batch 2 is fully masked (eager gives uniform rows there).
KEEP_5 = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]]


# --- helpers -----------------------------------------------------------------------------------------------------


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Record the keyword arguments of every F.scaled_dot_product_attention call.

    The SDPA backend is forced: these float64 checks are about its exactness, while ``auto`` picks it only where
    it measured faster (not for float64 on CPU)."""
    monkeypatch.setenv(ak.BACKEND_ENV, "bert_self_attention=sdpa,t5_attention=sdpa,gpt2_attention=sdpa")
    calls: Calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Tensor:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def randn(*shape: int) -> Tensor:
    return torch.randn(*shape, dtype=DT)


def padding_mask(keep: List[List[int]], dtype: torch.dtype = DT) -> Tensor:
    """Hugging Face's extended additive mask [B, 1, 1, K]: 0 where kept, finfo.min where padded."""
    return (1.0 - torch.tensor(keep, dtype=dtype))[:, None, None, :] * torch.finfo(dtype).min


def make_pair(
    cls: type, factory: Factory, *args: Any, prune: Optional[List[int]] = None, **kwargs: Any
) -> tuple[nn.Module, nn.Module]:
    """Original (random non-trivial weights) and the rewritten class loaded from its state_dict (strict)."""
    torch.manual_seed(0)
    original, rewritten = cls(*args, **kwargs), factory(cls)(*args, **kwargs)
    if prune:  # before .to(DT): HF's pruning rebuilds the layers in the default dtype
        original.prune_heads(prune)
        rewritten.prune_heads(prune)
    original, rewritten = original.to(DT), rewritten.to(DT)
    with torch.no_grad():
        for p in original.parameters():
            p.normal_(0.0, 0.5)
    rewritten.load_state_dict(original.state_dict(), strict=True)
    return original, rewritten


def tensors(x: Any) -> Iterator[Tensor]:
    if isinstance(x, Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from tensors(v)
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from tensors(v)


def structure(x: Any) -> Any:
    """The tuple layout with tensors replaced by their shapes."""
    if isinstance(x, Tensor):
        return tuple(x.shape)
    if isinstance(x, (tuple, list)):
        return tuple(structure(v) for v in x)
    return x


def clone_inputs(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach().clone().requires_grad_(x.is_floating_point())
    if isinstance(x, dict):
        return {k: clone_inputs(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(clone_inputs(v) for v in x)
    return x


def forward_backward(
    module: nn.Module, inputs: Dict[str, Any], training: bool, weight: Optional[Tensor] = None
) -> tuple[Any, Dict[str, Any]]:
    """Outputs and gradients of every parameter and float input for a loss on the first output only (so e.g. the
    relative bias gradient must flow through the attention core, not through the returned position_bias);
    ``weight`` scales the loss per output element."""
    module.train(training)
    module.zero_grad(set_to_none=True)
    args = clone_inputs(inputs)
    out = module(**args)
    first = out[0] if isinstance(out, tuple) else out.to_tuple()[0]
    (first.sin() if weight is None else first.sin() * weight).sum().backward()
    grads: Dict[str, Any] = {name: p.grad for name, p in module.named_parameters()}
    grads.update({f"input{i}": t.grad for i, t in enumerate(tensors(args))})
    return (out if isinstance(out, tuple) else out.to_tuple()), grads


def assert_same(
    original: nn.Module,
    rewritten: nn.Module,
    inputs: Dict[str, Any],
    calls: Calls,
    *,
    sdpa: bool = True,
    modes: tuple[bool, ...] = (False, True),
    tol: float = 1e-10,
    weight: Optional[Tensor] = None,
) -> None:
    """Same outputs, tuple structure and gradients in eval and train; exact when the fallback must be taken."""
    for training in modes:
        calls.clear()
        out_o, grads_o = forward_backward(original, inputs, training, weight)
        assert not calls, "the eager original is not expected to call SDPA"
        out_r, grads_r = forward_backward(rewritten, inputs, training, weight)
        assert bool(calls) == sdpa, f"SDPA {'not ' if sdpa else ''}called (training={training})"
        assert structure(out_r) == structure(out_o)
        assert grads_r.keys() == grads_o.keys()
        pairs = list(zip(tensors(out_r), tensors(out_o)))
        for name in grads_o:
            assert (grads_r[name] is None) == (grads_o[name] is None), name
            if grads_o[name] is not None:
                pairs.append((grads_r[name], grads_o[name]))
        for got, expected in pairs:
            if sdpa:
                torch.testing.assert_close(got, expected, rtol=10 * tol, atol=tol)
            else:
                assert torch.equal(got, expected)


# --- ADP001: BertSelfAttention -----------------------------------------------------------------------------------


def bert_config(**kwargs: Any) -> BertConfig:
    values = dict(hidden_size=16, num_attention_heads=4, max_position_embeddings=16, attention_probs_dropout_prob=0.0)
    values.update(kwargs)
    return BertConfig(**values)


@pytest.mark.parametrize("cls", [BertSelfAttention, RobertaSelfAttention, ElectraSelfAttention])
def test_bert_encoder_padding(cls: type, sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(cls, bert_self_attention_sdpa, bert_config())
    inputs = dict(hidden_states=randn(3, 5, 16), attention_mask=padding_mask(KEEP_5))
    assert_same(original, rewritten, inputs, sdpa_calls)


def test_bert_float32_mask_with_float64_model(sdpa_calls: Calls) -> None:
    # Eager promotes a float32 mask to the float64 scores; the mask is widened, not clamped to float64's minimum
    # (which a float32 tensor cannot hold).
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, bert_config())
    inputs = dict(hidden_states=randn(3, 5, 16), attention_mask=padding_mask(KEEP_5, torch.float32))
    assert_same(original, rewritten, inputs, sdpa_calls)


def test_bert_decoder_with_cache(sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, bert_config(is_decoder=True))
    mask = torch.zeros(2, 1, 2, 5, dtype=DT).masked_fill(torch.rand(2, 1, 2, 5) < 0.3, torch.finfo(DT).min)
    past = (randn(2, 4, 3, 4), randn(2, 4, 3, 4))
    inputs = dict(hidden_states=randn(2, 2, 16), attention_mask=mask, past_key_value=past)
    assert_same(original, rewritten, inputs, sdpa_calls)
    assert structure(rewritten(**inputs)) == ((2, 2, 16), ((2, 4, 5, 4), (2, 4, 5, 4)))


@pytest.mark.parametrize("cached", [False, True])
def test_bert_cross_attention(cached: bool, sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, bert_config(is_decoder=True))
    inputs = dict(
        hidden_states=randn(3, 2, 16),
        attention_mask=randn(3, 1, 2, 2),  # must be replaced by the encoder mask
        encoder_hidden_states=randn(3, 5, 16),
        encoder_attention_mask=padding_mask(KEEP_5),
        past_key_value=(randn(3, 4, 5, 4), randn(3, 4, 5, 4)) if cached else None,
    )
    assert_same(original, rewritten, inputs, sdpa_calls)


@pytest.mark.parametrize(
    "config_kwargs, call_kwargs",
    [
        ({}, dict(output_attentions=True)),
        ({}, dict(head_mask=torch.rand(1, 4, 1, 1, dtype=DT))),
        (dict(position_embedding_type="relative_key"), {}),
        (dict(position_embedding_type="relative_key_query"), {}),
    ],
)
def test_bert_fallbacks(config_kwargs: Dict[str, Any], call_kwargs: Dict[str, Any], sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, bert_config(**config_kwargs))
    inputs = dict(hidden_states=randn(3, 5, 16), attention_mask=padding_mask(KEEP_5), **call_kwargs)
    assert_same(original, rewritten, inputs, sdpa_calls, sdpa=False)


def test_bert_dropout_only_in_training(sdpa_calls: Calls) -> None:
    config = bert_config(attention_probs_dropout_prob=0.5)
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, config)
    inputs = dict(hidden_states=randn(3, 5, 16), attention_mask=padding_mask(KEEP_5))
    assert_same(original, rewritten, inputs, sdpa_calls, modes=(False,))
    assert sdpa_calls[-1]["dropout_p"] == 0.0
    rewritten.train()
    torch.manual_seed(1)
    trained = rewritten(**inputs)[0]
    assert sdpa_calls[-1]["dropout_p"] == 0.5
    assert not torch.allclose(trained, rewritten.eval()(**inputs)[0])


def test_bert_dropout_is_the_dropout_modules(sdpa_calls: Calls) -> None:
    """The drop-in reads the model's Dropout module: switched to eval alone (or `p = 0`, as TRL's
    `disable_dropout_in_model` does) it drops nothing in training, as the original; a replaced or hooked one is
    called by the original forward."""
    config = bert_config(attention_probs_dropout_prob=0.5)
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, config)
    inputs = dict(hidden_states=randn(3, 5, 16), attention_mask=padding_mask(KEEP_5))
    for module in (original, rewritten):
        module.train()
        module.dropout.eval()
    torch.testing.assert_close(rewritten(**inputs)[0], original(**inputs)[0], rtol=1e-12, atol=1e-12)
    assert sdpa_calls[-1]["dropout_p"] == 0.0
    calls = len(sdpa_calls)
    seen: List[int] = []
    rewritten.dropout.register_forward_hook(lambda *_: seen.append(1))
    rewritten(**inputs)
    assert seen == [1] and len(sdpa_calls) == calls  # the original forward ran, calling the hooked module


# --- ADP002: T5Attention -----------------------------------------------------------------------------------------


def t5_config(**kwargs: Any) -> T5Config:
    values = dict(
        d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        dropout_rate=0.0,
    )  # fmt: skip
    values.update(kwargs)
    return T5Config(**values)


# Eager T5 runs its softmax on ``scores.float()``, i.e. in float32 even for float64 inputs: looser tolerance, and
# no fully masked row (finfo(float64).min becomes -inf in float32, so eager gives NaN rows there; see the float32
# test below for fully masked rows).
T5_TOL = 1e-4
T5_KEEP = KEEP_5[:2]


def t5_pair(config: T5Config, **kwargs: Any) -> tuple[nn.Module, nn.Module]:
    return make_pair(T5Attention, t5_attention_sdpa, config, has_relative_attention_bias=True, **kwargs)


@pytest.mark.parametrize("relative", [True, False])
def test_t5_encoder_padding(relative: bool, sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(T5Attention, t5_attention_sdpa, t5_config(), has_relative_attention_bias=relative)
    inputs = dict(hidden_states=randn(2, 5, 16), mask=padding_mask(T5_KEEP))
    assert_same(original, rewritten, inputs, sdpa_calls, tol=T5_TOL)
    assert sdpa_calls[-1]["scale"] == 1.0
    if relative:  # the bias reaches SDPA as (part of) attn_mask, and its gradient flows back
        _, grads = forward_backward(rewritten, inputs, training=True)
        assert grads["relative_attention_bias.weight"].abs().sum() > 0


def test_t5_given_position_bias_ignores_mask(sdpa_calls: Calls) -> None:
    # Later layers get layer 0's position_bias (mask already added); the original then does not add `mask`.
    original, rewritten = make_pair(T5Attention, t5_attention_sdpa, t5_config())
    inputs = dict(hidden_states=randn(3, 5, 16), mask=randn(3, 1, 1, 5), position_bias=randn(3, 4, 5, 5))
    assert_same(original, rewritten, inputs, sdpa_calls, tol=T5_TOL)


def test_t5_fully_masked_rows_float32(sdpa_calls: Calls) -> None:
    original, rewritten = t5_pair(t5_config())
    original.float().eval()
    rewritten.float().eval()
    x, mask = torch.randn(3, 5, 16), padding_mask(KEEP_5, torch.float32)  # batch 2 fully masked
    torch.testing.assert_close(rewritten(x, mask)[0], original(x, mask)[0], rtol=1e-5, atol=1e-5)
    assert sdpa_calls


def test_t5_decoder_with_cache(sdpa_calls: Calls) -> None:
    original, rewritten = t5_pair(t5_config(is_decoder=True))
    inputs = dict(
        hidden_states=randn(2, 1, 16),
        mask=padding_mask([[1, 1, 1, 1], [0, 1, 1, 1]]),
        past_key_value=(randn(2, 4, 3, 4), randn(2, 4, 3, 4)),
        use_cache=True,
    )
    assert_same(original, rewritten, inputs, sdpa_calls, tol=T5_TOL)
    assert structure(rewritten(**inputs)) == ((2, 1, 16), ((2, 4, 4, 4), (2, 4, 4, 4)), (2, 4, 1, 4))


@pytest.mark.parametrize("past_length", [None, 5, 4])  # 4 != encoder length: the prefix-tuning recompute branch
def test_t5_cross_attention(past_length: Optional[int], sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(T5Attention, t5_attention_sdpa, t5_config(is_decoder=True))
    past = None if past_length is None else (randn(2, 4, past_length, 4), randn(2, 4, past_length, 4))
    inputs = dict(
        hidden_states=randn(2, 2, 16),
        mask=padding_mask(T5_KEEP),
        key_value_states=randn(2, 5, 16),
        past_key_value=past,
        query_length=3,
        use_cache=True,
    )
    assert_same(original, rewritten, inputs, sdpa_calls, tol=T5_TOL)


@pytest.mark.parametrize(
    "call_kwargs", [dict(output_attentions=True), dict(layer_head_mask=torch.rand(1, 4, 1, 1, dtype=DT))]
)
def test_t5_fallbacks(call_kwargs: Dict[str, Any], sdpa_calls: Calls) -> None:
    original, rewritten = t5_pair(t5_config())
    inputs = dict(hidden_states=randn(2, 5, 16), mask=padding_mask(T5_KEEP), **call_kwargs)
    assert_same(original, rewritten, inputs, sdpa_calls, sdpa=False)


def test_t5_pruned_heads_fall_back(sdpa_calls: Calls) -> None:
    original, rewritten = t5_pair(t5_config(), prune=[1])
    inputs = dict(hidden_states=randn(2, 5, 16), mask=padding_mask(T5_KEEP))
    assert_same(original, rewritten, inputs, sdpa_calls, sdpa=False)


def test_t5_dropout_only_in_training(sdpa_calls: Calls) -> None:
    original, rewritten = t5_pair(t5_config(dropout_rate=0.5))
    assert_same(original, rewritten, dict(hidden_states=randn(3, 5, 16)), sdpa_calls, modes=(False,), tol=T5_TOL)
    rewritten.train()(randn(3, 5, 16))
    assert sdpa_calls[-1]["dropout_p"] == 0.5


# --- ADP003: GPT2Attention ---------------------------------------------------------------------------------------


def gpt2_config(**kwargs: Any) -> GPT2Config:
    values = dict(n_embd=16, n_head=4, n_positions=16, attn_pdrop=0.0, resid_pdrop=0.0)
    values.update(kwargs)
    return GPT2Config(**values)


def query_weight(keep: List[List[int]]) -> Tensor:
    """Loss weight that ignores left-padded query positions (as labels=-100 does).

    Their rows see only padded keys; the SDPA outputs there equal eager's, but autograd's (meaningless) gradient
    through the absorbed ``scores + finfo.min`` entries reaches other keys than eager's ``torch.where`` lets through.
    """
    return torch.tensor(keep, dtype=DT)[:, :, None]


GPT2_KEEP = [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]


@pytest.mark.parametrize(
    "config_kwargs, layer_idx",
    [({}, None), (dict(scale_attn_weights=False), None), (dict(scale_attn_by_inverse_layer_idx=True), 2)],
)
def test_gpt2_left_padding(config_kwargs: Dict[str, Any], layer_idx: Optional[int], sdpa_calls: Calls) -> None:
    config = gpt2_config(**config_kwargs)
    original, rewritten = make_pair(GPT2Attention, gpt2_attention_sdpa, config, layer_idx=layer_idx)
    keep = [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]]  # left padding: pad queries see only pad keys
    inputs = dict(hidden_states=randn(3, 5, 16), attention_mask=padding_mask(keep))
    assert_same(original, rewritten, inputs, sdpa_calls, weight=query_weight(keep))


def test_gpt2_no_mask_uses_sdpa_causal(sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(GPT2Attention, gpt2_attention_sdpa, gpt2_config())
    assert_same(original, rewritten, dict(hidden_states=randn(2, 5, 16), use_cache=True), sdpa_calls)
    assert sdpa_calls[-1]["is_causal"] and sdpa_calls[-1]["attn_mask"] is None


@pytest.mark.parametrize("with_mask", [False, True])
def test_gpt2_layer_past(with_mask: bool, sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(GPT2Attention, gpt2_attention_sdpa, gpt2_config())
    inputs = dict(
        hidden_states=randn(3, 2, 16),
        layer_past=(randn(3, 4, 3, 4), randn(3, 4, 3, 4)),
        attention_mask=padding_mask(KEEP_5) if with_mask else None,
        use_cache=True,
    )
    assert_same(original, rewritten, inputs, sdpa_calls)
    assert structure(rewritten(**inputs)) == ((3, 2, 16), ((3, 4, 5, 4), (3, 4, 5, 4)))


def test_gpt2_cross_attention(sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(GPT2Attention, gpt2_attention_sdpa, gpt2_config(), is_cross_attention=True)
    inputs = dict(
        hidden_states=randn(3, 2, 16),
        attention_mask=randn(3, 1, 1, 2),  # must be replaced by the encoder mask
        encoder_hidden_states=randn(3, 5, 16),
        encoder_attention_mask=padding_mask(KEEP_5),
    )
    assert_same(original, rewritten, inputs, sdpa_calls)


@pytest.mark.parametrize(
    "config_kwargs, call_kwargs",
    [
        ({}, dict(output_attentions=True, attention_mask=padding_mask(KEEP_5))),
        ({}, dict(head_mask=torch.rand(1, 4, 1, 1, dtype=DT), attention_mask=padding_mask(KEEP_5))),
        (dict(reorder_and_upcast_attn=True), {}),  # no float64 mask: the original insists on float32 scores
    ],
)
def test_gpt2_fallbacks(config_kwargs: Dict[str, Any], call_kwargs: Dict[str, Any], sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(GPT2Attention, gpt2_attention_sdpa, gpt2_config(**config_kwargs))
    inputs = dict(hidden_states=randn(3, 5, 16), **call_kwargs)
    assert_same(original, rewritten, inputs, sdpa_calls, sdpa=False)


def test_gpt2_dropout_only_in_training(sdpa_calls: Calls) -> None:
    original, rewritten = make_pair(GPT2Attention, gpt2_attention_sdpa, gpt2_config(attn_pdrop=0.5))
    assert_same(original, rewritten, dict(hidden_states=randn(3, 5, 16)), sdpa_calls, modes=(False,))
    rewritten.train()(randn(3, 5, 16))
    assert sdpa_calls[-1]["dropout_p"] == 0.5


# --- class contract ----------------------------------------------------------------------------------------------

CASES = [
    (BertSelfAttention, bert_self_attention_sdpa, (bert_config(is_decoder=True),), {}),
    (T5Attention, t5_attention_sdpa, (t5_config(),), dict(has_relative_attention_bias=True)),
    (GPT2Attention, gpt2_attention_sdpa, (gpt2_config(),), dict(is_cross_attention=True, layer_idx=1)),
]


@pytest.mark.parametrize("cls, factory, args, kwargs", CASES)
def test_subclass_contract(cls: type, factory: Factory, args: tuple, kwargs: Dict[str, Any]) -> None:
    sub = factory(cls)
    assert sub is factory(cls) and factory(sub) is sub  # cached and idempotent
    assert issubclass(sub, cls) and sub.__name__ == "SDPA" + cls.__name__
    original, rewritten = make_pair(cls, factory, *args, **kwargs)
    assert [(k, v.shape) for k, v in rewritten.state_dict().items()] == [
        (k, v.shape) for k, v in original.state_dict().items()
    ]
    assert [name for name, _ in rewritten.named_buffers()] == [name for name, _ in original.named_buffers()]
    clone = copy.deepcopy(rewritten)
    assert type(clone) is sub
    for a, b in zip(clone.state_dict().values(), original.state_dict().values()):
        assert torch.equal(a, b)


class _Unshaped(nn.Module):
    """Right forward signature, none of BertSelfAttention's attributes."""

    def forward(self, hidden_states, attention_mask=None, head_mask=None, encoder_hidden_states=None,
                encoder_attention_mask=None, past_key_value=None, output_attentions=False):  # fmt: skip
        return (hidden_states * 2,)


class _OtherSignature(BertSelfAttention):
    def forward(self, hidden_states, attention_mask=None, cache_position=None):  # type: ignore[override]
        return super().forward(hidden_states, attention_mask)


def test_missing_attributes_fall_back(sdpa_calls: Calls) -> None:
    x = randn(2, 3, 4)
    assert torch.equal(bert_self_attention_sdpa(_Unshaped)()(x)[0], x * 2)
    assert not sdpa_calls


def test_unsupported_signature_warns_and_keeps_forward(sdpa_calls: Calls) -> None:
    with pytest.warns(RuntimeWarning, match="not the supported signature"):
        sub = bert_self_attention_sdpa(_OtherSignature)
    original, rewritten = make_pair(_OtherSignature, bert_self_attention_sdpa, bert_config())
    assert type(rewritten) is sub and bert_self_attention_sdpa(sub) is sub
    x = randn(2, 3, 16)
    assert torch.equal(rewritten(x)[0], original(x)[0])
    assert not sdpa_calls


# --- whole models: swap every attention module's class in place --------------------------------------------------


def swap_attention(model: nn.Module, cls: type, factory: Factory) -> int:
    swapped = 0
    for module in model.modules():
        if type(module) is cls:
            module.__class__ = factory(cls)
            swapped += 1
    return swapped


@pytest.mark.parametrize(
    "build, cls, factory, inputs, options",
    [
        (
            lambda: BertModel(bert_config(num_hidden_layers=2, intermediate_size=32, hidden_dropout_prob=0.0)),
            BertSelfAttention,
            bert_self_attention_sdpa,
            dict(input_ids=torch.randint(0, 50, (3, 5)), attention_mask=torch.tensor(KEEP_5[:2] + [[1, 0, 0, 0, 0]])),
            {},
        ),
        (
            lambda: T5Model(t5_config(num_layers=2, d_ff=32, vocab_size=50)),
            T5Attention,
            t5_attention_sdpa,
            dict(
                input_ids=torch.randint(0, 50, (2, 5)),
                attention_mask=torch.tensor(KEEP_5[:2]),
                decoder_input_ids=torch.randint(0, 50, (2, 4)),
                decoder_attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
            ),
            dict(tol=T5_TOL),
        ),
        (
            lambda: GPT2Model(gpt2_config(n_layer=2, vocab_size=50, embd_pdrop=0.0)),
            GPT2Attention,
            gpt2_attention_sdpa,
            dict(input_ids=torch.randint(0, 50, (2, 5)), attention_mask=torch.tensor(GPT2_KEEP)),
            dict(weight=query_weight(GPT2_KEEP)),
        ),
    ],
    ids=["bert", "t5", "gpt2"],
)
def test_whole_model_swap(build: Callable[[], nn.Module], cls: type, factory: Factory, inputs: Dict[str, Any],
                          options: Dict[str, Any], sdpa_calls: Calls) -> None:  # fmt: skip
    torch.manual_seed(0)
    original = build().to(DT)
    rewritten = copy.deepcopy(original)
    assert swap_attention(rewritten, cls, factory) > 0
    assert_same(original, rewritten, inputs, sdpa_calls, **options)


def test_gpt2_model_incremental_decoding(sdpa_calls: Calls) -> None:
    torch.manual_seed(0)
    original = GPT2Model(gpt2_config(n_layer=2, vocab_size=50, embd_pdrop=0.0)).to(DT).eval()
    rewritten = copy.deepcopy(original)
    swap_attention(rewritten, GPT2Attention, gpt2_attention_sdpa)
    ids, mask = torch.randint(0, 50, (2, 6)), torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        outs = []
        for model in (original, rewritten):
            prefix = model(input_ids=ids[:, :4], attention_mask=mask[:, :4], use_cache=True)
            outs.append(model(input_ids=ids[:, 4:], attention_mask=mask, past_key_values=prefix.past_key_values))
    assert sdpa_calls
    torch.testing.assert_close(outs[1].last_hidden_state, outs[0].last_hidden_state, rtol=1e-9, atol=1e-10)
    for a, b in zip(tensors(outs[1].past_key_values), tensors(outs[0].past_key_values)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_no_warning_for_supported_classes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cls, factory, _, _ in CASES:
            factory(cls)


def test_bert_output_is_its_own_tensor_where_sdpa_keeps_a_transposed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # SDPA's CUDA kernels return [B, H, S, D] as a transposed view of a [B, S, H, D] buffer they keep for backward;
    # given that layout here, a caller changing BertSelfAttention's output in place (as the eager original's fresh
    # copy allows) must still train.
    monkeypatch.setenv(ak.BACKEND_ENV, "bert_self_attention=sdpa")
    real = torch.nn.functional.scaled_dot_product_attention

    def transposed(*args: Any, **kwargs: Any) -> Tensor:
        return real(*args, **kwargs).transpose(1, 2).contiguous().transpose(1, 2)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", transposed)
    original, rewritten = make_pair(BertSelfAttention, bert_self_attention_sdpa, bert_config())
    states = randn(2, 5, 16)
    results = []
    for module in (original, rewritten):
        module.train()
        hidden_states = states.clone().requires_grad_()
        out = module(hidden_states, padding_mask(KEEP_5[:2]))[0]  # no fully masked row: see the module's limitations
        out += hidden_states  # a residual added in place by the caller
        out.sin().sum().backward()
        results.append((out, hidden_states.grad, module.query.weight.grad))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)
