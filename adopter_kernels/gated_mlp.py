"""ADP012 runtime: the gate/up half of a gated MLP, ``act(gate(x)) * up(x)``, as one GEMM and one fused kernel.

``gated_linear_unit(x, gate, up, act, **kw)`` replaces ``act(gate(x), **kw) * up(x)`` (SwiGLU, GeGLU, ...). The two
Linear modules are passed in, so their parameters and state-dict keys stay where they are.

Reference path: exactly ``act(gate(x), **kw) * up(x)``.

Triton path (when forced): one ``F.linear`` over ``cat([W_gate, W_up])`` (biases concatenated, a missing one
counts as zeros, as in ADP009's ``packed_qkv_linear``), then one kernel computing ``act(g) * u`` on the packed
output (forward and backward). It runs only when both layers are plain ``nn.Linear`` of one dtype and device with
equal ``out_features`` and the activation is recognised exactly by ``classify_activation`` (erf GELU, tanh GELU,
ReLU, SiLU; never one GELU for the other). The packed weight is cached under ``no_grad`` (see ``_cache``).
Dispatch: kernel ``gated_linear_unit`` of ``_dispatch``: ``reference`` under ``auto`` (the Triton path measured
slower on an H200, docs/KERNEL_PERFORMANCE.md); ``triton`` when forced.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ._cache import cached, needs_grad
from ._dispatch import TRITON, fx_tracing, is_plain, parametrized, reference_only, register_kernel, select
from .activation import Activation, classify_activation

__all__ = ["gated_linear_unit"]

_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

register_kernel("gated_linear_unit", TRITON, doc="ADP012 act(gate(x)) * up(x); packed GEMM + fused act*mul kernel")


def _pack(gate: nn.Linear, up: nn.Linear) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    weight = torch.cat([gate.weight, up.weight])
    if gate.bias is None and up.bias is None:
        return weight, None
    biases: list[torch.Tensor] = [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in (gate, up)]
    return weight, torch.cat(biases)


def _fusable(x: torch.Tensor, gate: nn.Linear, up: nn.Linear) -> bool:
    params = [t for m in (gate, up) for t in (m.weight, m.bias) if t is not None]
    return (
        is_plain(gate, nn.Linear)
        and is_plain(up, nn.Linear)
        and gate.out_features == up.out_features
        and gate.in_features == up.in_features
        and x.dtype in _TRITON_DTYPES
        and all(t.dtype == x.dtype and t.device == x.device for t in params)
        and x.dim() >= 1
        and x.shape[-1] == gate.in_features
        and x.numel() > 0
    )


def gated_linear_unit(
    input: torch.Tensor, gate: nn.Linear, up: nn.Linear, activation: Activation, **activation_kwargs: Any
) -> torch.Tensor:
    """``activation(gate(input), **activation_kwargs) * up(input)``; one GEMM and a fused kernel on CUDA."""
    if not isinstance(activation, nn.Module) and fx_tracing():
        # An fx graph cannot hold a function as an argument: trace the original ops (as the original code would).
        return activation(gate(input), **activation_kwargs) * up(input)
    return _gated_linear_unit(input, gate, up, activation, **activation_kwargs)


def _gated_linear_unit(
    input: torch.Tensor, gate: nn.Linear, up: nn.Linear, activation: Activation, **activation_kwargs: Any
) -> torch.Tensor:
    if (
        not reference_only("gated_linear_unit")
        and not parametrized(gate, up)  # no read of a weight computed on every read: the Linears read it
        and select("gated_linear_unit", input, gate.weight) == "triton"
        and _fusable(input, gate, up)
    ):
        kind = classify_activation(activation, **activation_kwargs)
        if kind is not None:
            from .triton_kernels.gated_activation import gated_activation

            sources = (gate.weight, gate.bias, up.weight, up.bias)
            if needs_grad(sources):
                weight, bias = _pack(gate, up)
            else:
                weight, bias = cached(gate, sources, ("gated_linear_unit", id(up)), lambda: _pack(gate, up))
            return gated_activation(F.linear(input, weight, bias), kind)
    return activation(gate(input), **activation_kwargs) * up(input)


# An fx leaf (module activations only, see gated_linear_unit): tracing records one call, not the dispatch.
torch.fx.wrap("_gated_linear_unit")
