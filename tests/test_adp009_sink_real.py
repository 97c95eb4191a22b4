"""ADP009 across an ``if``: the query projected before BERT's and BART's if/elif chains (LUKE's keys and values
before its ``if``; after it, BLIP-2's Q-Former), the rest inside the arms, on the real transformers 4.34.1 modeling
files. Plan "sink" (adopter_codemods/sink.py) copies the prefix atop every arm (the suffix to their ends), a later
round packs the projections where all three read one input. Each model is rewritten with ADP009 alone, built in float64 from the original and the rewritten
source, loaded strictly with the original's state_dict and compared in eval and training (outputs and gradients,
tolerance 1e-9, packed GEMM forced) on inputs that run every arm: self-attention and cross-attention, each without
and with a cache of earlier keys and values; LUKE with and without its entity-aware attention."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import libcst as cst
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import adopter_kernels  # noqa: E402
from adopter_codemods.api import rewrite_source  # noqa: E402
from adopter_kernels.equivalence import compare_models, default_dtype, load_source_as_module, seeded  # noqa: E402

if transformers.__version__ != "4.34.1":
    pytest.skip("written against transformers 4.34.1", allow_module_level=True)


def _rewritten(model: str) -> tuple[Any, Any, str]:
    """(original module, rewritten module, rewritten source) of ``modeling_<model>.py``."""
    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    path = Path(original.__file__)  # type: ignore[arg-type]
    result = rewrite_source(path.read_text(encoding="utf-8"), ["ADP009"], path=str(path))
    cst.parse_module(result.code)
    assert rewrite_source(result.code, ["ADP009"]).code == result.code
    rewritten = load_source_as_module(
        result.code, f"transformers.models.{model}.modeling_{model}_sunk", package=f"transformers.models.{model}"
    )
    return original, rewritten, result.code


class _Decode(torch.nn.Module):
    """An encoder-decoder step pair: the first call fills the cache, the second reads it, so every arm of the
    attention's if/elif chain runs (self- and cross-attention, without and with a cache)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, step: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        first = self.model(ids, use_cache=True, **kwargs)
        second = self.model(step, past_key_values=first.past_key_values, use_cache=True, **kwargs)
        return first.last_hidden_state, second.last_hidden_state


def _compare(original: Any, rewritten: Any, cls: str, config: Any, inputs: Any, wrap: bool = True) -> None:
    with default_dtype(torch.float64), adopter_kernels.use_backend("packed_qkv_linear=packed"):
        with seeded(0):
            vanilla = getattr(original, cls)(config)
            args, kwargs = inputs()
        with seeded(1):  # another init: the strict state_dict load must make them equal
            fused = getattr(rewritten, cls)(config)
        if wrap:
            vanilla, fused = _Decode(vanilla), _Decode(fused)
        compare_models(vanilla, fused, args, kwargs).raise_if_failed()


def test_bert_decoder_with_cross_attention() -> None:
    original, rewritten, code = _rewritten("bert")
    # the self-attention arms with and without a cache pack; the cross-attention arms keep the query alone
    assert code.count("adopter_kernels.packed_qkv_linear(hidden_states, self.query, self.key, self.value)") == 2
    assert code.count("mixed_query_layer = self.query(hidden_states)") == 2
    config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, is_decoder=True,
        add_cross_attention=True,
    )  # fmt: skip

    def inputs() -> tuple[tuple, dict]:
        ids, step = torch.randint(0, 40, (2, 5)), torch.randint(0, 40, (2, 1))
        return (ids, step), {"encoder_hidden_states": torch.randn(2, 3, 16)}

    _compare(original, rewritten, "BertModel", config, inputs)


