"""ADP011 FuseRMSNorm, ADP012 FuseGatedMLP and ADP013 FuseRotaryEmbedding on real LLaMA-family models.

transformers 4.34.1 (the suite's pinned version, in process): LLaMA and Mistral. The newest transformers 4.x
(4.57.6, in a subprocess whose PYTHONPATH puts ``.cache/transformers-4.57.6`` first; ``make test`` installs it there
with ``make newest-transformers``): LLaMA, Mistral and Qwen2. Each file is rewritten with the three rules, the
findings per class are checked, and a tiny float64 model built from the rewritten source loads the original's
checkpoint strictly and computes the same outputs and gradients in eval and training (``tests/llm_blocks_real.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
NEWEST = "4.57.6"
NEWEST_DIR = ROOT / ".cache" / f"transformers-{NEWEST}"

# Every model: three RMSNorms (two per decoder layer class, one final), one gated MLP, q and k rotated.
EXPECTED = {
    model: {
        f"ADP011:{prefix}DecoderLayer": 2,
        f"ADP011:{prefix}Model": 1,
        f"ADP012:{prefix}MLP": 1,
        "ADP013:": 2,  # "": the module-level apply_rotary_pos_emb
    }
    for model, prefix in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"))
}


@pytest.mark.skipif(transformers.__version__ != "4.34.1", reason="written against transformers 4.34.1")
@pytest.mark.parametrize("model", ["llama", "mistral"])
def test_llm_blocks_on_transformers_4_34_1(model: str) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from llm_blocks_real import check_model
    finally:
        sys.path.remove(str(ROOT / "tests"))
    assert check_model(model) == EXPECTED[model]


@pytest.mark.skipif(
    not (NEWEST_DIR / "transformers").is_dir(),
    reason=f"transformers {NEWEST} is not installed under {NEWEST_DIR} (run `make newest-transformers`)",
)
def test_llm_blocks_on_newest_transformers_4x() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_CACHE"}
    env["PYTHONPATH"] = os.pathsep.join([str(NEWEST_DIR), str(ROOT)])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "llm_blocks_real.py"), "llama", "mistral", "qwen2"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["transformers"] for r in results] == [NEWEST] * 3
    assert {r["model"]: r["findings"] for r in results} == {m: EXPECTED[m] for m in ("llama", "mistral", "qwen2")}


# Other 4.34.1 families: T5-casting RMSNorm copies with the gated-GELU feed-forward (MT5, UMT5), GPT-J's interleaved
# rotary and GPT-NeoX's partial rotary (rotary_pct < 1: the rotated slice only).
OTHER_FAMILIES = {
    "mt5": ("MT5Model", "MT5Config", {"ADP011": 4, "ADP012": 1}),
    "umt5": ("UMT5Model", "UMT5Config", {"ADP011": 4, "ADP012": 1}),
    "gptj": ("GPTJModel", "GPTJConfig", {"ADP013": 1}),
    "gpt_neox": ("GPTNeoXModel", "GPTNeoXConfig", {"ADP013": 2}),
}
_CONFIGS = {
    "mt5": dict(vocab_size=40, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
                feed_forward_proj="gated-gelu", dropout_rate=0.0),
    "gptj": dict(vocab_size=40, n_embd=16, n_layer=2, n_head=2, rotary_dim=4, n_positions=32, embd_pdrop=0.0,
                 resid_pdrop=0.0, attn_pdrop=0.0),
    "gpt_neox": dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                     rotary_pct=0.5, max_position_embeddings=32),
}  # fmt: skip
_CONFIGS["umt5"] = _CONFIGS["mt5"]


@pytest.mark.skipif(transformers.__version__ != "4.34.1", reason="written against transformers 4.34.1")
@pytest.mark.parametrize("model", sorted(OTHER_FAMILIES))
def test_llm_blocks_on_other_4_34_1_families(model: str) -> None:
    import importlib
    from collections import Counter

    import torch

    from adopter_codemods.api import rewrite_source
    from adopter_kernels.equivalence import compare_models, load_source_as_module

    model_cls, config_cls, expected = OTHER_FAMILIES[model]
    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    path = Path(original.__file__)  # type: ignore[arg-type]
    result = rewrite_source(path.read_text(encoding="utf-8"), ["ADP011", "ADP012", "ADP013"], path=str(path))
    assert dict(Counter(f.code for f in result.findings)) == expected
    rewritten = load_source_as_module(
        result.code, f"transformers.models.{model}.modeling_{model}_adopted", package=f"transformers.models.{model}"
    )
    config = getattr(transformers, config_cls)(**_CONFIGS[model])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        vanilla = getattr(original, model_cls)(config)
        with torch.no_grad():
            for name, p in vanilla.named_parameters():
                if "norm" in name:
                    p.add_(torch.randn_like(p) * 0.1)
        fused = getattr(rewritten, model_cls)(config)
        ids = torch.randint(0, 40, (2, 7))
        kwargs = {"input_ids": ids, "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2]), "use_cache": False}
        if model in ("mt5", "umt5"):
            kwargs["decoder_input_ids"] = ids
        compare_models(vanilla, fused, (), kwargs, rtol=1e-9, atol=1e-9).raise_if_failed()
    finally:
        torch.set_default_dtype(previous)
