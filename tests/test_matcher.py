"""The matcher's data-flow consistency and refusals, judged by execution.

Every positive case must be rewritten into executed-equivalent code; every refusal must leave the file
byte-identical. The cases are ADP005 (Dropout -> add -> LayerNorm) bodies spliced into one module template.
"""

from __future__ import annotations

import textwrap

import pytest

from adopter_codemods.api import scan_source
from rewrite_checks import assert_equivalent_rewrite, assert_unchanged

pytest.importorskip("torch")

TEMPLATE = '''\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)
        self.ln = nn.LayerNorm(8)
        self.ln2 = nn.LayerNorm(8)

    def forward(self, x, r):
{body}


def make_example():
    return M(), (torch.randn(2, 8, requires_grad=True), torch.randn(2, 8, requires_grad=True))
'''


def module(body: str) -> str:
    """`body` is forward's body; methods after a line `----` go into the class after forward."""
    forward, _, methods = textwrap.dedent(body).strip("\n").partition("\n----\n")
    text = textwrap.indent(forward, " " * 8)
    if methods:
        text += "\n\n" + textwrap.indent(methods, " " * 4)
    return TEMPLATE.format(body=text)


REWRITTEN = {
    "three statements": """
        h = self.drop(x)
        h = self.ln(h + r)
        return h
    """,
    "nested": "return self.ln(self.drop(x) + r)",
    "pre-LN: sum used after": """
        s = self.drop(x) + r
        y = self.ln(s)
        return y + s
    """,
    "commutative add": "return self.ln(r + self.drop(x))",
    "value versions": """
        h = self.drop(x)
        h = self.ln(h + x)
        return h
    """,
    "residual alias taken before": """
        s = r
        d = self.drop(x)
        r = r * 2
        return self.ln(d + s) + r
    """,
    "two norms share the dropout": """
        a = self.ln(self.drop(x) + r)
        b = self.ln2(self.drop(r) + x)
        return a + b
    """,
    "same norm twice": """
        h = self.ln(self.drop(x) + r)
        return self.ln(self.drop(h) + r)
    """,
    "kept norm also used alone": "return self.ln(self.drop(x) + r) + self.ln(x)",
    "prefix before if (branch copy)": """
        d = self.drop(x)
        if r.shape[0] > 1:
            return self.ln(d + r)
        return d * 2
    """,
    "prefix before if/else": """
        d = self.drop(x)
        if r.shape[0] > 1:
            d = self.ln(d + r)
        else:
            d = d * 2
        return d
    """,
    "inside a loop": """
        for _ in range(2):
            x = self.ln(self.drop(x) + r)
        return x
    """,
    "inside try": """
        try:
            d = self.drop(x)
            y = self.ln(d + r)
        except RuntimeError:
            y = x
        return y
    """,
    "inside an inlined helper": """
        return self.block(x, r)
    ----
    def block(self, a, b):
        h = self.drop(a)
        return self.ln(h + b)
    """,
    # Regression: another match deleted the Dropout that a branch plan copies into the else arm.
    "shared dropout, one use copied into an else arm": """
        d0 = self.drop(x)
        s1 = r + d0
        h = self.ln(s1)
        h = h + self.drop(r)
        if r.shape[0] > 5:
            return self.ln(h)
        return h
    """,
    "recursive helper": """
        return self.block(x, r, 2)
    ----
    def block(self, a, b, n):
        if n == 0:
            return self.ln(self.drop(a) + b)
        return self.block(a, b, n - 1)
    """,
}

