"""Which tests a fallback plan may evaluate before its region (`provider.syntax.fallback_condition`), and the
attributes a class stores outside ``__init__`` (`ClassStructure.stored_outside_init`), which such a test must not
read."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods.api import rewrite_source
from adopter_codemods.provider import build_module_structure
from adopter_codemods.provider.syntax import fallback_condition


@pytest.mark.parametrize(
    "test",
    [
        "output_attentions",
        "head_mask is not None",
        "self.save_attention",
        'self.position_embedding_type == "relative_key"',
        'self.kind in ("relative_key", "relative_key_query")',
        "is_cross_attention and self.save_attention",
        "not self.training or mask is None",
        "layer_idx >= 2",
    ],
)
def test_accepted(test: str) -> None:
    assert fallback_condition(cst.parse_expression(test))


@pytest.mark.parametrize(
    "test",
    [
        "self.use_head_mask()",  # a call may do anything
        "self.config.output_attentions",  # an attribute of another object
        'self.kind == other.kind',
        "mask[0] is None",
        "self.kind == kinds[0]",
        "exists(mask)",  # only as an absorbed `if`'s test, which the matcher checks apart
        "True",
    ],
)
def test_refused(test: str) -> None:
    assert not fallback_condition(cst.parse_expression(test))


def _stored(source: str) -> dict[str, frozenset[str]]:
    module = cst.parse_module(source)
    return {c.name: c.stored_outside_init for c in build_module_structure(module, None).classes}


def test_stores_outside_init_are_collected_over_the_family() -> None:
    stored = _stored(
        "import torch.nn as nn\n"
        "class A(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.flag = False\n"
        "        self.steps = 0\n"
        "    def forward(self, x):\n"
        "        self.steps += 1\n"
        "        return x\n"
        "    def reset(self):\n"
        "        del self.cache\n"
        "class B(A):\n"
        "    def enable(self):\n"
        "        setattr(self, 'flag', True)\n"
        "class C(nn.Module):\n"
        "    def load(self, name):\n"
        "        setattr(self, name, 1)\n"
    )
    assert stored["A"] == {"steps", "cache", "flag"}  # B's method stores `flag` on A's instances too
    assert stored["B"] == {"steps", "cache", "flag"}
    assert stored["C"] == {"*"}  # a computed name: any attribute


def test_init_defining_a_function_may_store_later() -> None:
    """A hook `__init__` defines and registers runs during forward: its stores, and `__init__`'s, count."""
    stored = _stored(
        "import torch.nn as nn\n"
        "class A(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.flag = False\n"
        "        def hook(module, args, out):\n"
        "            self.flag = True\n"
        "        self.register_forward_hook(hook)\n"
        "class B(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.flag = False\n"
    )
    assert stored["A"] == {"flag"}
    assert stored["B"] == set()


def test_init_only_calling_its_own_function_stores_nothing_later() -> None:
    """A function `__init__` only calls by name runs within it (rtdl's `make_kv_compression()`); one it hands on,
    decorates, stores or mentions in a lambda may run later."""
    body = (
        "        self.drop = None\n"
        "        def make():\n"
        "            return nn.Linear(2, 2)\n"
        "        self.proj = make() if d > 1 else make()\n"
    )
    header = "import torch.nn as nn\nclass A(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
    assert _stored(header + body)["A"] == set()
    for later, stored in (
        ("        self.maker = make\n", {"drop", "proj", "maker"}),
        ("        self.f = lambda: make()\n", {"drop", "proj", "f"}),
        ("        self.apply(make)\n", {"drop", "proj"}),
    ):
        assert _stored(header + body + later)["A"] == stored, later
    decorated = body.replace("        def make", "        @staticmethod\n        def make")
    assert _stored(header + decorated)["A"] == {"drop", "proj"}


ATTENTION = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.save_attention = False

    def forward(self, q, k, v):
        probs = F.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)
        if self.save_attention:
            self.attention_map = probs
        return torch.matmul(probs, v)
