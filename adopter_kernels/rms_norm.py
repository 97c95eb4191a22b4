"""ADP011 runtime: a hand-written RMSNorm class with its forward replaced by one fused RMSNorm.

``rms_norm_module(cls, cast, weight, eps)`` returns a cached subclass of ``cls`` (same constructor, parameters and
state-dict keys) whose forward is ``rms_norm(x, self.<weight>, self.<eps>, cast)``. The codemod only emits it for a
class whose forward it proved to be exactly the RMSNorm of ``cast``:

* ``"llama"`` (LlamaRMSNorm, Mistral, Qwen2, ...): upcast to float32, ``x * rsqrt(mean(x^2) + eps)``, cast back to
  the input dtype, then ``weight * x``;
* ``"t5"`` (T5LayerNorm, Pix2Struct, Idefics, ...): mean of squares in float32, ``x * rsqrt(...)`` in the promoted
  dtype, cast to the weight's dtype only when that is float16/bfloat16, then ``weight * x``;
* ``"gemma"`` (GemmaRMSNorm): ``x.float()`` normalised, times ``(1.0 + weight.float())``, cast back to ``x``'s type;
* ``"olmo2"`` (Olmo2RMSNorm, OLMo3, GPT-OSS, DeepSeek-V4, ...): upcast to float32, normalised, ``weight * x`` in the
  promoted dtype, then cast back to the input dtype (the weight multiplies before the cast, LLaMA's after it);
* ``"helium"`` (HeliumRMSNorm, NemotronH): as ``"olmo2"``, with ``weight.to(torch.float32)``: the product is float32
  whatever the weight's dtype (a float64 weight makes OLMo2's product float64).

Reference path: exactly those expressions, in that casting order (the oracle in tests). Triton path (see
Dispatch): a row kernel computing in float32 and, in training, a backward kernel giving the grads of ``x`` and the
weight (``triton_kernels.rms_norm``), when the input is float16/bfloat16/float32 and the weight has the input's dtype
(then the five casting orders reduce to the two the kernels implement: the weight after the rounding, LLaMA and T5,
or before it, offset by 1 for Gemma and by 0 for OLMo2 and Helium) and a row has at most ``MAX_N`` (16384)
elements. Dispatch: kernel ``rms_norm`` of ``_dispatch``: ``triton`` for CUDA inference, where it measured faster;
``reference`` in training (no faster on an H200) and on CPU; forcing ``triton`` takes the kernels in training too.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Callable, Dict, Optional, Union

import torch
from torch import nn

from ._dispatch import TRITON, register_kernel, select
from ._pickling import reduce_through

__all__ = ["rms_norm", "rms_norm_module", "RMS_NORM_CASTS"]

RMS_NORM_CASTS = ("llama", "t5", "gemma", "olmo2", "helium")
# The Triton kernel's weight offset per casting order: None where the weight multiplies the rounded normalised value.
_WEIGHT_OFFSETS: Dict[str, Optional[float]] = {"llama": None, "t5": None, "gemma": 1.0, "olmo2": 0.0, "helium": 0.0}
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
Eps = Union[float, torch.Tensor]

# H200 (docs/KERNEL_PERFORMANCE.md): the forward kernel measured 1.5-2.1x faster than the eager RMSNorm in inference;
# a training step (forward + backward kernel) measured the same as the original, so the original runs there.
TRITON_INFERENCE = dataclasses.replace(
    TRITON,
    where="CUDA inference (no autocast): 1.5-2.1x the eager RMSNorm on an H200; training measured no faster, so the "
    "original runs there",
    faster=lambda call: call.device == "cuda" and not call.grad,
)
register_kernel(
    "rms_norm", TRITON_INFERENCE,
    doc="ADP011 RMSNorm (llama/t5/gemma/olmo2/helium casting orders); Triton forward + backward",
)


def _llama(x: torch.Tensor, weight: torch.Tensor, eps: Eps) -> torch.Tensor:
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def _t5(x: torch.Tensor, weight: torch.Tensor, eps: Eps) -> torch.Tensor:
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(variance + eps)
    if weight.dtype in [torch.float16, torch.bfloat16]:
        h = h.to(weight.dtype)
    return weight * h


def _gemma(x: torch.Tensor, weight: torch.Tensor, eps: Eps) -> torch.Tensor:
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out = out * (1.0 + weight.float())
    return out.type_as(x)


def _olmo2(x: torch.Tensor, weight: torch.Tensor, eps: Eps) -> torch.Tensor:
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return (weight * h).to(input_dtype)


def _helium(x: torch.Tensor, weight: torch.Tensor, eps: Eps) -> torch.Tensor:
    return _olmo2(x, weight.to(torch.float32), eps)  # the cast is the only difference, and it comes first


_REFERENCE: Dict[str, Callable[[torch.Tensor, torch.Tensor, Eps], torch.Tensor]] = {
    "llama": _llama,
    "t5": _t5,
    "gemma": _gemma,
    "olmo2": _olmo2,
    "helium": _helium,
}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: Eps, cast: str = "llama") -> torch.Tensor:
    """RMSNorm over the last dim with the casting order ``cast`` (one of ``RMS_NORM_CASTS``)."""
    reference = _REFERENCE[cast]
    if (
        select("rms_norm", x, weight) == "triton"  # the cached decision first: cheapest
        and isinstance(eps, (int, float))
        and x.dtype in _TRITON_DTYPES
        and weight.dtype == x.dtype
        and weight.dim() == 1
        and x.dim() >= 1
        and weight.shape[0] == x.shape[-1]
        and x.numel() > 0
    ):
        from .triton_kernels.rms_norm import MAX_N
        from .triton_kernels.rms_norm import rms_norm as fused

        if x.shape[-1] <= MAX_N:
            return fused(x, weight, float(eps), _WEIGHT_OFFSETS[cast])
    return reference(x, weight, eps)


def _fused_forward(self: nn.Module, input: torch.Tensor) -> torch.Tensor:
    """The subclass forward; its code object is copied with the original forward's parameter name (see below)."""
    weight, eps, cast = type(self)._adopter_rms_norm  # type: ignore[attr-defined]
    return rms_norm(input, getattr(self, weight), getattr(self, eps), cast)


