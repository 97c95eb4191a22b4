"""Core: the forward walk scans each statement / expression for the names it reads and writes once per class.

The walk revisits nodes (two loop-body copies, nested opaque expressions; it used to revisit them per path), and
re-scanning them made the structure of transformers' modeling_t5.py take ~20 s instead of ~3 s.
"""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods import provider

SOURCE = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, a, b, c):
        if a:
            x = self.proj(x) * 2
        if b:
            x = self.proj(x + 1)
        for i in range(c):
            y = torch.cat([x[:, i : i + 1], x.flip(-1)[:, :1]], dim=1).sum(-1, keepdim=True)
            x = self.proj(x) + y
        total = {"out": x, "n": len([x, y])}
        return total
"""


def test_no_node_is_scanned_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    scanned: dict[str, list[cst.CSTNode]] = {"read": [], "written": []}  # keeps nodes alive: ids stay unique
    real_read, real_written = provider._read_names, provider._written_names

    def read(node: cst.CSTNode) -> tuple[list[str], bool]:
        scanned["read"].append(node)
        return real_read(node)

    def written(node: cst.CSTNode) -> set[str]:
        scanned["written"].append(node)
        return real_written(node)

    monkeypatch.setattr(provider, "_read_names", read)
    monkeypatch.setattr(provider, "_written_names", written)
    structure = provider.build_module_structure(cst.parse_module(SOURCE))
    (cls,) = structure.classes
    (graph,) = cls.graphs
    assert len(graph.paths()) > 4  # branches x loop copies: the walk does revisit nodes
    for kind, nodes in scanned.items():
        assert nodes, kind
        assert len({id(n) for n in nodes}) == len(nodes), f"a node's {kind} names were scanned twice"
