"""ADP007/ADP008: conv_bn2d, linear_bn1d and FusedSequential against the unfused modules."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_weights, fuse_linear_bn_weights

import adopter_kernels as ak
from adopter_kernels import batch_norm as bn_module


@pytest.fixture(autouse=True)
def _force_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check that folding is exact; ``auto`` uses it only where it measured faster (not on CPU)."""
    monkeypatch.setenv(ak.BACKEND_ENV, "conv_bn2d=folded,linear_bn1d=folded")


def _randomise_bn(bn: nn.modules.batchnorm._BatchNorm) -> None:
    with torch.no_grad():
        if bn.weight is not None:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_()
        if bn.running_mean is not None:
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)


def _conv_bn(
    dtype: Optional[torch.dtype] = None, affine: bool = True, **conv_kwargs: Any
) -> Tuple[nn.Conv2d, nn.BatchNorm2d]:
    conv = nn.Conv2d(4, 6, 3, dtype=dtype, **conv_kwargs)
    bn = nn.BatchNorm2d(6, affine=affine, dtype=dtype)
    _randomise_bn(bn)
    return conv, bn


def _tol(dtype: torch.dtype) -> Dict[str, float]:
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}


def _grads(out: torch.Tensor, tensors: List[torch.Tensor], g: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, tensors, g)


CONV_CONFIGS = [
    {},
    {"bias": False},
    {"groups": 2},
    {"dilation": 2, "padding": 2},
    {"stride": 2, "padding": 1},
    {"padding": 1, "padding_mode": "reflect"},
    {"padding": 1, "padding_mode": "circular"},
]


@pytest.mark.parametrize("conv_kwargs", CONV_CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_conv_bn_training_is_exact_including_running_stats(conv_kwargs: Dict[str, Any], dtype: torch.dtype) -> None:
    conv, bn = _conv_bn(dtype, **conv_kwargs)
    conv2, bn2 = copy.deepcopy(conv), copy.deepcopy(bn)
    x = torch.randn(3, 4, 9, 9, dtype=dtype, requires_grad=True)
    y = ak.conv_bn2d(x, conv, bn)
    y_ref = bn2(conv2(x))
    assert torch.equal(y, y_ref)
    g = torch.randn_like(y)
    params = [x, conv.weight, bn.weight, bn.bias]
    params_ref = [x, conv2.weight, bn2.weight, bn2.bias]
    assert all(torch.equal(a, b) for a, b in zip(_grads(y, params, g), _grads(y_ref, params_ref, g)))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(bn, name), getattr(bn2, name))


