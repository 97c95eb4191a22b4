"""Property tests: generated nn.Module sources mixing rule patterns with distractors.

Sources hold ADP005 (dropout -> add -> LayerNorm, split or nested, either operand order, the residual from a
helper method whose local has a namesake in forward), ADP004 (softmax), ADP006 (Linear -> activation), ADP009
(q/k/v projections of one input) and ADP010 (an attention core, its products written with `@`, `torch.matmul`,
`torch.bmm` or `torch.einsum`, scaled by a constant or by the query's size, its mask always, never or under
`if r is not None:` (added, or prepared there and filled with a named `-finfo.max`, also in place), its softmax a function, a method or `nn.Softmax(dim=-1)(s)`) next to layers converted where
`__init__` builds them (`.to(...)`), aliases, reused intermediates, layers shared with other code, if/else, early returns,
loops, helper methods, top-level functions, comments in odd places, both quote styles, tabs / 2 / 4 spaces and
LF / CRLF.
For every source and all rules together:

* the output parses; a second run changes nothing; a source without findings comes back byte-identical;
* a rewritten module imports, loads the original ``state_dict`` strictly and computes the same outputs and
  gradients in eval and train (``adopter_kernels.equivalence``; every dropout has p=0 so both draw the same).

Derandomized with a modest example count: the file runs in well under a minute on one core.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adopter_codemods.api import rewrite_source

pytest.importorskip("torch")

H = 8
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
_ids = itertools.count()


@dataclass
class Source:
    """A forward body under construction: lines (4-space indents), extra methods, names in use."""

    lines: list[str] = field(default_factory=list)
    methods: list[list[str]] = field(default_factory=list)
    functions: list[list[str]] = field(default_factory=list)  # top-level functions, before the class
    counter: itertools.count = field(default_factory=lambda: itertools.count())

    def fresh(self, stem: str) -> str:
        return f"{stem}{next(self.counter)}"


# Layers bound in __init__; the drop/ln variants exercise argument normalisation.
INIT_LINES = [
    "self.drop = nn.Dropout(0.0)",
    "self.drop2 = nn.Dropout(p=0.0, inplace=False)",
    f"self.ln = nn.LayerNorm({H})",
    f"self.ln2 = nn.LayerNorm({H}, eps=1e-6)",
    f"self.dense = nn.Linear({H}, {H})",
    "self.act = nn.GELU()",
    f"self.q = nn.Linear({H}, {H})",
    f"self.k = nn.Linear({H}, {H})",
    f"self.v = nn.Linear({H}, {H})",
    "self.mode = 'fused'  # a string in single quotes",
]

COMMENTS = ["# note", "# TODO: check shapes", "#", "# a 'quoted' \"comment\""]


def indent(lines: list[str], by: int = 1) -> list[str]:
    return [("    " * by + line) if line else line for line in lines]


@st.composite
def dropout_ln(draw: st.DrawFn, src: Source, var: str) -> list[str]:
    """One ADP005 instance reading and writing `var`, in one of its spellings, with optional distractors."""
    drop = draw(st.sampled_from(["drop", "drop2"]))
    ln = draw(st.sampled_from(["ln", "ln2"]))
    inp = var
    out: list[str] = []
    if draw(st.booleans()):
        inp = src.fresh("alias")
        out.append(f"{inp} = {var}")  # alias of the input
    form = draw(st.sampled_from(["split", "half", "nested", "nested_wrapped", "inside_call", "helper_residual"]))
    d, s = src.fresh("d"), src.fresh("s")
    add = lambda a, b: f"{a} + {b}" if draw(st.booleans()) else f"{b} + {a}"  # noqa: E731
    if form == "split":
        out += [f"{d} = self.{drop}({inp})", f"{s} = {add(d, 'r')}", f"{var} = self.{ln}({s})"]
    elif form == "half":
        out += [f"{d} = self.{drop}({inp})  # dropout first", f"{var} = self.{ln}({add(d, 'r')})"]
    elif form == "nested":
        out += [f"{var} = self.{ln}({add(f'self.{drop}({inp})', 'r')})"]
    elif form == "nested_wrapped":
        out += [f"{var} = self.{ln}(", f"    {add(f'self.{drop}({inp})', 'r')}  # residual", ")"]
    elif form == "helper_residual":
        # The residual is a helper's local, and forward has a variable of the same name holding something else.
        helper, local = src.fresh("_residual"), src.fresh("t")
        src.methods.append([f"def {helper}(self, r):", f"    {local} = r * 0.5", f"    return {local}"])
        out += [f"{local} = r", f"{var} = self.{ln}({add(f'self.{drop}({inp})', f'self.{helper}(r)')})"]
    else:
        out += [f"{var} = torch.tanh(self.{ln}({add(f'self.{drop}({inp})', 'r')}))"]
    if form in ("split", "half") and draw(st.integers(0, 3)) == 0:
        out.append(f"{var} = {var} + {d} * 0.5")  # the intermediate is used again: no rewrite for this one
    if draw(st.integers(0, 4)) == 0:
        out.append(f"{var} = {var} + self.{drop}(r)")  # the dropout is shared with other code
    return out


@st.composite
def attention_core(draw: st.DrawFn, src: Source, var: str) -> list[str]:
    """One ADP010 instance over `var` as query, key and value (3-dim), in each spelling of the two products."""
    s, p = src.fresh("s"), src.fresh("p")
    spelling = draw(st.sampled_from(["@", "torch.matmul", "torch.bmm", "torch.einsum"]))
    if spelling == "torch.einsum":
        scores = f'torch.einsum("b i d, b j d -> b i j", {var}, {var} * 0.5)'
        output = f'torch.einsum("b i j, b j d -> b i d", {p}, {var})'
    elif spelling == "@":
        scores, output = f"{var} @ ({var} * 0.5).transpose(-2, -1)", f"{p} @ {var}"
    else:
        scores, output = f"{spelling}({var}, ({var} * 0.5).transpose(1, 2))", f"{spelling}({p}, {var})"
    # The scale may read the query's metadata: a metadata call moves to the fused call like a constant.
    scale = draw(st.sampled_from(["0.3", f"{var}.size(-1) ** -0.5", f"{var}.shape[-1] ** -0.5"]))
    out = [f"{s} = {scores} * {scale}"]
    mask = draw(st.sampled_from(["none", "always", "optional", "prepared", "named_fill"]))
    # A boolean mask filled in, by a method or in place (read as the method), with a fill value named first.
    fill, keep = src.fresh("fill"), src.fresh("keep")
    masked_fill = draw(st.sampled_from([f"{s} = {s}.masked_fill(~{keep}, {fill})", f"{s}.masked_fill_(~{keep}, {fill})"]))
    if mask == "always":
        out.append(f"{s} = {s} + r[:, :, :1]")  # an additive mask
    elif mask == "optional":  # the fused call goes after the `if`: the scale is evaluated there
        out += ["if r is not None:", f"    {s} = {s} + r[:, :, 1:2]"]
    elif mask == "prepared":  # the `if` keeps the mask's preparation; the fill value's statement goes
        out += ["if r is not None:", f"    {keep} = r[:, :, 2:3].transpose(1, 2) > 0", f"    {fill} = -torch.finfo({s}.dtype).max",
                f"    {masked_fill}"]
    elif mask == "named_fill":
        out += [f"{keep} = r[:, :, 2:3].transpose(1, 2) > 0", f"{fill} = -torch.finfo({s}.dtype).max", masked_fill]
    softmax = draw(st.sampled_from([f"{s}.softmax(dim=-1)", f"F.softmax({s}, dim=-1)", f"nn.Softmax(dim=-1)({s})"]))
    out += [f"{p} = {softmax}", f"{p} = self.drop({p})", f"{var} = {output}"]
    if draw(st.integers(0, 3)) == 0:
        out.append(f"{var} = {var} + {p}.sum(-1, keepdim=True)")  # the probabilities are read again: refused
    return out


@st.composite
def other_rule(draw: st.DrawFn, src: Source, var: str) -> list[str]:
    kind = draw(st.sampled_from(["softmax", "dense_act", "qkv", "attention", "plain"]))
    if kind == "attention":
        return draw(attention_core(src, var))
    if kind == "softmax":
        return [draw(st.sampled_from([f"{var} = F.softmax({var}, dim=-1)", f"{var} = nn.Softmax(dim=-1)({var})"]))]
    if kind == "dense_act":
        return [f"{var} = self.act(self.dense({var}))"]
    if kind == "qkv":
        q, k, v = src.fresh("q"), src.fresh("k"), src.fresh("v")
        return [f"{q} = self.q({var})", f"{k} = self.k({var})", f"{v} = self.v({var})", f"{var} = {q} * {k} + {v}"]
    return [f"{var} = {var} * 2.0 - r"]


@st.composite
def segment(draw: st.DrawFn, src: Source, depth: int) -> list[str]:
    """A statement group transforming `h`, possibly under control flow or in a helper method."""
    choices = ["pattern", "pattern", "other"] + (
        ["if", "loop", "helper", "function", "early", "try", "with"] if depth < 2 else []
    )
    kind = draw(st.sampled_from(choices))
    if kind == "pattern":
        body = draw(dropout_ln(src, "h"))
    elif kind == "other":
        body = draw(other_rule(src, "h"))
    elif kind == "if":
        then = draw(segment(src, depth + 1))
        orelse = draw(st.one_of(st.none(), segment(src, depth + 1)))
        body = ["if h.shape[0] > 1:"] + indent(then)
        if orelse is not None and draw(st.booleans()):
            body += ["elif h.shape[1] > 1:"] + indent(orelse)
        elif orelse is not None:
            body += ["else:"] + indent(orelse)
    elif kind == "loop":
        body = ["for _ in range(2):"] + indent(draw(segment(src, depth + 1)))
    elif kind == "try":
        body = ["try:"] + indent(draw(segment(src, depth + 1))) + ["except RuntimeError:", "    h = h - r"]
    elif kind == "with":
        body = ["with torch.enable_grad():"] + indent(draw(segment(src, depth + 1)))
    elif kind == "early":
        body = ["if r is None:", "    return " + draw(st.sampled_from(["h", "self.ln(h)"]))]
    elif kind == "function":  # an attention core in a top-level function (no module: no dropout layer)
        name = src.fresh("_core")
        core = [line for line in draw(attention_core(src, "h")) if "self.drop" not in line]
        src.functions.append([f"def {name}(h, r):", *indent(core), "    return h"])
        body = [f"h = {name}(h, r)"]
    else:
        name = src.fresh("_block")
        helper_body = draw(segment(src, depth + 1))
        src.methods.append([f"def {name}(self, h, r):", *indent(helper_body), "    return h"])
        body = [f"h = self.{name}(h, r)"]
    if draw(st.integers(0, 3)) == 0:
        body.insert(draw(st.integers(0, len(body))) if body[0][:3] not in ("if ", "for") else 0, draw(st.sampled_from(COMMENTS)))
    return body


@st.composite
def module_sources(draw: st.DrawFn) -> str:
    src = Source()
    for _ in range(draw(st.integers(1, 4))):
        src.lines += draw(segment(src, 0))
    init = list(INIT_LINES)
    if draw(st.integers(0, 5)) == 0:
        init[0] = "self.drop = nn.Identity()"  # no Dropout: nothing of that layer matches
    if draw(st.booleans()):  # converted where built (no-ops in float64): the layers are the inner calls'
        init[1], init[3] = init[1] + ".cpu()", init[3] + ".to(dtype=torch.float64)"
    quote = draw(st.sampled_from(['"""', "'''"]))
    lines = [
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        "",
        *(line for function in src.functions for line in (*function, "", "")),
        "class M(nn.Module):",
        f"    {quote}Generated module.{quote}",
        "",
        "    def __init__(self):",
        "        super().__init__()",
        *indent(init, 2),
        "",
        "    def forward(self, x, r):",
        "        h = x",
        *indent(src.lines, 2),
        "        return h",
    ]
    for method in src.methods:
        lines += ["", *indent(method)]
    lines += [
        "",
        "",
        "def make_example():",
        f"    return M(), (torch.randn(2, 3, {H}, requires_grad=True), torch.randn(2, 3, {H}, requires_grad=True))",
        "",
    ]
    text = "\n".join(lines)
    style = draw(st.sampled_from(["4", "2", "tab"]))
    if style != "4":
        text = text.replace("    ", "  " if style == "2" else "\t")
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return text