REFUSED = {
    "intermediate used after": """
        d = self.drop(x)
        y = self.ln(d + r)
        return y + d
    """,
    "sum read between add and LayerNorm (pre-LN copy)": """
        s = self.drop(x) + r
        kept = s
        y = self.ln(s)
        return y + kept
    """,
    # Regression: `d2 = d` read the deleted `d` but was no use, so the rewrite left a NameError behind.
    "intermediate aliased": """
        d = self.drop(x)
        d2 = d
        return self.ln(d2 + r)
    """,
    # Regression: a helper argument counted as a use only where the helper read its parameter.
    "intermediate passed to a helper that ignores it": """
        d = self.drop(x)
        y = self.ln(d + r)
        return self.other(y, d)
    ----
    def other(self, a, unused):
        return a * 2
    """,
    "broken data flow": """
        d = self.drop(x)
        s = x + r
        return self.ln(s) + d
    """,
    "dropout input redefined before the norm": """
        d = self.drop(x)
        x = x * 2
        return self.ln(d + r) + x
    """,
    "intermediate returned early": """
        d = self.drop(x)
        if r is None:
            return d
        return self.ln(d + r)
    """,
    "loop-carried intermediate": """
        d = x
        y = x
        for _ in range(2):
            y = self.ln(d + r)
            d = self.drop(x)
        return y
    """,
    "intermediate mutated in place": """
        d = self.drop(x)
        d.add_(1.0)
        return self.ln(d + r)
    """,
    "augmented assignment instead of add": """
        d = self.drop(x)
        d += r
        return self.ln(d)
    """,
    "multiplication instead of add": "return self.ln(self.drop(x) * r)",
    "subtraction instead of add": "return self.ln(self.drop(x) - r)",
    "across a helper boundary": """
        return self.ln(self.res(x) + r)
    ----
    def res(self, x):
        return self.drop(x)
    """,
}


# The Dropout is used elsewhere, so the form that deletes it from __init__ (FusedDropoutAddLayerNorm) does not apply;
# the form that keeps both modules does (`dropout_add_layer_norm_module`).
LAYERS_KEPT = {
    "sum overwritten by the LayerNorm output while the Dropout is shared": """
        s = self.drop(x) + r
        s = self.ln(s)
        return s + self.drop(r)
    """,
    "removed layer called on another path": """
        if x.shape[0] > 1:
            return self.ln(self.drop(x) + r)
        return self.drop(x)
    """,
    "removed layer attribute read": """
        p = self.drop.p
        return self.ln(self.drop(x) + r) * (1 + p)
    """,
    "removed layer used in another method": """
        return self.ln(self.drop(x) + r)
    ----
    def extra(self, x):
        return self.drop(x)
    """,
}


@pytest.mark.parametrize("body", REWRITTEN.values(), ids=REWRITTEN.keys())
def test_rewritten_and_equivalent(body: str) -> None:
    assert_equivalent_rewrite(module(body), ["ADP005"])


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_refused(body: str) -> None:
    assert_unchanged(module(body), ["ADP005"])


@pytest.mark.parametrize("body", LAYERS_KEPT.values(), ids=LAYERS_KEPT.keys())
def test_a_layer_used_elsewhere_is_kept(body: str) -> None:
    code = assert_equivalent_rewrite(module(body), ["ADP005"]).code
    assert "self.drop = nn.Dropout(0.0)" in code and "dropout_add_layer_norm_module(" in code
    assert "FusedDropoutAddLayerNorm" not in code


def test_findings_point_at_the_matched_statements() -> None:
    source = module("""
        h = self.drop(x)
        # comment
        h = self.ln(h + r)
        return h
    """)
    (finding,) = scan_source(source, ["ADP005"], path="m.py")
    assert (finding.code, finding.cls, finding.function, finding.path) == ("ADP005", "M", "forward", "m.py")
    lines = source.splitlines()
    assert lines[finding.line - 1].strip() == "h = self.drop(x)"
    assert lines[finding.end_line - 1].strip() == "h = self.ln(h + r)"


@pytest.mark.parametrize(
    "init,expected",
    [
        ("self.drop = nn.Dropout(0.0, inplace=True)", 0),  # the rule requires inplace=False
        ("self.drop = nn.Dropout(p=0.0)", 1),
        ("self.drop = nn.Dropout()", 1),  # default p=0.5
        ("self.drop = nn.Identity()", 0),
        ("self.drop = nn.Dropout(0.0) if x else nn.Dropout(0.1)", 1),  # a Dropout either way: the guarded form
    ],
)
def test_init_arguments_are_normalised(init: str, expected: int) -> None:
    source = module("return self.ln(self.drop(x) + r)").replace("self.drop = nn.Dropout(0.0)", init)
    assert len(scan_source(source, ["ADP005"])) == expected


