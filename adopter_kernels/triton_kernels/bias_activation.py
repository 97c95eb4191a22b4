"""Triton fused bias add + activation (forward and backward), the epilogue of a bias-free ``F.linear``.

Elementwise over the flat tensor; the bias index is ``offset % n``. Activations (``ACT`` codes):
exact erf GELU, tanh-approximated GELU, ReLU and SiLU, each with its analytic derivative. The backward
recomputes ``z = x + bias`` from the saved pre-activation instead of storing the output twice.
tanh is written through the sigmoid (``tanh(u) = 2*sigmoid(2u) - 1``), which is available in every
Triton version and in the interpreter.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

# Activation kinds (the names adopter_kernels.activation classifies into) -> kernel ``ACT`` codes.
# Constants are literals inside the kernels: the interpreter mishandles tl.constexpr globals in arithmetic.
ACTIVATIONS = {"gelu": 0, "gelu_tanh": 1, "relu": 2, "silu": 3}

_BLOCK = 1024


@triton.jit
def _tanh(u):
    return 2.0 * tl.sigmoid(2.0 * u) - 1.0


@triton.jit
def _load_z(X, B, offs, mask, n, HAS_BIAS: tl.constexpr):
    z = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        z += tl.load(B + offs % n, mask=mask, other=0.0).to(tl.float32)
    return z


@triton.jit
def _bias_act_fwd(X, B, Y, numel, n, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    z = _load_z(X, B, offs, mask, n, HAS_BIAS)
    if ACT == 0:  # erf GELU
        y = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    elif ACT == 1:  # tanh GELU; 0.79788... = sqrt(2/pi)
        y = 0.5 * z * (1.0 + _tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)))
    elif ACT == 2:  # ReLU
        y = tl.maximum(z, 0.0)
    else:  # SiLU
        y = z * tl.sigmoid(z)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _bias_act_bwd(X, B, DY, DZ, numel, n, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    z = _load_z(X, B, offs, mask, n, HAS_BIAS)
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    if ACT == 0:  # erf GELU
        d = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    elif ACT == 1:  # tanh GELU; 0.79788... = sqrt(2/pi)
        t = _tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))
        d = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * z * z)
    elif ACT == 2:  # ReLU
        d = tl.where(z > 0.0, 1.0, 0.0)
    else:  # SiLU
        s = tl.sigmoid(z)
        d = s * (1.0 + z * (1.0 - s))
    tl.store(DZ + offs, (dy * d).to(DZ.dtype.element_ty), mask=mask)


class _BiasActivation(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: torch.Tensor, bias: Optional[torch.Tensor], act: int
    ) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.shape[-1]
        grid = (triton.cdiv(x.numel(), _BLOCK),)
        _bias_act_fwd[grid](
            x, x if bias is None else bias, y, x.numel(), n, ACT=act, HAS_BIAS=bias is not None, BLOCK=_BLOCK
        )
        ctx.save_for_backward(x, bias)
        ctx.act = act
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        x, bias = ctx.saved_tensors
        dz = torch.empty_like(x)
        n = x.shape[-1]
        grid = (triton.cdiv(x.numel(), _BLOCK),)
        _bias_act_bwd[grid](
            x, x if bias is None else bias, dy.contiguous(), dz, x.numel(), n,
            ACT=ctx.act, HAS_BIAS=bias is not None, BLOCK=_BLOCK,
        )
        grad_bias = dz.reshape(-1, n).sum(0) if bias is not None and ctx.needs_input_grad[1] else None
        return dz, grad_bias, None


def bias_activation(x: torch.Tensor, bias: Optional[torch.Tensor], kind: str) -> torch.Tensor:
    """``kind(x + bias)`` for a contiguous ``x`` whose last dim is ``bias``'s length (same dtype).

    ``kind`` is a key of ``ACTIVATIONS``.
    """
    return _BiasActivation.apply(x, bias, ACTIVATIONS[kind])
