"""ADP001-ADP003 and ADP014 on the real transformers 4.34.1 sources: rewrite modeling_bert/t5/gpt2/bart/whisper.py,
load the rewritten file as a module of the transformers package, and compare a tiny model built from it with the
original (strict checkpoint load, outputs and gradients in eval and training with dropout 0); the attention must
really run through SDPA. BART also decodes step by step from its cache, and asks for the attention probabilities.

Also checks the claim the rule files make about the "Copied from" classes they list: in the installed transformers,
each one's ``__init__`` and ``forward`` (ADP014: ``forward``) are the reference class's up to the class-name prefix.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from adopter_codemods.api import rewrite_source  # noqa: E402
from adopter_codemods.dsl import CallNode  # noqa: E402
from adopter_kernels.equivalence import (  # noqa: E402
    compare_models,
    default_dtype,
    load_source_as_module,
    seeded,
)
from adopter_codemods.rules import select_rules  # noqa: E402
from conftest import expected_path, fixture_cases, is_negative, rule_code  # noqa: E402

if transformers.__version__ != "4.34.1":
    pytest.skip("written against transformers 4.34.1", allow_module_level=True)

Inputs = dict[str, Any]


@dataclass(frozen=True)
class Case:
    code: str
    model_dir: str  # transformers/models/<model_dir>/modeling_<model_dir>.py
    classes: tuple[str, ...]  # classes holding the rewritten instantiations, in file order
    attention: str  # the rewritten attention class
    build: Callable[[Any], Any]  # rewritten-or-original modeling module -> model
    inputs: Callable[[], Inputs]
    sdpa_calls: int  # per forward
    tolerance: tuple[float, float] = (1e-9, 1e-9)  # (rtol, atol)


CASES = [
    Case(
        "ADP001",
        "bert",
        ("BertAttention",),
        "BertSelfAttention",
        lambda m: m.BertModel(
            m.BertConfig(
                vocab_size=50,
                hidden_size=8,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=16,
                max_position_embeddings=16,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
        ),
        lambda: {
            "input_ids": torch.randint(0, 50, (2, 6)),
            "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]]),
        },
        2,
    ),
    Case(
        "ADP002",
        "t5",
        ("T5LayerSelfAttention", "T5LayerCrossAttention"),
        "T5Attention",
        lambda m: m.T5Model(
            m.T5Config(
                vocab_size=50,
                d_model=8,
                d_kv=4,
                d_ff=16,
                num_layers=2,
                num_decoder_layers=2,
                num_heads=2,
                relative_attention_num_buckets=8,
                dropout_rate=0.0,
            )
        ),
        lambda: {
            "input_ids": torch.randint(0, 50, (2, 6)),
            "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]]),
            "decoder_input_ids": torch.randint(0, 50, (2, 4)),
        },
        6,  # 2 encoder self-attentions, 2 decoder self- and 2 cross-attentions
        # Eager T5 runs its softmax on ``scores.float()``: the original rounds the attention weights to float32
        # even in float64 (~1e-7 each, ~5e-6 after two encoder and two decoder layers), the SDPA rewrite does not.
        (1e-5, 1e-5),
    ),
    Case(
        "ADP003",
        "gpt2",
        ("GPT2Block", "GPT2Block"),
        "GPT2Attention",
        lambda m: m.GPT2Model(
            m.GPT2Config(
                vocab_size=50,
                n_embd=8,
                n_layer=2,
                n_head=2,
                n_positions=16,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                add_cross_attention=True,
            )
        ),
        lambda: {
            "input_ids": torch.randint(0, 50, (2, 5)),
            "attention_mask": torch.tensor([[1] * 5, [1, 1, 1, 1, 0]]),
            "encoder_hidden_states": torch.randn(2, 3, 8),
            "encoder_attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        },
        4,  # 2 self- and 2 cross-attentions
    ),
    Case(
        "ADP014",
        "bart",
        ("BartEncoderLayer", "BartDecoderLayer", "BartDecoderLayer"),
        "BartAttention",
        lambda m: m.BartModel(
            m.BartConfig(
                vocab_size=50,
                d_model=8,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=16,
                decoder_ffn_dim=16,
                max_position_embeddings=16,
                dropout=0.0,
                attention_dropout=0.0,
                activation_dropout=0.0,
            )
        ),
        lambda: {
            "input_ids": torch.randint(0, 50, (2, 6)),
            "attention_mask": torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]]),
            "decoder_input_ids": torch.randint(0, 50, (2, 4)),
        },
        6,  # 2 encoder self-attentions, 2 decoder self- (causal mask) and 2 cross-attentions (padding mask)
    ),
    Case(
        "ADP014",
        "whisper",
        ("WhisperEncoderLayer", "WhisperDecoderLayer", "WhisperDecoderLayer"),
        "WhisperAttention",
        lambda m: m.WhisperModel(
            m.WhisperConfig(
                vocab_size=50,
                pad_token_id=1,
                bos_token_id=0,
                eos_token_id=2,
                decoder_start_token_id=0,
                num_mel_bins=8,
                d_model=8,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=16,
                decoder_ffn_dim=16,
                max_source_positions=6,
                max_target_positions=16,
                dropout=0.0,
                attention_dropout=0.0,
                activation_dropout=0.0,
            )
        ),
        lambda: {
            "input_features": torch.randn(2, 8, 12),  # two convolutions, the second of stride 2: 6 frames
            "decoder_input_ids": torch.randint(0, 50, (2, 4)),
        },
        6,
    ),
]


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count F.scaled_dot_product_attention calls (the kernels look it up at call time).

    SDPA is forced: ``auto`` picks it only where it measured faster, and these float64 checks are about it."""
    monkeypatch.setenv(
        "ADOPTER_KERNELS_BACKEND", "bert_self_attention=sdpa,t5_attention=sdpa,gpt2_attention=sdpa,bart_attention=sdpa"
    )
    calls: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("case", CASES, ids=[c.model_dir for c in CASES])
