"""While the engine analyses a module (files.analysing), its whole-file checks parse the bytes the module came from
instead of rendering the tree (files.source_of) and share one memo (files.memo_of); anywhere else they get the
module's code and a fresh memo. Nothing keeps a module alive after its analysis."""

from __future__ import annotations

import gc
import weakref
from typing import Optional

import libcst as cst
import pytest

from adopter_codemods import engine, files
from adopter_codemods.rules import select_rules
from adopter_codemods.structure import ModuleStructure

SOURCE = b"# -*- coding: latin-1 -*-\nname = '\xe9'\n"


def test_source_of_gives_the_bytes_only_while_analysed() -> None:
    module, other = cst.parse_module(SOURCE), cst.parse_module(SOURCE)
    assert files.source_of(module) == module.code
    with files.analysing(module, SOURCE):
        assert files.source_of(module) is SOURCE
        assert files.source_of(other) == other.code  # an equal module is not the one being analysed
        with files.analysing(other):  # unknown bytes: its code
            assert files.source_of(other) == other.code
    assert files.source_of(module) == module.code


def test_memo_lasts_one_analysis() -> None:
    module = cst.parse_module(SOURCE)
    outside = files.memo_of(module)
    outside["x"] = 1
    assert files.memo_of(module) == {}  # outside an analysis every call gets a new one
    with files.analysing(module):
        memo = files.memo_of(module)
        memo["x"] = 1
        assert files.memo_of(module) is memo
        with files.analysing(module):  # a nested analysis of the same module starts afresh
            assert files.memo_of(module) == {}
        assert files.memo_of(module) is memo
    with files.analysing(module):
        assert files.memo_of(module) == {}


def test_engine_analysis_makes_it_known(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def find_all(structure: ModuleStructure, rules: object, refusals: Optional[list[object]] = None) -> list[object]:
        seen.append(files.source_of(structure.module))
        return []

    monkeypatch.setattr(engine, "find_all", find_all)
    engine.analyse_source(SOURCE, [], "m.py")
    assert seen == [SOURCE]


def test_no_module_outlives_its_analysis() -> None:
    """The guards' per-file memo (the whole-file AST of ADP011/ADP013 and ADP001-003) goes with the analysis: a
    parsed tree kept alive past it would be traversed by every later collection of a long scan."""
    source = (
        b"import torch\nfrom torch import nn\n\n\nclass RMSNorm(nn.Module):\n"
        b"    def __init__(self, d):\n        super().__init__()\n        self.weight = nn.Parameter(torch.ones(d))\n"
        b"        self.eps = 1e-6\n\n    def forward(self, x):\n        return x * self.weight\n\n\n"
        b"class Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.norm = RMSNorm(8)\n\n"
        b"    def forward(self, x):\n        return self.norm(x)\n"
    )
    gc.collect()
    before = sum(isinstance(o, cst.Module) for o in gc.get_objects())
    analysis = engine.analyse_source(source, select_rules(["all"]), "m.py")
    analysis.findings()
    del analysis
    gc.collect()
    assert sum(isinstance(o, cst.Module) for o in gc.get_objects()) == before


def test_graphs_are_freed_without_the_collector() -> None:
    """No reference cycle runs through a graph (a `Reach` holds its graph by proxy, searches are not recursive
    closures): once an analysis is dropped, its graphs go at once, not at the next collection."""
    from adopter_codemods.flow.graph import FlowGraph

    source = (
        b"import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n\nclass Block(nn.Module):\n"
        b"    def __init__(self):\n        super().__init__()\n        self.dense = nn.Linear(8, 8)\n"
        b"        self.dropout = nn.Dropout(0.1)\n        self.LayerNorm = nn.LayerNorm(8)\n\n"
        b"    def forward(self, h, x):\n        h = self.dense(h)\n        h = self.dropout(h)\n"
        b"        h = self.LayerNorm(h + x)\n        return F.softmax(h, dim=-1)\n"
    )
    gc.collect()
    gc.disable()
    try:
        before = {id(o) for o in gc.get_objects() if type(o) is FlowGraph}
        analysis = engine.analyse_source(source, select_rules(["all"]), "m.py")
        assert analysis.findings()
        graphs = [weakref.ref(o) for o in gc.get_objects() if type(o) is FlowGraph and id(o) not in before]
        assert graphs
        del analysis
        assert all(graph() is None for graph in graphs)
    finally:
        gc.enable()