'''


def test_a_flag_only_init_stores_is_a_fallback_test() -> None:
    result = rewrite_source(ATTENTION, ["ADP010"])
    assert len(result.findings) == 1
    assert "    if self.save_attention:\n            probs = F.softmax" in result.code


@pytest.mark.parametrize(
    "method",
    [
        "    def enable(self):\n        self.save_attention = True\n",  # another method: may run during forward
        "    def enable(self, name):\n        setattr(self, name, True)\n",
    ],
)
def test_a_flag_stored_by_another_method_is_not(method: str) -> None:
    assert not rewrite_source(ATTENTION + "\n" + method, ["ADP010"]).findings


def test_a_subclass_storing_the_flag_counts() -> None:
    subclass = "\n\nclass Saving(Attn):\n    def enable(self):\n        self.save_attention = True\n"
    assert not rewrite_source(ATTENTION + subclass, ["ADP010"]).findings


def test_no_attribute_test_in_a_top_level_function() -> None:
    """Outside a class `self` is any object: what stores its attributes is unknown."""
    source = (
        "import torch\nimport torch.nn.functional as F\n\n\n"
        "def attend(self, q, k, v):\n"
        "    probs = F.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)\n"
        "    if self.save_attention:\n"
        "        self.attention_map = probs\n"
        "    return torch.matmul(probs, v)\n"
    )
    assert not rewrite_source(source, ["ADP010"]).findings
    # A parameter is the function's own: tested again before the region, it holds the same value.
    local = source.replace("self.save_attention", "save_attention").replace("v):", "v, save_attention=False):")
    assert len(rewrite_source(local, ["ADP010"]).findings) == 1
    # A global is not: any call in between could change it (also where, as here, none is made).
    assert not rewrite_source(source.replace("self.save_attention", "save_attention"), ["ADP010"]).findings


def test_a_property_is_not_a_flag() -> None:
    """A property runs code, which may read what forward changes."""
    source = ATTENTION.replace("        self.save_attention = False\n", "") + (
        "\n    @property\n    def save_attention(self):\n        return not self.training\n"
    )
    assert not rewrite_source(source, ["ADP010"]).findings


@pytest.mark.parametrize(
    "other",
    [
        # a local base's property: the instance's attribute lookup finds it
        "class Base(nn.Module):\n    @property\n    def save_attention(self):\n        return not self.training\n",
        # a subclass's property: an instance may be of the subclass
        "class Saving(Attn):\n    @property\n    def save_attention(self):\n        return not self.training\n",
        # a descriptor bound in the class body
        "class Base(nn.Module):\n    save_attention = property(lambda self: not self.training)\n",
    ],
    ids=["base-property", "subclass-property", "base-descriptor"],
)
def test_a_property_of_the_class_family_is_not_a_flag(other: str) -> None:
    source = ATTENTION.replace("        self.save_attention = False\n", "")
    if other.startswith("class Base"):
        source = source.replace("class Attn(nn.Module):", other + "\n\nclass Attn(Base):")
    else:
        source += "\n\n" + other
    assert "save_attention" in source and not rewrite_source(source, ["ADP010"]).findings
    # a plain class attribute of the base is data, not code: the flag is read before the region as written
    plain = source.replace(other.split("\n", 1)[1], "    save_attention = False\n") if other.startswith("class Base") else None
    if plain is not None:
        assert len(rewrite_source(plain, ["ADP010"]).findings) == 1


CHANGED_IN_PLACE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def forward(self, q, k, v, n):
        probs = F.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)
        out = torch.matmul(probs, v)
        n.add_(1)
        if n > 0:
            self.attention_map = probs
        return out
'''


@pytest.mark.parametrize(
    ("change", "value_test", "identity_test"),
    [
        # the engine deems torch.add free of effects; its out= changes n: `n > 0` at the top of the region would
        # read n before the addition (and `probs` would be undefined where the original test is true)
        ("torch.add(n, 1, out=n)", False, True),
        ("n.add_(1)", False, False),  # an effect between the region and the read: refused either way
        ("n[...] = 1", False, False),
        ("m = n + 1", True, True),  # reads n only
    ],
)
def test_a_test_value_changed_in_place_is_no_fallback_test(change: str, value_test: bool, identity_test: bool) -> None:
    """A test reading the value of an object changed in place from the region on is no fallback test; an identity
    test (`is not None`) cannot see such a change."""
    source = CHANGED_IN_PLACE.replace("n.add_(1)", change)
    assert bool(rewrite_source(source, ["ADP010"]).findings) is value_test
    identity = source.replace("if n > 0:", "if n is not None:")
    assert bool(rewrite_source(identity, ["ADP010"]).findings) is identity_test
