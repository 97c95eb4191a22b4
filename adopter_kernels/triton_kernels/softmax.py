"""Triton softmax over the last dim (forward and backward).

One program per row. Rows up to ``MAX_BLOCK`` columns are held in registers and read once; longer rows
are streamed in ``MAX_BLOCK`` chunks with an online max/sum (two reads per element), so any row length
works. Accumulation is in float32. Rows that are entirely ``-inf`` give NaN, as ``torch.softmax`` does.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
import triton
import triton.language as tl

from ._launch import row_block, warps_for

# Largest row block kept in registers; longer rows take the streamed kernel. Tests lower it to reach
# the streamed path on tiny inputs.
MAX_BLOCK = 8192


@triton.jit
def _softmax_fwd(X, Y, n_cols, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * n_cols
    y_row = Y + row * n_cols
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(y_row + cols, (e / tl.sum(e, 0)).to(Y.dtype.element_ty), mask=mask)
    else:
        # Per-lane running max and sum; lanes that have only seen -inf keep sum 0 (avoids inf - inf).
        m_i = tl.full([BLOCK], -float("inf"), tl.float32)
        d_i = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m_i, x)
            seen = m_new != -float("inf")
            d_i = tl.where(seen, d_i * tl.exp(m_i - m_new) + tl.exp(x - m_new), 0.0)
            m_i = m_new
        m = tl.max(m_i, 0)
        d = tl.sum(tl.where(m_i != -float("inf"), d_i * tl.exp(m_i - m), 0.0), 0)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + offs, (tl.exp(x - m) / d).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd(Y, DY, DX, n_cols, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    # dx = y * (dy - sum(dy * y))
    row = tl.program_id(0).to(tl.int64)
    y_row = Y + row * n_cols
    dy_row = DY + row * n_cols
    dx_row = DX + row * n_cols
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        dot = tl.sum(y * dy, 0)
        tl.store(dx_row + cols, (y * (dy - dot)).to(DX.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            y = tl.load(y_row + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + offs, mask=mask, other=0.0).to(tl.float32)
            acc += y * dy
        dot = tl.sum(acc, 0)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            y = tl.load(y_row + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_row + offs, (y * (dy - dot)).to(DX.dtype.element_ty), mask=mask)


class _Launch(NamedTuple):
    grid: Tuple[int]
    n_cols: int
    block: int
    single: bool
    warps: int


def _launch_config(x: torch.Tensor) -> _Launch:
    n_cols = x.shape[-1]
    block = min(row_block(n_cols), MAX_BLOCK)
    return _Launch((x.numel() // n_cols,), n_cols, block, block >= n_cols, warps_for(block))


class _SoftmaxLastDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = torch.empty_like(x)
        c = _launch_config(x)
        _softmax_fwd[c.grid](x, y, c.n_cols, BLOCK=c.block, SINGLE=c.single, num_warps=c.warps)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        dx = torch.empty_like(y)
        c = _launch_config(y)
        _softmax_bwd[c.grid](y, dy.contiguous(), dx, c.n_cols, BLOCK=c.block, SINGLE=c.single, num_warps=c.warps)
        return dx


def softmax_last_dim(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a contiguous, non-empty float16/bfloat16/float32 tensor."""
    return _SoftmaxLastDim.apply(x)