def test_rewritten_modeling_file_is_equivalent(case: Case, sdpa_calls: list[int]) -> None:
    package = f"transformers.models.{case.model_dir}"
    original = importlib.import_module(f"{package}.modeling_{case.model_dir}")
    source = Path(original.__file__ or "").read_text(encoding="utf-8")

    result = rewrite_source(source, [case.code], path=f"modeling_{case.model_dir}.py")
    assert [f.cls for f in result.findings] == list(case.classes)
    ast.parse(result.code)
    rewritten = load_source_as_module(result.code, f"{package}.modeling_{case.model_dir}_adopted", package=package)

    # float64: the comparison sees the rewrite, not float32 rounding (T5's unscaled scores round visibly).
    with default_dtype(torch.float64):
        with seeded(0):
            original_model = case.build(original)
        with seeded(0):
            rewritten_model = case.build(rewritten)
        sdpa_classes = {type(m).__name__ for m in rewritten_model.modules() if type(m).__name__.startswith("SDPA")}
        assert sdpa_classes == {"SDPA" + case.attention}
        with seeded(1):
            inputs = case.inputs()
        rtol, atol = case.tolerance
        report = compare_models(original_model, rewritten_model, kwargs=inputs, rtol=rtol, atol=atol)
    report.raise_if_failed()
    assert len(sdpa_calls) == case.sdpa_calls * len(report.modes)  # only the rewritten model calls SDPA


def _bart_pair() -> tuple[Any, Any]:
    """The original and the ADP014-rewritten BartModel of CASES, in float64 with the same weights, in eval."""
    (case,) = [c for c in CASES if c.model_dir == "bart"]
    package = "transformers.models.bart"
    original = importlib.import_module(f"{package}.modeling_bart")
    result = rewrite_source(Path(original.__file__ or "").read_text(encoding="utf-8"), ["ADP014"], path="modeling_bart.py")
    rewritten = load_source_as_module(result.code, f"{package}.modeling_bart_adopted_pair", package=package)
    models = []
    for module in (original, rewritten):
        with default_dtype(torch.float64), seeded(0):
            models.append(case.build(module).eval())
    models[1].load_state_dict(models[0].state_dict(), strict=True)
    return models[0], models[1]


