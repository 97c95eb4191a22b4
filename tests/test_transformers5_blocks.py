"""Acceptance on transformers 5.x (``.cache/transformers-5.23.0``, installed by ``make model-zoo``): GPT-2, BART, MBart,
LLaMA, OLMo2 and Helium, whose layers derive from ``modeling_layers.GradientCheckpointingLayer`` (a class of another file, which
``class_bases`` resolves from the modeling file's relative import). ``tests/transformers5_blocks.py`` runs in a
subprocess (5.x cannot share a process with the pinned 4.34.1): module classes, the exact findings per
``CODE:Class.function``, AdoptAll's rewrite executed against the original in float64 (outputs, gradients and buffers
in eval and training, strict checkpoint load, 1e-9).

What does not fire in 5.x, and why (extend EXPECTED when it does):
- ADP009 on ``BartAttention``: its key/value projections read ``key_value_states if is_cross_attention else
  hidden_states`` under a cache branch, not the query's input on every path;
- ADP006 on ``GPT2MLP``: its projections are ``Conv1D``, not ``nn.Linear``;
- ADP003 on ``GPT2Block``: 5.x's ``GPT2Attention.forward`` does not take the drop-in's parameters, so the drop-in
  could not run its fast path (the ``attention_class_fits_drop_in`` guard refuses it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from model_zoo import TRANSFORMERS5, transformers5_pythonpath

pytest.importorskip("torch")

EXPECTED: dict[str, dict[str, object]] = {
    "gpt2": {
        "findings": {
            "ADP004:.eager_attention_forward": 1,
            "ADP004:GPT2Attention._upcast_and_reordered_attn": 1,  # float32-only path: not executed here
            # its activation `get_activation(...) if activation_string else nn.Identity()`: guarded; the double-heads
            # model holding it is not built here
            "ADP006:GPT2SequenceSummary.forward": 1,
        },
        "layers": ["GPT2Block"],
        "kernel_modules": [],
    },
    "bart": {
        "findings": {
            "ADP004:.eager_attention_forward": 1,
            # post-LN with functional dropout: self-attention, (decoder) cross-attention, feed-forward
            "ADP005:BartDecoderLayer.forward": 3,
            "ADP005:BartEncoderLayer.forward": 2,
            "ADP006:BartDecoderLayer.forward": 1,
            "ADP006:BartEncoderLayer.forward": 1,
        },
        "layers": ["BartEncoderLayer", "BartDecoderLayer"],
        "kernel_modules": [],
    },
    "mbart": {
        "findings": {
            "ADP004:.eager_attention_forward": 1,
            # pre-LN, the sum copied to `residual`; the decoder's fused call goes in the cross-attention `if`
            "ADP005:MBartDecoderLayer.forward": 1,
            "ADP005:MBartEncoderLayer.forward": 1,
            "ADP006:MBartDecoderLayer.forward": 1,
            "ADP006:MBartEncoderLayer.forward": 1,
        },
        "layers": ["MBartEncoderLayer", "MBartDecoderLayer"],
        "kernel_modules": [],
    },
    "llama": {
        "findings": {
            "ADP004:.eager_attention_forward": 1,
            "ADP011:LlamaDecoderLayer.__init__": 2,
            "ADP011:LlamaModel.__init__": 1,
            "ADP009:LlamaAttention.forward": 1,  # q/k/v projections inside .view(...).transpose(1, 2) chains
            "ADP012:LlamaMLP.forward": 1,
            # q and k; the function is marked `@use_kernel_forward_from_hub("rotary_pos_emb")`, which runs its body
            # unless the user opts in to `kernelize()` (then the whole function is replaced, rewritten or not)
            "ADP013:.apply_rotary_pos_emb": 2,
        },
        "layers": ["LlamaDecoderLayer"],
        "kernel_modules": ["adopter_kernels.FusedLlamaRMSNorm"],
    },
    "olmo2": {
        "findings": {
            "ADP004:.eager_attention_forward": 1,
            "ADP009:Olmo2Attention.forward": 1,
            # OLMo2's casting order (the weight multiplies before the cast back): q/k norms, post-norms, final norm
            "ADP011:Olmo2Attention.__init__": 2,
            "ADP011:Olmo2DecoderLayer.__init__": 2,
            "ADP011:Olmo2Model.__init__": 1,
            "ADP012:Olmo2MLP.forward": 1,
            "ADP013:.apply_rotary_pos_emb": 2,
        },
        "layers": ["Olmo2DecoderLayer"],
        "kernel_modules": ["adopter_kernels.FusedOlmo2RMSNorm"],
    },
    "helium": {
        "findings": {
            "ADP004:.eager_attention_forward": 1,
            "ADP009:HeliumAttention.forward": 1,
            # Helium's casting order: OLMo2's with `weight.to(torch.float32)`
            "ADP011:HeliumDecoderLayer.__init__": 2,
            "ADP011:HeliumModel.__init__": 1,
            "ADP012:HeliumMLP.forward": 1,
        },
        "layers": ["HeliumDecoderLayer"],
        "kernel_modules": ["adopter_kernels.FusedHeliumRMSNorm"],
    },
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_CACHE"}
    env["PYTHONPATH"] = transformers5_pythonpath()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "transformers5_blocks.py"), *EXPECTED],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["model"]: r for r in lines}


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_transformers5_rewrite_is_equivalent(results: dict[str, dict[str, object]], model: str) -> None:
    result = results[model]
    assert result["transformers"] == TRANSFORMERS5
    assert result["findings"] == EXPECTED[model]["findings"]
    assert result["kernel_modules"] == EXPECTED[model]["kernel_modules"]
    layers = EXPECTED[model]["layers"]
    assert isinstance(layers, list) and set(layers) <= set(result["module_classes"])  # type: ignore[arg-type]


def test_bart_embeddings_are_module_classes_through_torch_sources(results: dict[str, dict[str, object]]) -> None:
    """``BartLearnedPositionalEmbedding(nn.Embedding)``: a module class since bases resolve through torch's sources
    (before, only ``nn.Module``/containers counted)."""
    assert {"BartLearnedPositionalEmbedding", "BartScaledWordEmbedding"} <= set(results["bart"]["module_classes"])  # type: ignore[arg-type]
