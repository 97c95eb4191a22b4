"""A chained assignment of None in __init__ (`self.q_proj = self.k_proj = self.v_proj = None`, timm's Attention,
eva.py and attention_pool2d.py) binds each target as lines of their own would; it is no rebinding outside
__init__ (init_bindings.InitReader, provider.discovery._rebound)."""

from __future__ import annotations

import textwrap

import libcst as cst

from adopter_codemods.api import refused_sites, scan_source
from adopter_codemods.provider import build_module_structure
from adopter_codemods.structure import ClassStructure

HEAD = '''import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, qkv_fused=False):
        super().__init__()
        if qkv_fused:
            self.qkv = nn.Linear(dim, dim * 3)
            {none}
        else:
            self.qkv = None
            self.q_proj = nn.Linear(dim, dim)
            self.k_proj = nn.Linear(dim, dim)
            self.v_proj = nn.Linear(dim, dim)

    def forward(self, x):
        if self.qkv is not None:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q = self.q_proj(x)
            k = self.k_proj(x)
            v = self.v_proj(x)
        return q + k * v
'''
CHAINED = HEAD.format(none="self.q_proj = self.k_proj = self.v_proj = None")
SEPARATE = HEAD.format(none="self.q_proj = None\n            self.k_proj = None\n            self.v_proj = None")
PROJECTIONS = "(self.q_proj, self.k_proj, self.v_proj)"


def _attention(source: str) -> ClassStructure:
    structure = build_module_structure(cst.parse_module(source))
    return next(c for c in structure.classes if c.name == "Attention")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def test_each_target_is_an_init_binding() -> None:
    cls = _attention(CHAINED)
    for attr in ("q_proj", "k_proj", "v_proj"):
        assert [_code(b.value) for b in cls.init_bindings[attr]] == ["None", "nn.Linear(dim, dim)"]
    assert cls.rebound == frozenset()


def test_chained_none_is_found_as_separate_lines_are() -> None:
    found = [(f.code, f.line, f.message.endswith(PROJECTIONS)) for f in scan_source(CHAINED, ["ADP009"])]
    assert found == [("ADP009", 21, True)]
    assert [(f.code, f.line) for f in scan_source(SEPARATE, ["ADP009"])] == [("ADP009", 23)]
    assert refused_sites(CHAINED, ["ADP009"]) == []


def test_rebound_outside_init_is_still_refused() -> None:
    """A chain outside __init__ rebinds each target."""
    source = CHAINED + textwrap.indent(textwrap.dedent('''
        def reset(self):
            self.q_proj = self.k_proj = self.v_proj = None
    '''), "    ")
    assert scan_source(source, ["ADP009"]) == []
    assert [(r.line, r.category.value, r.reason) for r in refused_sites(source, ["ADP009"])] == [
        (
            21,
            "layer-rebound",
            "self.q_proj is bound again other than by an assignment of its own in __init__ (in another method or "
            "class, by setattr, or in a chain `self.a = self.b = ...`), so what it is at the call is unknown",
        )
    ]


def test_a_chain_of_a_layer_binds_no_layer() -> None:
    """`self.q_proj = self.k_proj = nn.Linear(...)` is one layer under two names: no binding describes that, so
    the projections are not packed (the layer would count twice)."""
    source = CHAINED.replace(
        "            self.q_proj = nn.Linear(dim, dim)\n            self.k_proj = nn.Linear(dim, dim)\n",
        "            self.q_proj = self.k_proj = nn.Linear(dim, dim)\n",
    )
    assert "self.q_proj = self.k_proj = nn.Linear" in source
    bindings = _attention(source).init_bindings
    for attr in ("q_proj", "k_proj"):
        assert [_code(b.value) for b in bindings.get(attr, [])] in ([], ["None"])
    assert scan_source(source, ["ADP009"]) == []
