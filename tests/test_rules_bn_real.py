"""ADP007/ADP008 on real transformers 4.34.1 model files: expected findings, and the rewritten modules built and run
against the originals (strict state-dict load, outputs and gradients in eval and train).

DPT is the paper's case (§3.2 Fig. 3): BatchNorm under ``if self.use_batch_norm`` in DPTPreActResidualLayer, plus
its segmentation heads' nn.Sequential. ResNet has plain conv/bn pairs, GroupViT Linear -> BatchNorm1d projection
heads in nn.Sequential.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if transformers.__version__ != "4.34.1":  # the expected findings are those of this release's sources
    pytest.skip("needs transformers 4.34.1", allow_module_level=True)

from torch import nn

from adopter_codemods.api import rewrite_source, scan_source
from adopter_kernels.equivalence import compare_models, default_dtype, load_source_as_module, seeded

# (model package, rule) -> expected findings as (class, line of the first matched statement)
EXPECTED = {
    ("dpt", "ADP007"): [
        ("DPTPreActResidualLayer", 747),  # convolution1 -> `if self.use_batch_norm:` batch_norm1
        ("DPTPreActResidualLayer", 753),  # convolution2 -> `if self.use_batch_norm:` batch_norm2
        ("DPTSemanticSegmentationHead", 1177),  # self.head = nn.Sequential(Conv2d, BatchNorm2d, ...)
        ("DPTAuxiliaryHead", 1200),
    ],
    ("resnet", "ADP007"): [("ResNetConvLayer", 74), ("ResNetShortCut", 116)],
    ("groupvit", "ADP008"): [("GroupViTModel", 1375), ("GroupViTModel", 1381)],  # visual_/text_projection
    # The other rule finds nothing in these files.
    ("dpt", "ADP008"): [],
    ("resnet", "ADP008"): [],
    ("groupvit", "ADP007"): [],
}


def _source(package: str) -> str:
    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    return Path(module.__file__).read_text(encoding="utf-8")  # type: ignore[arg-type]


_REWRITTEN: dict[tuple[str, str], ModuleType] = {}


def _original_and_rewritten(package: str, rule: str) -> tuple[ModuleType, ModuleType]:
    original = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    if (package, rule) not in _REWRITTEN:
        code = rewrite_source(_source(package), [rule]).code
        _REWRITTEN[(package, rule)] = load_source_as_module(
            code, f"transformers.models.{package}.modeling_{package}_adopted_{rule.lower()}",
            package=f"transformers.models.{package}",
        )
    return original, _REWRITTEN[(package, rule)]


@pytest.mark.parametrize(("package", "rule"), list(EXPECTED), ids=[f"{p}-{r}" for p, r in EXPECTED])
def test_findings_and_rewrite(package: str, rule: str) -> None:
    source = _source(package)
    findings = scan_source(source, [rule])
    assert [(f.cls, f.line) for f in findings] == EXPECTED[(package, rule)]
    result = rewrite_source(source, [rule])
    assert [(f.cls, f.line) for f in result.findings] == EXPECTED[(package, rule)]
    compile(result.code, f"modeling_{package}_adopted.py", "exec")
    assert rewrite_source(result.code, [rule]).code == result.code  # idempotent
    if not findings:
        assert result.code == source


def test_dpt_conditional_batch_norm_is_duplicated_into_else() -> None:
    code = rewrite_source(_source("dpt"), ["ADP007"]).code
    assert (
        "        if self.use_batch_norm:\n"
        "            hidden_state = adopter_kernels.conv_bn2d(hidden_state, self.convolution1, self.batch_norm1)\n"
        "        else:\n"
        "            hidden_state = self.convolution1(hidden_state)\n"
    ) in code
    assert code.count("adopter_kernels.FusedSequential(") == 2


def _randomize_norms(model: nn.Module) -> None:
    """Running statistics and affine parameters away from their defaults, so eval folding is really exercised."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.copy_(torch.randn(module.num_features, generator=generator) * 0.5)
                module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(module.num_features, generator=generator) * 0.1)


def _compare(
    build: Callable[[ModuleType], nn.Module], package: str, rule: str, inputs: Callable[[], tuple[object, ...]]
) -> None:
    """Build both models and draw the inputs in float64 under one seed (eval folds BN into the weights: float64
    keeps that rounding at ~1e-15, far below the harness's 1e-9)."""
    original_module, rewritten_module = _original_and_rewritten(package, rule)
    with default_dtype(torch.float64), seeded(0):
        original = build(original_module)
        _randomize_norms(original)
        rewritten = build(rewritten_module)
        args = inputs()
        assert type(rewritten).__module__ == rewritten_module.__name__
        report = compare_models(original, rewritten, args)
    assert report.ok, report.format()


@pytest.mark.parametrize("use_batch_norm", [True, False])
def test_dpt_pre_act_residual_layer_equivalent(use_batch_norm: bool) -> None:
    config = transformers.DPTConfig(fusion_hidden_size=8, use_batch_norm_in_fusion_residual=use_batch_norm)
    _compare(lambda m: m.DPTPreActResidualLayer(config), "dpt", "ADP007", lambda: (torch.randn(2, 8, 6, 6),))


def test_dpt_segmentation_head_equivalent() -> None:
    config = transformers.DPTConfig(fusion_hidden_size=8, num_labels=3, semantic_classifier_dropout=0.0)
    features = lambda: ([torch.randn(2, 8, 4, 4) for _ in range(4)],)  # noqa: E731
    _compare(lambda m: m.DPTSemanticSegmentationHead(config), "dpt", "ADP007", features)


def test_resnet_model_equivalent() -> None:
    config = transformers.ResNetConfig(embedding_size=4, hidden_sizes=[4, 8], depths=[1, 1], layer_type="bottleneck")
    _compare(lambda m: m.ResNetModel(config), "resnet", "ADP007", lambda: (torch.randn(2, 3, 16, 16),))


def test_groupvit_model_equivalent() -> None:
    config = transformers.GroupViTConfig(
        text_config={
            "vocab_size": 50,
            "hidden_size": 8,
            "intermediate_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
        },
        vision_config={
            "hidden_size": 8,
            "intermediate_size": 16,
            "depths": [1, 1],
            "num_hidden_layers": 2,
            "num_group_tokens": [4, 0],
            "num_output_groups": [4, 4],
            "num_attention_heads": 2,
            "image_size": 8,
            "patch_size": 4,
        },
        projection_dim=4,
        projection_intermediate_dim=8,
    )
    inputs = lambda: (torch.randint(0, 50, (3, 5)), torch.randn(3, 3, 8, 8))  # noqa: E731
    _compare(lambda m: m.GroupViTModel(config), "groupvit", "ADP008", inputs)
