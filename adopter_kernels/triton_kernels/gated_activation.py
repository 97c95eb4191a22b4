"""Triton ``act(g) * u`` over a packed ``[..., 2n]`` tensor ``[g | u]`` (forward and backward).

Elementwise over the ``n`` output columns of each row; the gate and up halves are read from the same packed row
(the output of one GEMM over ``[W_gate; W_up]``), so nothing is split or copied. Activations (``ACT`` codes, the
kinds of ``adopter_kernels.activation``) with their analytic derivatives: exact erf GELU, tanh GELU, ReLU, SiLU.
Computed in float32, rounded once to the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .bias_activation import ACTIVATIONS, _tanh

_BLOCK = 1024


@triton.jit
def _act(z, ACT: tl.constexpr):
    if ACT == 0:  # erf GELU
        y = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    elif ACT == 1:  # tanh GELU; 0.79788... = sqrt(2/pi)
        y = 0.5 * z * (1.0 + _tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)))
    elif ACT == 2:  # ReLU
        y = tl.maximum(z, 0.0)
    else:  # SiLU
        y = z * tl.sigmoid(z)
    return y


@triton.jit
def _act_grad(z, ACT: tl.constexpr):
    if ACT == 0:
        d = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    elif ACT == 1:
        t = _tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))
        d = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * z * z)
    elif ACT == 2:
        d = tl.where(z > 0.0, 1.0, 0.0)
    else:
        s = tl.sigmoid(z)
        d = s * (1.0 + z * (1.0 - s))
    return d


@triton.jit
def _gated_fwd(P, Y, numel, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    g_offs = (offs // n) * (2 * n) + offs % n
    g = tl.load(P + g_offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(P + g_offs + n, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, (_act(g, ACT) * u).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _gated_bwd(P, DY, DP, numel, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    g_offs = (offs // n) * (2 * n) + offs % n
    g = tl.load(P + g_offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(P + g_offs + n, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(DP + g_offs, (dy * u * _act_grad(g, ACT)).to(DP.dtype.element_ty), mask=mask)
    tl.store(DP + g_offs + n, (dy * _act(g, ACT)).to(DP.dtype.element_ty), mask=mask)


class _GatedActivation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, packed: torch.Tensor, act: int) -> torch.Tensor:  # type: ignore[override]
        packed = packed.contiguous()
        n = packed.shape[-1] // 2
        y = packed.new_empty(packed.shape[:-1] + (n,))
        _gated_fwd[(triton.cdiv(y.numel(), _BLOCK),)](packed, y, y.numel(), n, ACT=act, BLOCK=_BLOCK)
        ctx.save_for_backward(packed)
        ctx.act = act
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        (packed,) = ctx.saved_tensors
        n = packed.shape[-1] // 2
        dp = torch.empty_like(packed)
        numel = dy.numel()
        _gated_bwd[(triton.cdiv(numel, _BLOCK),)](packed, dy.contiguous(), dp, numel, n, ACT=ctx.act, BLOCK=_BLOCK)
        return dp, None


def gated_activation(packed: torch.Tensor, kind: str) -> torch.Tensor:
    """``act(packed[..., :n]) * packed[..., n:]`` for ``packed`` of last dim ``2n``; ``kind`` a key of ACTIVATIONS."""
    return _GatedActivation.apply(packed, ACTIVATIONS[kind])
