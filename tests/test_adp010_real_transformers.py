"""ADP010 FuseAttentionCore on real transformers 4.34.1 modeling files of fourteen families (ViT, BLIP, SegFormer,
LeViT, RemBERT, ViLT, Perceiver, MobileViT, Swin, SAM; ALBERT, ESM, BEiT and BLIP-2's Q-Former, whose
relative-position switches become fallback tests): rewrite the file through the API, load it as a module of the transformers package, and compare a
tiny float64 model built from it with the original (strict checkpoint load, outputs and gradients, eval and
training with dropout 0); the fused cores must really run SDPA (forced: on CPU ``auto`` keeps the hand-written
core), and the fallback arm must still serve
``output_attentions``."""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from adopter_codemods.api import rewrite_source  # noqa: E402
from adopter_kernels.equivalence import compare_models, load_source_as_module  # noqa: E402

if transformers.__version__ != "4.34.1":
    pytest.skip("written against transformers 4.34.1", allow_module_level=True)


@dataclass(frozen=True)
class Case:
    model_dir: str
    classes: tuple[str, ...]  # classes holding a finding, in file order
    build: Callable[[Any], Any]
    inputs: Callable[[], dict[str, Any]]
    sdpa_calls: int  # per forward without output_attentions (0: every call takes the arm kept as written)
    name: str = ""  # the test id, when not model_dir

    @property
    def id(self) -> str:
        return self.name or self.model_dir


def _image(size: int, channels: int = 3) -> Callable[[], dict[str, Any]]:
    return lambda: {"pixel_values": torch.randn(2, channels, size, size)}


def _tokens(vocab: int = 50, low: int = 0) -> Callable[[], dict[str, Any]]:
    return lambda: {
        "input_ids": torch.randint(low, vocab, (2, 6)),
        "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]]),
    }


def _albert(position_embedding_type: str) -> Callable[[Any], Any]:
    return lambda m: m.AlbertModel(
        m.AlbertConfig(
            vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            position_embedding_type=position_embedding_type,
        )
    )


def _esm(position_embedding_type: str) -> Callable[[Any], Any]:
    return lambda m: m.EsmModel(
        m.EsmConfig(
            vocab_size=33, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
            max_position_embeddings=40, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=1,
            mask_token_id=32, position_embedding_type=position_embedding_type,
        ),
        add_pooling_layer=False,
    )


def _beit(layer_bias: bool) -> Callable[[Any], Any]:
    return lambda m: m.BeitModel(
        m.BeitConfig(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32, image_size=8,
            patch_size=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
            use_relative_position_bias=layer_bias, use_shared_relative_position_bias=not layer_bias,
        ),
        add_pooling_layer=False,
    )


