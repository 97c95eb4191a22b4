"""ADP009: packed_qkv_linear == (q(x), k(x), v(x)) with one GEMM."""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import adopter_kernels as ak
from adopter_kernels import qkv as qkv_module


@pytest.fixture(autouse=True)
def _force_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check that the packed GEMM is exact; ``auto`` uses it only where it measured faster (not on CPU)."""
    monkeypatch.setenv(ak.BACKEND_ENV, "packed_qkv_linear=packed")


def _layers(
    dtype: torch.dtype, biases: Tuple[bool, ...] = (True, True, True), outs: Tuple[int, ...] = (8, 8, 8)
) -> List[nn.Linear]:
    return [nn.Linear(6, o, bias=b, dtype=dtype) for o, b in zip(outs, biases)]


def _tol(dtype: torch.dtype) -> dict:
    return {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("biases", [(True, True, True), (False, False, False), (True, False, True)])
@pytest.mark.parametrize("outs", [(8, 8, 8), (8, 4, 4)])
@pytest.mark.parametrize("shape", [(5, 6), (2, 3, 6)])
def test_outputs_and_grads_match_separate_linears(
    dtype: torch.dtype, biases: Tuple[bool, bool, bool], outs: Tuple[int, int, int], shape: Tuple[int, ...]
) -> None:
    q, k, v = _layers(dtype, biases, outs)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    ours = ak.packed_qkv_linear(x, q, k, v)
    ref = (q(x), k(x), v(x))
    assert isinstance(ours, tuple) and len(ours) == 3
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **_tol(dtype))
    gs = [torch.randn_like(t) for t in ref]
    params = [x, *q.parameters(), *k.parameters(), *v.parameters()]
    for a, b in zip(torch.autograd.grad(ours, params, gs), torch.autograd.grad(ref, params, gs)):
        torch.testing.assert_close(a, b, **_tol(dtype))


def test_one_gemm_and_no_bias_when_none_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[Any] = []
    real = F.linear

    def spy(input: torch.Tensor, weight: torch.Tensor, bias: Any = None) -> torch.Tensor:
        calls.append(bias)
        return real(input, weight, bias)

    monkeypatch.setattr(qkv_module.F, "linear", spy)
    ak.packed_qkv_linear(torch.randn(2, 6), *_layers(torch.float32, (False, False, False)))
    assert calls == [None]
    ak.packed_qkv_linear(torch.randn(2, 6), *_layers(torch.float32, (False, True, False)))
    assert len(calls) == 2 and calls[1].shape == (24,) and torch.equal(calls[1][:8], torch.zeros(8))


def test_outputs_split_into_heads() -> None:
    q, k, v = _layers(torch.float64)
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    for t, layer in zip(ak.packed_qkv_linear(x, q, k, v), (q, k, v)):
        torch.testing.assert_close(t.view(2, 3, 2, 4), layer(x).view(2, 3, 2, 4), **_tol(torch.float64))


def test_outputs_may_be_changed_in_place_as_the_linears_outputs_may() -> None:
    """The packed outputs share one buffer but are not views for autograd (`unsafe_split`): changing one, or a view of
    one, in place (Longformer's `query_vectors /= ...`, `torch.relu_(k)`) gives the gradients of the three Linears
    (split's views of one buffer made autograd refuse it)."""
    layers = _layers(torch.float64)
    torch.manual_seed(0)
    x0 = torch.randn(2, 5, 6, dtype=torch.float64)
    t = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)

    def run(backend: str) -> List[torch.Tensor]:
        x = x0.clone().requires_grad_()
        for layer in layers:
            layer.zero_grad()
        t.grad = None
        with ak.use_backend(f"packed_qkv_linear={backend}"):
            q, k, v = ak.packed_qkv_linear(x, *layers)
        q.mul_(t)
        heads = v.view(2, 5, 2, 4).transpose(1, 2)
        heads.add_(1.0)
        k /= 3
        torch.relu_(k)
        ((q * k).sum() + (v**2).sum() + (heads**3).sum()).backward()
        return [x.grad, t.grad, *(p.grad for layer in layers for p in layer.parameters())]

    for got, want in zip(run("packed"), run("reference")):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_under_torch_func_transforms() -> None:
    """vmap and grad of torch.func: unsafe_split has no batching rule, so under the transforms the outputs are split
    as views (vmap raised)."""
    layers = _layers(torch.float64)
    x = torch.randn(5, 2, 6, dtype=torch.float64)
    batched = torch.func.vmap(lambda t: ak.packed_qkv_linear(t, *layers)[0])(x)
    torch.testing.assert_close(batched, layers[0](x), **_tol(torch.float64))
    grad = torch.func.grad(lambda t: ak.packed_qkv_linear(t, *layers)[1].sum())(x)
    torch.testing.assert_close(grad, layers[1].weight.sum(0).expand_as(x), **_tol(torch.float64))


def test_different_in_features_is_an_error() -> None:
    with pytest.raises(ValueError, match="in_features q=6, k=5, v=6"):
        ak.packed_qkv_linear(torch.randn(2, 6), nn.Linear(6, 4), nn.Linear(5, 4), nn.Linear(6, 4))


@pytest.mark.parametrize("backend", ["auto", "packed_qkv_linear=packed"])
def test_modules_other_than_linears_are_called(backend: str) -> None:
    """A class may bind `nn.Identity()` in one branch of `__init__` and the Linears in the other (the codemod refuses
    that shape, but the kernel is public): the modules are called as written."""
    x = torch.randn(2, 6)
    q, v = nn.Identity(), nn.Linear(6, 6)
    with ak.use_backend(backend):
        out = ak.packed_qkv_linear(x, q, nn.Identity(), v)
    torch.testing.assert_close(out[0], x, rtol=0, atol=0)
    torch.testing.assert_close(out[1], x, rtol=0, atol=0)
    torch.testing.assert_close(out[2], v(x), rtol=0, atol=0)


def test_subclassed_or_hooked_linears_are_called() -> None:
    q, k, v = _layers(torch.float32)
    seen: List[str] = []
    k.register_forward_hook(lambda *args: seen.append("k"))
    x = torch.randn(2, 6)
    out = ak.packed_qkv_linear(x, q, k, v)
    assert seen == ["k"] and all(torch.equal(a, m(x)) for a, m in zip(out, (q, k, v)))


def test_packed_weight_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[int] = []
    real = qkv_module._pack

    def counting(*args: nn.Linear) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(qkv_module, "_pack", counting)
    layers = nn.ModuleList(_layers(torch.float64))
    q, k, v = layers
    x = torch.randn(3, 6, dtype=torch.float64)

    def check(expected_calls: int) -> None:
        with torch.no_grad():
            for a, m in zip(ak.packed_qkv_linear(x, q, k, v), (q, k, v)):
                torch.testing.assert_close(a, m(x), **_tol(torch.float64))
        assert len(calls) == expected_calls

    check(1)
    check(1)
    # training: packed per call, grads flow, then the optimizer step invalidates the cache
    opt = torch.optim.SGD(layers.parameters(), lr=0.5)
    sum(t.sum() for t in ak.packed_qkv_linear(x, q, k, v)).backward()
    assert len(calls) == 2 and all(p.grad is not None for p in layers.parameters())
    opt.step()
    check(3)
    layers.load_state_dict(nn.ModuleList(_layers(torch.float64)).state_dict())
    check(4)
    check(4)


def test_teacher_updates_the_cache_sees_and_the_one_it_cannot() -> None:
    """A momentum (EMA) teacher run under no_grad keeps the packed weight cached between its updates. Updates that go
    through autograd's version counter (in place under no_grad, `copy_` of a state dict) or replace the tensor
    (`p.data = ...`, MoCo) are seen; an in-place write through `.data` (`p.data.mul_(m)`, DINO) bypasses the
    counter, so the cache keeps the old weight until `clear_weight_cache()`, or always with `set_weight_cache(False)`
    (README Limitations)."""
    torch.manual_seed(0)
    teacher, student = nn.ModuleList(_layers(torch.float64)), nn.ModuleList(_layers(torch.float64))
    x = torch.randn(3, 6, dtype=torch.float64)

    def stale() -> bool:
        with torch.no_grad():
            packed = ak.packed_qkv_linear(x, *teacher)
        return not all(torch.allclose(a, m(x), rtol=1e-12, atol=1e-12) for a, m in zip(packed, teacher))

    def ema(update: Any) -> None:
        for t, s in zip(teacher.parameters(), student.parameters()):
            update(t, s)

    assert not stale()
    with torch.no_grad():
        ema(lambda t, s: t.mul_(0.9).add_(s, alpha=0.1))
    assert not stale()
    ema(lambda t, s: setattr(t, "data", t.data * 0.9 + s.data * 0.1))
    assert not stale()
    ema(lambda t, s: t.data.mul_(0.9).add_(s.data, alpha=0.1))
    assert stale()
    ak.clear_weight_cache()
    assert not stale()
    # a teacher updated so at every step: the cache off, the packed weight is made on every call
    ak.set_weight_cache(False)
    try:
        ema(lambda t, s: t.data.mul_(0.9).add_(s.data, alpha=0.1))
        assert not stale()
    finally:
        ak.set_weight_cache(True)
    ema(lambda t, s: t.data.mul_(0.9).add_(s.data, alpha=0.1))
    assert not stale()  # the cache was dropped when turned off: this is its first entry
    ema(lambda t, s: t.data.mul_(0.9).add_(s.data, alpha=0.1))
    assert stale()
