"""SDPA drop-in subclasses for Hugging Face-style attention classes (rules ADP001, ADP002, ADP003, ADP014).

What: ``bert_self_attention_sdpa(cls)``, ``t5_attention_sdpa(cls)``, ``gpt2_attention_sdpa(cls)`` and
``bart_attention_sdpa(cls)`` each return a cached subclass of ``cls`` (named ``"SDPA" + cls.__name__``) whose
attention core is ``torch.nn.functional.scaled_dot_product_attention``. Rewritten model code reads::

    self.self = bert_self_attention_sdpa(BertSelfAttention)(config, position_embedding_type=...)

Why a subclass: it inherits ``__init__`` unchanged, so the constructor signature, parameters, buffers and
``state_dict`` keys are exactly the original's and a checkpoint of the original loads with ``strict=True``.
It also works for the many classes that copy these ("Copied from transformers.models.bert...":
``RobertaSelfAttention``, ``ElectraSelfAttention``, ...), and an existing module can be converted in place with
``module.__class__ = bert_self_attention_sdpa(type(module))``.

Semantics: the same function as the original's eager forward, in eval and training (up to floating-point
rounding): Hugging Face's additive float masks (``finfo.min``, not ``-inf``) are passed to SDPA as they are, so
fully masked rows behave as in eager; dropout is applied only when ``self.training``; the returned tuples
(``past_key_value`` / ``present`` / ``position_bias``) are the original's.

Fallback to the original ``forward`` (``super().forward``) when the fast path cannot give the same result:
attention probabilities requested (``output_attentions``), a head mask (BART: ``layer_head_mask``) given, BERT
relative position embeddings, T5 pruned heads, GPT-2 ``reorder_and_upcast_attn``, or an instance that lacks an
attribute the fast path reads.

Limitations:
- The fast path mirrors the eager forward of transformers 4.34.1 (tested; BART's with its cache in both
  attentions, and the mask-size check with the original's message). The forward signatures are the same in
  4.20.1 and, for BERT and GPT-2, in 4.46.3 (BertSelfAttention's code is identical there); T5Attention gained
  ``cache_position`` in 4.4x. If ``cls.forward`` does not have exactly the supported parameter names, the factory
  warns once and the subclass keeps the original forward (correct, not faster). Older GPT-2 code masked the
  causal part with ``masked_bias`` (-1e4) instead of ``finfo.min``: same results except in rows whose visible keys
  are all padding.
- Rows in which every visible key is padding (e.g. GPT-2 left padding): outputs equal eager's, but autograd's
  (meaningless) gradient through those rows differs from eager's; it is zero when the loss ignores them.
- It assumes the semantics of the class it mirrors; a copied class with the same signature and attributes but a
  modified attention computation would not be detected.
- SDPA's dropout draws random numbers differently from ``nn.Dropout``: training with dropout > 0 is the same
  distribution, not the same sample.
- The generated classes are not importable by name, so pickling a whole model (``torch.save(model)``) fails;
  ``copy.deepcopy`` and ``state_dict`` checkpoints work.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from typing import Any, Callable, Optional, Set, Tuple, TypeVar, cast

import torch
from torch import Tensor, nn

from ._dispatch import autocast_dtype, compute_dtype, forced, is_plain, select
from ._pickling import reduce_through
from .attention_backends import fast_attention

__all__ = ["bert_self_attention_sdpa", "t5_attention_sdpa", "gpt2_attention_sdpa", "bart_attention_sdpa"]

M = TypeVar("M", bound=nn.Module)
KeyValue = Tuple[Tensor, Tensor]


# ---------------------------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------------------------


def _split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``[B, S, H*D] -> [B, H, S, D]`` (what ``transpose_for_scores`` / ``_split_heads`` / T5 ``shape`` do)."""
    return x.view(*x.shape[:-1], num_heads, -1).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    """``[B, H, S, D] -> [B, S, H*D]``."""
    x = x.transpose(1, 2)
    return x.reshape(*x.shape[:-2], -1)


def _fresh_merged_heads(context: Tensor) -> Tensor:
    """``_merge_heads`` returning a tensor of its own where the context is kept for backward, as the original's
    ``permute(...).contiguous().view(...)`` does. On CUDA, SDPA and xformers lay their output out as ``[B, S, H, D]``
    and keep it for backward: the merge would be a view of it, and a caller changing the result in place
    (``out += residual``) would make backward raise."""
    merged = _merge_heads(context)
    return merged.clone() if merged.requires_grad and context.transpose(1, 2).is_contiguous() else merged


