"""ADP011-ADP013 on real LLaMA-family modeling files of whatever transformers is importable (a helper of
``test_real_llm_blocks.py``; also run as a script in a subprocess whose ``PYTHONPATH`` holds another transformers).

For each model: rewrite its ``modeling_<model>.py`` with FuseRMSNorm, FuseGatedMLP and FuseRotaryEmbedding, check
the findings per rule and class, that the output parses and a second run changes nothing, then build a tiny float64
model from the original and from the rewritten module, load the original's state_dict strictly and compare outputs
and gradients in eval and training (``compare_models``, tolerance 1e-9). Prints one JSON line per model.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from pathlib import Path

import libcst as cst
import torch
import transformers

from adopter_codemods.api import rewrite_source
from adopter_kernels.equivalence import compare_models, load_source_as_module

RULES = ["ADP011", "ADP012", "ADP013"]
# model dir -> (model class, config class)
MODELS = {
    "llama": ("LlamaModel", "LlamaConfig"),
    "mistral": ("MistralModel", "MistralConfig"),
    "qwen2": ("Qwen2Model", "Qwen2Config"),
}


def check_model(model: str) -> dict[str, object]:
    """Rewrite, check and run one model; returns the findings as ``{"ADP011:LlamaDecoderLayer": 2, ...}``."""
    model_cls, config_cls = MODELS[model]
    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    path = Path(original.__file__)  # type: ignore[arg-type]
    source = path.read_text(encoding="utf-8")
    result = rewrite_source(source, RULES, path=str(path))
    cst.parse_module(result.code)
    again = rewrite_source(result.code, RULES)
    assert again.code == result.code and not again.findings, "a second run changed the code"
    rewritten = load_source_as_module(
        result.code,
        f"transformers.models.{model}.modeling_{model}_adopted",
        package=f"transformers.models.{model}",
        path=str(path.with_name(f"modeling_{model}_adopted.py")),  # 4.5x's auto_docstring reads models/<name>/
    )
    config = getattr(transformers, config_cls)(
        vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, hidden_act="silu",
    )  # fmt: skip
    config._attn_implementation = "eager"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # 4.34.1 builds its causal mask in the default dtype
    try:
        return _compare(original, rewritten, model_cls, config, result.findings)
    finally:
        torch.set_default_dtype(previous)


def _compare(original: object, rewritten: object, model_cls: str, config: object, findings: list) -> dict[str, object]:
    torch.manual_seed(0)
    vanilla = getattr(original, model_cls)(config).double()
    with torch.no_grad():  # RMSNorm weights start at ones: move them so the weight multiply is checked
        for name, p in vanilla.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    torch.manual_seed(0)
    fused = getattr(rewritten, model_cls)(config).double()
    kinds = Counter(type(m).__name__ for m in fused.modules())
    assert kinds[f"Fused{model_cls[: -len('Model')]}RMSNorm"] == 2 * 2 + 1, kinds
    ids = torch.randint(0, 50, (2, 7))
    mask = torch.tensor([[1] * 7, [0] * 2 + [1] * 5])
    report = compare_models(
        vanilla, fused, (), {"input_ids": ids, "attention_mask": mask, "use_cache": False}, rtol=1e-9, atol=1e-9
    )
    report.raise_if_failed()
    return dict(sorted(Counter(f"{f.code}:{f.cls}" for f in findings).items()))


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(MODELS):
        print(json.dumps({"model": name, "transformers": transformers.__version__, "findings": check_model(name)}))
