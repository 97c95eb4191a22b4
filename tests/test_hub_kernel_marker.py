"""transformers' hub-kernel marker on a module-level function (``@use_kernel_forward_from_hub("rotary_pos_emb")`` on
``apply_rotary_pos_emb`` in most transformers 5.x models) leaves the function's body to be rewritten: the marker runs
the body as written unless the user opts in to ``kernelize()``, which replaces the whole function. Any other
decorator, a marker of that name defined in the file included, keeps the function out of reach."""

from __future__ import annotations

import pytest

from adopter_codemods.api import rewrite_source, scan_source

HELPERS = '''
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


{decorator}
def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
'''


@pytest.mark.parametrize(
    "imports, decorator",
    [
        ("from ...integrations import use_kernel_forward_from_hub", '@use_kernel_forward_from_hub("rotary_pos_emb")'),
        ("from transformers.integrations import use_kernel_func_from_hub", '@use_kernel_func_from_hub("rotary_pos_emb")'),
        ("import transformers.integrations.hub_kernels as hk", '@hk.use_kernel_forward_from_hub("rotary_pos_emb")'),
    ],
)
def test_marked_function_is_rewritten(imports: str, decorator: str) -> None:
    source = imports + "\n" + HELPERS.format(decorator=decorator)
    lines = source.splitlines()
    q_line = next(i for i, text in enumerate(lines, 1) if text.lstrip().startswith("q_embed ="))
    assert [(f.code, f.line) for f in scan_source(source, ["ADP013"])] == [("ADP013", q_line), ("ADP013", q_line + 1)]
    rewritten = rewrite_source(source, ["ADP013"]).code
    assert decorator in rewritten and rewritten.count("adopter_kernels.rotary_embedding(") == 2


@pytest.mark.parametrize(
    "prelude, decorator",
    [
        # a local function of the same name may return anything in the function's place
        ("def use_kernel_forward_from_hub(name):\n    return lambda f: f\n", '@use_kernel_forward_from_hub("rope")'),
        ("from functools import lru_cache", "@lru_cache(maxsize=None)"),
        ("from transformers.integrations import use_kernel_func_from_hub_with_fallback",
         '@use_kernel_func_from_hub_with_fallback("rope", "pkg")'),
    ],
)
def test_other_decorators_keep_the_function_out_of_reach(prelude: str, decorator: str) -> None:
    source = prelude + "\n" + HELPERS.format(decorator=decorator)
    assert scan_source(source, ["ADP013"]) == []
