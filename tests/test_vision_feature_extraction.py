"""torchvision's fx feature extraction on a rewritten torchvision ResNet-18 (issue 14 item 4).

The source is torchvision 0.28.0's ``models/resnet.py`` with ``norm_layer(...)`` spelled ``nn.BatchNorm2d(...)`` (a
model with a fixed norm layer, as most user code has), rewritten by ``rewrite_source``: ADP007 turns the stem's
``bn1(conv1(x))`` into ``adopter_kernels.conv_bn2d`` (the blocks build their convs through ``conv3x3()``, which the
engine does not see). ``create_feature_extractor`` must accept every node name it accepts on the original — the
BN inside the kernel call included — and return the same features, in float64, eval and train. (Symbolic tracing
records ``conv_bn2d`` as the original ``bn(conv(x))`` modules, so the extractor's graph is the original's.) The whole
package rewritten by the CLI is checked the same way by tests/vision_acceptance.py.
"""

from __future__ import annotations

import importlib.util
import types
from typing import Dict

import torch

import adopter_kernels as ak
from adopter_codemods.api import rewrite_source
from model_zoo import VISION_DIR, import_vision

torchvision, _ = import_vision()
from torchvision.models import _api  # noqa: E402
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names  # noqa: E402

NODES = {"bn1": "stem_bn", "layer1": "layer1", "layer4.1.bn2": "last_bn", "fc": "logits"}
TOL = {"rtol": 1e-9, "atol": 1e-9}


def _rewritten_resnet_module() -> types.ModuleType:
    source = (VISION_DIR / "torchvision" / "models" / "resnet.py").read_text().replace("norm_layer(", "nn.BatchNorm2d(")
    result = rewrite_source(source, ["all"], path="resnet.py")
    assert "x = adopter_kernels.conv_bn2d(x, self.conv1, self.bn1)" in result.code
    spec = importlib.util.spec_from_loader("torchvision.models.resnet_adopted", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "torchvision.models"  # its relative imports resolve to the installed torchvision
    registered = dict(_api.BUILTIN_MODELS)  # @register_model refuses a second "resnet18"
    _api.BUILTIN_MODELS.clear()
    try:
        exec(compile(result.code, "resnet_adopted.py", "exec"), module.__dict__)
    finally:
        _api.BUILTIN_MODELS.clear()
        _api.BUILTIN_MODELS.update(registered)
    return module


def test_create_feature_extractor_on_rewritten_resnet18() -> None:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        original = torchvision.models.resnet18(num_classes=10)
        rewritten = _rewritten_resnet_module().resnet18(num_classes=10)
        rewritten.load_state_dict(original.state_dict(), strict=True)
        x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    finally:
        torch.set_default_dtype(previous)
    assert get_graph_node_names(rewritten) == get_graph_node_names(original)
    with ak.use_backend("conv_bn2d=folded"):  # what CUDA runs; the graph calls the modules anyway
        extractors = [create_feature_extractor(model, return_nodes=NODES) for model in (original, rewritten)]
        for mode in ("train", "eval", "train", "eval"):  # train steps move the running stats both sides
            features: list[Dict[str, torch.Tensor]] = []
            for extractor in extractors:
                extractor.train(mode == "train")
                features.append(extractor(x))
            assert features[0].keys() == features[1].keys() == set(NODES.values())
            for key in features[0]:
                torch.testing.assert_close(features[1][key], features[0][key], **TOL)
