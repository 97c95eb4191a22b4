"""Layers whose weight ``torch.nn.utils.parametrize`` computes on every read (``spectral_norm``, ``weight_norm``,
``orthogonal``).

In training, each read of a ``spectral_norm`` weight runs one power iteration and updates the ``_u``/``_v``
buffers, so the number of reads is part of what the model computes. The original ``q(x)`` reads the weight once;
a kernel that read it to choose a backend, or to pack it, before calling the module would use another weight and
leave other buffers. Every kernel that takes layers calls them as the original code does when one is parametrized,
whatever backend is forced."""

from __future__ import annotations

import copy
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

import adopter_kernels
from adopter_kernels import use_backend
from adopter_kernels.equivalence import default_dtype, iter_leaves

Layers = dict[str, nn.Module]


def _qkv() -> Layers:
    return {"q": nn.Linear(8, 8), "k": nn.Linear(8, 8), "v": nn.Linear(8, 8)}


def _glu() -> Layers:
    return {"gate": nn.Linear(8, 16), "up": nn.Linear(8, 16)}


# kernel, the backend forced, its layers (the first one gets the parametrization), the input's shape, the original
# computation and the kernel's call
CASES: list[tuple[str, str, Callable[[], Layers], tuple[int, ...], Callable, Callable]] = [
    (
        "packed_qkv_linear", "packed", _qkv, (2, 5, 8),
        lambda x, m: (m["q"](x), m["k"](x), m["v"](x)),
        lambda x, m: adopter_kernels.packed_qkv_linear(x, m["q"], m["k"], m["v"]),
    ),
    (
        "gated_linear_unit", "triton", _glu, (2, 5, 8),
        lambda x, m: F.silu(m["gate"](x)) * m["up"](x),
        lambda x, m: adopter_kernels.gated_linear_unit(x, m["gate"], m["up"], F.silu),
    ),
    (
        "linear_bias_activation", "triton", lambda: {"linear": nn.Linear(8, 16)}, (2, 5, 8),
        lambda x, m: F.gelu(m["linear"](x)),
        lambda x, m: adopter_kernels.linear_bias_activation(x, m["linear"], F.gelu),
    ),
    (
        "conv_bn2d", "folded", lambda: {"conv": nn.Conv2d(3, 4, 3), "bn": nn.BatchNorm2d(4)}, (2, 3, 6, 6),
        lambda x, m: m["bn"](m["conv"](x)),
        lambda x, m: adopter_kernels.conv_bn2d(x, m["conv"], m["bn"]),
    ),
    (
        "dropout_add_layer_norm", "triton", lambda: {"norm": nn.LayerNorm(8), "drop": nn.Dropout(0.0)}, (2, 5, 8),
        lambda x, m: m["norm"](m["drop"](x) + 1.0),
        lambda x, m: adopter_kernels.dropout_add_layer_norm_module(x, torch.ones_like(x), m["norm"], m["drop"]),
    ),
    (
        "linear_bn1d", "folded", lambda: {"linear": nn.Linear(8, 4), "bn": nn.BatchNorm1d(4)}, (6, 8),
        lambda x, m: m["bn"](m["linear"](x)),
        lambda x, m: adopter_kernels.linear_bn1d(x, m["linear"], m["bn"]),
    ),
]


def _leaves(out: object) -> list[torch.Tensor]:
    return [t for _, t in iter_leaves(out, "out") if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("parametrization", [spectral_norm, weight_norm], ids=["spectral_norm", "weight_norm"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_parametrized_weight_is_read_as_often_as_the_original_reads_it(
    case: tuple, training: bool, parametrization: Callable[[nn.Module], nn.Module]
) -> None:
    kernel, backend, build, shape, original, rewritten = case
    with default_dtype(torch.float64):
        torch.manual_seed(0)
        layers = build()
        parametrization(next(iter(layers.values())))
        for layer in layers.values():
            layer.train(training)
        copies = copy.deepcopy(layers)
        x = torch.randn(*shape, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    expected = _leaves(original(x, layers))
    with use_backend(f"{kernel}={backend}"):
        got = _leaves(rewritten(y, copies))
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    torch.autograd.backward(expected, [torch.ones_like(t) for t in expected])
    torch.autograd.backward(got, [torch.ones_like(t) for t in got])
    torch.testing.assert_close(y.grad, x.grad, rtol=1e-12, atol=1e-12)
    for name, layer in layers.items():
        # the power iteration's buffers (`parametrizations.weight.0._u`, `_v`), BatchNorm's statistics
        theirs = dict(copies[name].named_buffers())
        for key, buffer in layer.named_buffers():
            torch.testing.assert_close(theirs[key], buffer, rtol=1e-12, atol=1e-12, msg=f"{name}.{key}")
        grads = {k: p.grad for k, p in copies[name].named_parameters()}
        for key, param in layer.named_parameters():
            torch.testing.assert_close(grads[key], param.grad, rtol=1e-12, atol=1e-12, msg=f"{name}.{key}.grad")
