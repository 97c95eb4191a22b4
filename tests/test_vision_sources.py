"""Layer types in torchvision's and timm's real sources (installed by `make model-zoo`): which Conv2d -> BatchNorm2d
sites ADP007 finds now that `conv3x3(...)`, `norm_layer(planes)`, `nn.Sequential(*layers)`,
`ConvNormActivation(nn.Sequential)` and factories of other files (timm's `create_conv2d`, `get_norm_act_layer`)
are followed. The end-to-end execution of the rewritten packages is the
acceptance harness's; here the findings themselves are pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from adopter_codemods.api import scan_source
from model_zoo import VISION_DIR, require

EXPECTED = {
    # BasicBlock, Bottleneck (conv3x3/conv1x1 factories, norm_layer set when None), _make_layer's downsample, stem
    "torchvision/models/resnet.py": [
        ("BasicBlock", "forward", "guarded"), ("BasicBlock", "forward", "guarded"),
        ("Bottleneck", "forward", "guarded"), ("Bottleneck", "forward", "guarded"), ("Bottleneck", "forward", "guarded"),
        ("ResNet", "_make_layer", "guarded"), ("ResNet", "_forward_impl", "guarded"),
    ],
    # ConvNormActivation(nn.Sequential) builds [conv_layer(...), norm_layer(...), ...]: MobileNetV2, EfficientNet
    "torchvision/ops/misc.py": [("ConvNormActivation", "__init__", "guarded")],
    # InvertedResidual's nn.Sequential(*layers) ends with nn.Conv2d, norm_layer(oup)
    "torchvision/models/mobilenetv2.py": [("InvertedResidual", "__init__", "guarded")],
    # Every pair is inside Conv2dNormActivation (ops/misc.py)
    "torchvision/models/efficientnet.py": [],
    # BasicBlock/Bottleneck take `norm_layer=nn.BatchNorm2d`; downsample_conv/_avg build nn.Sequential(*[...]);
    # the deep stem `nn.Sequential(*[nn.Conv2d, norm_layer(...), act, ...])` with `norm_layer =
    # get_norm_layer(norm_layer)`, a function of timm/layers/create_norm.py (factory_types.py): two pairs
    "timm/models/resnet.py": [
        ("BasicBlock", "forward", "guarded"), ("BasicBlock", "forward", "guarded"),
        ("Bottleneck", "forward", "guarded"), ("Bottleneck", "forward", "guarded"), ("Bottleneck", "forward", "guarded"),
        ("", "downsample_conv", "guarded"), ("", "downsample_avg", "guarded"),
        ("ResNet", "__init__", "guarded"), ("ResNet", "__init__", "guarded"),
    ],
    # create_conv2d(...) and norm_act_layer(...) from get_norm_act_layer(norm_layer): functions of timm/layers
    # (one of several conv classes; a registry entry or the class passed in). conv_head -> bn2 is refused:
    # prune_intermediate_layers rebinds self.conv_head.
    "timm/models/efficientnet.py": [
        ("EfficientNet", "forward_intermediates", "guarded"), ("EfficientNet", "forward_features", "guarded"),
        ("EfficientNetFeatures", "forward", "guarded"),
    ],
    "timm/models/_efficientnet_blocks.py": [
        ("ConvBnAct", "forward", "guarded"),
        ("DepthwiseSeparableConv", "forward", "guarded"), ("DepthwiseSeparableConv", "forward", "guarded"),
        ("DepthwiseSeparableConv", "forward", "guarded"),
        ("InvertedResidual", "forward", "guarded"), ("InvertedResidual", "forward", "guarded"),
        ("InvertedResidual", "forward", "guarded"), ("InvertedResidual", "forward", "guarded"),
        ("EdgeResidual", "forward", "guarded"), ("EdgeResidual", "forward", "guarded"),
    ],
}


@pytest.mark.parametrize("relative", list(EXPECTED))
def test_conv_bn_sites_in_vision_sources(relative: str) -> None:
    require(VISION_DIR)
    path = Path(VISION_DIR) / relative
    findings = scan_source(path.read_text(encoding="utf-8"), ["ADP007"], path=str(path))
    assert [(f.cls, f.function, f.certainty) for f in findings] == EXPECTED[relative]