def test_bart_decodes_from_its_cache(sdpa_calls: list[int]) -> None:
    """The cache branches: self-attention extends its keys and values, cross-attention reuses them."""
    models = _bart_pair()
    with seeded(1):
        ids = torch.randint(0, 50, (2, 6))
        mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
        decoder_ids = torch.randint(0, 50, (2, 5))
    outputs = []
    with torch.no_grad(), default_dtype(torch.float64):  # BART's causal mask is built in the default dtype
        for model in models:
            first = model(ids, attention_mask=mask, decoder_input_ids=decoder_ids[:, :3], use_cache=True)
            step = model(
                attention_mask=mask, decoder_input_ids=decoder_ids[:, 3:], encoder_outputs=(first.encoder_last_hidden_state,),
                past_key_values=first.past_key_values, use_cache=True,
            )  # fmt: skip
            outputs.append((first.last_hidden_state, step.last_hidden_state, step.past_key_values))
    assert len(sdpa_calls) == 6 + 4  # the first call as in CASES; the step's decoder: 2 self- and 2 cross-attentions
    for a, b in zip(outputs[0][:2], outputs[1][:2]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    for layer_a, layer_b in zip(outputs[0][2], outputs[1][2]):
        for a, b in zip(layer_a, layer_b):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_bart_output_attentions_keeps_the_original_forward(sdpa_calls: list[int]) -> None:
    models = _bart_pair()
    with seeded(1):
        inputs = {"input_ids": torch.randint(0, 50, (2, 6)), "decoder_input_ids": torch.randint(0, 50, (2, 4))}
    with torch.no_grad(), default_dtype(torch.float64):
        outs = [m(**inputs, output_attentions=True) for m in models]
    assert not sdpa_calls
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for a, b in zip(getattr(outs[0], name), getattr(outs[1], name)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bart_mask_of_the_wrong_size_fails_as_the_original(sdpa_calls: list[int]) -> None:
    from transformers.models.bart.modeling_bart import BartAttention

    import adopter_kernels

    with seeded(0):
        original = BartAttention(8, 2)
        rewritten = adopter_kernels.bart_attention_sdpa(BartAttention)(8, 2)
        hidden, mask = torch.randn(2, 5, 8), torch.zeros(2, 1, 5, 4)
    errors = []
    for module in (original, rewritten):
        with pytest.raises(ValueError) as error:
            module(hidden, attention_mask=mask)
        errors.append(str(error.value))
    assert errors[0] == errors[1] and "Attention mask should be of size (2, 1, 5, 5)" in errors[0]
    assert not sdpa_calls


POSITIVE_FIXTURES = [
    c for c in fixture_cases() if not is_negative(c) and rule_code(c) in ("ADP001", "ADP002", "ADP003", "ADP014")
]


@pytest.mark.parametrize("case", POSITIVE_FIXTURES, ids=[f"{c.parent.name}/{c.name}" for c in POSITIVE_FIXTURES])
def test_rewritten_fixture_runs_sdpa(case: Path, sdpa_calls: list[int]) -> None:
    """The fixture runner proves equivalence; this proves the equivalence is not a silent fallback."""
    module = load_source_as_module(
        expected_path(case).read_text(encoding="utf-8"), f"sdpa_{case.parent.name}_{case.stem}"
    )
    torch.manual_seed(0)
    model, args, *kwargs = module.make_example()
    with torch.no_grad():
        model.eval()(*args, **(kwargs[0] if kwargs else {}))
    findings = len(rewrite_source(case.read_text(encoding="utf-8"), [rule_code(case)]).findings)
    assert len(sdpa_calls) == findings  # each rewritten attention runs once per forward in these fixtures


# Every listed class but the reference is a transformers 4.34.1 "Copied from" class; where it lives.
COPIES_MODULES = {
    "AlignTextSelfAttention": "align.modeling_align",
    "AltRobertaSelfAttention": "altclip.modeling_altclip",
    "BertGenerationSelfAttention": "bert_generation.modeling_bert_generation",
    "BridgeTowerSelfAttention": "bridgetower.modeling_bridgetower",
    "CamembertSelfAttention": "camembert.modeling_camembert",
    "ChineseCLIPTextSelfAttention": "chinese_clip.modeling_chinese_clip",
    "ClapTextSelfAttention": "clap.modeling_clap",
    "Data2VecTextSelfAttention": "data2vec.modeling_data2vec_text",
    "ElectraSelfAttention": "electra.modeling_electra",
    "ErnieSelfAttention": "ernie.modeling_ernie",
    "LayoutLMSelfAttention": "layoutlm.modeling_layoutlm",
    "MarkupLMSelfAttention": "markuplm.modeling_markuplm",
    "MegatronBertSelfAttention": "megatron_bert.modeling_megatron_bert",
    "RealmSelfAttention": "realm.modeling_realm",
    "RoCBertSelfAttention": "roc_bert.modeling_roc_bert",
    "RobertaPreLayerNormSelfAttention": "roberta_prelayernorm.modeling_roberta_prelayernorm",
    "RobertaSelfAttention": "roberta.modeling_roberta",
    "SplinterSelfAttention": "splinter.modeling_splinter",
    "XLMRobertaSelfAttention": "xlm_roberta.modeling_xlm_roberta",
    "XLMRobertaXLSelfAttention": "xlm_roberta_xl.modeling_xlm_roberta_xl",
    "XmodSelfAttention": "xmod.modeling_xmod",
    "LongT5Attention": "longt5.modeling_longt5",
    "MT5Attention": "mt5.modeling_mt5",
    "Pop2PianoAttention": "pop2piano.modeling_pop2piano",
    "SwitchTransformersAttention": "switch_transformers.modeling_switch_transformers",
    "DecisionTransformerGPT2Attention": "decision_transformer.modeling_decision_transformer",
    "BigBirdPegasusDecoderAttention": "bigbird_pegasus.modeling_bigbird_pegasus",
    "BioGptAttention": "biogpt.modeling_biogpt",
    "BlenderbotAttention": "blenderbot.modeling_blenderbot",
    "BlenderbotSmallAttention": "blenderbot_small.modeling_blenderbot_small",
    "Data2VecAudioAttention": "data2vec.modeling_data2vec_audio",
    "GPTSanJapaneseAttention": "gptsan_japanese.modeling_gptsan_japanese",
    "HubertAttention": "hubert.modeling_hubert",
    "InformerAttention": "informer.modeling_informer",
    "M2M100Attention": "m2m_100.modeling_m2m_100",
    "MBartAttention": "mbart.modeling_mbart",
    "MarianAttention": "marian.modeling_marian",
    "MusicgenAttention": "musicgen.modeling_musicgen",
    "PLBartAttention": "plbart.modeling_plbart",
    "PegasusAttention": "pegasus.modeling_pegasus",
    "PegasusXAttention": "pegasus_x.modeling_pegasus_x",
    "SEWAttention": "sew.modeling_sew",
    "Speech2Text2Attention": "speech_to_text_2.modeling_speech_to_text_2",
    "Speech2TextAttention": "speech_to_text.modeling_speech_to_text",
    "TimeSeriesTransformerAttention": "time_series_transformer.modeling_time_series_transformer",
    "UniSpeechAttention": "unispeech.modeling_unispeech",
    "UniSpeechSatAttention": "unispeech_sat.modeling_unispeech_sat",
    "Wav2Vec2Attention": "wav2vec2.modeling_wav2vec2",
    "WhisperAttention": "whisper.modeling_whisper",
}
REFERENCES = {  # rule -> (reference class, its module, the name prefix copies replace)
    "ADP001": ("BertSelfAttention", "bert.modeling_bert", "Bert"),
    "ADP002": ("T5Attention", "t5.modeling_t5", "T5"),
    "ADP003": ("GPT2Attention", "gpt2.modeling_gpt2", "GPT2"),
    "ADP014": ("BartAttention", "bart.modeling_bart", "Bart"),
}
# The methods each copy must share with its reference. ADP014's drop-in replaces only `forward`; it reads the
# attributes `__init__` sets (checked by the rule's guard), and Whisper's `__init__` builds k_proj without a bias.
COMPARED = {"ADP014": ("forward",)}


def _methods(module: str, cls: str, prefix: str, names: tuple[str, ...] = ("__init__", "forward")) -> dict[str, str]:
    """Methods of a class (`__init__` and `forward`), as AST dumps with the class-name prefix replaced by ``@``."""
    spec = importlib.util.find_spec(f"transformers.models.{module}")  # locates the file without importing torch code
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    return {
        f.name: ast.dump(f).replace(prefix, "@")
        for f in node.body
        if isinstance(f, ast.FunctionDef) and f.name in names
    }


@pytest.mark.parametrize("code", sorted(REFERENCES))
def test_listed_copies_are_verbatim(code: str) -> None:
    (rule,) = select_rules([code])
    assert rule.init is not None
    pattern = rule.init.source[0]
    assert isinstance(pattern, CallNode)
    reference, module, prefix = REFERENCES[code]
    listed = [t.removeprefix("*.") for t in pattern.types]
    assert listed[0] == reference
    names = COMPARED.get(code, ("__init__", "forward"))
    expected = _methods(module, reference, prefix, names)
    assert set(expected) == set(names)
    suffix = reference.removeprefix(prefix)
    for name in listed[1:]:
        copy_prefix = name.removesuffix(suffix)
        assert copy_prefix != name, name
        assert _methods(COPIES_MODULES[name], name, copy_prefix, names) == expected, name
