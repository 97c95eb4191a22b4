"""ADP010's einsum variants: the rule (guard ``attention_einsum_equations``, adopter_codemods/rule_guards.py) rewrites
exactly the einsum cores whose equations the kernel (``_matmul_equations``, adopter_kernels/attention_core.py) runs
as SDPA: never a core the kernel would always run by hand, never refusing one it would speed up."""

from __future__ import annotations

import textwrap

import pytest

from adopter_codemods.api import rewrite_source
from adopter_kernels.attention_core import _matmul_equations

TEMPLATE = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.dropout = nn.Dropout(0.1)

        def forward(self, q, k, v):
            sim = torch.einsum({score!r}, q, k) * 0.5
            attn = sim.softmax(dim=-1)
            attn = self.dropout(attn)
            return torch.einsum({output!r}, attn, v)
    """
)

EQUATIONS = [
    ("b h i d, b h j d -> b h i j", "b h i j, b h j d -> b h i d"),
    ("bhid,bhjd->bhij", "bhij,bhjd->bhid"),
    ("b h q c, b h k c -> b h q k", "b h i j, b h j d -> b h i d"),  # letters of its own in each equation
    ("...id,...jd->...ij", "...ij,...jd->...id"),
    ("... h i d, ... h j d -> ... h i j", "... h i j, ... h j d -> ... h i d"),
    ("...hid,...hjd->...hij", "...ij,...jd->...id"),
    ("b i d, b j d -> b i j", "b i j, b j d -> b i d"),
    ("i d, j d -> i j", "i j, j d -> i d"),  # no leading dims: 2-dim tensors, which SDPA's fast path does not take
    ("B G H I D, B G H J D -> B G H I J", "B G H I J, B G H J D -> B G H I D"),  # 5 dims (torchvision MaxViT)
    ("b h i d, b j d -> b h i j", "b h i j, b j d -> b h i d"),  # one key for all heads
    ("b h i d, b h j d -> b h j i", "b h j i, b h i d -> b h j d"),  # scores transposed
    ("b h i d, h b j d -> b h i j", "b h i j, b h j d -> b h i d"),  # key dims in another order
    ("b h i d, b h j d -> b h i j", "b h i j, b h j d -> b i h d"),  # output heads moved
    ("b i d, b j d -> b i j", "b h i j, b h j d -> b h i d"),  # different numbers of leading dims
    ("...id,...jd->...ij", "bhij,bhjd->bhid"),
    ("b h i i, b h j i -> b h i j", "b h i j, b h j d -> b h i d"),  # a repeated letter: a diagonal
    ("b h i d, b h j d -> b h i j", "b h i j, b h j d, b h j d -> b h i d"),  # three operands (not matched)
    ("b b i d, b b j d -> b b i j", "b b i j, b b j d -> b b i d"),
]


def _kernel_runs_sdpa(score: str, output: str) -> bool:
    """Whether the kernel's fast path takes these equations for some 3- or 4-dim input."""
    leading = _matmul_equations(score, output)
    return leading in (-1, 1, 2)


@pytest.mark.parametrize("score, output", EQUATIONS)
def test_rule_rewrites_exactly_what_the_kernel_speeds_up(score: str, output: str) -> None:
    result = rewrite_source(TEMPLATE.format(score=score, output=output), ["ADP010"], path="einsum_attention.py")
    rewritten = "adopter_kernels.attention_core(" in result.code
    assert rewritten == _kernel_runs_sdpa(score, output), result.code
    if rewritten:
        assert f"score_equation={score!r}, output_equation={output!r}" in result.code


def test_an_einsum_the_kernel_cannot_run_is_the_reason_given_before_the_fill_value() -> None:
    """DALL-E 2's and CoCa's one-key-for-all-heads attention fills with `-finfo.max`, which the `masked_min` variant
    takes and the `masked_inf` variant does not: the refusal names the einsum, which rules out both."""
    from adopter_codemods.api import refused_sites

    source = textwrap.dedent(
        """\
        import torch
        from torch import nn, einsum


        class Attention(nn.Module):
            def forward(self, q, k, v, mask):
                sim = einsum("b h i d, b j d -> b h i j", q, k)
                sim = sim.masked_fill(mask, -torch.finfo(sim.dtype).max)
                attn = sim.softmax(dim=-1)
                return einsum("b h i j, b j d -> b h i d", attn, v)
        """
    )
    (site,) = refused_sites(source, ["ADP010"])
    assert site.reason.startswith("guard attention_einsum_equations")
