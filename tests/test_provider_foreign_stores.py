"""Stores on objects other than `self` (`ClassStructure.foreign_stores`): `other.ln = nn.LayerNorm(8)` or
`m.add_module(f"x{i}", ...)` may replace a layer of a class an __init__ edit rewrites, so such an edit is refused.
A store on a local holding a container its function built (`seq = nn.Sequential()`, torchvision's ViT conv stem)
cannot, and is not counted (provider.discovery._fresh_containers)."""

from __future__ import annotations

import dataclasses
import textwrap

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from adopter_codemods.api import rewrite_source
from adopter_codemods.engine import analyse_source
from adopter_codemods.provider import build_module_structure
from adopter_codemods.rules import select_rules

SELF_OUTPUT = '''import torch
import torch.nn as tnn
from torch import nn
from torch.nn import ModuleList


class SelfOutput(nn.Module):
    def __init__(self, dim, p):
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(p)
        self.LayerNorm = nn.LayerNorm(dim)

    def forward(self, h, x):
        h = self.dense(h)
        h = self.dropout(h)
        return self.LayerNorm(h + x)
'''

# A function storing on a local container it built: nothing counted.
HARMLESS = {
    "Sequential.add_module, computed name": '''
        def stem(chans):
            seq = nn.Sequential()
            for i, c in enumerate(chans):
                seq.add_module(f"conv_{i}", nn.Conv2d(c, c, 3))
            return seq
    ''',
    "ModuleList through setattr": '''
        def stack(n):
            layers = ModuleList()
            setattr(layers, str(n), nn.Linear(2, 2))
            return layers
    ''',
    "ModuleDict and Module, bound twice, in a method": '''
        class Heads(nn.Module):
            def __init__(self, names):
                super().__init__()
                heads = tnn.ModuleDict()
                if names:
                    heads = torch.nn.ModuleDict()
                for name in names:
                    heads.add_module(name, nn.Linear(2, 2))
                extra = nn.Module()
                extra.proj = nn.Linear(2, 2)
                self.heads, self.extra = heads, extra
    ''',
    "store in a nested scope reading the container": '''
        def stem(chans):
            seq = nn.Sequential()
            def add(i):
                seq.add_module(f"conv_{i}", nn.Identity())
            for i in chans:
                add(i)
            return seq
    ''',
}

# Stores that may reach an instance of a class of the file: counted, with the first store as the cause.
UNSAFE = {
    "a parameter": '''
        def build(m, i):
            m.add_module(f"x{i}", nn.Identity())
    ''',
    "a layer of self": '''
        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.child = SelfOutput(8, 0.1)
                self.child.dropout = nn.Dropout(0.2)
    ''',
    "a local holding an instance of a class of the file": '''
        def build():
            m = SelfOutput(8, 0.1)
            m.dropout = nn.Dropout(0.2)
            return m
    ''',
    "a local bound to a container and to something else": '''
        def build(other):
            seq = nn.Sequential()
            if other is not None:
                seq = other
            seq.add_module(f"x{len(seq)}", nn.Identity())
    ''',
    "a local bound by a loop": '''
        def build(mods):
            for seq in mods:
                seq.add_module(f"x{len(seq)}", nn.Identity())
            seq = nn.Sequential()
    ''',
    "a global": '''
        def build():
            global seq
            seq = nn.Sequential()
            seq.add_module(f"x{len(seq)}", nn.Identity())
    ''',
    "a container built only in a nested function": '''
        def build():
            def make():
                seq = nn.Sequential()
                return seq
            seq.add_module(f"x{len(seq)}", nn.Identity())
    ''',
    "a constructor named through a parameter": '''
        def build(nn):
            seq = nn.Sequential()
            seq.add_module(f"x{len(seq)}", nn.Identity())
    ''',
    "a class of the file named Sequential": '''
        class Sequential(SelfOutput):
            pass


        def build():
            seq = Sequential(8, 0.1)
            seq.add_module(f"x{len(seq)}", nn.Identity())
    ''',
    "an unpacked target": '''
        def build(x):
            seq, n = nn.Sequential(), x
            seq.add_module(f"x{n}", nn.Identity())
    ''',
    "module-level code": '''
        seq = nn.Sequential()
        seq.add_module(f"x{len(seq)}", nn.Identity())
    ''',
}


def _source(extra: str) -> str:
    return SELF_OUTPUT + "\n\n" + textwrap.dedent(extra)


def _foreign_stores(source: str) -> dict[str, int]:
    """The foreign stores of SelfOutput, with the line of each one's cause."""
    module = cst.parse_module(source)
    cls = next(c for c in build_module_structure(module).classes if c.name == "SelfOutput")
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {attr: positions[node].start.line for attr, node in cls.foreign_stores.items()}


@pytest.mark.parametrize("case", HARMLESS)
def test_stores_on_a_container_the_function_builds_are_not_counted(case: str) -> None:
    source = _source(HARMLESS[case])
    assert _foreign_stores(source) == {}
    assert "FusedDropoutAddLayerNorm" in rewrite_source(source, ["ADP005"]).code  # __init__ edited


@pytest.mark.parametrize("case", UNSAFE)
def test_other_stores_are_counted(case: str) -> None:
    source = _source(UNSAFE[case])
    assert "FusedDropoutAddLayerNorm" not in rewrite_source(source, ["ADP005"]).code  # __init__ left alone
    assert _foreign_stores(source).keys() & {"*", "dropout"}


def test_the_refusal_names_the_store() -> None:
    """Only the variant editing __init__ (ADP005's first): a later one leaving __init__ alone would take the site."""
    source = _source(UNSAFE["a local bound to a container and to something else"])
    first = dataclasses.replace(select_rules(["ADP005"])[0], alternatives=())
    refused = analyse_source(source, [first], with_refusals=True).refused()
    assert [(r.line, r.category.value, r.reason, r.cause_line) for r in refused] == [
        (
            16,
            "layer-rebound",
            "this module assigns an attribute 'dropout' on another object, so self.dropout may be replaced from "
            "outside the class",
            25,
        )
    ]
    assert source.splitlines()[24].strip().startswith("seq.add_module(")


def test_first_store_per_attribute_is_the_cause() -> None:
    source = _source('''
        def build(a, b):
            a.dropout = nn.Dropout(0.2)
            b.dropout = nn.Dropout(0.3)
            setattr(b, a.name, None)
    ''')
    assert _foreign_stores(source) == {"dropout": 22, "*": 24}
