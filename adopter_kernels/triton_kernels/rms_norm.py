"""Triton RMSNorm over the last dim (forward and backward).

Forward: one program per row, the whole row held in registers (hidden sizes of LLMs: a few thousand columns).
Accumulation in float32. With the weight in the input's dtype, LLaMA's and T5's casting orders are both
``y = w * round(x * rstd)`` with ``rstd = rsqrt(mean(x^2) + eps)`` (the normalised value rounded to the input dtype
before the weight multiply); with a weight offset ``o`` the weight multiplies in float32 and the product is rounded
once, ``y = round(x * rstd * (o + w))``: Gemma's order (``o = 1``) and OLMo2's (``o = 0``). When autograd records
the call the forward also writes the per-row ``rstd`` (float32) for the backward; inference writes only ``y``.

Backward: a persistent kernel (a few programs per SM), each walking a contiguous chunk of rows. Per row it
recomputes ``n = x * rstd`` and, with ``g = dy * w`` (``dy * (o + w)`` with an offset), writes
``dx = rstd * (g - n * mean(g * n))``; it accumulates the weight's grad in registers, ``dy * round(n)``
(``dy * n`` with an offset, the rounding coming after the weight), and the per-program partial sums are added with
one ``torch.sum``. Rounding counts as the identity in the derivative, as autograd takes a dtype cast.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ._launch import num_programs, row_block, warps_for

# A row is held in registers (the backward keeps several row-wide values): wider rows take the reference path, as
# in the LayerNorm kernel.
MAX_N = 16384


@triton.jit
def _rms_norm_fwd(
    X, W, Y, Rstd, n_cols, eps,
    BLOCK: tl.constexpr, LATE_ROUND: tl.constexpr, OFFSET: tl.constexpr, STORE_RSTD: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / n_cols + eps)
    n = x * rstd
    if LATE_ROUND:
        y = n * (OFFSET + w)
    else:
        y = w * n.to(Y.dtype.element_ty).to(tl.float32)
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)
    if STORE_RSTD:
        tl.store(Rstd + row, rstd)


@triton.jit
def _rms_norm_bwd(
    X, W, DY, Rstd, DX, DW, n_rows, n_cols, rows_per_program,
    BLOCK: tl.constexpr, LATE_ROUND: tl.constexpr, OFFSET: tl.constexpr, HAS_DX: tl.constexpr, HAS_DW: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if LATE_ROUND:
        w = OFFSET + w  # masked lanes stay harmless: dy and x load as 0 there
    dw = tl.zeros([BLOCK], tl.float32)
    row_start = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    for row in range(row_start, row_end):
        base = row * n_cols
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + row)
        n = x * rstd
        if HAS_DW:
            if LATE_ROUND:
                dw += dy * n
            else:  # the weight multiplies the rounded normalised value
                dw += dy * n.to(X.dtype.element_ty).to(tl.float32)
        if HAS_DX:
            g = dy * w
            dx = (g - n * (tl.sum(g * n, 0) / n_cols)) * rstd
            tl.store(DX + base + cols, dx.to(DX.dtype.element_ty), mask=mask)
    if HAS_DW:
        tl.store(DW + pid * n_cols + cols, dw, mask=mask)


def _forward(
    x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: Optional[float], store_rstd: bool
) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(contiguous 2-D rows of ``x``, output rows, per-row rstd when ``store_rstd``)."""
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols).contiguous()
    out = torch.empty_like(rows)
    rstd = torch.empty(rows.shape[0], dtype=torch.float32, device=x.device) if store_rstd else None
    block = row_block(n_cols)
    _rms_norm_fwd[(rows.shape[0],)](
        rows, weight, out, out if rstd is None else rstd, n_cols, eps,
        BLOCK=block, LATE_ROUND=weight_offset is not None, OFFSET=weight_offset or 0.0, STORE_RSTD=store_rstd,
        num_warps=warps_for(block),
    )
    return rows, out, rstd


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: Optional[float]
    ) -> torch.Tensor:
        rows, out, rstd = _forward(x, weight, eps, weight_offset, store_rstd=True)
        ctx.save_for_backward(rows, weight, rstd)
        ctx.weight_offset = weight_offset
        return out.view(x.shape)

    @staticmethod
    @once_differentiable  # the kernel's grads carry no graph: a double backward raises instead of going wrong
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        rows, weight, rstd = ctx.saved_tensors
        has_dx, has_dw = ctx.needs_input_grad[:2]
        n_rows, n_cols = rows.shape
        programs = num_programs(rows.device, n_rows)
        dx = torch.empty_like(rows) if has_dx else rows
        dw = torch.empty((programs, n_cols), dtype=torch.float32, device=rows.device) if has_dw else rstd
        block = row_block(n_cols)
        _rms_norm_bwd[(programs,)](
            rows, weight, dy.reshape(-1, n_cols).contiguous(), rstd, dx, dw, n_rows, n_cols,
            triton.cdiv(n_rows, programs),
            BLOCK=block, LATE_ROUND=ctx.weight_offset is not None, OFFSET=ctx.weight_offset or 0.0,
            HAS_DX=has_dx, HAS_DW=has_dw, num_warps=warps_for(block),
        )
        grad_x = dx.view(dy.shape) if has_dx else None
        grad_w = dw.sum(0).to(weight.dtype) if has_dw else None
        return grad_x, grad_w, None, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: Optional[float]) -> torch.Tensor:
    """RMSNorm of ``x`` (any shape, non-empty, last dim = ``weight``'s length, 1-D ``weight`` of ``x``'s
    float16/bfloat16/float32 dtype); output in ``x``'s dtype. ``weight_offset`` None: the weight multiplies the
    normalised value rounded to ``x``'s dtype (LLaMA, T5); a number ``o``: the float32 normalised value times
    ``o + weight``, rounded once (Gemma ``1.0``, OLMo2 ``0.0``). Differentiable in ``x`` and ``weight``."""
    weight = weight.contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RMSNorm.apply(x, weight, eps, weight_offset)
    # Nothing records the call: no autograd node, no rstd kept.
    return _forward(x, weight, eps, weight_offset, store_rstd=False)[1].view(x.shape)