def _check(source: str) -> None:
    from adopter_kernels.equivalence import assert_equivalent, load_source_as_module

    compile(source, "<generated>", "exec")
    result = rewrite_source(source, ["all"])
    cst.parse_module(result.code)
    compile(result.code, "<rewritten>", "exec")
    if not result.findings:
        assert result.code == source, "a source without findings must come back byte-identical"
        return
    again = rewrite_source(result.code, ["all"])
    assert again.code == result.code and not again.findings, "a second run changed the code"
    n = next(_ids)
    original = load_source_as_module(source, f"adopter_prop_{n}_original")
    rewritten = load_source_as_module(result.code, f"adopter_prop_{n}_rewritten")
    assert_equivalent(original, rewritten)  # float64, 1e-9: a packed GEMM's other summation order is ~1e-15


@SETTINGS
@given(module_sources())
def test_generated_modules(source: str) -> None:
    _check(source)


def test_the_generator_produces_rewrites_and_refusals() -> None:
    """The properties above are only meaningful if the generated sources exercise both outcomes."""
    seen = {"rewritten": 0, "unchanged": 0, "codes": set(), "fused_in_a_function": 0}

    @settings(SETTINGS, max_examples=60)
    @given(module_sources())
    def collect(source: str) -> None:
        result = rewrite_source(source, ["all"])
        seen["rewritten" if result.findings else "unchanged"] += 1  # type: ignore[operator]
        seen["codes"] |= {f.code for f in result.findings}  # type: ignore[operator]
        seen["fused_in_a_function"] += "attention_core(" in result.code.split("class M")[0]  # type: ignore[operator]

    collect()
    assert seen["rewritten"] and seen["unchanged"] and seen["fused_in_a_function"]
    assert {"ADP005", "ADP004", "ADP006", "ADP010"} <= seen["codes"]  # type: ignore[operator]
