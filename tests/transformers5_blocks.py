"""All rules on real transformers 5.x modeling files (a helper of ``test_transformers5_blocks.py``, run as a script in
a subprocess whose ``PYTHONPATH`` starts with ``tests/model_zoo.py``'s ``transformers5_pythonpath()``).

For each model: which classes the engine sees as modules (5.x derives its layers from
``modeling_layers.GradientCheckpointingLayer``, a class of another file, resolved by ``class_bases``), the findings
of every rule per ``CODE:Class.function``, then AdoptAll's rewrite: it parses, a second run changes nothing, and a
tiny float64 model built from the rewritten module loads the original's state_dict strictly and computes the same
outputs, gradients and buffers in eval and training (``compare_models``, tolerance 1e-9, seeded). Prints one JSON
line per model (and configuration).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import libcst as cst
import torch
import transformers

from adopter_codemods.api import rewrite_source
from adopter_codemods.class_bases import BaseResolver
from adopter_kernels.equivalence import compare_models, load_source_as_module
from adopter_codemods.provider import build_module_structure

SMALL = dict(vocab_size=50, max_position_embeddings=64)
# name -> (model dir, model class, config class, config, GradientCheckpointingLayer subclasses to check)
MODELS: dict[str, tuple[str, str, str, dict[str, Any], tuple[str, ...]]] = {
    "gpt2": ("gpt2", "GPT2Model", "GPT2Config", dict(vocab_size=50, n_positions=64, n_embd=32, n_layer=2, n_head=4,
             resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.0), ("GPT2Block",)),
    "bart": ("bart", "BartModel", "BartConfig", dict(**SMALL, d_model=32, encoder_layers=2, decoder_layers=2,
             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
             dropout=0.1, attention_dropout=0.1, activation_dropout=0.1), ("BartEncoderLayer", "BartDecoderLayer")),
    "mbart": ("mbart", "MBartModel", "MBartConfig", dict(**SMALL, d_model=32, encoder_layers=2, decoder_layers=2,
              encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
              dropout=0.1, attention_dropout=0.1, activation_dropout=0.1), ("MBartEncoderLayer", "MBartDecoderLayer")),
    "llama": ("llama", "LlamaModel", "LlamaConfig", dict(**SMALL, hidden_size=32, intermediate_size=48,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
              hidden_act="silu", attention_dropout=0.1), ("LlamaDecoderLayer",)),
    # ADP011's OLMo2 and Helium casting orders (the weight multiplies before the cast back)
    "olmo2": ("olmo2", "Olmo2Model", "Olmo2Config", dict(**SMALL, hidden_size=32, intermediate_size=48,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
              hidden_act="silu", attention_dropout=0.1), ("Olmo2DecoderLayer",)),
    "helium": ("helium", "HeliumModel", "HeliumConfig", dict(**SMALL, hidden_size=32, intermediate_size=48,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6,
               hidden_act="silu", attention_dropout=0.1), ("HeliumDecoderLayer",)),
}  # fmt: skip


def check_model(name: str) -> dict[str, object]:
    directory, model_cls, config_cls, config_args, layers = MODELS[name]
    original = importlib.import_module(f"transformers.models.{directory}.modeling_{directory}")
    path = Path(original.__file__)  # type: ignore[arg-type]
    source = path.read_text(encoding="utf-8")
    structure = build_module_structure(cst.parse_module(source), str(path))
    classes = [c.name for c in structure.classes if c.name]
    # The layers' base is the class of transformers/modeling_layers.py, found from the file's relative import.
    layer_base = BaseResolver(str(path)).resolve("...modeling_layers.GradientCheckpointingLayer")
    expected_base = Path(transformers.__file__).resolve().with_name("modeling_layers.py")
    assert layer_base is not None and Path(layer_base.path) == expected_base, layer_base
    assert all(layer in classes for layer in layers), classes

    result = rewrite_source(source, ["all"], path=str(path))
    cst.parse_module(result.code)
    again = rewrite_source(result.code, ["all"], path=str(path))
    assert again.code == result.code and not again.findings, "a second run changed the code"
    rewritten = load_source_as_module(
        result.code,
        f"transformers.models.{directory}.modeling_{directory}_adopted",
        package=f"transformers.models.{directory}",
        path=str(path.with_name(f"modeling_{directory}_adopted.py")),  # auto_docstring reads models/<name>/
    )
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        config = getattr(transformers, config_cls)(**config_args)
        config._attn_implementation = "eager"
        torch.manual_seed(0)
        vanilla = getattr(original, model_cls)(config)
        with torch.no_grad():  # norm weights start at ones, biases at zeros: move them so they are checked
            for param_name, p in vanilla.named_parameters():
                if "norm" in param_name or "ln_" in param_name or param_name.endswith("bias"):
                    p.add_(torch.randn_like(p) * 0.1)
        fused = getattr(rewritten, model_cls)(config)
        ids = torch.randint(0, 50, (2, 7))
        mask = torch.tensor([[1] * 7, [0] * 2 + [1] * 5])
        kwargs: dict[str, object] = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
        if name in ("bart", "mbart"):
            kwargs["decoder_input_ids"] = torch.randint(0, 50, (2, 5))
        compare_models(vanilla, fused, (), kwargs, rtol=1e-9, atol=1e-9).raise_if_failed()
        kinds = sorted({type(m).__module__.split(".")[0] + "." + type(m).__name__ for m in fused.modules()})
    finally:
        torch.set_default_dtype(previous)
    return {
        "model": name,
        "transformers": transformers.__version__,
        "module_classes": classes,
        "findings": dict(sorted(Counter(f"{f.code}:{f.cls}.{f.function}" for f in result.findings).items())),
        "kernel_modules": [k for k in kinds if k.startswith("adopter_kernels.")],
    }


if __name__ == "__main__":
    for model in sys.argv[1:] or sorted(MODELS):
        print(json.dumps(check_model(model)))
