"""vit-pytorch's ViT (lucidrains/vit-pytorch, vit_pytorch/vit.py and its einsum siblings cross_vit.py, cct.py,
cvt.py, ...): pre-norm blocks whose attention core writes both products with ``torch.einsum`` and the softmax as an
``nn.Softmax(dim = -1)`` layer. einops' ``rearrange`` is written as reshape/permute, and the dropout probabilities
are 0 (the reference models have none). Rewrite sites: ADP010 (the attention core, one per block, its einsum
variant) and ADP006 (the feed-forward's Linear -> GELU).
"""

from __future__ import annotations

import torch
from torch import einsum, nn

CONFIGS = {
    "tiny": {"image_size": 16, "patch_size": 4, "dim": 32, "depth": 2, "heads": 4, "mlp_dim": 64},
    "base": {"image_size": 224, "patch_size": 16, "dim": 768, "depth": 12, "heads": 12, "mlp_dim": 3072},  # ViT-B/16
}


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.attend = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        b, n, _ = x.shape
        qkv = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in qkv)

        dots = einsum("b h i d, b h j d -> b h i j", q, k) * self.scale

        attn = self.attend(dots)
        attn = self.dropout(attn)

        out = einsum("b h i j, b h j d -> b h i d", attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, dim_head: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(
            nn.ModuleList([Attention(dim, heads, dim_head), FeedForward(dim, mlp_dim)]) for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.norm(x)


class ViT(nn.Module):
    def __init__(self, image_size: int, patch_size: int, dim: int, depth: int, heads: int, mlp_dim: int,
                 channels: int = 3, num_classes: int = 1000) -> None:
        super().__init__()
        self.patch_size = patch_size
        patch_dim = channels * patch_size * patch_size
        self.to_patch_embedding = nn.Sequential(nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim), nn.LayerNorm(dim))
        num_patches = (image_size // patch_size) ** 2
        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = Transformer(dim, depth, heads, dim // heads, mlp_dim)
        self.mlp_head = nn.Linear(dim, num_classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        b, c, h, w = img.shape
        p = self.patch_size
        # rearrange(img, 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)')
        patches = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)
        x = self.to_patch_embedding(patches)
        x = torch.cat((self.cls_token.expand(b, -1, -1), x), dim=1) + self.pos_embedding
        x = self.transformer(x)
        return self.mlp_head(x[:, 0])


def build_model(size: str) -> nn.Module:
    return ViT(**CONFIGS[size])


def example_inputs(size: str, batch_size: int) -> tuple[tuple[torch.Tensor, ...], dict]:
    side = CONFIGS[size]["image_size"]
    return (torch.randn(batch_size, 3, side, side),), {}
