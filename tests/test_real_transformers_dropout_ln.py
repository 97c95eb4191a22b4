"""ADP005 on real transformers 4.34.1 sources it was never tuned on: BERT, RoBERTa and ELECTRA (Dropout modules,
post-LN), OneFormer, CTRL and MPT (pre-LN), BART, OPT, MBart and Whisper (functional dropout; MBart's and Whisper's
pre-LN layers copy the sum before the LayerNorm), and nine more pre-LN decoder layers whose self-attention sum
reaches its LayerNorm inside the cross-attention `if` (M2M100, Pegasus, Blenderbot, ...).

Each modeling file is rewritten with the FuseDropoutLN rule only, the result must parse and be idempotent, and a tiny
model built from the rewritten module must load the original's checkpoint strictly and compute the same outputs
and gradients in eval and in training *with dropout on* (the fused kernel's reference path draws random numbers
exactly like nn.Dropout, so the same seed gives the same masks).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import libcst as cst
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from adopter_codemods.api import rewrite_source  # noqa: E402
from adopter_kernels.equivalence import (  # noqa: E402
    compare_models,
    default_dtype,
    load_source_as_module,
    seeded,
)

if transformers.__version__ != "4.34.1":
    pytest.skip("written against transformers 4.34.1", allow_module_level=True)

# model dir -> (model class, config class, classes with the Dropout -> add -> LayerNorm residual)
MODELS = {
    "bert": ("BertModel", "BertConfig", {"BertSelfOutput", "BertOutput"}),
    "roberta": ("RobertaModel", "RobertaConfig", {"RobertaSelfOutput", "RobertaOutput"}),
    "electra": ("ElectraModel", "ElectraConfig", {"ElectraSelfOutput", "ElectraOutput"}),
}


def _source(model: str) -> tuple[str, str]:
    module = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    path = Path(module.__file__)  # type: ignore[arg-type]
    return str(path), path.read_text(encoding="utf-8")


@pytest.mark.parametrize("model", sorted(MODELS))
def test_fuse_dropout_ln_on_real_model(model: str) -> None:
    model_cls, config_cls, expected_classes = MODELS[model]
    path, source = _source(model)
    result = rewrite_source(source, ["ADP005"], path=path)
    assert {f.cls for f in result.findings} == expected_classes
    cst.parse_module(result.code)
    assert rewrite_source(result.code, ["ADP005"]).code == result.code

    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    rewritten = load_source_as_module(
        result.code, f"transformers.models.{model}.modeling_{model}_adopted", package=f"transformers.models.{model}"
    )
    config = getattr(transformers, config_cls)(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.0,
        embedding_size=16,
    )  # fmt: skip
    with default_dtype(torch.float64), seeded(0):
        vanilla = getattr(original, model_cls)(config)
        fused = getattr(rewritten, model_cls)(config)
        assert sum(type(m).__name__ == "FusedDropoutAddLayerNorm" for m in fused.modules()) == 2 * 2
        ids = torch.randint(0, 40, (2, 7))
        mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
        report = compare_models(vanilla, fused, (), {"input_ids": ids, "attention_mask": mask})
    report.raise_if_failed()


def test_prenorm_form_on_oneformer_decoder_layer() -> None:
    """OneFormer's query-transformer decoder layer has a pre-LN `forward_pre` (`output = output + dropout1(o2);
    output2 = norm2(output)`, `output` added to again) beside a post-LN `forward_post` sharing the same Dropouts.
    The pre-LN sites take the pre-LN form; the post-LN ones cannot delete a Dropout `forward_pre` still passes on,
    so they take the form that keeps the modules (as do the self-attention, cross-attention and FFN layers, whose
    Dropouts `forward_pre` calls too). The layer computes the same outputs and gradients, built pre-norm and
    post-norm, in eval and in training with dropout on. (The pixel decoder's encoder layer has BART's post-LN
    functional-dropout blocks: two more findings.)"""
    path, source = _source("oneformer")
    result = rewrite_source(source, ["ADP005"], path=path)
    layer = "OneFormerTransformerDecoderQueryTransformerDecoderLayer"
    assert [(f.cls, f.function) for f in result.findings] == [
        *[("OneFormerPixelDecoderEncoderLayer", "forward")] * 2,
        *[(f"OneFormerTransformerDecoder{kind}Layer", "forward_post") for kind in ("SelfAttention", "CrossAttention",
                                                                                  "FFN")],
        *[(layer, "forward_post")] * 3, *[(layer, "forward_pre")] * 2,
    ]
    assert result.code.count("adopter_kernels.dropout_add_layer_norm_residual(") == 2
    assert result.code.count("adopter_kernels.dropout_add_layer_norm_module(") == 8
    assert "FusedDropoutAddLayerNorm" not in result.code  # the post-LN sites keep their shared Dropouts
    cst.parse_module(result.code)
    assert rewrite_source(result.code, ["ADP005"]).code == result.code

    original = importlib.import_module("transformers.models.oneformer.modeling_oneformer")
    rewritten = load_source_as_module(
        result.code, "transformers.models.oneformer.modeling_oneformer_adopted", package="transformers.models.oneformer"
    )
    for normalize_before in (True, False):
        with default_dtype(torch.float64), seeded(0):
            kwargs = {"d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.2}
            kwargs["normalize_before"] = normalize_before
            vanilla = getattr(original, layer)(**kwargs)
            fused = getattr(rewritten, layer)(**kwargs)
            output, memory = torch.randn(5, 2, 8), torch.randn(7, 2, 8)  # (sequence, batch, d_model)
            report = compare_models(vanilla, fused, (output, memory), {"query_pos": torch.randn(5, 2, 8)})
        report.raise_if_failed()
        assert "train" in report.modes


# Pre-LN decoder LMs: model dir -> (model class, the block, config built with dropout on)
PRENORM_MODELS = {
    "ctrl": ("CTRLModel", "EncoderLayer", lambda: transformers.CTRLConfig(
        vocab_size=40, n_positions=32, n_embd=16, dff=32, n_layer=2, n_head=2, resid_pdrop=0.2, embd_pdrop=0.0,
    )),
    "mpt": ("MptModel", "MptBlock", lambda: transformers.MptConfig(
        vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_seq_len=32, attn_config={"attn_pdrop": 0.2},
    )),
}  # fmt: skip


@pytest.mark.parametrize("model", sorted(PRENORM_MODELS))
def test_prenorm_form_on_real_decoder_models(model: str) -> None:
    """CTRL's EncoderLayer and MPT's block are pre-LN (`out1 = x + dropout1(attn)`; `out2 = layernorm2(out1)`; the
    feed-forward adds to `out1`): one pre-LN finding per block class; the whole tiny model, rewritten, loads the
    original's checkpoint strictly and computes the same outputs and gradients in eval and in training."""
    model_cls, block, make_config = PRENORM_MODELS[model]
    path, source = _source(model)
    result = rewrite_source(source, ["ADP005"], path=path)
    assert [f.cls for f in result.findings] == [block]
    assert result.code.count("adopter_kernels.dropout_add_layer_norm_residual(") == 1
    cst.parse_module(result.code)
    assert rewrite_source(result.code, ["ADP005"]).code == result.code

    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    rewritten = load_source_as_module(
        result.code, f"transformers.models.{model}.modeling_{model}_adopted", package=f"transformers.models.{model}"
    )
    with default_dtype(torch.float64), seeded(0):
        config = make_config()
        vanilla = getattr(original, model_cls)(config)
        fused = getattr(rewritten, model_cls)(config)
        ids = torch.randint(0, 40, (2, 7))
        report = compare_models(vanilla, fused, (), {"input_ids": ids})
    report.raise_if_failed()
    assert "train" in report.modes


# Models with functional dropout: model dir -> (model class, config, {class: findings}, extra kwargs)
_SEQ2SEQ = dict(
    vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
    encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32, dropout=0.2, attention_dropout=0.1,
    activation_dropout=0.1, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
)  # fmt: skip
FUNCTIONAL_MODELS = {
    # post-LN: every dropout -> add -> LayerNorm, the cross-attention one inside `if encoder_hidden_states is not None`
    "bart": ("BartModel", lambda: transformers.BartConfig(**_SEQ2SEQ), {"BartEncoderLayer": 2, "BartDecoderLayer": 3}),
    # pre-LN with the sum copied to `residual` before the LayerNorm (`h = residual + h; residual = h; h = ln(h)`);
    # in the decoder layer the self-attention's copy and LayerNorm are in `if encoder_hidden_states is not None:`
    "mbart": ("MBartModel", lambda: transformers.MBartConfig(**_SEQ2SEQ), {"MBartEncoderLayer": 1, "MBartDecoderLayer": 1}),
    # post-LN or pre-LN by configuration: the dropout and add precede `if not self.do_layer_norm_before:` holding the
    # LayerNorm (copied into an else arm); built post-LN, so the fused arm runs
    "opt": ("OPTModel", lambda: transformers.OPTConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, ffn_dim=32, num_attention_heads=2,
        max_position_embeddings=32, word_embed_proj_dim=16, dropout=0.2, attention_dropout=0.1,
        do_layer_norm_before=False, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    ), {"OPTDecoderLayer": 1}),
    "whisper": ("WhisperModel", lambda: transformers.WhisperConfig(
        **{k: v for k, v in _SEQ2SEQ.items() if k != "max_position_embeddings"},
        num_mel_bins=8, max_source_positions=8, max_target_positions=16,
    ), {"WhisperEncoderLayer": 1, "WhisperDecoderLayer": 1}),
}  # fmt: skip


@pytest.mark.parametrize("model", sorted(FUNCTIONAL_MODELS))
def test_functional_dropout_forms_on_real_models(model: str) -> None:
    """BART's and OPT's layers drop out with `nn.functional.dropout(h, p=self.dropout, training=self.training)`
    (post-LN: one `dropout_add_layer_norm_module` call per residual block; OPT's in an `if`); MBart's and Whisper's
    layers are pre-LN and copy the sum to `residual` before the next LayerNorm (one `h, residual =
    dropout_add_layer_norm_residual(...)`). In their decoder layers the self-attention's dropout and add precede the
    cross-attention's `if` (two `x = None` lines between), which holds the copy and the LayerNorm: the fused call
    goes in the `if`, the dropout and add are copied into a new `else`; the cross-attention's own sum reaches the
    final LayerNorm after the `if`, whose lines are copied to the end of both arms, where each sum fuses with it
    (two more calls). The whole tiny model, rewritten, loads the
    original's checkpoint strictly and computes the same outputs and gradients in eval and in training with every
    dropout on (same seed, same masks), float64."""
    model_cls, make_config, expected = FUNCTIONAL_MODELS[model]
    path, source = _source(model)
    result = rewrite_source(source, ["ADP005"], path=path)
    found: dict[str, int] = {}
    for finding in result.findings:
        found[finding.cls] = found.get(finding.cls, 0) + 1
    assert found == expected
    kernel = "dropout_add_layer_norm_module(" if model in ("bart", "opt") else "dropout_add_layer_norm_residual("
    after_the_if = 2 if model in ("mbart", "whisper") else 0  # the final LayerNorm's copies in the decoder's arms
    assert result.code.count(f"adopter_kernels.{kernel}") == sum(expected.values()) + after_the_if
    assert "FusedDropoutAddLayerNorm" not in result.code  # __init__ untouched: no Dropout module to take over
    cst.parse_module(result.code)
    assert rewrite_source(result.code, ["ADP005"]).code == result.code

    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    rewritten = load_source_as_module(
        result.code, f"transformers.models.{model}.modeling_{model}_adopted", package=f"transformers.models.{model}"
    )
    with default_dtype(torch.float64), seeded(0):
        config = make_config()
        vanilla = getattr(original, model_cls)(config)
        with torch.no_grad():  # LayerNorm weights start at ones, biases at zeros: move them so they are checked
            for name, param in vanilla.named_parameters():
                if "layer_norm" in name:
                    param.add_(torch.randn_like(param) * 0.1)
        fused = getattr(rewritten, model_cls)(config)
        decoder_ids = torch.randint(0, 40, (2, 5))
        mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
        if model == "whisper":
            inputs = {"input_features": torch.randn(2, 8, 16), "decoder_input_ids": decoder_ids}
        elif model == "opt":
            inputs = {"input_ids": torch.randint(0, 40, (2, 7)), "attention_mask": mask}
        else:
            inputs = {"input_ids": torch.randint(0, 40, (2, 7)), "attention_mask": mask, "decoder_input_ids": decoder_ids}
        report = compare_models(vanilla, fused, (), {**inputs, "use_cache": False})
    report.raise_if_failed()
    assert "train" in report.modes


def test_mbart_decoder_without_encoder_runs_the_else_copy() -> None:
    """MBartForCausalLM runs the decoder layers without encoder states: the `else` arm the rewrite adds (the
    self-attention's dropout and add, fused with the final LayerNorm copied there from after the `if`) runs instead
    of the cross-attention arm, with the same outputs and gradients."""
    path, source = _source("mbart")
    result = rewrite_source(source, ["ADP005"], path=path)
    else_arm = (
        "        else:\n            # Fully Connected\n            hidden_states, residual = "
        "adopter_kernels.dropout_add_layer_norm_residual(hidden_states, residual, self.final_layer_norm,"
    )
    assert else_arm in result.code
    original = importlib.import_module("transformers.models.mbart.modeling_mbart")
    rewritten = load_source_as_module(
        result.code, "transformers.models.mbart.modeling_mbart_adopted", package="transformers.models.mbart"
    )
    with default_dtype(torch.float64), seeded(0):
        config = transformers.MBartConfig(**_SEQ2SEQ)
        vanilla = original.MBartForCausalLM(config)
        fused = rewritten.MBartForCausalLM(config)
        report = compare_models(vanilla, fused, (), {"input_ids": torch.randint(0, 40, (2, 7)), "use_cache": False})
    report.raise_if_failed()
    assert "train" in report.modes


# Pre-LN decoder layers shaped like MBart's (self-attention dropout and add before the cross-attention `if` holding
# the copy of the sum and its LayerNorm): model dir -> (layer, its tiny config with dropout on)
_DECODER = dict(
    d_model=16, decoder_attention_heads=2, decoder_ffn_dim=32, dropout=0.2, attention_dropout=0.1,
    activation_dropout=0.1,
)  # fmt: skip
CROSS_ATTENTION_DECODERS = {
    "bigbird_pegasus": ("BigBirdPegasusDecoderLayer", lambda: transformers.BigBirdPegasusConfig(**_DECODER)),
    "blenderbot": ("BlenderbotDecoderLayer", lambda: transformers.BlenderbotConfig(**_DECODER)),
    "m2m_100": ("M2M100DecoderLayer", lambda: transformers.M2M100Config(**_DECODER)),
    "musicgen": ("MusicgenDecoderLayer", lambda: transformers.MusicgenDecoderConfig(
        hidden_size=16, num_attention_heads=2, ffn_dim=32, dropout=0.2, attention_dropout=0.1, activation_dropout=0.1,
    )),
    "nllb_moe": ("NllbMoeDecoderLayer", lambda: transformers.NllbMoeConfig(**_DECODER)),
    "pegasus": ("PegasusDecoderLayer", lambda: transformers.PegasusConfig(**_DECODER)),
    "pegasus_x": ("PegasusXDecoderLayer", lambda: transformers.PegasusXConfig(**_DECODER)),
    "speech_to_text": ("Speech2TextDecoderLayer", lambda: transformers.Speech2TextConfig(**_DECODER)),
    "xglm": ("XGLMDecoderLayer", lambda: transformers.XGLMConfig(
        d_model=16, attention_heads=2, ffn_dim=32, dropout=0.2, attention_dropout=0.1, activation_dropout=0.1,
        add_cross_attention=True,
    )),
}  # fmt: skip


@pytest.mark.parametrize("model", sorted(CROSS_ATTENTION_DECODERS))
def test_prenorm_decoder_layers_fuse_into_the_cross_attention_if(model: str) -> None:
    """The decoder layer's one finding is the self-attention's dropout and add fused with the cross-attention's
    LayerNorm inside the `if`; the layer, rewritten, computes the same outputs and gradients as the original with
    encoder states (the fused arm) and without (the copied `else`), in eval and in training with dropout on."""
    layer, make_config = CROSS_ATTENTION_DECODERS[model]
    path, source = _source(model)
    result = rewrite_source(source, ["ADP005"], path=path)
    messages = [f.message for f in result.findings if f.cls == layer]
    assert len(messages) == 1 and ("encoder_attn_layer_norm" in messages[0] or "cross_attention_layer_norm" in messages[0])
    layer_code = result.code.split(f"\nclass {layer}(")[1].split("\nclass ")[0]
    assert "adopter_kernels.dropout_add_layer_norm_residual(" in layer_code and "        else:\n" in layer_code
    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    rewritten = load_source_as_module(
        result.code, f"transformers.models.{model}.modeling_{model}_adopted", package=f"transformers.models.{model}"
    )
    for encoder_states in (True, False):
        with default_dtype(torch.float64), seeded(0):
            config = make_config()
            vanilla = getattr(original, layer)(config)
            fused = getattr(rewritten, layer)(config)
            kwargs = {"encoder_hidden_states": torch.randn(2, 7, 16)} if encoder_states else {}
            report = compare_models(vanilla, fused, (torch.randn(2, 5, 16),), {**kwargs, "use_cache": False})
        report.raise_if_failed()
        assert "train" in report.modes