@pytest.mark.parametrize("conv_kwargs", CONV_CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine", [True, False])
def test_conv_bn_eval_folds_within_tolerance(conv_kwargs: Dict[str, Any], dtype: torch.dtype, affine: bool) -> None:
    conv, bn = _conv_bn(dtype, affine=affine, **conv_kwargs)
    conv.eval()
    bn.eval()
    x = torch.randn(2, 4, 9, 9, dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(ak.conv_bn2d(x, conv, bn), bn(conv(x)), **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_conv_bn_eval_with_grad_is_differentiable(dtype: torch.dtype) -> None:
    conv, bn = _conv_bn(dtype)
    bn.eval()
    x = torch.randn(2, 4, 7, 7, dtype=dtype, requires_grad=True)
    y = ak.conv_bn2d(x, conv, bn)
    g = torch.randn_like(y)
    params = [x, conv.weight, conv.bias, bn.weight, bn.bias]
    for a, b in zip(_grads(y, params, g), _grads(bn(conv(x)), params, g)):
        torch.testing.assert_close(a, b, **_tol(dtype))


def test_eval_without_running_stats_uses_batch_statistics() -> None:
    conv = nn.Conv2d(3, 5, 1)
    bn = nn.BatchNorm2d(5, track_running_stats=False).eval()
    x = torch.randn(4, 3, 5, 5)
    assert torch.equal(ak.conv_bn2d(x, conv, bn), bn(conv(x)))


def test_fold_bn_is_bit_identical_to_torch_helpers() -> None:
    conv, bn = _conv_bn()
    w, b = bn_module.fold_bn(conv.weight, conv.bias, bn)
    w_ref, b_ref = fuse_conv_bn_weights(
        conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias
    )
    assert torch.equal(w, w_ref) and torch.equal(b, b_ref)
    linear, bn1 = nn.Linear(5, 3), nn.BatchNorm1d(3)
    _randomise_bn(bn1)
    w, b = bn_module.fold_bn(linear.weight, linear.bias, bn1)
    w_ref, b_ref = fuse_linear_bn_weights(
        linear.weight, linear.bias, bn1.running_mean, bn1.running_var, bn1.eps, bn1.weight, bn1.bias
    )
    assert torch.equal(w, w_ref) and torch.equal(b, b_ref)


def _count_folds(monkeypatch: pytest.MonkeyPatch) -> List[int]:
    calls: List[int] = []
    real = bn_module.fold_bn

    def counting(*args: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(bn_module, "fold_bn", counting)
    return calls


def test_eval_cache_reused_and_invalidated(monkeypatch: pytest.MonkeyPatch) -> None:
    # float32 first: the last step checks that a dtype change (.double()) invalidates the cache.
    calls = _count_folds(monkeypatch)
    conv, bn = _conv_bn()
    model = nn.Sequential(conv, bn)
    x = torch.randn(2, 4, 6, 6)

    def check(expected_calls: int) -> None:
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(ak.conv_bn2d(x, conv, bn), bn(conv(x)), **_tol(x.dtype))
        assert len(calls) == expected_calls

    check(1)
    check(1)  # cached
    # optimizer step (foreach and plain) changes weights in place
    for opt_cls, kwargs in ((torch.optim.SGD, {"lr": 0.1}), (torch.optim.Adam, {"lr": 0.1, "foreach": True})):
        model.train()
        opt = opt_cls(model.parameters(), **kwargs)
        ak.conv_bn2d(x, conv, bn).square().mean().backward()  # also updates running stats
        opt.step()
        opt.zero_grad()
        check(len(calls) + 1)
    # load_state_dict copies in place
    other = nn.Sequential(*_conv_bn())
    model.load_state_dict(other.state_dict())
    check(len(calls) + 1)
    # a new Parameter object, and a dtype change
    conv.weight = nn.Parameter(torch.randn_like(conv.weight))
    check(len(calls) + 1)
    model.double()
    x = x.double()
    check(len(calls) + 1)


def test_eval_cache_sees_running_statistics_updated_with_frozen_weights() -> None:
    """A training forward with the weights frozen (BN recalibration, `swa_utils.update_bn`, a frozen backbone whose BN
    stays in training) changes only the running statistics, which the native kernel writes without bumping their
    version counters: the folded weights are folded again (the eval output was the stale fold's, off by ~0.7)."""
    conv, bn = _conv_bn()
    for p in (*conv.parameters(), *bn.parameters()):
        p.requires_grad_(False)
    x = torch.randn(2, 4, 6, 6)
    for _ in range(2):
        conv.eval(), bn.eval()
        with torch.no_grad():
            torch.testing.assert_close(ak.conv_bn2d(x, conv, bn), bn(conv(x)), **_tol(x.dtype))
        bn.train()
        bn(conv(x * 3 + 1))  # new running statistics


def test_grad_mode_with_trainable_params_never_uses_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_folds(monkeypatch)
    conv, bn = _conv_bn()
    bn.eval()
    x = torch.randn(1, 4, 5, 5)
    ak.conv_bn2d(x, conv, bn)
    ak.conv_bn2d(x, conv, bn)
    assert len(calls) == 2
    for p in (*conv.parameters(), *bn.parameters()):
        p.requires_grad_(False)
    ak.conv_bn2d(x, conv, bn)
    ak.conv_bn2d(x, conv, bn)
    assert len(calls) == 3


def test_weights_folded_under_inference_mode_are_not_reused_with_autograd() -> None:
    conv, bn = _conv_bn()
    bn.eval()
    for p in (*conv.parameters(), *bn.parameters()):
        p.requires_grad_(False)  # frozen backbone: folded weights are cached
    with torch.inference_mode():
        ak.conv_bn2d(torch.randn(1, 4, 5, 5), conv, bn)
    x = torch.randn(1, 4, 5, 5, requires_grad=True)
    ak.conv_bn2d(x, conv, bn).sum().backward()  # would fail on an inference tensor saved for backward
    (grad_ref,) = torch.autograd.grad(bn(conv(x)).sum(), x)
    torch.testing.assert_close(x.grad, grad_ref)


def test_hooks_and_unbatched_input_use_the_modules() -> None:
    conv, bn = _conv_bn()
    bn.eval()
    seen = []
    conv.register_forward_hook(lambda *args: seen.append("conv"))
    ak.conv_bn2d(torch.randn(1, 4, 5, 5), conv, bn)
    assert seen == ["conv"]
    conv2, bn2 = _conv_bn()
    bn2.eval()
    with pytest.raises(ValueError, match="4D"):
        ak.conv_bn2d(torch.randn(4, 5, 5), conv2, bn2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_bn1d_train_exact_and_eval_folded(dtype: torch.dtype, bias: bool) -> None:
    linear, bn = nn.Linear(5, 7, bias=bias, dtype=dtype), nn.BatchNorm1d(7, dtype=dtype)
    _randomise_bn(bn)
    linear2, bn2 = copy.deepcopy(linear), copy.deepcopy(bn)
    x = torch.randn(6, 5, dtype=dtype, requires_grad=True)
    y, y_ref = ak.linear_bn1d(x, linear, bn), bn2(linear2(x))
    assert torch.equal(y, y_ref)
    g = torch.randn_like(y)
    assert all(
        torch.equal(a, b)
        for a, b in zip(_grads(y, [x, linear.weight, bn.weight], g), _grads(y_ref, [x, linear2.weight, bn2.weight], g))
    )
    assert torch.equal(bn.running_mean, bn2.running_mean) and torch.equal(bn.running_var, bn2.running_var)
    bn.eval()
    bn2.eval()
    y = ak.linear_bn1d(x, linear, bn)
    y_ref = bn2(linear2(x))
    torch.testing.assert_close(y, y_ref, **_tol(dtype))
    for a, b in zip(_grads(y, [x, linear.weight, bn.bias], g), _grads(y_ref, [x, linear2.weight, bn2.bias], g)):
        torch.testing.assert_close(a, b, **_tol(dtype))


def test_linear_bn1d_3d_input_is_not_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_folds(monkeypatch)
    # (N, C, L) input: BatchNorm1d normalises dim 1 (= C = 7), the Linear maps the last dim (7 -> 7).
    linear, bn = nn.Linear(7, 7), nn.BatchNorm1d(7)
    _randomise_bn(bn)
    bn.eval()
    x = torch.randn(2, 7, 7)
    assert torch.equal(ak.linear_bn1d(x, linear, bn), bn(linear(x)))
    assert calls == []


def _make_sequential(cls: type) -> nn.Sequential:
    torch.manual_seed(0)
    model = cls(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, bias=False),
        nn.BatchNorm2d(4),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 8),
        nn.BatchNorm1d(8),
        nn.Linear(8, 2),
    )
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            _randomise_bn(m)
    return model


def test_fused_sequential_is_a_drop_in(float64: None) -> None:
    ref, fused = _make_sequential(nn.Sequential), _make_sequential(ak.FusedSequential)
    assert list(fused.state_dict()) == list(ref.state_dict())
    fused.load_state_dict(ref.state_dict(), strict=True)
    assert [type(m) for m in fused] == [type(m) for m in ref]
    assert isinstance(fused[1:3], ak.FusedSequential) and len(fused) == 9
    od = ak.FusedSequential(OrderedDict([("conv", nn.Conv2d(1, 2, 1)), ("bn", nn.BatchNorm2d(2))]))
    assert list(od.state_dict())[:2] == ["conv.weight", "conv.bias"] and od.bn is od[1]

    x = torch.randn(4, 3, 6, 6, requires_grad=True)
    g = torch.randn(4, 2)
    y, y_ref = fused(x), ref(x)  # training: exact
    assert torch.equal(y, y_ref)
    assert all(
        torch.equal(a, b)
        for a, b in zip(_grads(y, [x, *fused.parameters()], g), _grads(y_ref, [x, *ref.parameters()], g))
    )
    for (name, buf), (_, buf_ref) in zip(fused.named_buffers(), ref.named_buffers()):
        assert torch.equal(buf, buf_ref), name
    fused.eval()
    ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x), **_tol(torch.float64))


def test_fused_sequential_leaves_other_pairs_alone() -> None:
    model = ak.FusedSequential(nn.Linear(3, 3), nn.Tanh(), nn.BatchNorm1d(3), nn.Linear(3, 3))
    ref = nn.Sequential(*model)
    x = torch.randn(5, 3)
    assert torch.equal(model(x), ref(x))
