"""ADP006: linear_bias_activation == activation(linear(x)); activation recognition is exact."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import adopter_kernels as ak


class GELUActivation(nn.Module):  # same name as Hugging Face's, different behaviour: must not be fused
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class NewGELUActivation(nn.Module):  # same name and math as Hugging Face's
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


CASES = [
    (nn.GELU(), {}, "gelu"),
    (nn.GELU(approximate="tanh"), {}, "gelu_tanh"),
    (nn.ReLU(), {}, "relu"),
    (nn.ReLU(inplace=True), {}, "relu"),
    (nn.SiLU(), {}, "silu"),
    (nn.Tanh(), {}, None),
    (nn.Sigmoid(), {}, None),
    (F.gelu, {}, "gelu"),
    (F.gelu, {"approximate": "none"}, "gelu"),
    (F.gelu, {"approximate": "tanh"}, "gelu_tanh"),
    (F.relu, {}, "relu"),
    (F.relu, {"inplace": True}, "relu"),
    (torch.relu, {}, "relu"),
    (F.silu, {}, "silu"),
    (torch.tanh, {}, None),
    (torch.sigmoid, {}, None),
    (F.leaky_relu, {"negative_slope": 0.2}, None),
    (GELUActivation(), {}, None),
    (NewGELUActivation(), {}, "gelu_tanh"),
    (lambda t: t * 2, {}, None),
]


@pytest.mark.parametrize("activation,kwargs,kind", CASES)
def test_classification(activation: Callable[..., torch.Tensor], kwargs: Dict[str, Any], kind: Optional[str]) -> None:
    assert ak.classify_activation(activation, **kwargs) == kind


def test_hooked_or_kwarg_modules_are_not_recognised() -> None:
    gelu = nn.GELU()
    handle = gelu.register_forward_hook(lambda *args: None)
    assert ak.classify_activation(gelu) is None
    handle.remove()
    assert ak.classify_activation(gelu) == "gelu"
    assert ak.classify_activation(F.gelu, approximate="tanh", extra=1) is None


def test_hugging_face_activations_by_name_and_behaviour() -> None:
    activations = pytest.importorskip("transformers.activations")
    expected = {
        "gelu": "gelu",
        "gelu_python": "gelu",  # GELUActivation(use_gelu_python=True): erf formula in Python
        "gelu_new": "gelu_tanh",
        "gelu_fast": "gelu_tanh",
        "gelu_accurate": "gelu_tanh",
        "gelu_pytorch_tanh": "gelu_tanh",
        "silu": "silu",
        "swish": "silu",
        "relu": "relu",
        "quick_gelu": None,
        "gelu_10": None,
        "mish": None,
        "linear": None,
        "relu2": None,
        "sigmoid": None,
        "tanh": None,
    }
    for name, kind in expected.items():
        if name in activations.ACT2CLS:
            assert ak.classify_activation(activations.ACT2FN[name]) == kind, name


@pytest.mark.parametrize("activation,kwargs,kind", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_reference_path_is_the_composition(
    activation: Callable[..., torch.Tensor], kwargs: Dict[str, Any], kind: Optional[str], dtype: torch.dtype, bias: bool
) -> None:
    linear = nn.Linear(6, 5, bias=bias, dtype=dtype)
    x = torch.randn(2, 3, 6, dtype=dtype, requires_grad=True)
    y = ak.linear_bias_activation(x, linear, activation, **kwargs)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, *linear.parameters()], g)
    y_ref = activation(linear(x), **kwargs)
    grads_ref = torch.autograd.grad(y_ref, [x, *linear.parameters()], g)
    assert torch.equal(y, y_ref)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_ref))


def test_linear_module_is_called_so_its_hooks_run() -> None:
    linear = nn.Linear(4, 4)
    calls = []
    linear.register_forward_hook(lambda *args: calls.append(1))
    ak.linear_bias_activation(torch.randn(2, 4), linear, nn.GELU())
    assert calls == [1]
