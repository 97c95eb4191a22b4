"""ADP005 on real transformers 4.34.1 sources it was never tuned on: BERT, RoBERTa and ELECTRA.

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
