"""ADP004 FastSoftmax, ADP006 FuseBiasGeLU and ADP009 FuseQKV on real transformers 4.34.1 modeling files.

Each rule runs alone over modeling files where it should fire: the findings are the expected classes, the output
parses and a second run changes nothing. For one model per rule (ADP004: two, CodeGen writing
`nn.Softmax(dim=-1)(x)`), a tiny model built from the rewritten source loads the original's state_dict strictly and
computes the same outputs and gradients in eval and in training (with dropout on: none of the three kernels draws
random numbers, so the same seed gives the same masks).
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import libcst as cst
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from adopter_codemods.api import rewrite_source  # noqa: E402
from adopter_kernels.equivalence import (  # noqa: E402
    EquivalenceReport,
    compare_models,
    default_dtype,
    load_source_as_module,
    seeded,
)
from adopter_codemods.qualnames import ImportTable, qualname_matches  # noqa: E402

if transformers.__version__ != "4.34.1":
    pytest.skip("written against transformers 4.34.1", allow_module_level=True)

MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])  # the second sequence is padded

# (rule, model dir) -> findings per class
EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    ("ADP004", "bert"): {"BertSelfAttention": 1},
    ("ADP004", "gpt_neo"): {"GPTNeoSelfAttention": 1},
    ("ADP004", "prophetnet"): {"": 2, "ProphetNetAttention": 1},  # "": its top-level `def softmax(...)` helper
    ("ADP004", "codegen"): {"CodeGenAttention": 1},  # `nn.Softmax(dim=-1)(attn_weights)`, built and called
    ("ADP006", "bert"): {"BertIntermediate": 1, "BertPredictionHeadTransform": 1},
    ("ADP006", "vit"): {"ViTIntermediate": 1},
    ("ADP006", "clip"): {"CLIPMLP": 1},
    ("ADP006", "gpt_neo"): {"GPTNeoMLP": 1},
    ("ADP009", "gpt_neo"): {"GPTNeoSelfAttention": 1},
    ("ADP009", "gptj"): {"GPTJAttention": 1},
    ("ADP009", "llama"): {"LlamaAttention": 1, "LlamaFlashAttention2": 1},
    ("ADP009", "longformer"): {},  # `query_vectors /= ...` on an output: refused by the guard
}


def _source(model: str) -> tuple[str, str]:
    module = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    path = Path(module.__file__)  # type: ignore[arg-type]
    return str(path), path.read_text(encoding="utf-8")


def _softmax_calls(source: str) -> int:
    """Calls of torch.nn.functional.softmax in a file, by qualified name, and of a torch.nn.Softmax built and called
    at once (what FastSoftmax must find)."""
    module = cst.parse_module(source)
    table = ImportTable.from_module(module)

    class Count(cst.CSTVisitor):
        n = 0

        def visit_Call(self, node: cst.Call) -> None:
            name = table.resolve(node.func.func if isinstance(node.func, cst.Call) else node.func)
            wanted = "torch.nn.Softmax" if isinstance(node.func, cst.Call) else "torch.nn.functional.softmax"
            if name is not None and qualname_matches(wanted, name):
                self.n += 1

    counter = Count()
    module.visit(counter)
    return counter.n


def _rewrite(rule: str, model: str) -> str:
    path, source = _source(model)
    result = rewrite_source(source, [rule], path=path)
    assert Counter(f.cls for f in result.findings) == Counter(EXPECTED[(rule, model)])
    assert {f.code for f in result.findings} <= {rule}
    cst.parse_module(result.code)
    assert rewrite_source(result.code, [rule]).code == result.code
    return result.code


@pytest.mark.parametrize(("rule", "model"), sorted(EXPECTED))
def test_rule_on_real_modeling_file(rule: str, model: str) -> None:
    code = _rewrite(rule, model)
    if rule == "ADP004":  # every call, in methods and top-level functions alike
        assert _softmax_calls(code) == 0
        assert code.count("adopter_kernels.softmax(") == _softmax_calls(_source(model)[1])


def _compare(
    model: str, code: str, model_cls: str, config: object, inputs: Callable[[], tuple[tuple, dict]]
) -> EquivalenceReport:
    """Build the original and the rewritten model and draw ``inputs()``, all in float64 under fixed seeds."""
    original = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    rewritten = load_source_as_module(
        code, f"transformers.models.{model}.modeling_{model}_adopted", package=f"transformers.models.{model}"
    )
    with default_dtype(torch.float64):
        with seeded(0):
            vanilla = getattr(original, model_cls)(config)
            args, kwargs = inputs()
        with seeded(1):  # different init: the strict state_dict load must make them equal
            fused = getattr(rewritten, model_cls)(config)
        return compare_models(vanilla, fused, args, kwargs)


def test_fast_softmax_bert_equivalent() -> None:
    code = _rewrite("ADP004", "bert")
    config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    )  # fmt: skip
    inputs = lambda: ((), {"input_ids": torch.randint(0, 40, (2, 7)), "attention_mask": MASK})  # noqa: E731
    _compare("bert", code, "BertModel", config, inputs).raise_if_failed()


def test_fast_softmax_codegen_equivalent() -> None:
    """CodeGen's softmax is a module built and called at once, `nn.Softmax(dim=-1)(attn_weights)` (4 heads: its
    projection splits them in 4 model-parallel groups)."""
    code = _rewrite("ADP004", "codegen")
    assert "adopter_kernels.softmax(attn_weights, dim=-1)" in code
    config = transformers.CodeGenConfig(
        vocab_size=40, n_positions=16, n_ctx=16, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, resid_pdrop=0.1,
        embd_pdrop=0.1, attn_pdrop=0.1,
    )  # fmt: skip
    inputs = lambda: ((), {"input_ids": torch.randint(0, 40, (2, 7)), "attention_mask": MASK})  # noqa: E731
    _compare("codegen", code, "CodeGenModel", config, inputs).raise_if_failed()


def test_fuse_bias_gelu_vit_equivalent() -> None:
    code = _rewrite("ADP006", "vit")
    config = transformers.ViTConfig(
        image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    )  # fmt: skip
    _compare("vit", code, "ViTModel", config, lambda: ((torch.randn(2, 3, 8, 8),), {})).raise_if_failed()


def test_fuse_qkv_gpt_neo_equivalent() -> None:
    code = _rewrite("ADP009", "gpt_neo")
    config = transformers.GPTNeoConfig(
        vocab_size=40, max_position_embeddings=16, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
        attention_types=[[["global", "local"], 1]], window_size=4, embed_dropout=0.1, attention_dropout=0.1,
        resid_dropout=0.1,
    )  # fmt: skip
    inputs = lambda: ((), {"input_ids": torch.randint(0, 40, (2, 7)), "attention_mask": MASK, "use_cache": True})  # noqa: E731
    _compare("gpt_neo", code, "GPTNeoModel", config, inputs).raise_if_failed()
