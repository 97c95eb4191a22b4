"""Unusual Python around the ADP005 pattern: every construct is either rewritten into executed-equivalent code or
left byte-identical, never rewritten wrongly. Encodings and newline styles round-trip byte for byte apart from
the intended edit."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from adopter_codemods.api import rewrite_source
from adopter_codemods.engine import rewrite_module
from adopter_codemods.rules import select_rules
from rewrite_checks import assert_equivalent_rewrite, assert_unchanged

pytest.importorskip("torch")

HEADER = "import torch\nfrom torch import nn\n\n\n"
INIT = """\
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)
        self.ln = nn.LayerNorm(8)
"""
EXAMPLE = """

def make_example():
    return {model}(), (torch.randn(2, 8, requires_grad=True), torch.randn(2, 8))
"""


def source(body: str, model: str = "M") -> str:
    return HEADER + textwrap.dedent(body).strip("\n") + "\n" + EXAMPLE.format(model=model)


# Each case: (source, expected outcome). "rewritten": executed-equivalent rewrite; "unchanged": byte-identical.
CASES: dict[str, tuple[str, str]] = {
    "decorated forward": (
        source('''
            import functools


            def traced(fn):
                @functools.wraps(fn)
                def wrapper(self, *args, **kwargs):
                    return fn(self, *args, **kwargs) * 2
                return wrapper


            class M(nn.Module):
            {init}
                @traced
                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)
        '''),
        "rewritten",
    ),
    "torch.jit.script forward is left alone": (
        source('''
            class M(nn.Module):
            {init}
                @torch.jit.script_method
                def helper(self, x, r):
                    return self.ln(self.drop(x) + r)

                def forward(self, x, r):
                    return x + r
        '''),
        "unchanged",
    ),
    "nested class": (
        source('''
            class Outer(nn.Module):
                class Inner(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.drop = nn.Dropout(0.0)
                        self.ln = nn.LayerNorm(8)

                    def forward(self, x, r):
                        return self.ln(self.drop(x) + r)

                def __init__(self):
                    super().__init__()
                    self.inner = Outer.Inner()

                def forward(self, x, r):
                    return self.inner(x, r)
        ''', "Outer"),
        "unchanged",
    ),
    "super().forward in a subclass": (
        source('''
            class Base(nn.Module):
            {init}
                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)


            class M(Base):
                def forward(self, x, r):
                    y = super().forward(x, r)
                    return self.drop(y) + self.ln(r)
        '''),
        "rewritten",  # M calls the Dropout too: the form that keeps the modules
    ),
    "ModuleList and ModuleDict": (
        source('''
            class M(nn.Module):
            {init}
                    self.drops = nn.ModuleList([nn.Dropout(0.0) for _ in range(2)])
                    self.norms = nn.ModuleDict({"a": nn.LayerNorm(8)})

                def forward(self, x, r):
                    for d in self.drops:
                        x = d(x)
                    x = self.norms["a"](self.drops[0](x) + r)
                    return self.ln(self.drop(x) + r)
        '''),
        "rewritten",
    ),
    "add_module rebinds": (
        source('''
            class M(nn.Module):
            {init}
                    self.add_module("ln", nn.Identity())

                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)
        '''),
        "unchanged",
    ),
    "setattr rebinds": (
        source('''
            class M(nn.Module):
            {init}
                    setattr(self, "ln", nn.Identity())

                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)
        '''),
        "unchanged",
    ),
    "rebound from outside the class": (
        source('''
            class M(nn.Module):
            {init}
                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)


            def build():
                m = M()
                m.ln = nn.LayerNorm(8)
                return m
        '''),
        "rewritten",  # the form that calls self.ln, whatever it is then (the fused class is refused)
    ),
    "star-args": (
        source('''
            class M(nn.Module):
            {init}
                def forward(self, *xs, **kw):
                    x, r = xs
                    h = self.ln(self.drop(*xs[:1]) + r)
                    return h
        '''),
        "unchanged",
    ),
    "star-args elsewhere in forward": (
        source('''
            class M(nn.Module):
            {init}
                def forward(self, *xs):
                    x, r = xs
                    return self.ln(self.drop(x) + r)
        '''),
        "rewritten",
    ),
    "walrus holds the intermediate": (
        source('''
            class M(nn.Module):
            {init}
                def forward(self, x, r):
                    h = self.ln((d := self.drop(x)) + r)
                    return h + d
        '''),
        "unchanged",
    ),
    "walrus in a test": (
        source('''
            class M(nn.Module):
            {init}
                def forward(self, x, r):
                    if (d := self.drop(x)) is not None:
                        return self.ln(d + r)
                    return x
        '''),
        "unchanged",
    ),
    "match statement": (
        source('''
            class M(nn.Module):
            {init}
                    self.mode = "a"

                def forward(self, x, r):
                    h = self.drop(x)
                    match self.mode:
                        case "a":
                            return self.ln(h + r)
                        case _:
                            return h
        '''),
        "unchanged",
    ),
    "match case body": (
        source('''
            class M(nn.Module):
            {init}
                    self.mode = "a"

                def forward(self, x, r):
                    match self.mode:
                        case "a":
                            return self.ln(self.drop(x) + r)
                        case _:
                            return x
        '''),
        "rewritten",
    ),
    "async helper": (
        source('''
            class M(nn.Module):
            {init}
                async def helper(self, x, r):
                    return self.ln(self.drop(x) + r)

                def forward(self, x, r):
                    return x + r
        '''),
        "unchanged",
    ),
    "lambda": (
        source('''
            class M(nn.Module):
            {init}
                def forward(self, x, r):
                    g = lambda: self.drop(x)
                    return self.ln(g() + r)
        '''),
        "unchanged",
    ),
    "lambda elsewhere": (
        source('''
            class M(nn.Module):
            {init}
                    self.f = lambda t: t * 2

                def forward(self, x, r):
                    return self.f(self.ln(self.drop(x) + r))
        '''),
        "rewritten",
    ),
    "global and nonlocal": (
        source('''
            COUNT = 0


            class M(nn.Module):
            {init}
                def forward(self, x, r):
                    global COUNT
                    h = self.drop(x)
                    COUNT += 1
                    out = self.ln(h + r)

                    def inner():
                        nonlocal out
                        out = out * 2
                    inner()
                    return out
        '''),
        "rewritten",
    ),
    "class without __init__ (class attributes)": (
        source('''
            class M(nn.Module):
                drop = nn.Dropout(0.0)
                ln = nn.LayerNorm(8)

                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)
        '''),
        "unchanged",
    ),
    "class without __init__ (inherited)": (
        source('''
            class Base(nn.Module):
            {init}
                def forward(self, x, r):
                    return x


            class M(Base):
                def forward(self, x, r):
                    return self.ln(self.drop(x) + r)
        '''),
        "rewritten",
    ),
    "forward defined via assignment": (
        source('''
            def _fwd(self, x, r):
                return self.ln(self.drop(x) + r)


            class Base(nn.Module):
            {init}
                forward = _fwd


            class M(Base):
                def _impl(self, x, r):
                    return self.ln(self.drop(x) + r)

                forward = _impl
        ''', "Base"),
        "rewritten",  # the Dropout is reachable from outside the class: the form that keeps the modules
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_construct(case: str) -> None:
    text, outcome = CASES[case]
    text = text.replace("{init}\n", INIT).replace("{init}", INIT)
    compile(text, case, "exec")
    if outcome == "rewritten":
        assert_equivalent_rewrite(text, ["ADP005"])
    else:
        assert_unchanged(text, ["ADP005"])


# ------------------------------------------------------------------------------------------ bytes and layout

BLOCK = source('''
    class M(nn.Module):
    {init}
        def forward(self, x, r):
            # comment
            h = self.drop(x)
            return self.ln(h + r)
''').replace("{init}\n", INIT)


def test_tabs_indentation() -> None:
    tabbed = BLOCK.replace("    ", "\t")
    result = assert_equivalent_rewrite(tabbed, ["ADP005"])
    assert "\t\treturn self.ln(x, r)\n" in result.code
    assert result.code == rewrite_source(BLOCK, ["ADP005"]).code.replace("    ", "\t")


def test_two_space_indentation_and_single_quotes() -> None:
    two = BLOCK.replace("    ", "  ").replace('"', "'")
    result = assert_equivalent_rewrite(two, ["ADP005"])
    assert result.code == rewrite_source(BLOCK, ["ADP005"]).code.replace("    ", "  ").replace('"', "'")


def test_crlf_round_trips() -> None:
    expected = rewrite_source(BLOCK, ["ADP005"]).code.replace("\n", "\r\n")
    assert rewrite_source(BLOCK.replace("\n", "\r\n"), ["ADP005"]).code == expected


def test_bom_round_trips_as_text_and_bytes() -> None:
    expected = rewrite_source(BLOCK, ["ADP005"]).code
    assert rewrite_source("\ufeff" + BLOCK, ["ADP005"]).code == "\ufeff" + expected
    # Files are read as bytes (CLI, libcst.tool): Module.bytes keeps the BOM and CRLF of the original.
    data = b"\xef\xbb\xbf" + BLOCK.replace("\n", "\r\n").encode()
    outcome = rewrite_module(cst.parse_module(data), select_rules(["ADP005"]))
    assert outcome.module.bytes == b"\xef\xbb\xbf" + expected.replace("\n", "\r\n").encode()


def test_latin1_coding_cookie_round_trips() -> None:
    text = "# -*- coding: latin-1 -*-\n# caf\xe9\n" + BLOCK
    outcome = rewrite_module(cst.parse_module(text.encode("latin-1")), select_rules(["ADP005"]))
    expected = "# -*- coding: latin-1 -*-\n# caf\xe9\n" + rewrite_source(BLOCK, ["ADP005"]).code
    assert outcome.module.bytes == expected.encode("latin-1")


@pytest.mark.parametrize("text", [BLOCK.replace("\n", "\r\n"), "\ufeff" + BLOCK, BLOCK.replace("    ", "\t")])
def test_files_without_a_match_are_byte_identical(text: str) -> None:
    unmatched = text.replace("self.drop(x)", "x")
    assert_unchanged(unmatched)