CASES = [
    Case(
        "vit",
        ("ViTSelfAttention",),
        lambda m: m.ViTModel(
            m.ViTConfig(
                hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32, image_size=8,
                patch_size=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            )
        ),
        _image(8),
        2,
    ),
    Case(
        "blip",
        ("BlipAttention",),
        lambda m: m.BlipVisionModel(
            m.BlipVisionConfig(
                hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=8,
                patch_size=4, attention_dropout=0.0,
            )
        ),
        _image(8),
        2,
    ),
    Case(
        "segformer",
        ("SegformerEfficientSelfAttention",),
        lambda m: m.SegformerModel(
            m.SegformerConfig(
                num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
                strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
            )
        ),
        _image(32),
        2,
    ),
    Case(
        "levit",
        ("LevitAttention", "LevitAttentionSubsample"),
        lambda m: m.LevitModel(
            m.LevitConfig(
                image_size=32, hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                key_dim=[8, 8, 8], patch_size=16, kernel_size=3, stride=2, padding=1, drop_path_rate=0.0,
            )
        ),
        _image(32),
        5,  # three blocks' attentions and two subsampling attentions
    ),
    Case(
        "rembert",
        ("RemBertSelfAttention",),
        lambda m: m.RemBertModel(
            m.RemBertConfig(
                vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, input_embedding_size=8,
                output_embedding_size=8, intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            ),
            add_pooling_layer=False,
        ),
        lambda: {"input_ids": torch.randint(0, 50, (2, 6)), "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])},
        2,  # the padding mask is passed to the fused call
    ),
    Case(
        "vilt",
        ("ViltSelfAttention",),  # its softmax is `nn.Softmax(dim=-1)(attention_scores)`, a module built and called
        lambda m: m.ViltModel(
            m.ViltConfig(
                vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
                image_size=8, patch_size=4, max_image_length=-1, max_position_embeddings=16, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            ),
            add_pooling_layer=False,
        ),
        lambda: {
            "input_ids": torch.randint(0, 50, (2, 6)),
            "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]]),
            "pixel_values": torch.randn(2, 3, 8, 8),
        },
        2,
    ),
    Case(
        "perceiver",
        ("PerceiverSelfAttention",),  # `nn.Softmax(dim=-1)(attention_scores)`; cross- and self-attention
        lambda m: m.PerceiverModel(
            m.PerceiverConfig(
                num_latents=8, d_latents=16, d_model=12, num_blocks=1, num_self_attends_per_block=2,
                num_self_attention_heads=2, num_cross_attention_heads=1, attention_probs_dropout_prob=0.0,
            )
        ),
        lambda: {"inputs": torch.randn(2, 6, 12), "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])},
        3,  # the cross-attention (with the padding mask) and two self-attentions
    ),
    Case(
        "mobilevit",
        ("MobileViTSelfAttention",),
        lambda m: m.MobileViTModel(
            m.MobileViTConfig(
                image_size=32, hidden_sizes=[16, 16, 16], neck_hidden_sizes=[8, 8, 16, 16, 16, 24, 32],
                num_attention_heads=2, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0,
            )
        ),
        _image(32),
        -1,  # counted from the model: one per transformer layer
    ),
    # BERT copies with the relative-position switch `if self.position_embedding_type == "relative_key" or ...:`
    Case("albert", ("AlbertAttention",), _albert("absolute"), _tokens(), 2),
    Case("albert", ("AlbertAttention",), _albert("relative_key"), _tokens(), 0, name="albert-relative_key"),
    Case("esm", ("EsmSelfAttention",), _esm("rotary"), _tokens(30, low=4), 2),
    Case("esm", ("EsmSelfAttention",), _esm("relative_key_query"), _tokens(30, low=4), 0, name="esm-relative_key_query"),
    # `if self.relative_position_bias is not None:` (a layer's bias: as written); the shared bias is the mask
    Case("beit", ("BeitSelfAttention",), _beit(layer_bias=False), _image(8), 2),
    Case("beit", ("BeitSelfAttention",), _beit(layer_bias=True), _image(8), 0, name="beit-layer_bias"),
    Case(
        "blip_2",
        ("Blip2Attention", "Blip2QFormerMultiHeadAttention"),
        lambda m: m.Blip2QFormerModel(
            m.Blip2QFormerConfig(
                vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
                max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                cross_attention_frequency=1, encoder_hidden_size=12,
            )
        ),
        lambda: {
            "query_embeds": torch.randn(2, 4, 16),
            "encoder_hidden_states": torch.randn(2, 5, 12),
            "encoder_attention_mask": torch.tensor([[1] * 5, [1, 1, 1, 0, 0]]),
        },
        4,  # the Q-Former's self- and cross-attention in both layers
    ),
    Case(
        "swin",
        ("SwinSelfAttention",),  # its bias is added as `relative_position_bias.unsqueeze(0)`, a call that only computes
        lambda m: m.SwinModel(
            m.SwinConfig(
                image_size=16, patch_size=2, embed_dim=8, depths=[2, 1], num_heads=[2, 2], window_size=4,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
            )
        ),
        _image(16),
        2,  # the shifted block's masked windows run as written (the mask is added through a view of the scores)
    ),
    Case(
        "sam",
        ("SamAttention",),
        lambda m: m.SamAttention(m.SamMaskDecoderConfig(hidden_size=16, num_attention_heads=2), downsample_rate=2),
        lambda: {"query": torch.randn(2, 1, 5, 16), "key": torch.randn(2, 1, 7, 16), "value": torch.randn(2, 1, 7, 16)},
        1,
    ),
]


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts SDPA calls, with SDPA forced (``auto`` picks it on CUDA only: on CPU it measured slower at small sizes)."""
    import adopter_kernels

    calls: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with adopter_kernels.use_backend("attention_core=sdpa"):
        yield calls


def _load(case: Case) -> tuple[Any, Any, list[Any]]:
    package = f"transformers.models.{case.model_dir}"
    original = importlib.import_module(f"{package}.modeling_{case.model_dir}")
    source = Path(original.__file__ or "").read_text(encoding="utf-8")
    result = rewrite_source(source, ["ADP010"], path=f"modeling_{case.model_dir}.py")
    ast.parse(result.code)
    rewritten = load_source_as_module(result.code, f"{package}.modeling_{case.model_dir}_adp010", package=package)
    return original, rewritten, result.findings


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rewritten_modeling_file_is_equivalent(case: Case, sdpa_calls: list[int]) -> None:
    original, rewritten, findings = _load(case)
    assert [f.cls for f in findings] == list(case.classes)
    torch.manual_seed(0)
    original_model = case.build(original).double()
    torch.manual_seed(0)
    rewritten_model = case.build(rewritten).double()
    torch.manual_seed(1)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in case.inputs().items()}
    report = compare_models(original_model, rewritten_model, kwargs=inputs)
    report.raise_if_failed()
    expected = case.sdpa_calls
    if expected < 0:
        expected = sum(type(m).__name__ == "MobileViTSelfAttention" for m in rewritten_model.modules())
    assert len(sdpa_calls) == expected * len(report.modes)  # only the rewritten model calls SDPA


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.model_dir in ("vit", "blip", "segformer", "rembert", "vilt", "perceiver", "albert", "esm", "beit")],
    ids=lambda c: c.id,
)
def test_output_attentions_keeps_the_code_as_written(case: Case, sdpa_calls: list[int]) -> None:
    """The fallback arm: with output_attentions the probabilities are the original's, and SDPA is not called."""
    original, rewritten, _ = _load(case)
    models = []
    for module in (original, rewritten):
        torch.manual_seed(0)
        models.append(case.build(module).double().eval())
    models[1].load_state_dict(models[0].state_dict(), strict=True)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in case.inputs().items()}
    outs = []
    for model in models:
        torch.manual_seed(2)  # ViLT's visual embedding samples patches
        with torch.no_grad():
            outs.append(model(**inputs, output_attentions=True))
    assert not sdpa_calls
    assert len(outs[0].attentions) == len(outs[1].attentions) > 0
    for a, b in zip(outs[0].attentions, outs[1].attentions):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(outs[0].last_hidden_state, outs[1].last_hidden_state, rtol=0, atol=0)
