"""GroupViT-style projection heads: Linear -> BatchNorm1d in ``nn.Sequential`` and as plain attributes.

The Sequential head is transformers' ``GroupViTModel.visual_projection`` / ``text_projection``; the
attribute-based block is the same pattern written out in ``forward``. Rewrite sites: ADP008 (linear + BN).
"""

from __future__ import annotations

import torch
from torch import nn

CONFIGS = {
    "tiny": {"embed_dim": 16, "intermediate_dim": 32, "projection_dim": 8, "num_blocks": 2},
    "base": {"embed_dim": 768, "intermediate_dim": 4096, "projection_dim": 256, "num_blocks": 4},
}


class LinearBNBlock(nn.Module):
    """Linear -> BatchNorm1d -> ReLU with a residual connection, layers held as plain attributes."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.BatchNorm1d(dim)
        self.act = nn.ReLU()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = self.dense(hidden_states)
        out = self.norm(out)
        return hidden_states + self.act(out)


class GroupViTStyleProjector(nn.Module):
    """Residual Linear/BN trunk over pooled features, then GroupViT's visual and text projection heads."""

    def __init__(self, embed_dim: int, intermediate_dim: int, projection_dim: int, num_blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(LinearBNBlock(embed_dim) for _ in range(num_blocks))
        self.visual_projection = nn.Sequential(
            nn.Linear(embed_dim, intermediate_dim, bias=True),
            nn.BatchNorm1d(intermediate_dim),
            nn.ReLU(inplace=True),
            nn.Linear(intermediate_dim, projection_dim, bias=True),
        )
        self.text_projection = nn.Sequential(
            nn.Linear(embed_dim, intermediate_dim, bias=True),
            nn.BatchNorm1d(intermediate_dim),
            nn.ReLU(inplace=True),
            nn.Linear(intermediate_dim, projection_dim, bias=True),
        )

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for block in self.blocks:
            image_embeds = block(image_embeds)
        return self.visual_projection(image_embeds), self.text_projection(text_embeds)


def build_model(size: str = "tiny") -> nn.Module:
    config = CONFIGS[size]
    return GroupViTStyleProjector(
        config["embed_dim"], config["intermediate_dim"], config["projection_dim"], config["num_blocks"]
    )


def example_inputs(size: str = "tiny", batch_size: int = 4) -> tuple[tuple[torch.Tensor, ...], dict]:
    dim = CONFIGS[size]["embed_dim"]
    return (torch.randn(batch_size, dim), torch.randn(batch_size, dim)), {}


def make_example():
    """Return (model, args) for one forward call (fixture convention)."""
    args, _ = example_inputs("tiny", 4)
    return build_model("tiny"), args
