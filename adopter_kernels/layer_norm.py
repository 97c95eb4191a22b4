"""ADP005 runtime: fused dropout + residual add + LayerNorm.

``FusedDropoutAddLayerNorm`` *is* an ``nn.LayerNorm`` (same constructor plus a keyword-only ``dropout``,
same ``weight``/``bias`` parameters and state-dict keys), so the codemod can give it the LayerNorm's
attribute name and pretrained checkpoints load unchanged. Its ``forward(input, residual)`` replaces the
three statements ``x = dropout(a); b = x + r; c = layer_norm(b)``.

Reference path: literally ``F.layer_norm(F.dropout(input, p, training) + residual, ...)``; this consumes
the RNG exactly as ``nn.Dropout`` then add then ``nn.LayerNorm``, so training outputs are bit-identical
to the original model under the same seed. Dropout follows ``self.training`` at every call (epoi's
version froze it at construction).

Pre-LN blocks keep the sum as their residual stream (``x = x + drop(a); h = ln(x)``, ``x`` read again later):
``dropout_add_layer_norm_residual(a, x, ln, drop)`` returns both ``(ln(x), x)``; its reference path calls the
model's own Dropout (or ``F.dropout``) and LayerNorm modules, so it is the original computation. Post-LN blocks
that drop out with ``F.dropout`` (the BART family: the probability is a forward-time attribute, not an ``__init__``
Dropout a fused module could take over) call ``dropout_add_layer_norm_module(a, r, ln, p=..., training=...)``,
``ln(F.dropout(a, p, training) + r)`` with the model's LayerNorm module.

Triton path (when forced): one fused kernel for the forward and one for the backward (see
``triton_kernels.layer_norm``). Its dropout mask comes from Triton's Philox stream, so with ``p > 0`` in
training it is statistically, not bitwise, equal to torch's. It needs ``input`` and ``residual`` of the
same shape and dtype (no broadcasting), contiguous, float16/bfloat16/float32, weight/bias in that dtype,
and a normalised size up to ``MAX_N``; anything else takes the reference path. ``auto`` takes the reference path
everywhere: the Triton path measured slower than torch's ops on an H200 (docs/KERNEL_PERFORMANCE.md). Its backward
reads ``input`` and ``residual`` again (the original keeps its own sum): changing either in place after the call,
before backward, makes autograd raise on the forced Triton path only.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ._dispatch import TRITON, is_plain, reference_only, register_kernel, select

__all__ = [
    "FusedDropoutAddLayerNorm", "dropout_add_layer_norm", "dropout_add_layer_norm_module",
    "dropout_add_layer_norm_residual",
]

_ShapeLike = Union[int, Sequence[int], torch.Size]
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

register_kernel("dropout_add_layer_norm", TRITON, doc="ADP005 layer_norm(dropout(x) + residual); one Triton kernel")


def _triton_eligible(
    input: torch.Tensor,
    residual: torch.Tensor,
    shape: List[int],
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
) -> bool:
    from .triton_kernels.layer_norm import MAX_N

    n = math.prod(shape)
    return (
        input.dtype in _TRITON_DTYPES
        and residual.shape == input.shape
        and residual.dtype == input.dtype
        and input.dim() >= len(shape)
        and list(input.shape[input.dim() - len(shape):]) == shape
        and 0 < n <= MAX_N
        and input.numel() > 0
        and input.is_contiguous()
        and residual.is_contiguous()
        and all(t is None or (t.dtype == input.dtype and t.numel() == n) for t in (weight, bias))
    )


def dropout_add_layer_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape: _ShapeLike,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
    p: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """``F.layer_norm(F.dropout(input, p, training) + residual, normalized_shape, weight, bias, eps)``."""
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    if not reference_only("dropout_add_layer_norm") and (
        select("dropout_add_layer_norm", *[t for t in (input, residual, weight, bias) if t is not None]) == "triton"
        and _triton_eligible(input, residual, shape, weight, bias)
    ):
        if not 0.0 <= p <= 1.0:  # same check and message as F.dropout
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        from .triton_kernels.layer_norm import dropout_add_layer_norm as fused

        n = math.prod(shape)
        out = fused(
            input.view(-1, n),
            residual.view(-1, n),
            None if weight is None else weight.reshape(n),
            None if bias is None else bias.reshape(n),
            eps,
            p if training else 0.0,
        )
        return out.view(input.shape)
    return F.layer_norm(F.dropout(input, p, training) + residual, shape, weight, bias, eps)


def dropout_add_layer_norm_module(
    input: torch.Tensor,
    residual: torch.Tensor,
    norm: nn.LayerNorm,
    dropout: Optional[nn.Dropout] = None,
    *,
    p: float = 0.5,
    training: bool = True,
) -> torch.Tensor:
    """``norm(dropout(input) + residual)`` (``F.dropout(input, p, training)`` when no ``dropout`` module is given;
    ``p`` and ``training`` default as in ``F.dropout``): a post-LN block's residual add and LayerNorm, written with
    the functional dropout (BART's ``nn.functional.dropout(h, p=self.dropout, training=self.training)``), so the
    dropout probability is read where the call runs, not fixed in ``__init__``."""
    fast = _module_kernel_arguments(input, residual, norm, dropout, p, training)
    if fast is not None:
        from .triton_kernels.layer_norm import dropout_add_layer_norm as fused

        return fused(*fast).view(input.shape)
    dropped = dropout(input) if dropout is not None else F.dropout(input, p, training)
    return norm(dropped + residual)


def dropout_add_layer_norm_residual(
    input: torch.Tensor,
    residual: torch.Tensor,
    norm: nn.LayerNorm,
    dropout: Optional[nn.Dropout] = None,
    *,
    p: float = 0.5,
    training: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(norm(h), h)`` with ``h = dropout(input) + residual`` (``F.dropout(input, p, training)`` when no ``dropout``
    module is given; ``p`` and ``training`` default as in ``F.dropout``): a pre-LN block's residual add and the next
    LayerNorm, the sum returned too because the block adds to it again."""
    fast = _module_kernel_arguments(input, residual, norm, dropout, p, training)
    if fast is not None:
        from .triton_kernels.layer_norm import dropout_add_layer_norm_residual as fused

        out, summed = fused(*fast)
        return out.view(input.shape), summed.view(input.shape)
    dropped = dropout(input) if dropout is not None else F.dropout(input, p, training)
    summed = dropped + residual
    return norm(summed), summed


_KernelArguments = Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor], float, float]


