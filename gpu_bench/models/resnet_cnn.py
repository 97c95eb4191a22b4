"""ResNet-style CNN: Conv2d -> BatchNorm2d pairs as plain attributes and inside ``nn.Sequential``.

Base size is a ResNet-18 layout (basic blocks, widths 64-512, 224x224 inputs); tiny is a two-stage toy.
Rewrite sites: ADP007 (conv+BN) in the stem, in every block and in the projection shortcuts.
"""

from __future__ import annotations

import torch
from torch import nn

CONFIGS = {
    "tiny": {"widths": (8, 16), "blocks": (1, 1), "num_classes": 10, "image_size": 16},
    "base": {"widths": (64, 128, 256, 512), "blocks": (2, 2, 2, 2), "num_classes": 1000, "image_size": 224},
}


class BasicBlock(nn.Module):
    """Two 3x3 conv/BN pairs with an identity or projection (1x1 conv + BN in a Sequential) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


class ResNet(nn.Module):
    """Stem (7x7 conv, BN, ReLU, max-pool), stages of basic blocks, global average pool, classifier."""

    def __init__(self, widths: tuple[int, ...], blocks: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages = []
        in_channels = widths[0]
        for index, (width, count) in enumerate(zip(widths, blocks)):
            layers = [BasicBlock(in_channels, width, stride=1 if index == 0 else 2)]
            layers += [BasicBlock(width, width) for _ in range(count - 1)]
            stages.append(nn.Sequential(*layers))
            in_channels = width
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.stages(self.stem(pixel_values))
        return self.fc(torch.flatten(self.pool(hidden), 1))


def build_model(size: str = "tiny") -> nn.Module:
    config = CONFIGS[size]
    return ResNet(config["widths"], config["blocks"], config["num_classes"])


def example_inputs(size: str = "tiny", batch_size: int = 2) -> tuple[tuple[torch.Tensor, ...], dict]:
    side = CONFIGS[size]["image_size"]
    return (torch.randn(batch_size, 3, side, side),), {}


def make_example():
    """Return (model, args) for one forward call (fixture convention)."""
    args, _ = example_inputs("tiny", 2)
    return build_model("tiny"), args
