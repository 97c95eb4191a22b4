"""ADP009 (q/k/v projections nested in larger expressions) on real modeling files of whatever transformers is
importable (a helper of ``test_adp009_hoist.py``; also run as a script in a subprocess whose ``PYTHONPATH`` holds
another transformers: 4.57.6 or 5.23.0).

For each model: rewrite its ``modeling_<model>.py`` with the given rules, check that the output parses and a second
run changes nothing, then build a tiny float64 model from the original and from the rewritten module, load the
original's state_dict strictly and compare outputs and gradients in eval and training (``compare_models``,
tolerance 1e-9), with ``packed_qkv_linear`` forced to its packed GEMM (on CPU it would otherwise apply the three
Linears). Prints one JSON line per model: ``{"model", "transformers", "findings": {"ADP009:LlamaAttention": 1}}``.

    python tests/qkv_real.py RULES MODEL...      # RULES: comma-separated codes, or "all"
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import libcst as cst
import torch
import transformers

from adopter_codemods.api import rewrite_source
from adopter_kernels.equivalence import compare_models, default_dtype, load_source_as_module, seeded
from adopter_codemods.rules import builtin_rules

_DECODER = dict(
    vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, hidden_act="silu",
)  # fmt: skip
_ENCODER = dict(
    vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
    max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
)  # fmt: skip
_VISION = dict(
    image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
)  # fmt: skip


def _tokens() -> tuple[tuple, dict[str, Any]]:
    ids = torch.randint(0, 40, (2, 7))
    return (), {"input_ids": ids, "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2])}


def _decoder_tokens() -> tuple[tuple, dict[str, Any]]:
    ids = torch.randint(0, 50, (2, 7))
    return (), {"input_ids": ids, "attention_mask": torch.tensor([[1] * 7, [0] * 2 + [1] * 5]), "use_cache": False}


def _pixels() -> tuple[tuple, dict[str, Any]]:
    return (torch.randn(2, 3, 8, 8),), {}


_SWIN = dict(image_size=8, patch_size=2, num_channels=3, embed_dim=8, depths=[1, 1], num_heads=[2, 2], window_size=2)
_PEGASUS_X = dict(
    vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
    encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32, num_global_tokens=2, block_size=4,
)  # fmt: skip


def _encoder_decoder_tokens() -> tuple[tuple, dict[str, Any]]:
    ids = torch.randint(0, 40, (2, 8))
    return (), {"input_ids": ids, "decoder_input_ids": ids[:, :5]}


def _layout_tokens() -> tuple[tuple, dict[str, Any]]:
    _, kwargs = _tokens()
    corners = torch.randint(0, 50, (2, 7, 2))
    return (), {**kwargs, "bbox": torch.cat([corners, corners + 10], dim=-1)}


_PIX2STRUCT = dict(
    hidden_size=16, patch_embed_hidden_size=48, d_ff=32, d_kv=8, num_attention_heads=2, num_hidden_layers=2,
    patch_size=4, num_channels=3, dropout_rate=0.1, attention_dropout=0.1, seq_len=6,
)  # fmt: skip


def _flattened_patches() -> tuple[tuple, dict[str, Any]]:
    patches = torch.randn(2, 6, 2 + 4 * 4 * 3)
    patches[..., 0] = torch.arange(6) // 3 + 1  # row and column of each patch: embedding indices
    patches[..., 1] = torch.arange(6) % 3 + 1
    return (), {"flattened_patches": patches, "attention_mask": torch.tensor([[1] * 6, [1] * 4 + [0] * 2])}


# model dir -> (model class, config class, config arguments, inputs)
MODELS: dict[str, tuple[str, str, dict[str, Any], Callable[[], tuple[tuple, dict[str, Any]]]]] = {
    "llama": ("LlamaModel", "LlamaConfig", _DECODER, _decoder_tokens),
    "mistral": ("MistralModel", "MistralConfig", _DECODER, _decoder_tokens),
    "qwen2": ("Qwen2Model", "Qwen2Config", _DECODER, _decoder_tokens),
    "bert": ("BertModel", "BertConfig", _ENCODER, _tokens),
    "vit": ("ViTModel", "ViTConfig", _VISION, _pixels),
    "clip": ("CLIPVisionModel", "CLIPVisionConfig", _VISION, _pixels),
    "swin": ("SwinModel", "SwinConfig", _SWIN, _pixels),
    "layoutlm": ("LayoutLMModel", "LayoutLMConfig", _ENCODER, _layout_tokens),
    "pegasus_x": ("PegasusXModel", "PegasusXConfig", _PEGASUS_X, _encoder_decoder_tokens),
    "pix2struct": ("Pix2StructVisionModel", "Pix2StructVisionConfig", _PIX2STRUCT, _flattened_patches),
    # clip_qkv: OLMo clamps each projection in place (`query_states.clamp_(...)`)
    "olmo": ("OlmoModel", "OlmoConfig", {**_DECODER, "clip_qkv": 0.5}, _decoder_tokens),
}


def check_model(model: str, rules: list[str]) -> dict[str, int]:
    """Rewrite, check and run one model; returns the findings as ``{"ADP009:LlamaAttention": 1, ...}``."""
    model_cls, config_cls, config_args, inputs = MODELS[model]
    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    path = Path(original.__file__)  # type: ignore[arg-type]
    result = rewrite_source(path.read_text(encoding="utf-8"), rules, path=str(path))
    cst.parse_module(result.code)
    again = rewrite_source(result.code, rules)
    assert again.code == result.code and not again.findings, "a second run changed the code"
    rewritten = load_source_as_module(
        result.code,
        f"transformers.models.{model}.modeling_{model}_adopted",
        package=f"transformers.models.{model}",
        path=str(path.with_name(f"modeling_{model}_adopted.py")),  # 4.5x's auto_docstring reads models/<name>/
    )
    config = getattr(transformers, config_cls)(**config_args)
    config._attn_implementation = "eager"
    import adopter_kernels

    with default_dtype(torch.float64), adopter_kernels.use_backend("packed_qkv_linear=packed"):
        with seeded(0):
            vanilla = getattr(original, model_cls)(config)
            args, kwargs = inputs()
        with seeded(1):  # different init: the strict state_dict load must make them equal
            fused = getattr(rewritten, model_cls)(config)
        compare_models(vanilla, fused, args, kwargs, rtol=1e-9, atol=1e-9).raise_if_failed()
    return dict(sorted(Counter(f"{f.code}:{f.cls}" for f in result.findings).items()))


def rule_codes(spec: str) -> list[str]:
    return [r.code for r in builtin_rules()] if spec == "all" else spec.split(",")


if __name__ == "__main__":
    codes = rule_codes(sys.argv[1])
    for name in sys.argv[2:]:
        found = check_model(name, codes)
        print(json.dumps({"model": name, "transformers": transformers.__version__, "findings": found}))
