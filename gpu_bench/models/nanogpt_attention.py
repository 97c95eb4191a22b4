"""nanoGPT-style decoder blocks (Karpathy's model.py, the non-flash attention branch): a causal mask from a
lower-triangular buffer filled with -inf, softmax, attention dropout, ``att @ v``. Rewrite sites: ADP010 (the
attention core, one per block), ADP004 (its softmax), ADP006 (the MLP's Linear -> GELU).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.nn import functional as F

CONFIGS = {
    "tiny": {"n_embd": 32, "n_head": 4, "n_layer": 2, "block_size": 16},
    "base": {"n_embd": 768, "n_head": 12, "n_layer": 12, "block_size": 1024},  # GPT-2 small shapes
}


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        h = self.c_fc(self.ln_2(x))
        h = self.gelu(h)
        return x + self.c_proj(h)


class NanoGPTBlocks(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_layer: int, block_size: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


def build_model(size: str) -> nn.Module:
    return NanoGPTBlocks(**CONFIGS[size])


def example_inputs(size: str, batch_size: int) -> tuple[tuple[torch.Tensor, ...], dict]:
    cfg = CONFIGS[size]
    return (torch.randn(batch_size, cfg["block_size"], cfg["n_embd"]),), {}
