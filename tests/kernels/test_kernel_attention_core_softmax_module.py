"""ADP010 with the softmax written as a layer (`self.attend = nn.Softmax(dim=-1)`, vit-pytorch's Attention): the
rewritten call passes the layer (`attention_core(..., softmax=self.attend)`). The reference path calls it, so hooks
fire and whatever the attribute holds at run time is what runs; SDPA only for a plain nn.Softmax over the last dim
that nothing observes. float64, CPU, the SDPA backend forced (CUDA's `auto`)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adopter_kernels import attention_core, use_backend

B, H, L, S, E = 2, 3, 5, 6, 8


def _qkv(rank: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lead = (B, H) if rank == 4 else (B * H,)
    return tuple(  # type: ignore[return-value]
        torch.randn((*lead, n, E), generator=g, dtype=torch.float64, requires_grad=True) for n in (L, S, S)
    )


def _eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attend: nn.Module, drop: Optional[nn.Module] = None,
           scale: float = 0.5, bmm: bool = False) -> torch.Tensor:
    """vit-pytorch's core as written: `attn = self.attend(dots); attn = self.dropout(attn); out = attn @ v`."""
    matmul = torch.bmm if bmm else torch.matmul
    dots = matmul(q, k.transpose(-1, -2)) * scale
    attn = attend(dots)
    if drop is not None:
        attn = drop(attn)
    return matmul(attn, v)


def _fused(attend: nn.Module, drop: Optional[nn.Module] = None, bmm: bool = False) -> Callable[..., torch.Tensor]:
    return lambda q, k, v: attention_core(q, k.transpose(-1, -2), v, scale=0.5, softmax=attend, dropout=drop,
                                          batched=bmm)


def _check(fn_new: Callable[..., torch.Tensor], fn_old: Callable[..., torch.Tensor], rank: int = 4) -> None:
    outs, grads = [], []
    for fn in (fn_old, fn_new):
        q, k, v = _qkv(rank)
        out = fn(q, k, v)
        out.backward(torch.ones_like(out))
        outs.append(out.detach())
        grads.append([t.grad for t in (q, k, v)])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-9, atol=1e-9, equal_nan=True)
    for g_new, g_old in zip(grads[1], grads[0]):
        torch.testing.assert_close(g_new, g_old, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.fixture(autouse=True)
def _force_sdpa() -> Iterator[None]:
    with use_backend("attention_core=sdpa"):
        yield


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = F.scaled_dot_product_attention

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    return calls


@pytest.mark.parametrize("dim", [-1, 3])
def test_plain_last_dim_softmax_runs_sdpa(dim: int, sdpa_calls: list[int]) -> None:
    attend, drop = nn.Softmax(dim=dim), nn.Dropout(0.1).eval()
    _check(_fused(attend, drop), lambda q, k, v: _eager(q, k, v, attend, drop))
    assert len(sdpa_calls) == 1


def test_batched_form_with_a_softmax_module(sdpa_calls: list[int]) -> None:
    attend = nn.Softmax(dim=2)  # the last dim of 3-D scores
    _check(_fused(attend, bmm=True), lambda q, k, v: _eager(q, k, v, attend, bmm=True), rank=3)
    assert len(sdpa_calls) == 1


@pytest.mark.parametrize(
    "attend",
    [nn.Softmax(dim=1), nn.Softmax(), nn.Softmax(dim=2), nn.Identity(), nn.LogSoftmax(dim=-1)],
    ids=["dim=1", "dim=None", "dim=2", "Identity", "LogSoftmax"],
)
def test_anything_else_runs_the_module(attend: nn.Module, sdpa_calls: list[int]) -> None:
    """What the attribute holds at run time is what runs (another binding in __init__, `m.attend = ...` from
    outside, a changed dim): the reference path calls it."""
    with pytest.warns(UserWarning) if isinstance(attend, nn.Softmax) and attend.dim is None else contextlib.nullcontext():
        _check(_fused(attend), lambda q, k, v: _eager(q, k, v, attend))
    assert not sdpa_calls


class _Temperature(nn.Softmax):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.softmax(input / 2.0, self.dim)


def test_subclass_overriding_forward_runs_the_module(sdpa_calls: list[int]) -> None:
    attend = _Temperature(dim=-1)
    _check(_fused(attend), lambda q, k, v: _eager(q, k, v, attend))
    assert not sdpa_calls


def test_hooked_softmax_runs_the_module_and_its_hooks(sdpa_calls: list[int]) -> None:
    """vit-pytorch's Recorder registers a forward hook on `attend` to record the attention maps."""
    recorded: list[torch.Tensor] = []
    attend = nn.Softmax(dim=-1)
    attend.register_forward_hook(lambda _m, _i, out: recorded.append(out.detach().clone()))
    _check(_fused(attend), lambda q, k, v: _eager(q, k, v, attend))
    assert not sdpa_calls and len(recorded) == 2
    torch.testing.assert_close(recorded[0], recorded[1], rtol=0, atol=0)
    # a hook that changes the output is honoured too
    attend.register_forward_hook(lambda _m, _i, out: out * 0.5)
    _check(_fused(attend), lambda q, k, v: _eager(q, k, v, attend))
    assert not sdpa_calls


def test_softmax_module_under_the_reference_backend(sdpa_calls: list[int]) -> None:
    attend = nn.Softmax(dim=-1)
    with use_backend("reference"):
        _check(_fused(attend), lambda q, k, v: _eager(q, k, v, attend))
    assert not sdpa_calls