def test_two_bindings_of_a_rewritten_layer_keep_init() -> None:
    # the fused LayerNorm class cannot replace two bindings: the form that calls the model's modules applies
    source = module("return self.ln(self.drop(x) + r)").replace(
        "        self.ln = nn.LayerNorm(8)\n",
        "        if torch.cuda.is_available():\n            self.ln = nn.LayerNorm(8)\n"
        "        else:\n            self.ln = nn.LayerNorm(8, eps=1e-3)\n",
    )
    result = assert_equivalent_rewrite(source, ["ADP005"])
    assert "nn.LayerNorm(8, eps=1e-3)" in result.code
    assert "dropout_add_layer_norm_module(x, r, self.ln, self.drop)" in result.code


# ------------------------------------------------------------------------------------------ beyond one class

BASE = '''\
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)
        self.ln = nn.LayerNorm(8)

    def forward(self, x, r):
        return self.ln(self.drop(x) + r){base_tail}
{extra}

def make_example():
    return {model}(), (torch.randn(2, 8, requires_grad=True), torch.randn(2, 8))
'''

FAMILY_REFUSED = {
    # Regression: a subclass __init__ rebinds the fused LayerNorm to a plain one.
    "subclass rebinds the kept layer": (
        "",
        "\n\nclass Child(Base):\n    def __init__(self):\n        super().__init__()\n"
        "        self.ln = nn.LayerNorm(8, eps=1e-3)\n",
        "Child",
    ),
    # Regression: another method rebinds the fused LayerNorm.
    "another method rebinds the kept layer": (
        "\n\n    def reset(self):\n        self.ln = nn.LayerNorm(8)",
        "",
        "Base",
    ),
    # Regression: setattr/add_module rebind an attribute outside `self.x = ...`.
    "setattr rebinds": ("", "", "Base"),
    "computed setattr name": ("", "", "Base"),
}
# The Dropout is used elsewhere in the family or from another class: the form that keeps the modules applies.
FAMILY_KEPT = {
    # Regression: Child's match deleted Base's Dropout, which Base.forward still calls; now both keep it.
    "subclass forward shares the parent's layers": (
        " + self.drop(r)",
        "\n\nclass Child(Base):\n    def forward(self, x, r):\n        return self.ln(self.drop(x) + r)\n",
        "Base",
    ),
    # Regression: another class reaches the removed Dropout through its submodule.
    "removed layer reached from another class": (
        "",
        "\n\nclass Outer(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.inner = Base()\n\n"
        "    def forward(self, x, r):\n        return self.inner.ln(self.inner.drop(x) + r)\n",
        "Outer",
    ),
}
_INIT_EXTRA = {
    "setattr rebinds": '        self.add_module("ln", nn.Identity())\n',
    "computed setattr name": '        for name in ("ln",):\n            setattr(self, name, nn.Identity())\n',
}


def _family_source(case: str) -> str:
    base_tail, extra, model = FAMILY_REFUSED[case] if case in FAMILY_REFUSED else FAMILY_KEPT[case]
    source = BASE.format(base_tail=base_tail, extra=extra, model=model)
    if case in _INIT_EXTRA:
        source = source.replace("        self.ln = nn.LayerNorm(8)\n", "        self.ln = nn.LayerNorm(8)\n" + _INIT_EXTRA[case], 1)
    return source


@pytest.mark.parametrize("case", FAMILY_REFUSED)
def test_refused_across_classes(case: str) -> None:
    assert_unchanged(_family_source(case), ["ADP005"])


@pytest.mark.parametrize("case", FAMILY_KEPT)
def test_a_layer_used_elsewhere_in_the_family_is_kept(case: str) -> None:
    code = assert_equivalent_rewrite(_family_source(case), ["ADP005"]).code
    assert "self.drop = nn.Dropout(0.0)" in code and "FusedDropoutAddLayerNorm" not in code


def test_inherited_forward_is_matched_once_in_the_defining_class() -> None:
    # Regression: a subclass inheriting __init__ and forward reported the same site again (and the two identical
    # matches blocked each other, so nothing was rewritten).
    source = BASE.format(base_tail="", extra="\n\nclass Child(Base):\n    pass\n", model="Child")
    assert [f.cls for f in scan_source(source, ["ADP005"])] == ["Base"]
    assert_equivalent_rewrite(source, ["ADP005"], findings=1)
