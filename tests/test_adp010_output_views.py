"""ADP010: `.view` of the attention output (guard `attention_output_views`, adopter_codemods/flow/slice_views.py).

`p @ v` is contiguous; on CUDA, SDPA's memory-efficient kernel returns the output as a transposed view of a
[batch, seq, heads, dim] buffer (torch's own meta function for it says so: `torch/_meta_registrations.py`), and its
flash kernel lays it out as the query is. Checked here on CPU, with SDPA's output given that layout: the refusals of
fixtures/ADP010_fuse_attention_core/neg_output_view_merges_dims.py guard a real failure, and a view splitting the
last dim alone is still fused and runs.
"""

from __future__ import annotations

import importlib

import pytest

from adopter_codemods import guards
from adopter_codemods.api import rewrite_source
from conftest import FIXTURES

torch = pytest.importorskip("torch")

NEGATIVE = FIXTURES / "ADP010_fuse_attention_core" / "neg_output_view_merges_dims.py"
GUARD = "attention_output_views"


@pytest.fixture
def cuda_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """SDPA returning what the CUDA memory-efficient kernel returns: the output of a [B, S, H, D] buffer, transposed."""
    functional = importlib.import_module("adopter_kernels.attention_core").F
    sdpa = functional.scaled_dot_product_attention

    def transposed(*args, **kwargs):  # type: ignore[no-untyped-def]
        return sdpa(*args, **kwargs).transpose(1, 2).contiguous().transpose(1, 2)

    monkeypatch.setattr(functional, "scaled_dot_product_attention", transposed)


@pytest.mark.parametrize("name", ["HeadsIntoSequence", "Chained"])
def test_the_refused_rewrite_would_raise_with_sdpa_on_cuda(
    name: str, monkeypatch: pytest.MonkeyPatch, cuda_layout: None
) -> None:
    import adopter_kernels
    from adopter_kernels.equivalence import load_source_as_module

    importlib.import_module("adopter_codemods.rule_guards")  # registers the guards, so monkeypatch restores this one
    monkeypatch.setitem(guards._GUARDS, GUARD, lambda match, placement: True)
    source = NEGATIVE.read_text(encoding="utf-8")
    result = rewrite_source(source, ["ADP010"], path=str(NEGATIVE))
    assert len(result.findings) == 2
    original = load_source_as_module(source, f"core_views_original_{name}")
    rewritten = load_source_as_module(result.code, f"core_views_rewritten_{name}")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    expected = getattr(original, name)()(q, k, v)
    model = getattr(rewritten, name)()
    with adopter_kernels.use_backend("attention_core=reference"):
        torch.testing.assert_close(model(q, k, v), expected)
    with adopter_kernels.use_backend("attention_core=sdpa"), pytest.raises(RuntimeError, match="view size is not compatible"):
        model(q, k, v)


SPLIT_LAST = """import torch
from torch import nn


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)

    def forward(self, q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        out = self.drop(p) @ v
        return out.view(out.size()[:-1] + (2, -1)), out.transpose(1, 2).contiguous().view(q.size(0), q.size(2), -1)
"""


def test_a_view_splitting_the_last_dim_or_after_contiguous_is_fused_and_runs(cuda_layout: None) -> None:
    import adopter_kernels
    from adopter_kernels.equivalence import load_source_as_module

    result = rewrite_source(SPLIT_LAST, ["ADP010"])
    assert len(result.findings) == 1
    original = load_source_as_module(SPLIT_LAST, "core_views_split_original")
    rewritten = load_source_as_module(result.code, "core_views_split_rewritten")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    with adopter_kernels.use_backend("attention_core=sdpa"):
        for got, want in zip(rewritten.Split()(q, k, v), original.Split()(q, k, v)):
            torch.testing.assert_close(got, want)


ESCAPING = """import torch
from torch import nn


class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)

    def forward(self, q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1)
        return self.drop(p) @ v


class ThroughSuper(A):
    def forward(self, q, k, v):
        out = super().forward(q, k, v)
        out += v
        return out


class ThroughTheClass(A):
    def forward(self, q, k, v):
        out = A.forward(self, q, k, v)
        out.mul_(2)
        return out


class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = A()

    def forward(self, q, k, v):
        out = self.a(q, k, v)
        out += q
        return out
"""


@pytest.mark.parametrize("name", ["ThroughSuper", "ThroughTheClass", "Parent"])
def test_the_output_may_be_changed_in_place_by_whoever_gets_it(name: str) -> None:
    """SDPA keeps its output for the backward pass, `p @ v` does not; code the rewrite cannot see (a subclass through
    `super().forward`, a parent module, another file) may change the result in place, as it may the original's. The
    kernel returns a copy under grad: outputs and gradients equal the original's with SDPA (backward raised before)."""
    import adopter_kernels
    from adopter_kernels.equivalence import load_source_as_module

    result = rewrite_source(ESCAPING, ["ADP010"])
    assert len(result.findings) == 1
    original = getattr(load_source_as_module(ESCAPING, f"escaping_original_{name}"), name)()
    rewritten = getattr(load_source_as_module(result.code, f"escaping_rewritten_{name}"), name)()
    torch.manual_seed(0)
    inputs = [torch.randn(2, 4, 64, 16, dtype=torch.float64) for _ in range(3)]

    def run(model: torch.nn.Module) -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = model(*leaves)
        out.pow(2).sum().backward()
        return [out.detach(), *(t.grad for t in leaves)]

    want = run(original)
    with adopter_kernels.use_backend("attention_core=sdpa"):
        got = run(rewritten)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