def _module_kernel_arguments(
    input: torch.Tensor,
    residual: torch.Tensor,
    norm: nn.LayerNorm,
    dropout: Optional[nn.Dropout],
    p: float,
    training: bool,
) -> Optional[_KernelArguments]:
    """The Triton kernel's arguments (rows of ``input`` and ``residual``, flat weight and bias, eps, the dropout
    probability in effect) when dispatch picks it and the call fits it, else None: plain ``nn.LayerNorm``/
    ``nn.Dropout`` modules (nothing they compute with overridden, no hooks: the kernel does not call them; ADP005
    passes modules of any type where the model's code only makes them possible), fitting tensors."""
    if reference_only("dropout_add_layer_norm") or not is_plain(norm, nn.LayerNorm):
        return None
    if dropout is not None:
        if not is_plain(dropout, nn.Dropout) or dropout.inplace:
            return None
        p, training = dropout.p, dropout.training
    weight, bias = norm.weight, norm.bias
    tensors = [t for t in (input, residual, weight, bias) if t is not None]
    if select("dropout_add_layer_norm", *tensors) != "triton":
        return None
    shape = list(norm.normalized_shape)
    if not (_triton_eligible(input, residual, shape, weight, bias) and 0.0 <= p <= 1.0):
        return None
    n = math.prod(shape)
    return (
        input.view(-1, n),
        residual.view(-1, n),
        None if weight is None else weight.reshape(n),
        None if bias is None else bias.reshape(n),
        norm.eps,
        p if training else 0.0,
    )


def _fused_forward(module: "FusedDropoutAddLayerNorm", input: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    drop = module.dropout  # its p and mode as they are now: code may have changed them (`m.p = 0`, `m.eval()`)
    return dropout_add_layer_norm(
        input, residual, module.normalized_shape, module.weight, module.bias, module.eps, drop.p, drop.training
    )


# An fx leaf taking the module: a traced graph reads ``module.training`` when it runs, as nn.Dropout would.
torch.fx.wrap("_fused_forward")


class FusedDropoutAddLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose forward is ``layer_norm(dropout(input) + residual)``.

    Drop-in for ``nn.Dropout(p)`` + add + ``nn.LayerNorm(...)``: the LayerNorm's arguments are unchanged
    and ``dropout=p`` carries the Dropout's probability. The dropout is a child ``nn.Dropout(p)`` (no state: the
    state-dict keys are the LayerNorm's), read at every call, so code that reaches the model's Dropout modules
    through the module tree still controls it (TRL's ``disable_dropout_in_model`` setting ``p = 0``, a Dropout
    switched to eval alone); its path is ``<layer norm>.dropout`` instead of the removed attribute's.
    """

    def __init__(
        self,
        normalized_shape: _ShapeLike,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        *,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device=device, dtype=dtype)
        self.dropout = nn.Dropout(dropout)  # raises nn.Dropout's own error for a probability outside [0, 1]

    def forward(self, input: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:  # type: ignore[override]
        if residual is None:
            # The attribute's other uses (`self.LayerNorm(x)`, elsewhere in the class or the model) stay LayerNorm:
            # this is nn.LayerNorm.forward, spelled out because TorchScript cannot call super().
            return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)
        if torch.jit.is_scripting():  # a scripted model runs the reference computation
            return F.layer_norm(
                self.dropout(input) + residual, self.normalized_shape, self.weight, self.bias, self.eps,
            )
        return _fused_forward(self, input, residual)
