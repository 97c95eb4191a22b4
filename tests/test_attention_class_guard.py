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
        "ADP014": (attention._BartAttentionSDPA, attention._BART_ATTRIBUTES),
    }
    assert set(kernels) == set(ATTENTION_DROP_INS)
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


# ------------------------------------------------------------------------------------------ imported classes

_PARAMETERS, _ATTRIBUTES = ATTENTION_DROP_INS["ADP001"]
_FITTING_FORWARD = f"    def forward(self, {', '.join(_PARAMETERS)}):\n        return (hidden_states,)\n"
_SETS_ATTRIBUTES = "".join(f"        self.{a} = None\n" for a in _ATTRIBUTES)


def _attention_class(name: str, forward: str, init: str = _SETS_ATTRIBUTES, base: str = "nn.Module") -> str:
    return f"class {name}({base}):\n    def __init__(self, config):\n        super().__init__()\n{init}\n{forward}"


def _user_model(import_line: str, cls: str = "BertSelfAttention") -> str:
    return (
        f"import torch.nn as nn\n{import_line}\n\n\nclass Block(nn.Module):\n    def __init__(self, config):\n"
        f"        super().__init__()\n        self.attention = {cls}(config)\n\n"
        "    def forward(self, hidden_states, attention_mask=None):\n"
        "        return self.attention(hidden_states, attention_mask)[0]\n"
    )


def _scan(path: Path) -> tuple[list[str], list[str]]:
    from adopter_codemods import engine
    from adopter_codemods.rules import select_rules

    analysis = engine.analyse_file(str(path), select_rules(["ADP001"]), with_refusals=True)
    return [f.code for f in analysis.findings()], [r.reason for r in analysis.refused()]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("layers", "found", "reason"),
    [
        (_attention_class("BertSelfAttention", _FITTING_FORWARD), True, None),
        (_attention_class("BertSelfAttention", _FITTING_FORWARD.replace("):", ", **kwargs):", 1)), False,
         "takes (self, hidden_states, attention_mask, head_mask, encoder_hidden_states, encoder_attention_mask, "
         "past_key_value, output_attentions, **kwargs), not the drop-in's"),
        (_attention_class("BertSelfAttention", _FITTING_FORWARD, init="        pass\n"), False,
         "`BertSelfAttention` never sets `attention_head_size`, `dropout`"),
        # forward and attributes come from a base in a third file
        ("from .base import Base\n\n\n" + _attention_class("BertSelfAttention", "", base="Base"), True, None),
        ("from .base import Bare\n\n\n" + _attention_class("BertSelfAttention", "", init="        pass\n", base="Bare"),
         False, "`BertSelfAttention` never sets `attention_head_size`"),
    ],
)  # fmt: skip
def test_imported_class_is_judged_in_its_own_file(tmp_path: Path, layers: str, found: bool, reason: str) -> None:
    base = "import torch.nn as nn\n\n\n" + _attention_class("Base", _FITTING_FORWARD)
    base += "\n\n" + _attention_class("Bare", _FITTING_FORWARD, init="        pass\n")
    layers = "import torch.nn as nn\n" + layers
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": base, "pkg/layers.py": layers,
                      "pkg/model.py": _user_model("from .layers import BertSelfAttention")})  # fmt: skip
    findings, refused = _scan(tmp_path / "pkg" / "model.py")
    assert findings == (["ADP001"] if found else [])
    if reason is None:
        assert refused == []
    else:
        assert len(refused) == 1 and reason in refused[0] and "attention_class_fits_drop_in" in refused[0], refused


def test_class_found_nowhere_is_taken_on_trust(tmp_path: Path) -> None:
    _write(tmp_path, {"model.py": _user_model("from not_installed_anywhere.layers import BertSelfAttention")})
    assert _scan(tmp_path / "model.py") == (["ADP001"], [])


def test_installed_transformers_class_fits(tmp_path: Path) -> None:
    """transformers 4.34.1 (the installed one): its BertSelfAttention is what the drop-in serves."""
    _write(tmp_path, {"model.py": _user_model("from transformers.models.bert.modeling_bert import BertSelfAttention")})
    assert _scan(tmp_path / "model.py") == (["ADP001"], [])


@needs_newest
def test_newest_transformers_imported_class_is_refused(tmp_path: Path) -> None:
    """The same user file with 4.57.6 on the path: its BertSelfAttention.forward is decorated (`deprecate_kwarg`)
    and takes `past_key_values`/`cache_position`; the import is resolved there and the site refused."""
    _write(tmp_path, {"model.py": _user_model("from transformers.models.bert.modeling_bert import BertSelfAttention")})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(NEWEST_MODELS.parent.parent), str(ROOT)]))
    proc = subprocess.run(
        [sys.executable, "-m", "adopter_codemods", "scan", "--no-cache", "--no-progress", "--show-refused",
         "--format", "json", "--rules", "ADP001", str(tmp_path / "model.py")],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    assert report["findings"] == []
    [refused] = report["refused"]
    assert "modeling_bert.py" in refused["reason"] and "BertSelfAttention.forward" in refused["reason"], refused


def test_scan_cache_misses_when_the_imported_class_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from adopter_codemods import cli

    fitting = "import torch.nn as nn\n" + _attention_class("BertSelfAttention", _FITTING_FORWARD)
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/layers.py": fitting,
                      "pkg/model.py": _user_model("from .layers import BertSelfAttention")})  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADOPTER_CACHE_DIR", raising=False)

    def scan() -> list[str]:
        cli.main(["scan", "--format", "json", "--no-progress", "--rules", "ADP001", "pkg/model.py"])
        return [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]

    assert scan() == ["ADP001"]
    assert scan() == ["ADP001"]  # from the cache
    (tmp_path / "pkg" / "layers.py").write_text(fitting.replace("):\n        return", ", **kwargs):\n        return"))
    assert scan() == []  # the class no longer fits: the cached result is not reused
