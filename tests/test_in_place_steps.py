"""Steps written in place (``scores += mask``, ``scores *= scale``): the walk reads ``x += y`` as the operator node
``x + y`` assigned to ``x``; the matcher takes it only where the object it changes is one the match made, and, for
arithmetic, where the rule's target keeps the step in place (``in_place($s)``, which the kernel honours by keeping
the dtype of ``x``, as Python's in-place operator does)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import adopter_kernels
from adopter_codemods.api import refused_sites, rewrite_source
from adopter_codemods.dsl import RuleSyntaxError, parse_rule
from adopter_kernels.equivalence import load_source_as_module
from conftest import FIXTURES

OPEN_CLIP = FIXTURES / "ADP010_fuse_attention_core" / "mask_added_in_place.py"


def _scores() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=generator).to(torch.bfloat16) for _ in range(3))
    return q, k, v, torch.randn(2, 4, 5, 5, generator=generator)  # a float32 mask on bfloat16 scores


def test_kernel_adds_in_place_where_the_code_did() -> None:
    q, k, v, mask = _scores()
    scores = q @ k.transpose(-2, -1)
    scores += mask  # stays bfloat16
    expected = scores.softmax(dim=-1) @ v
    got = adopter_kernels.attention_core(q, k.transpose(-2, -1), v, mask=mask, mask_in_place=True)
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)
    # Out of place the sum is float32, and the float32 probabilities cannot multiply the bfloat16 values.
    with pytest.raises(RuntimeError):
        adopter_kernels.attention_core(q, k.transpose(-2, -1), v, mask=mask)


def test_kernel_scales_in_place_where_the_code_did() -> None:
    q, k, v, _ = _scores()
    scale = torch.full((4, 1, 1), 0.3)  # a float32 tensor: `*` would promote the bfloat16 scores
    scores = q @ k.transpose(-2, -1)
    scores *= scale
    scores /= scale
    expected = scores.softmax(dim=-1) @ v
    got = adopter_kernels.attention_core(
        q, k.transpose(-2, -1), v, scale=scale, divisor=scale, scale_in_place=True, divisor_in_place=True
    )
    assert torch.equal(got, expected)


@pytest.mark.parametrize("backend", ["reference", "attention_core=sdpa"])
def test_rewritten_open_clip_attention_in_bfloat16_with_a_float32_mask(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture's model in bfloat16, its causal mask in float32: the rewrite computes what the original does,
    bit for bit, also with SDPA forced (it declines a mask of another dtype)."""
    monkeypatch.setenv(adopter_kernels.BACKEND_ENV, backend)
    source = OPEN_CLIP.read_text(encoding="utf-8")
    rewritten = rewrite_source(source, ["ADP010"]).code
    assert "mask_in_place=True" in rewritten
    original_module = load_source_as_module(source, "in_place_original")
    rewritten_module = load_source_as_module(rewritten, "in_place_rewritten")
    torch.manual_seed(0)
    original = original_module.Attention(16).to(torch.bfloat16).eval()
    fused = rewritten_module.Attention(16).to(torch.bfloat16).eval()
    fused.load_state_dict(original.state_dict(), strict=True)
    x = torch.randn(5, 2, 16).to(torch.bfloat16)
    mask = torch.full((5, 5), float("-inf")).triu(1) + torch.randn(5, 5)  # float32, not only 0 and -inf
    with torch.no_grad():
        assert torch.equal(original(x, mask), fused(x, mask))
        if backend == "reference":  # without a mask SDPA takes bfloat16 too: the same up to its rounding
            assert torch.equal(original(x), fused(x))


SCALED_SOFTMAX = """\
rule ScaledSoftmax
code ADP901
forward:
    torch.matmul($a, $b) -> $s0;
    $s0 * $c -> $s1;
    torch.softmax($s1, dim=-1) -> $p
    =>
    kernels.scaled_softmax($a, $b, $c{extra}) -> $p
"""

IN_PLACE_SOURCE = """\
import torch
from torch import nn


class Scores(nn.Module):
    def forward(self, a, b, c):
        s = torch.matmul(a, b)
        s *= c
        return torch.softmax(s, dim=-1)
"""


def _rule(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "scaled_softmax.adopter"
    path.write_text(SCALED_SOFTMAX.format(extra=extra), encoding="utf-8")
    return path


def test_a_step_written_in_place_is_taken_only_where_the_target_keeps_it(tmp_path: Path) -> None:
    plain = _rule(tmp_path, "")
    assert rewrite_source(IN_PLACE_SOURCE, [], rule_files=[plain]).code == IN_PLACE_SOURCE
    [site] = refused_sites(IN_PLACE_SOURCE, [], rule_files=[plain])
    assert site.category == "input-may-be-mutated"
    assert "`s *= c` is written in place, which keeps the dtype of its tensor" in site.reason
    kept = _rule(tmp_path, ", in_place=in_place($s1)")
    code = rewrite_source(IN_PLACE_SOURCE, [], rule_files=[kept]).code
    assert "return kernels.scaled_softmax(a, b, c, in_place=True)" in code
    # Written out of place, the keyword is left out.
    out_of_place = IN_PLACE_SOURCE.replace("s *= c", "s = s * c")
    code = rewrite_source(out_of_place, [], rule_files=[kept]).code
    assert "return kernels.scaled_softmax(a, b, c)" in code


def test_an_in_place_step_on_a_tensor_the_match_did_not_make_is_refused(tmp_path: Path) -> None:
    """`s` is an input here (the rule starts at the product's consumer): the caller's tensor changes in place."""
    rule = tmp_path / "scale_then_softmax.adopter"
    rule.write_text(
        "rule ScaleSoftmax\ncode ADP902\nforward:\n    $s0 * $c -> $s1;\n    torch.softmax($s1, dim=-1) -> $p\n"
        "    =>\n    kernels.scaled_softmax($s0, $c, in_place=in_place($s1)) -> $p\n",
        encoding="utf-8",
    )
    source = IN_PLACE_SOURCE.replace("s = torch.matmul(a, b)\n        ", "s = a\n        ")
    assert rewrite_source(source, [], rule_files=[rule]).code == source
    [site] = refused_sites(source, [], rule_files=[rule])
    assert "`s *= c` changes in place a tensor the matched steps did not make" in site.reason


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("kernels.f($a, in_place($s1)) -> $p", "'in_place(...)' is a forward target's keyword argument only"),
        ("kernels.f($a, flag=in_place($p)) -> $p", "'in_place($p)': $p is no operator step's output"),
        ("kernels.f($a, flag=in_place(s1)) -> $p", "expected a $variable in 'in_place(...)'"),
    ],
)
def test_in_place_is_checked_where_the_rule_is_loaded(target: str, message: str) -> None:
    text = SCALED_SOFTMAX.replace("kernels.scaled_softmax($a, $b, $c{extra}) -> $p", target)
    with pytest.raises(RuleSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        parse_rule(text)