def _forward_taking(name: str) -> Callable[..., torch.Tensor]:
    """``_fused_forward`` with its input parameter called ``name``, the original's: callers passing it by keyword
    keep working, and ``torch.fx`` (which reads a root's parameters from its code object) and ``inspect.signature``
    see the original's signature. Its locals other than the two parameters are renamed out of the way first."""
    code = _fused_forward.__code__
    others = [local for local in code.co_varnames if local not in ("self", "input")]
    taken = {"self", name}
    renamed = {local: local if local not in taken else f"_{local}_" for local in others}
    code = code.replace(co_varnames=("self", name, *renamed.values()))
    forward = types.FunctionType(code, _fused_forward.__globals__, "forward")
    forward.__annotations__ = {name: torch.Tensor, "return": torch.Tensor}
    return forward


@functools.lru_cache(maxsize=None)
def rms_norm_module(cls: type, cast: str, weight: str = "weight", eps: str = "variance_epsilon") -> type:
    """ADP011: cached subclass of ``cls`` whose forward is the fused ``rms_norm`` of ``self.<weight>``/``self.<eps>``."""
    if cast not in RMS_NORM_CASTS:
        raise ValueError(f"cast must be one of {RMS_NORM_CASTS}, got {cast!r}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"rms_norm_module expects an nn.Module class, got {cls!r}")
    params = list(inspect.signature(cls.forward).parameters)
    forward = _forward_taking(params[1] if len(params) == 2 and params[1].isidentifier() else "input")
    name = "Fused" + cls.__name__
    doc = f"{cls.__name__} with a fused RMSNorm forward ({cast} casting order, ADP011); see {__name__}."
    reduce = reduce_through(rms_norm_module, (cls, cast, weight, eps))  # pickle cannot find this class by name
    forward.__qualname__ = f"{name}.forward"
    namespace = {"forward": forward, "_adopter_rms_norm": (weight, eps, cast), "__reduce_ex__": reduce,
                 "__module__": __name__, "__qualname__": name, "__doc__": doc}
    return type(name, (cls,), namespace)


# An fx leaf where the subclass forward above calls it (adopter_kernels/__init__.py wraps the public name).
torch.fx.wrap("rms_norm")