def test_bart_encoder_decoder() -> None:
    original, rewritten, code = _rewritten("bart")
    assert code.count("adopter_kernels.packed_qkv_linear(hidden_states, self.q_proj, self.k_proj, self.v_proj)") == 2
    config = transformers.BartConfig(
        vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32, dropout=0.1,
        attention_dropout=0.1,
    )  # fmt: skip

    class Decode(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, ...]:
            first = self.model(ids, decoder_input_ids=ids[:, :4], use_cache=True)
            encoded = (first.encoder_last_hidden_state,)
            second = self.model(
                encoder_outputs=encoded, decoder_input_ids=step, past_key_values=first.past_key_values, use_cache=True
            )
            return first.last_hidden_state, second.last_hidden_state

    with default_dtype(torch.float64), adopter_kernels.use_backend("packed_qkv_linear=packed"):
        with seeded(0):
            vanilla = Decode(original.BartModel(config))
            ids, step = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 1))
        with seeded(1):
            fused = Decode(rewritten.BartModel(config))
        compare_models(vanilla, fused, (ids, step)).raise_if_failed()


@pytest.mark.parametrize("entity_aware", [True, False])
def test_luke_keys_and_values_before_the_if(entity_aware: bool) -> None:
    original, rewritten, code = _rewritten("luke")
    # the key and value projections are copied into both arms; the arm projecting the query from the same input packs
    assert code.count("adopter_kernels.packed_qkv_linear(concat_hidden_states, self.key, self.value, self.query)") == 1
    config = transformers.LukeConfig(
        vocab_size=40, entity_vocab_size=10, entity_emb_size=8, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1, use_entity_aware_attention=entity_aware,
    )  # fmt: skip

    def inputs() -> tuple[tuple, dict]:
        kwargs = {
            "entity_ids": torch.randint(0, 10, (2, 2)),
            "entity_position_ids": torch.randint(0, 5, (2, 2, 3)),
        }
        return (torch.randint(0, 40, (2, 5)),), kwargs

    _compare(original, rewritten, "LukeModel", config, inputs, wrap=False)


@pytest.mark.parametrize("model", ["blip_2", "instructblip"])
def test_qformer_query_after_the_if(model: str) -> None:
    # BLIP-2's and InstructBLIP's Q-Former project the query after the chain: its statement is copied to the end of
    # every arm, and the self-attention arms (with and without a cache) pack
    original, rewritten, code = _rewritten(model)
    assert code.count("adopter_kernels.packed_qkv_linear(hidden_states, self.key, self.value, self.query)") == 2
    assert code.count("mixed_query_layer = self.query(hidden_states)") == 1  # the cross-attention arm's
    prefix = "Blip2" if model == "blip_2" else "InstructBlip"
    config = getattr(transformers, f"{prefix}QFormerConfig")(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        cross_attention_frequency=1, encoder_hidden_size=12, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )  # fmt: skip
    config.query_length = 4  # read where a cache is passed; the models set it from their own config
    extra = {"input_ids": None} if model == "instructblip" else {}

    class Decode(torch.nn.Module):
        """The queries cross-attending to image features, then one more query reading their cache."""

        def __init__(self, qformer: torch.nn.Module) -> None:
            super().__init__()
            self.qformer = qformer

        def forward(self, queries: torch.Tensor, image: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, ...]:
            first = self.qformer(query_embeds=queries, encoder_hidden_states=image, use_cache=True, **extra)
            second = self.qformer(
                query_embeds=step, encoder_hidden_states=image, past_key_values=first.past_key_values, use_cache=True,
                **extra,
            )
            return first.last_hidden_state, second.last_hidden_state

    def inputs() -> tuple[tuple, dict]:
        return (torch.randn(2, 4, 16), torch.randn(2, 3, 12), torch.randn(2, 1, 16)), {}

    with default_dtype(torch.float64), adopter_kernels.use_backend("packed_qkv_linear=packed"):
        with seeded(0):
            vanilla = Decode(getattr(original, f"{prefix}QFormerModel")(config))
            args, kwargs = inputs()
        with seeded(1):
            fused = Decode(getattr(rewritten, f"{prefix}QFormerModel")(config))
        compare_models(vanilla, fused, args, kwargs).raise_if_failed()
