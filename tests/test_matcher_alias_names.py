"""Core: the fused call reads an input under the name it was matched with while that name still holds the value;
an alias defined earlier (``identity = x``) is not substituted for it."""

from __future__ import annotations

from adopter_codemods.api import rewrite_source

SOURCE = """\
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(4)

    def forward(self, x, r):
        identity = x
        h = self.drop(x)
        h = self.norm(h + r)
        return h + identity
"""


def test_alias_is_not_substituted_for_the_matched_name() -> None:
    result = rewrite_source(SOURCE, ["ADP005"])
    assert result.findings
    assert "        h = self.norm(x, r)\n" in result.code
