"""DPT-style fusion stages: BatchNorm2d applied under ``if self.use_batch_norm:`` after each convolution.

The residual layer mirrors transformers' ``DPTPreActResidualLayer`` (paper Fig. 4/5: the rewrite duplicates
the branch); the fusion layer mirrors ``DPTFeatureFusionLayer`` (two residual layers, 2x upsampling, 1x1
projection). Rewrite sites: ADP007 (conv + conditional BN), two per residual layer.
"""

from __future__ import annotations

import torch
from torch import nn

CONFIGS = {
    "tiny": {"hidden_size": 8, "num_stages": 2, "image_size": 16},
    "base": {"hidden_size": 256, "num_stages": 4, "image_size": 96},
}


class DPTPreActResidualLayer(nn.Module):
    """ReLU -> conv -> (BN) -> ReLU -> conv -> (BN), plus the input."""

    def __init__(self, hidden_size: int, use_batch_norm: bool = True) -> None:
        super().__init__()
        self.use_batch_norm = use_batch_norm
        use_bias_in_fusion_residual = not use_batch_norm
        self.activation1 = nn.ReLU()
        self.convolution1 = nn.Conv2d(
            hidden_size, hidden_size, kernel_size=3, stride=1, padding=1, bias=use_bias_in_fusion_residual
        )
        self.activation2 = nn.ReLU()
        self.convolution2 = nn.Conv2d(
            hidden_size, hidden_size, kernel_size=3, stride=1, padding=1, bias=use_bias_in_fusion_residual
        )
        if self.use_batch_norm:
            self.batch_norm1 = nn.BatchNorm2d(hidden_size)
            self.batch_norm2 = nn.BatchNorm2d(hidden_size)

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        residual = hidden_state
        hidden_state = self.activation1(hidden_state)
        hidden_state = self.convolution1(hidden_state)
        if self.use_batch_norm:
            hidden_state = self.batch_norm1(hidden_state)
        hidden_state = self.activation2(hidden_state)
        hidden_state = self.convolution2(hidden_state)
        if self.use_batch_norm:
            hidden_state = self.batch_norm2(hidden_state)
        return hidden_state + residual


class DPTFeatureFusionLayer(nn.Module):
    """Residual layer on the incoming feature, add, residual layer, 2x bilinear upsampling, 1x1 projection."""

    def __init__(self, hidden_size: int, use_batch_norm: bool = True) -> None:
        super().__init__()
        self.projection = nn.Conv2d(hidden_size, hidden_size, kernel_size=1, bias=True)
        self.residual_layer1 = DPTPreActResidualLayer(hidden_size, use_batch_norm)
        self.residual_layer2 = DPTPreActResidualLayer(hidden_size, use_batch_norm)

    def forward(self, hidden_state: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        hidden_state = hidden_state + self.residual_layer1(residual)
        hidden_state = self.residual_layer2(hidden_state)
        hidden_state = nn.functional.interpolate(hidden_state, scale_factor=2, mode="bilinear", align_corners=True)
        return self.projection(hidden_state)


class DPTFusionNeck(nn.Module):
    """A stem projecting RGB to ``hidden_size`` features, then ``num_stages`` fusion layers coarse to fine."""

    def __init__(self, hidden_size: int, num_stages: int, use_batch_norm: bool = True) -> None:
        super().__init__()
        self.num_stages = num_stages
        self.stem = nn.Conv2d(3, hidden_size, kernel_size=3, stride=2 ** (num_stages - 1), padding=1)
        self.layers = nn.ModuleList(DPTFeatureFusionLayer(hidden_size, use_batch_norm) for _ in range(num_stages))
        self.head = nn.Conv2d(hidden_size, 1, kernel_size=1)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        features = self.stem(pixel_values)
        hidden_state = torch.zeros_like(features)
        for layer in self.layers:
            hidden_state = layer(hidden_state, features)
            # The next (finer) stage fuses with the same features, upsampled to its resolution.
            features = nn.functional.interpolate(features, size=hidden_state.shape[-2:], mode="nearest")
        return self.head(hidden_state)


def build_model(size: str = "tiny") -> nn.Module:
    config = CONFIGS[size]
    return DPTFusionNeck(config["hidden_size"], config["num_stages"], use_batch_norm=True)


def example_inputs(size: str = "tiny", batch_size: int = 2) -> tuple[tuple[torch.Tensor, ...], dict]:
    side = CONFIGS[size]["image_size"]
    return (torch.randn(batch_size, 3, side, side),), {}


def make_example():
    """Return (model, args) for one forward call (fixture convention)."""
    args, _ = example_inputs("tiny", 2)
    return build_model("tiny"), args
