"""The benchmark suite: where each model's source lives, how to build it at each size, and its inputs.

A model is always built *from source text*: the vanilla variant executes the unmodified file, each rewritten
variant executes the codemod's output of the same file, both through ``load_source_as_module``. Hugging Face
models come from the installed ``transformers`` 4.x package (its ``modeling_*.py``, loaded under the package
so relative imports resolve); the others are the reference files in ``gpu_bench/models/``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from adopter_kernels.equivalence import iter_leaves, load_source_as_module
from gpu_bench.variants import default_rewriter, make_variants

SIZES: tuple[str, ...] = ("tiny", "base")
MODELS_DIR = Path(__file__).resolve().parent / "models"

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
InputsFn = Callable[[types.ModuleType, str, int, "int | None"], Inputs]


class SourceUnavailable(Exception):
    """The model's source file cannot be found (e.g. transformers is not installed)."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One suite entry.

    ``module`` is a dotted module name: ``transformers.models.bert.modeling_bert`` or
    ``gpu_bench.models.resnet_cnn``. ``build(module, size, dropout)`` builds the model from an executed copy
    of that source; ``dropout=False`` zeroes every dropout probability (used for the equivalence check, where
    fused kernels may draw random numbers in another order). ``inputs(module, size, batch_size, seq_len)``
    returns CPU tensors drawn from the global RNG (the caller seeds it) for the vanilla ``module``.
    """

    name: str
    title: str
    module: str
    build: Callable[[types.ModuleType, str, bool], nn.Module]
    inputs: InputsFn
    batch_size: Mapping[str, int]
    seq_len: Mapping[str, int | None]

    @property
    def from_transformers(self) -> bool:
        return self.module.startswith("transformers.")

    @property
    def package(self) -> str:
        return self.module.rpartition(".")[0]

    def source_path(self) -> Path:
        """Path of the source file; raises ``SourceUnavailable`` saying what to install."""
        if not self.from_transformers:
            return MODELS_DIR / f"{self.module.rpartition('.')[2]}.py"
        spec = importlib.util.find_spec("transformers")
        if spec is None or spec.origin is None:
            raise SourceUnavailable(f"{self.name}: needs `pip install 'transformers>=4.30,<5'`")
        relative = self.module.split(".")[1:]
        path = Path(spec.origin).parent.joinpath(*relative[:-1], relative[-1] + ".py")
        if not path.is_file():  # e.g. transformers 5 moved or removed the model
            raise SourceUnavailable(f"{self.name}: {path} does not exist in the installed transformers")
        return path


# --------------------------------------------------------------------------------------------------------------
# Hugging Face transformers models
# --------------------------------------------------------------------------------------------------------------

# Config keyword arguments per size. Tiny: CPU smoke (hidden 32, 2 layers, 4 heads, small vocab); base: the
# published base checkpoints' shapes (bert-base-uncased, gpt2, t5-base, EleutherAI/gpt-neo-125M).
_HF_CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "bert": {
        "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     vocab_size=128, max_position_embeddings=64),
        "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                     vocab_size=30522, max_position_embeddings=512),
    },
    "gpt2": {
        "tiny": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=128, n_positions=64),
        "base": dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
    },
    "t5": {
        "tiny": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=128,
                     relative_attention_num_buckets=8, relative_attention_max_distance=16),
        "base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12, vocab_size=32128),
    },
    "gpt_neo": {
        "tiny": dict(hidden_size=32, num_layers=2, num_heads=4, vocab_size=128, max_position_embeddings=64,
                     attention_types=[[["global", "local"], 1]], window_size=8),
        "base": dict(hidden_size=768, num_layers=12, num_heads=12, vocab_size=50257, max_position_embeddings=2048,
                     attention_types=[[["global", "local"], 6]], window_size=256),
    },
    "bart": {  # base: facebook/bart-base
        "tiny": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128,
                     max_position_embeddings=64),
        "base": dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                     decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, vocab_size=50265,
                     max_position_embeddings=1024),
    },
    "vilt": {  # base: ViLT-B/32 (dandelin/vilt-b32-mlm): 40 text tokens and 144 patches of a 384x384 image
        "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     vocab_size=128, max_position_embeddings=16, image_size=32, patch_size=16),
        "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                     vocab_size=30522, max_position_embeddings=40, image_size=384, patch_size=32),
    },
    "llama": {  # base: TinyLlama-1.1B shapes (grouped-query attention, SwiGLU, RMSNorm, rotary)
        "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=128, max_position_embeddings=64),
        "base": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
    },
    # The same LlamaModel at SmolLM-135M's shapes (HuggingFaceTB/SmolLM-135M): a published LLaMA-architecture size
    # whose training state (weights, gradients, AdamW moments: ~2.2 GB per model) fits a CPU machine twice over,
    # where TinyLlama's (~18 GB per model) does not. Tiny keeps its three query heads per key/value head.
    "smollm": {
        "tiny": dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
                     num_key_value_heads=2, vocab_size=128, max_position_embeddings=64),
        "base": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, vocab_size=49152, max_position_embeddings=2048),
    },
}

# The config key holding the number of learned position embeddings: the most tokens such a model takes (T5's
# relative buckets and LLaMA's rotary cache have no such bound).
_POSITIONS_KEY: dict[str, str] = {"bert": "max_position_embeddings", "gpt2": "n_positions",
                                  "gpt_neo": "max_position_embeddings", "bart": "max_position_embeddings",
                                  "vilt": "max_position_embeddings"}


def max_seq_len(name: str, size: str) -> int | None:
    """The most tokens suite model ``name`` takes at ``size`` (its learned positions); None when unbounded."""
    key = _POSITIONS_KEY.get(name)
    return None if key is None else int(_HF_CONFIGS[name][size][key])


# Every dropout probability of each config class (zeroed for the equivalence check).
_HF_DROPOUT_KEYS: dict[str, tuple[str, ...]] = {
    "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "t5": ("dropout_rate",),
    "gpt_neo": ("embed_dropout", "attention_dropout", "resid_dropout"),
    "llama": ("attention_dropout",),  # 4.34.1 has none; later 4.x add this one
    "smollm": ("attention_dropout",),
    "vilt": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "bart": ("dropout", "attention_dropout", "activation_dropout"),
}


def _hf_builder(key: str, config_class: str, model_class: str) -> Callable[[types.ModuleType, str, bool], nn.Module]:
    """Build ``module.<model_class>(transformers.<config_class>(**sizes))``; the config class is not rewritten."""

    def build(module: types.ModuleType, size: str, dropout: bool) -> nn.Module:
        import transformers

        # No KV cache: we time full-sequence training/inference, and a cache would add outputs to the loss.
        kwargs = dict(_HF_CONFIGS[key][size], use_cache=False)
        if not dropout:
            kwargs.update(dict.fromkeys(_HF_DROPOUT_KEYS[key], 0.0))
        config = getattr(transformers, config_class)(**kwargs)
        return getattr(module, model_class)(config)

    return build


def _text_inputs(key: str, *, decoder: bool = False) -> InputsFn:
    """Token ids plus an attention mask whose last sample is right-padded by a quarter (exercises masking)."""

    def inputs(module: types.ModuleType, size: str, batch_size: int, seq_len: int | None) -> Inputs:
        del module  # the config alone says what the inputs look like
        if seq_len is None:
            raise ValueError(f"{key}: a sequence length is required")
        vocab = _HF_CONFIGS[key][size]["vocab_size"]
        input_ids = torch.randint(0, vocab, (batch_size, seq_len))
        attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
        if batch_size > 1:
            attention_mask[-1, seq_len - seq_len // 4 :] = 0
        kwargs: dict[str, Any] = {"attention_mask": attention_mask}
        if decoder:
            kwargs["decoder_input_ids"] = torch.randint(0, vocab, (batch_size, seq_len))
        return (input_ids,), kwargs

    return inputs


def _vilt_inputs(module: types.ModuleType, size: str, batch_size: int, seq_len: int | None) -> Inputs:
    """Text as `_text_inputs` gives it (at most the config's 40 positions) and an image of the config's size."""
    (input_ids,), kwargs = _text_inputs("vilt")(module, size, batch_size, seq_len)
    side = _HF_CONFIGS["vilt"][size]["image_size"]
    kwargs["pixel_values"] = torch.randn(batch_size, 3, side, side)
    return (input_ids,), kwargs


# --------------------------------------------------------------------------------------------------------------
# Reference models (gpu_bench/models/*.py)
# --------------------------------------------------------------------------------------------------------------


def _reference_build(module: types.ModuleType, size: str, dropout: bool) -> nn.Module:
    del dropout  # the reference models have no dropout
    return module.build_model(size)


def _reference_inputs(module: types.ModuleType, size: str, batch_size: int, seq_len: int | None) -> Inputs:
    del seq_len  # images / pooled features: no sequence dimension
    return module.example_inputs(size, batch_size)


SUITE: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("bert", "BERT (BertModel)", "transformers.models.bert.modeling_bert",
                  _hf_builder("bert", "BertConfig", "BertModel"), _text_inputs("bert"),
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": 16, "base": 512}),
        ModelSpec("gpt2", "GPT-2 (GPT2Model)", "transformers.models.gpt2.modeling_gpt2",
                  _hf_builder("gpt2", "GPT2Config", "GPT2Model"), _text_inputs("gpt2"),
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": 16, "base": 1024}),
        ModelSpec("t5", "T5 encoder-decoder (T5Model)", "transformers.models.t5.modeling_t5",
                  _hf_builder("t5", "T5Config", "T5Model"), _text_inputs("t5", decoder=True),
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": 16, "base": 512}),
        ModelSpec("gpt_neo", "GPT-Neo, separate q/k/v projections (GPTNeoModel)",
                  "transformers.models.gpt_neo.modeling_gpt_neo",
                  _hf_builder("gpt_neo", "GPTNeoConfig", "GPTNeoModel"), _text_inputs("gpt_neo"),
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": 16, "base": 1024}),
        ModelSpec("llama", "LLaMA decoder: RMSNorm, SwiGLU MLP, rotary (LlamaModel; ADP009, ADP011-ADP013)",
                  "transformers.models.llama.modeling_llama",
                  _hf_builder("llama", "LlamaConfig", "LlamaModel"), _text_inputs("llama"),
                  batch_size={"tiny": 2, "base": 4}, seq_len={"tiny": 16, "base": 1024}),
        ModelSpec("smollm", "LLaMA decoder at SmolLM-135M shapes (LlamaModel; llama's rules at a size CPUs train)",
                  "transformers.models.llama.modeling_llama",
                  _hf_builder("smollm", "LlamaConfig", "LlamaModel"), _text_inputs("smollm"),
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": 16, "base": 1024}),
        ModelSpec("bart", "BART encoder-decoder (BartModel; its attention class and the copies of it: ADP014)",
                  "transformers.models.bart.modeling_bart",
                  _hf_builder("bart", "BartConfig", "BartModel"), _text_inputs("bart", decoder=True),
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": 16, "base": 512}),
        ModelSpec("vilt", "ViLT vision-and-language encoder (ViltModel; its softmax a module built and called)",
                  "transformers.models.vilt.modeling_vilt",
                  _hf_builder("vilt", "ViltConfig", "ViltModel"), _vilt_inputs,
                  batch_size={"tiny": 2, "base": 4}, seq_len={"tiny": 8, "base": 40}),
        ModelSpec("resnet", "ResNet-style CNN (reference; ResNet-18 layout at base)", "gpu_bench.models.resnet_cnn",
                  _reference_build, _reference_inputs,
                  batch_size={"tiny": 2, "base": 64}, seq_len={"tiny": None, "base": None}),
        ModelSpec("dpt", "DPT-style fusion with conditional BatchNorm (reference)",
                  "gpu_bench.models.dpt_conditional_bn", _reference_build, _reference_inputs,
                  batch_size={"tiny": 2, "base": 16}, seq_len={"tiny": None, "base": None}),
        ModelSpec("groupvit", "GroupViT-style Linear+BatchNorm1d projections (reference)",
                  "gpu_bench.models.groupvit_linear_bn", _reference_build, _reference_inputs,
                  batch_size={"tiny": 4, "base": 512}, seq_len={"tiny": None, "base": None}),
        ModelSpec("nanogpt", "nanoGPT-style blocks, hand-written causal attention (reference; ADP010)",
                  "gpu_bench.models.nanogpt_attention", _reference_build, _reference_inputs,
                  batch_size={"tiny": 2, "base": 8}, seq_len={"tiny": None, "base": None}),
        ModelSpec("vit_einsum", "vit-pytorch ViT, einsum attention core (reference; ADP010; ViT-B/16 at base)",
                  "gpu_bench.models.vit_einsum_attention", _reference_build, _reference_inputs,
                  batch_size={"tiny": 2, "base": 32}, seq_len={"tiny": None, "base": None}),
    )
}


def synthetic_loss(output: Any) -> torch.Tensor:
    """Mean of squares of every output tensor that needs grad: touches every head and needs no labels.

    Accumulated in fp32 so bf16 autocast runs keep an accurate loss.
    """
    tensors = [t for _, t in iter_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not tensors:
        raise RuntimeError("the model returned no tensor that requires grad; cannot time a training step")
    return torch.stack([t.float().square().mean() for t in tensors]).sum()


def load_variants(spec: ModelSpec, tag: str) -> dict[str, types.ModuleType]:
    """The executed module of vanilla and of every rewritten variant of ``spec``'s source (``make_variants``, every
    rule), by variant name; ``tag`` keeps their module names apart from other loads of the same source. Raises
    ``SourceUnavailable`` as ``source_path`` does."""
    path = spec.source_path()
    return {
        variant.name: load_source_as_module(variant.source, f"{spec.module}__{tag}_{variant.name.lower()}",
                                            package=spec.package, path=f"{path}[{variant.name}]")
        for variant in make_variants(path.read_text(), str(path), default_rewriter())
    }