def _additive_mask(mask: Optional[Tensor], dtype: torch.dtype) -> Optional[Tensor]:
    """Return an additive mask in the query's dtype, as SDPA requires (eager relies on type promotion instead).

    A float mask of a wider range is clamped to ``finfo(dtype).min`` first: under autocast a float32 ``finfo.min``
    mask meets half precision queries and would otherwise become ``-inf``, turning eager's uniform fully-masked
    rows into NaN. A narrower one (a float32 mask with float64 queries) is only widened: clamping it at float64's
    minimum would not even be representable in its own dtype.
    """
    if mask is None or mask.dtype == dtype:
        return mask
    if mask.is_floating_point() and torch.finfo(mask.dtype).min < torch.finfo(dtype).min:
        mask = mask.clamp(min=torch.finfo(dtype).min)
    return mask.to(dtype)


def _merge_causal_mask(causal: Tensor, mask: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    """One additive mask equal to eager's ``torch.where(causal, scores, finfo.min) + mask``.

    Where ``causal`` is false eager gives ``finfo.min + mask`` and we give ``scores + finfo.min + mask``; the
    scores vanish in ``finfo.min``'s rounding, so both agree, including rows that end up at ``-inf``.
    """
    merged = torch.zeros(causal.shape, dtype=dtype, device=causal.device)
    merged = merged.masked_fill(~causal.bool(), torch.finfo(dtype).min)  # old HF versions keep a uint8 buffer
    extra = _additive_mask(mask, dtype)
    return merged if extra is None else merged + extra


#: On CPU with bfloat16 compute (bfloat16 layers, or float32 ones under bfloat16 autocast) SDPA pays for these classes
#: only from this many attention scores (batch x heads x queries x keys), in rows of at least this many keys. One layer
#: at BERT-base width (12 heads of 64), one thread, batch 1 and 4, 16 to 1024 keys
#: (benchmarks/bench_attention_lengths.py --kernel; gpu_bench/results/cpu-2026-11-28/attention_classes_*.txt): bfloat16
#: inference, BERT, GPT-2 and BART 0.87-0.98x at 32-256 keys, T5 0.99-1.05x below 256, all four 1.13-1.36x at
#: 4x12x512x512; under autocast inference 0.92-0.99x at 16-128 keys (GPT-2 to 256), 1.60-1.95x at 4x12x512x512; autocast
#: training 0.71-0.94x to 256 keys, 1.23-1.28x at 4x12x512x512. float32 without autocast runs SDPA at every size
#: (0.98-0.99x at worst, BART below 128 keys, within noise; 1.02-2.00x elsewhere).
_CPU_BF16_MIN_SCORES = 4 * 12 * 512 * 512
_CPU_BF16_MIN_KEYS = 512
#: With float16 compute on CPU, per grad mode (False: inference): the same layers and machine. float16 layers
#: (``model.half()``), batch 1 over 16-512 keys and batch 4 at 16, 64 and 256
#: (attention_classes_fp16_{infer,train}.txt): inference 1.02-2.49x from 4x12x16x16 or 1x12x32x32 scores (GPT-2
#: 0.97-1.02x, within noise, up to 128 keys; 0.98x at 1x12x16x16); training 0.94-0.98x for BERT and BART at batch 1 up
#: to 64 keys, 1.00-1.36x from 4x12x64x64 or 1x12x128x128 scores in rows of 64 keys. float32 layers under float16
#: autocast, batch 1 over 16-256 keys and batch 4 at 16-512 (attention_classes_fp16_autocast_*.txt): the same sizes pay
#: (inference 1.00-3.31x from there, 0.98-1.05x below; training 1.01-1.30x from there, 0.95-0.98x for BERT and BART at
#: batch 1 below).
_CPU_FP16_MIN_SCORES = {False: 4 * 12 * 16 * 16, True: 4 * 12 * 64 * 64}
_CPU_FP16_MIN_KEYS = {False: 16, True: 64}


def _sdpa_pays(kernel: str, states: Tensor, heads: int, keys: int) -> bool:
    """The size test of the SDPA backend, which the cached decision cannot make (it sees no shapes): on CPU with
    bfloat16 compute (bfloat16 layers or autocast), ``_CPU_BF16_MIN_SCORES`` scores in rows of ``_CPU_BF16_MIN_KEYS``
    keys; with float16 compute, ``_CPU_FP16_MIN_SCORES`` in rows of ``_CPU_FP16_MIN_KEYS`` for the grad mode;
    elsewhere, and with a backend forced, none. ``states``: the layer's ``[batch, queries, hidden]`` input."""
    if not states.is_cpu:
        return True
    compute = compute_dtype(states.dtype, autocast_dtype("cpu"))
    if compute == torch.bfloat16:
        least, least_keys = _CPU_BF16_MIN_SCORES, _CPU_BF16_MIN_KEYS
    elif compute == torch.float16:
        grad = torch.is_grad_enabled()
        least, least_keys = _CPU_FP16_MIN_SCORES[grad], _CPU_FP16_MIN_KEYS[grad]
    else:
        return True
    if keys >= least_keys and states.shape[0] * heads * states.shape[1] * keys >= least:
        return True
    return forced(kernel) != "auto"


def _key_length(states: Tensor, cross_states: Optional[Tensor], past: Optional[KeyValue]) -> int:
    """Keys of a BERT- or BART-style call: cross-attention's cached keys or its states, else the query states and
    the cache they extend."""
    if cross_states is not None:
        return cross_states.shape[1] if past is None else past[0].shape[2]
    return states.shape[1] + (0 if past is None else past[0].shape[2])


def _has_attributes(module: nn.Module, names: Tuple[str, ...]) -> bool:
    return all(hasattr(module, name) for name in names)


def _forward_parameters(cls: Any) -> Tuple[str, ...]:  # any class with a forward
    return tuple(inspect.signature(cls.forward).parameters)[1:]  # drop ``self``


@functools.lru_cache(maxsize=None)
def _sdpa_subclass(cls: type, mixin: type, rule: str) -> type:
    """Create ``SDPA<cls>`` = ``(mixin, cls)``; without the mixin if ``cls.forward``'s signature is not supported."""
    if getattr(cls, "_adopter_rule", None) == rule:  # already converted: keep rewriting idempotent
        return cls
    name = "SDPA" + cls.__name__
    bases: Tuple[type, ...] = (mixin, cls)
    if _forward_parameters(cls) != _forward_parameters(mixin):
        warnings.warn(
            f"{rule}: {cls.__module__}.{cls.__qualname__}.forward{_forward_parameters(cls)} is not the supported "
            f"signature {_forward_parameters(mixin)}; {name} keeps the original attention computation",
            RuntimeWarning,
            stacklevel=3,
        )
        bases = (cls,)
    doc = f"{cls.__name__} with F.scaled_dot_product_attention as its attention core ({rule}); see {__name__}."
    reduce = reduce_through(_sdpa_subclass, (cls, mixin, rule))  # pickle cannot find this class by name
    namespace = {"__module__": __name__, "__qualname__": name, "__doc__": doc, "_adopter_rule": rule,
                 "__reduce_ex__": reduce}
    return type(name, bases, namespace)


# ---------------------------------------------------------------------------------------------------------------
# ADP001: BertSelfAttention and its copies
# ---------------------------------------------------------------------------------------------------------------

_BERT_ATTRIBUTES = (
    "query", "key", "value", "dropout", "num_attention_heads", "attention_head_size",
    "position_embedding_type", "is_decoder",
)  # fmt: skip


class _BertSelfAttentionSDPA(nn.Module):
    """Mixin placed before a BertSelfAttention-style class in the MRO; ``super()`` is that class."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    dropout: nn.Dropout
    num_attention_heads: int
    attention_head_size: int
    position_embedding_type: str
    is_decoder: bool

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Optional[Tensor] = None,
        head_mask: Optional[Tensor] = None,
        encoder_hidden_states: Optional[Tensor] = None,
        encoder_attention_mask: Optional[Tensor] = None,
        past_key_value: Optional[KeyValue] = None,
        output_attentions: Optional[bool] = False,
    ) -> Tuple[Any, ...]:
        backend = select("bert_self_attention", hidden_states, training=torch.is_grad_enabled())
        if (
            backend == "reference"
            or output_attentions
            or head_mask is not None
            or not _has_attributes(self, _BERT_ATTRIBUTES)
            or not is_plain(self.dropout, nn.Dropout)  # SDPA drops out itself: a replaced or hooked one is called
            or self.position_embedding_type in ("relative_key", "relative_key_query")
            or not _sdpa_pays("bert_self_attention", hidden_states, self.num_attention_heads,
                              _key_length(hidden_states, encoder_hidden_states, past_key_value))
        ):
            return super().forward(
                hidden_states, attention_mask, head_mask, encoder_hidden_states, encoder_attention_mask,
                past_key_value, output_attentions,
            )  # fmt: skip
        heads = self.num_attention_heads
        query = _split_heads(self.query(hidden_states), heads)
        if encoder_hidden_states is not None:  # cross-attention: encoder keys/values (cached after the first step)
            attention_mask = encoder_attention_mask
            if past_key_value is not None:
                key, value = past_key_value[0], past_key_value[1]
            else:
                key = _split_heads(self.key(encoder_hidden_states), heads)
                value = _split_heads(self.value(encoder_hidden_states), heads)
        else:
            key = _split_heads(self.key(hidden_states), heads)
            value = _split_heads(self.value(hidden_states), heads)
            if past_key_value is not None:
                key = torch.cat([past_key_value[0], key], dim=2)
                value = torch.cat([past_key_value[1], value], dim=2)
        context = fast_attention(
            "bert_self_attention",
            backend,
            query,
            key,
            value,
            _additive_mask(attention_mask, query.dtype),
            dropout_p=self.dropout.p if self.dropout.training else 0.0,
            is_causal=False,
            scale=1.0 / math.sqrt(self.attention_head_size),
        )
        outputs: Tuple[Any, ...] = (_fresh_merged_heads(context),)  # returned to the caller as it is
        if self.is_decoder:
            outputs = outputs + ((key, value),)
        return outputs


def bert_self_attention_sdpa(cls: type[M]) -> type[M]:
    """ADP001: cached SDPA subclass of a BertSelfAttention-style class (same constructor, same parameters).

    Expects the attributes of ``_BERT_ATTRIBUTES`` and ``forward(hidden_states, attention_mask, head_mask,
    encoder_hidden_states, encoder_attention_mask, past_key_value, output_attentions)``; falls back to the
    original forward for ``output_attentions``, a ``head_mask`` and relative position embeddings.
    """
    return cast("type[M]", _sdpa_subclass(cast(type, cls), _BertSelfAttentionSDPA, "ADP001"))


# ---------------------------------------------------------------------------------------------------------------
# ADP002: T5Attention and its copies
# ---------------------------------------------------------------------------------------------------------------

_T5_ATTRIBUTES = (
    "q", "k", "v", "o", "n_heads", "dropout", "has_relative_attention_bias", "compute_bias", "pruned_heads",
    "is_decoder", "gradient_checkpointing",
)  # fmt: skip


def _t5_lengths(hidden_states: Tensor, key_value_states: Optional[Tensor], past_key_value: Optional[KeyValue],
                query_length: Optional[int]) -> Tuple[int, int]:
    """T5Attention's ``(real_seq_length, key_length)``."""
    real_seq_length = hidden_states.shape[1]
    if past_key_value is not None:
        real_seq_length += past_key_value[0].shape[2] if query_length is None else query_length
    return real_seq_length, real_seq_length if key_value_states is None else key_value_states.shape[1]


def _t5_project(
    hidden_states: Tensor,
    proj: nn.Module,
    key_value_states: Optional[Tensor],
    past: Optional[Tensor],
    heads: int,
) -> Tensor:
    """Keys or values exactly as T5Attention's inner ``project`` (incl. its prefix-tuning length check)."""
    if past is None:
        return _split_heads(proj(hidden_states if key_value_states is None else key_value_states), heads)
    if key_value_states is None:  # self-attention: append this step to the cache
        return torch.cat([past, _split_heads(proj(hidden_states), heads)], dim=2)
    if past.shape[2] != key_value_states.shape[1]:
        return _split_heads(proj(key_value_states), heads)
    return past


class _T5AttentionSDPA(nn.Module):
    """Mixin placed before a T5Attention-style class in the MRO; ``super()`` is that class."""

    q: nn.Linear
    k: nn.Linear
    v: nn.Linear
    o: nn.Linear
    n_heads: int
    dropout: float
    has_relative_attention_bias: bool
    pruned_heads: Set[int]
    is_decoder: bool
    gradient_checkpointing: bool
    compute_bias: Callable[..., torch.Tensor]

    def forward(
        self,
        hidden_states: Tensor,
        mask: Optional[Tensor] = None,
        key_value_states: Optional[Tensor] = None,
        position_bias: Optional[Tensor] = None,
        past_key_value: Optional[KeyValue] = None,
        layer_head_mask: Optional[Tensor] = None,
        query_length: Optional[int] = None,
        use_cache: bool = False,
        output_attentions: bool = False,
    ) -> Tuple[Any, ...]:
        backend = select("t5_attention", hidden_states, training=torch.is_grad_enabled())
        if (
            backend == "reference"
            or output_attentions
            or layer_head_mask is not None
            or not _has_attributes(self, _T5_ATTRIBUTES)
            or self.pruned_heads  # the original selects bias heads with a pruning mask; not worth mirroring
            or (past_key_value is not None and len(past_key_value) != 2)  # let the original raise its error
            or not _sdpa_pays("t5_attention", hidden_states, self.n_heads,
                              _t5_lengths(hidden_states, key_value_states, past_key_value, query_length)[1])
        ):
            return super().forward(
                hidden_states, mask, key_value_states, position_bias, past_key_value, layer_head_mask,
                query_length, use_cache, output_attentions,
            )  # fmt: skip
        seq_length = hidden_states.shape[1]
        real_seq_length, key_length = _t5_lengths(hidden_states, key_value_states, past_key_value, query_length)

        heads = self.n_heads
        query = _split_heads(self.q(hidden_states), heads)
        past_key, past_value = (None, None) if past_key_value is None else past_key_value
        key = _t5_project(hidden_states, self.k, key_value_states, past_key, heads)
        value = _t5_project(hidden_states, self.v, key_value_states, past_value, heads)

        # Built exactly as the original does, because it is returned and reused by the following layers.
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros(
                    (1, heads, real_seq_length, key_length), device=query.device, dtype=query.dtype
                )
                if self.gradient_checkpointing and self.training:
                    position_bias.requires_grad = True
            else:
                position_bias = self.compute_bias(real_seq_length, key_length, device=query.device)
            if past_key_value is not None:  # cached keys: only the bias rows of the new queries
                position_bias = position_bias[:, :, -seq_length:, :]
            if mask is not None:
                position_bias = position_bias + mask

        # T5 does not scale scores (scale=1.0); the bias (+ mask) is one additive mask, so its gradient
        # reaches relative_attention_bias through SDPA.
        context = fast_attention(
            "t5_attention",
            backend,
            query,
            key,
            value,
            _additive_mask(position_bias, query.dtype),
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=False,
            scale=1.0,
        )
        present = (key, value) if (self.is_decoder and use_cache) else None
        return (self.o(_merge_heads(context)), present, position_bias)


def t5_attention_sdpa(cls: type[M]) -> type[M]:
    """ADP002: cached SDPA subclass of a T5Attention-style class (same constructor, same parameters).

    Expects the attributes of ``_T5_ATTRIBUTES`` and ``forward(hidden_states, mask, key_value_states,
    position_bias, past_key_value, layer_head_mask, query_length, use_cache, output_attentions)``; returns
    ``(attn_output, present_key_value_state, position_bias)`` like the original and falls back to it for
    ``output_attentions``, a ``layer_head_mask`` and pruned heads.
    """
    return cast("type[M]", _sdpa_subclass(cast(type, cls), _T5AttentionSDPA, "ADP002"))


# ---------------------------------------------------------------------------------------------------------------
# ADP003: GPT2Attention and its copies
# ---------------------------------------------------------------------------------------------------------------

_GPT2_ATTRIBUTES = (
    "c_attn", "c_proj", "attn_dropout", "resid_dropout", "num_heads", "split_size", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "layer_idx", "reorder_and_upcast_attn", "is_cross_attention", "bias",
)  # fmt: skip


class _GPT2AttentionSDPA(nn.Module):
    """Mixin placed before a GPT2Attention-style class in the MRO; ``super()`` is that class."""

    c_attn: nn.Module
    q_attn: nn.Module
    c_proj: nn.Module
    attn_dropout: nn.Dropout
    resid_dropout: nn.Dropout
    num_heads: int
    split_size: int
    scale_attn_weights: bool
    scale_attn_by_inverse_layer_idx: bool
    layer_idx: Optional[int]
    reorder_and_upcast_attn: bool
    is_cross_attention: bool
    bias: Tensor

    def forward(
        self,
        hidden_states: Tensor,
        layer_past: Optional[KeyValue] = None,
        attention_mask: Optional[Tensor] = None,
        head_mask: Optional[Tensor] = None,
        encoder_hidden_states: Optional[Tensor] = None,
        encoder_attention_mask: Optional[Tensor] = None,
        use_cache: Optional[bool] = False,
        output_attentions: Optional[bool] = False,
    ) -> Tuple[Any, ...]:
        backend = select("gpt2_attention", hidden_states, training=torch.is_grad_enabled())
        if (
            backend == "reference"
            or output_attentions
            or head_mask is not None
            or not _has_attributes(self, _GPT2_ATTRIBUTES)
            or not is_plain(self.attn_dropout, nn.Dropout)  # SDPA drops out itself: a replaced or hooked one is called
            or self.reorder_and_upcast_attn  # float32 scores under disabled autocast: keep the original
            or (encoder_hidden_states is not None and not hasattr(self, "q_attn"))  # the original raises
            or not _sdpa_pays("gpt2_attention", hidden_states, self.num_heads,
                              (hidden_states if encoder_hidden_states is None else encoder_hidden_states).shape[1]
                              + (0 if layer_past is None else layer_past[0].shape[-2]))
        ):
            return super().forward(
                hidden_states, layer_past, attention_mask, head_mask, encoder_hidden_states,
                encoder_attention_mask, use_cache, output_attentions,
            )  # fmt: skip
        if encoder_hidden_states is not None:
            query = self.q_attn(hidden_states)
            key, value = self.c_attn(encoder_hidden_states).split(self.split_size, dim=2)
            attention_mask = encoder_attention_mask
        else:
            query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query, key, value = (_split_heads(t, self.num_heads) for t in (query, key, value))
        if layer_past is not None:
            key = torch.cat((layer_past[0], key), dim=-2)
            value = torch.cat((layer_past[1], value), dim=-2)
        present = (key, value) if use_cache is True else None  # ``is True`` as in the original

        scale = 1.0 / math.sqrt(value.shape[-1]) if self.scale_attn_weights else 1.0
        if self.scale_attn_by_inverse_layer_idx:
            scale /= float(self.layer_idx + 1)  # type: ignore[operator]  # set whenever this flag is used
        query_length, key_length = query.shape[-2], key.shape[-2]
        is_causal = False
        if self.is_cross_attention:  # as in the original, the flag (not the inputs) decides on causality
            mask = _additive_mask(attention_mask, query.dtype)
        elif attention_mask is None and query_length == key_length:
            # The buffer is a lower triangle, so this is SDPA's own causal mask (which lets CUDA pick flash).
            mask, is_causal = None, True
        else:
            causal = self.bias[:, :, key_length - query_length : key_length, :key_length]
            mask = _merge_causal_mask(causal, attention_mask, query.dtype)
        context = fast_attention(
            "gpt2_attention",
            backend,
            query,
            key,
            value,
            mask,
            dropout_p=self.attn_dropout.p if self.attn_dropout.training else 0.0,
            is_causal=is_causal,
            scale=scale,
        )
        attn_output = self.resid_dropout(self.c_proj(_merge_heads(context)))
        return (attn_output, present)


def gpt2_attention_sdpa(cls: type[M]) -> type[M]:
    """ADP003: cached SDPA subclass of a GPT2Attention-style class (same constructor, parameters and buffers).

    Expects the attributes of ``_GPT2_ATTRIBUTES`` and ``forward(hidden_states, layer_past, attention_mask,
    head_mask, encoder_hidden_states, encoder_attention_mask, use_cache, output_attentions)``. The causal buffer
    slice (query vs key length with cached keys) and the padding mask become one additive float mask. Falls back
    to the original for ``output_attentions``, a ``head_mask`` and ``reorder_and_upcast_attn``. Assumes the
    ``bias`` buffer is the lower-triangular mask GPT2Attention builds (it is not in the state dict).
    """
    return cast("type[M]", _sdpa_subclass(cast(type, cls), _GPT2AttentionSDPA, "ADP003"))


# ---------------------------------------------------------------------------------------------------------------
# ADP014: BartAttention and its copies (MBart, Marian, Pegasus, Whisper, Wav2Vec2, HuBERT, ... in 4.x)
# ---------------------------------------------------------------------------------------------------------------

_BART_ATTRIBUTES = (
    "embed_dim", "num_heads", "dropout", "head_dim", "scaling", "is_decoder", "k_proj", "v_proj", "q_proj",
    "out_proj",
)  # fmt: skip


class _BartAttentionSDPA(nn.Module):
    """Mixin placed before a BartAttention-style class in the MRO; ``super()`` is that class."""

    embed_dim: int
    num_heads: int
    dropout: float
    head_dim: int
    scaling: float
    is_decoder: bool
    k_proj: nn.Module
    v_proj: nn.Module
    q_proj: nn.Module
    out_proj: nn.Module

    def forward(
        self,
        hidden_states: Tensor,
        key_value_states: Optional[Tensor] = None,
        past_key_value: Optional[KeyValue] = None,
        attention_mask: Optional[Tensor] = None,
        layer_head_mask: Optional[Tensor] = None,
        output_attentions: bool = False,
    ) -> Tuple[Any, ...]:
        backend = select("bart_attention", hidden_states, training=torch.is_grad_enabled())
        if (
            backend == "reference"
            or output_attentions
            or layer_head_mask is not None
            or not _has_attributes(self, _BART_ATTRIBUTES)
            or not _sdpa_pays("bart_attention", hidden_states, self.num_heads,
                              _key_length(hidden_states, key_value_states, past_key_value))
        ):
            return super().forward(
                hidden_states, key_value_states, past_key_value, attention_mask, layer_head_mask, output_attentions
            )
        # As the original: the query scaled before the product (so SDPA's scale is 1.0), the keys and values of
        # the four cases (cross-attention reusing its cache, cross-attention, self-attention extending its cache,
        # self-attention), each [B, H, S, D] and contiguous, as `_shape` makes them; a decoder returns them.
        bsz, tgt_len, _ = hidden_states.size()
        heads = functools.partial(_bart_heads, bsz=bsz, num_heads=self.num_heads, head_dim=self.head_dim)
        query = heads(self.q_proj(hidden_states) * self.scaling)
        if (
            key_value_states is not None
            and past_key_value is not None
            and past_key_value[0].shape[2] == key_value_states.shape[1]
        ):
            key, value = past_key_value[0], past_key_value[1]
        elif key_value_states is not None:
            key = heads(self.k_proj(key_value_states))
            value = heads(self.v_proj(key_value_states))
        else:
            key = heads(self.k_proj(hidden_states))
            value = heads(self.v_proj(hidden_states))
            if past_key_value is not None:
                key = torch.cat([past_key_value[0], key], dim=2)
                value = torch.cat([past_key_value[1], value], dim=2)
        if self.is_decoder:
            past_key_value = (key, value)
        src_len = key.size(2)
        if attention_mask is not None and attention_mask.size() != (bsz, 1, tgt_len, src_len):
            raise ValueError(  # the original's check, word for word
                f"Attention mask should be of size {(bsz, 1, tgt_len, src_len)}, but is {attention_mask.size()}"
            )
        context = fast_attention(
            "bart_attention",
            backend,
            query,
            key,
            value,
            _additive_mask(attention_mask, query.dtype),
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=False,
            scale=1.0,
        )
        attn_output = self.out_proj(context.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim))
        return attn_output, None, past_key_value


def _bart_heads(x: Tensor, bsz: int, num_heads: int, head_dim: int) -> Tensor:
    """BartAttention's ``_shape(x, -1, bsz)``: ``[B, S, H*D] -> [B, H, S, D]``, contiguous. A function, not a method
    of the mixin: a method would shadow any of that name the attention class has."""
    return x.view(bsz, -1, num_heads, head_dim).transpose(1, 2).contiguous()


def bart_attention_sdpa(cls: type[M]) -> type[M]:
    """ADP014: cached SDPA subclass of a BartAttention-style class (same constructor, same parameters).

    Expects the attributes of ``_BART_ATTRIBUTES`` and ``forward(hidden_states, key_value_states, past_key_value,
    attention_mask, layer_head_mask, output_attentions)``; returns ``(attn_output, None, past_key_value)`` like the
    original without ``output_attentions``, and falls back to it for ``output_attentions`` and a
    ``layer_head_mask``.
    """
    return cast("type[M]", _sdpa_subclass(cast(type, cls), _BartAttentionSDPA, "ADP014"))
