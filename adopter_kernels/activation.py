"""ADP006 runtime: ``activation(linear(input))`` with the bias add fused into the activation.

``linear_bias_activation(input, linear, activation, **kw)`` replaces ``activation(linear(input), **kw)``.
The Linear module is passed in (its parameters and state-dict keys stay where they are).

Reference path: exactly ``activation(linear(input), **kw)``.

Triton path (when forced): ``F.linear(input, W)`` without bias, then one fused kernel for
``act(. + bias)`` with its backward. It runs only for activations recognised *exactly*: erf GELU,
tanh GELU, ReLU and SiLU. Recognition never substitutes one GELU for the other (epoi's FusedBiasGELU
silently used the tanh form, 4.7e-4 off). Recognised forms:

* torch modules ``nn.GELU(approximate='none'|'tanh')``, ``nn.ReLU``, ``nn.SiLU`` (exact type, no hooks);
* functions ``F.gelu`` (``approximate=`` kwarg), ``F.relu``/``torch.relu``, ``F.silu``;
* Hugging Face activation modules, by class name *and* a behaviour probe (their output on a fixed
  float64 grid must match the kernel's formula), without importing transformers: ``GELUActivation``
  (``ACT2FN['gelu']``), ``NewGELUActivation``/``FastGELUActivation``/``AccurateGELUActivation``/
  ``PytorchGELUTanh``/``GELUTanh`` (tanh GELU), ``SiLUActivation``.

Everything else (Tanh, Sigmoid, QuickGELU, clipped GELU, user classes, extra kwargs) is computed by the
reference path. ``auto`` takes the reference path everywhere: the Triton path measured slower than torch's ops on an
H200 (docs/KERNEL_PERFORMANCE.md).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ._dispatch import TRITON, fx_tracing, is_plain, parametrized, reference_only, register_kernel, select

__all__ = ["linear_bias_activation", "classify_activation"]

Activation = Union[nn.Module, Callable[..., torch.Tensor]]
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

register_kernel("linear_bias_activation", TRITON, doc="ADP006 act(linear(x)); bias add fused into the activation")


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


# The formula each kind must reproduce in the behaviour probe (float64, so only the math is compared).
_FORMULAS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_tanh": _gelu_tanh,
    "relu": lambda x: x.clamp_min(0.0),
    "silu": lambda x: x * torch.sigmoid(x),
}

_GELU_APPROXIMATE: Dict[str, str] = {"none": "gelu", "tanh": "gelu_tanh"}
_TORCH_MODULES: Dict[type, str] = {nn.ReLU: "relu", nn.SiLU: "silu"}  # nn.GELU: by its `approximate`

_HF_CLASSES: Dict[str, str] = {
    "GELUActivation": "gelu",
    "NewGELUActivation": "gelu_tanh",
    "FastGELUActivation": "gelu_tanh",
    "AccurateGELUActivation": "gelu_tanh",
    "PytorchGELUTanh": "gelu_tanh",
    "GELUTanh": "gelu_tanh",
    "SiLUActivation": "silu",
}

# Function activations and the keyword arguments each may take without changing the math
# (``inplace`` only decides whether the linear output, a temporary, is overwritten).
_FUNCTIONS: Dict[Callable[..., torch.Tensor], Tuple[str, Tuple[str, ...]]] = {
    F.gelu: ("gelu", ("approximate",)),
    F.relu: ("relu", ("inplace",)),
    torch.relu: ("relu", ()),
    # in place on the linear's new output, which nothing else holds: the same tensor values as out of place
    F.relu_: ("relu", ()),
    torch.relu_: ("relu", ()),
    F.silu: ("silu", ("inplace",)),
}

_PROBE_CACHE: weakref.WeakKeyDictionary[nn.Module, Optional[str]] = weakref.WeakKeyDictionary()


def _probe(module: nn.Module, kind: str) -> Optional[str]:
    """``kind`` if ``module`` computes that formula on a fixed grid (float64, tight tolerance), else None."""
    x = torch.linspace(-8.0, 8.0, 257, dtype=torch.float64)
    try:
        with torch.no_grad():
            out = module(x)
    except Exception:  # a module that cannot run on a float64 CPU vector is not one we recognise
        return None
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return None
    return kind if torch.allclose(out, _FORMULAS[kind](x), rtol=1e-9, atol=1e-9) else None


def classify_activation(activation: Activation, **kwargs: Any) -> Optional[str]:
    """Kind (``'gelu'``, ``'gelu_tanh'``, ``'relu'``, ``'silu'``) the fused kernel computes exactly, or None."""
    if isinstance(activation, nn.Module):
        if kwargs or not is_plain(activation, type(activation)):
            return None
        if type(activation) is nn.GELU:
            return _GELU_APPROXIMATE.get(activation.approximate)
        if type(activation) in _TORCH_MODULES:
            return _TORCH_MODULES[type(activation)]
        kind = _HF_CLASSES.get(type(activation).__name__)
        if kind is None:
            return None
        if activation not in _PROBE_CACHE:
            _PROBE_CACHE[activation] = _probe(activation, kind)
        return _PROBE_CACHE[activation]
    try:
        entry = _FUNCTIONS.get(activation)
    except TypeError:  # unhashable callable
        return None
    if entry is None:
        return None
    kind, allowed = entry
    if any(k not in allowed for k in kwargs):
        return None
    if kind == "gelu":
        return _GELU_APPROXIMATE.get(kwargs.get("approximate", "none"))
    return kind


def linear_bias_activation(
    input: torch.Tensor, linear: nn.Linear, activation: Activation, **activation_kwargs: Any
) -> torch.Tensor:
    """``activation(linear(input), **activation_kwargs)``, bias add fused into the activation on CUDA."""
    if not isinstance(activation, nn.Module) and fx_tracing():
        # An fx graph cannot hold a function as an argument: trace the original ops (as the original code would).
        return activation(linear(input), **activation_kwargs)
    return _linear_bias_activation(input, linear, activation, **activation_kwargs)


def _linear_bias_activation(
    input: torch.Tensor, linear: nn.Linear, activation: Activation, **activation_kwargs: Any
) -> torch.Tensor:
    # The decisions first: where it is the original computation (auto everywhere), nothing else runs.
    # (getattr: a replaced layer, say a LoRA wrapper, may have no weight; is_plain then refuses it.)
    if (
        not reference_only("linear_bias_activation")
        and not parametrized(linear)  # no read of a weight computed on every read: the Linear reads it
        and select("linear_bias_activation", input, getattr(linear, "weight", None)) == "triton"
        and is_plain(linear, nn.Linear)
    ):
        kind = classify_activation(activation, **activation_kwargs)
        weight, bias = linear.weight, linear.bias
        if (
            kind is not None
            and input.dtype in _TRITON_DTYPES
            and weight.dtype == input.dtype
            and (bias is None or bias.dtype == input.dtype)
            and input.numel() > 0
        ):
            from .triton_kernels.bias_activation import bias_activation

            return bias_activation(F.linear(input, weight), bias, kind)
    return activation(linear(input), **activation_kwargs)


# An fx leaf (module activations only, see linear_bias_activation): tracing records one call, not the dispatch.
torch.fx.wrap("_linear_bias_activation")
