"""ADP001-003 refuse a class defined in the file that the SDPA drop-in cannot serve (guard
``attention_class_fits_drop_in``): a finding must mean the fast path can run.

transformers 4.57.6's attention classes (``past_key_values``/``cache_position``, ``**kwargs``) were rewritten before
the guard and then only warned and ran the original forward. Here every instantiation the three rules matched on
4.57.6 is refused, and a subprocess with 4.57.6 shows that each of those classes would indeed have fallen back (the
factory's signature warning). Over 4.34.1 the rules still fire and run the fast path
(tests/test_real_transformers_attention.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adopter_codemods.api import scan_source
from adopter_codemods.structural_guards import ATTENTION_DROP_INS

ROOT = Path(__file__).resolve().parent.parent
NEWEST = "4.57.6"
NEWEST_MODELS = ROOT / ".cache" / f"transformers-{NEWEST}" / "transformers" / "models"

# What the rules matched on 4.57.6 before the guard: rule -> (model dir, file stem, instantiated class, matched sites)
MATCHED_BEFORE: dict[str, tuple[tuple[str, str, str, int], ...]] = {
    "ADP001": (
        ("align", "modeling_align", "AlignTextSelfAttention", 1),
        ("chinese_clip", "modeling_chinese_clip", "ChineseCLIPTextSelfAttention", 1),
        ("clap", "modeling_clap", "ClapTextSelfAttention", 1),
        ("layoutlm", "modeling_layoutlm", "LayoutLMSelfAttention", 1),
        ("markuplm", "modeling_markuplm", "MarkupLMSelfAttention", 1),
        ("megatron_bert", "modeling_megatron_bert", "MegatronBertSelfAttention", 1),
        ("roberta_prelayernorm", "modeling_roberta_prelayernorm", "RobertaPreLayerNormSelfAttention", 1),
        ("splinter", "modeling_splinter", "SplinterSelfAttention", 1),
        ("xmod", "modeling_xmod", "XmodSelfAttention", 1),
    ),
    "ADP002": (
        ("longt5", "modeling_longt5", "LongT5Attention", 2),
        ("mt5", "modeling_mt5", "MT5Attention", 2),
        ("pop2piano", "modeling_pop2piano", "Pop2PianoAttention", 2),
        ("switch_transformers", "modeling_switch_transformers", "SwitchTransformersAttention", 2),
        ("t5", "modeling_t5", "T5Attention", 2),
    ),
    "ADP003": (
        ("decision_transformer", "modeling_decision_transformer", "DecisionTransformerGPT2Attention", 2),
        ("gpt2", "modeling_gpt2", "GPT2Attention", 2),
    ),
}


def test_guard_constants_are_the_kernels_requirements() -> None:
    pytest.importorskip("torch")
    from adopter_kernels import attention

    kernels = {
        "ADP001": (attention._BertSelfAttentionSDPA, attention._BERT_ATTRIBUTES),
        "ADP002": (attention._T5AttentionSDPA, attention._T5_ATTRIBUTES),
        "ADP003": (attention._GPT2AttentionSDPA, attention._GPT2_ATTRIBUTES),
    }
    for code, (mixin, attributes) in kernels.items():
        assert ATTENTION_DROP_INS[code] == (attention._forward_parameters(mixin), attributes)


needs_newest = pytest.mark.skipif(
    not NEWEST_MODELS.is_dir(), reason=f"transformers {NEWEST} is not installed (run `make newest-transformers`)"
)


@needs_newest
@pytest.mark.parametrize("code", sorted(MATCHED_BEFORE))
def test_newest_transformers_classes_are_refused(code: str) -> None:
    for model, stem, cls, sites in MATCHED_BEFORE[code]:
        path = NEWEST_MODELS / model / f"{stem}.py"
        source = path.read_text(encoding="utf-8")
        assert source.count(f"{cls}(") >= 1 + sites  # the definition and the instantiations are still there
        assert scan_source(source, [code], path=str(path)) == [], f"{path.name}: {cls}"


_FALLBACK_PROBE = """
import importlib, json, sys, warnings
import transformers
import adopter_kernels
factories = {"ADP001": adopter_kernels.bert_self_attention_sdpa, "ADP002": adopter_kernels.t5_attention_sdpa,
             "ADP003": adopter_kernels.gpt2_attention_sdpa}
for code, model, stem, cls in json.loads(sys.argv[1]):
    module = importlib.import_module(f"transformers.models.{model}.{stem}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sdpa = factories[code](getattr(module, cls))
    fell_back = any("is not the supported signature" in str(w.message) for w in caught)
    print(json.dumps({"transformers": transformers.__version__, "class": cls, "fell_back": fell_back,
                      "mro": [c.__name__ for c in sdpa.__mro__[:2]]}))
"""


@needs_newest
def test_refused_classes_would_have_run_the_original_forward() -> None:
    """The drop-in of each refused 4.57.6 class keeps the original forward: the rewrite would have been dead."""
    pytest.importorskip("torch")
    cases = [[code, model, stem, cls] for code, rows in MATCHED_BEFORE.items() for model, stem, cls, _ in rows]
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_CACHE"}
    env["PYTHONPATH"] = os.pathsep.join([str(NEWEST_MODELS.parent.parent), str(ROOT)])
    proc = subprocess.run(
        [sys.executable, "-c", _FALLBACK_PROBE, json.dumps(cases)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["class"] for r in results] == [c[3] for c in cases]
    for r in results:
        assert r["transformers"] == NEWEST
        assert r["fell_back"] and r["mro"] == ["SDPA" + r["class"], r["class"]], r
