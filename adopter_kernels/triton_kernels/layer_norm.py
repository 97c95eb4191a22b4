"""Triton fused dropout + residual add + LayerNorm (forward and backward).

Forward: one program per row reads ``x`` and ``residual`` once, applies dropout with Triton's Philox
``tl.rand(seed, offset)``, adds, normalises and writes ``y`` plus per-row mean/rstd (float32). The
dropout mask is not stored: the backward kernel regenerates it from the same seed and offsets, so
training memory is that of a plain LayerNorm.

Backward: a persistent kernel (a few programs per SM), each walking a contiguous chunk of rows. Per row
it recomputes ``h = dropout(x) + residual`` and the normalised value, writes the grad of ``h`` (the
residual's grad) and the grad of ``x`` (the same, masked and scaled), and accumulates the weight/bias
grads in registers; the per-program partial sums are added with one ``torch.sum``.

The random stream is Triton's, not torch's: with ``p > 0`` in training the mask differs from
``nn.Dropout``'s under the same seed (same distribution). The seed is drawn from torch's default CPU
generator, so ``torch.manual_seed`` still makes runs reproducible.
Rows must fit one block (``MAX_N`` elements); callers use the reference path beyond.

Residual out (pre-LN blocks, ``dropout_add_layer_norm_residual``): the forward also writes ``h`` (the residual
stream the block carries on) and the backward adds that output's gradient to the grad of ``h``.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import triton
import triton.language as tl

from ._launch import num_programs, row_block, warps_for

MAX_N = 16384


@triton.jit
def _keep_mask(seed, offsets, p):
    # Philox counter = flat element index, 64-bit so large tensors never repeat a mask.
    return tl.rand(seed, offsets.to(tl.int64)) >= p


@triton.jit
def _dal_fwd(
    X, R, W, B, Y, S, Mean, Rstd, N, eps, p, scale, seed,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, DROPOUT: tl.constexpr, STORE_SUM: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + base + cols, mask=mask, other=0.0).to(tl.float32)
    if DROPOUT:
        x = tl.where(_keep_mask(seed, base + cols, p), x * scale, 0.0)
    h = x + r
    if STORE_SUM:
        tl.store(S + base + cols, h.to(S.dtype.element_ty), mask=mask)
    mean = tl.sum(h, 0) / N
    d = tl.where(mask, h - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / N + eps)
    y = d * rstd
    if HAS_W:
        y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@triton.jit
def _dal_bwd(
    X, R, W, DY, DS, DX, DR, Mean, Rstd, DW, DB, M, N, rows_per_program, p, scale, seed,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, DROPOUT: tl.constexpr, HAS_DS: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    row_start = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    for row in range(row_start, row_end):
        base = row * N
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(R + base + cols, mask=mask, other=0.0).to(tl.float32)
        if DROPOUT:
            keep = _keep_mask(seed, base + cols, p)
            x = tl.where(keep, x * scale, 0.0)
        mean = tl.load(Mean + row)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(mask, (x + r - mean) * rstd, 0.0)
        dy = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            dw += dy * xhat
            g = dy * w
        else:
            g = dy
        if HAS_B:
            db += dy
        dh = (g - (xhat * (tl.sum(xhat * g, 0) / N) + tl.sum(g, 0) / N)) * rstd
        if HAS_DS:  # the sum is also an output: its gradient joins the one through the normalisation
            dh += tl.load(DS + base + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(DR + base + cols, dh.to(DR.dtype.element_ty), mask=mask)
        if DROPOUT:
            dh = tl.where(keep, dh * scale, 0.0)
        tl.store(DX + base + cols, dh.to(DX.dtype.element_ty), mask=mask)
    if HAS_W:
        tl.store(DW + pid * N + cols, dw, mask=mask)
    if HAS_B:
        tl.store(DB + pid * N + cols, db, mask=mask)


def _drop_consts(p: float) -> Tuple[float, float, bool]:
    """(p, 1/(1-p), dropout on?); p == 1 keeps nothing, as torch does."""
    if p <= 0.0:
        return 0.0, 1.0, False
    return p, (1.0 / (1.0 - p) if p < 1.0 else 0.0), True


class _DropoutAddLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: Optional[torch.Tensor],
        bias: Optional[torch.Tensor],
        n: int,
        eps: float,
        p: float,
        store_sum: bool,
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        rows = x.numel() // n
        y = torch.empty_like(x)
        summed = torch.empty_like(x) if store_sum else y
        mean = torch.empty(rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        p, scale, dropout = _drop_consts(p)
        seed = int(torch.randint(2**31 - 1, (1,)).item()) if dropout else 0
        block = row_block(n)
        _dal_fwd[(rows,)](
            x, residual, x if weight is None else weight, x if bias is None else bias, y, summed, mean, rstd,
            n, eps, p, scale, seed,
            HAS_W=weight is not None, HAS_B=bias is not None, DROPOUT=dropout, STORE_SUM=store_sum, BLOCK_N=block,
            num_warps=warps_for(block),
        )
        ctx.save_for_backward(x, residual, weight, mean, rstd)
        ctx.consts = (n, p, scale, seed, dropout, None if bias is None else bias.dtype)
        return (y, summed) if store_sum else y

    @staticmethod
    def backward(ctx, dy: torch.Tensor, ds: Optional[torch.Tensor] = None):  # type: ignore[override]
        x, residual, weight, mean, rstd = ctx.saved_tensors
        n, p, scale, seed, dropout, bias_dtype = ctx.consts
        has_b = bias_dtype is not None
        has_w = weight is not None
        rows = x.numel() // n
        programs = num_programs(x.device, rows)
        dx = torch.empty_like(x)
        dr = torch.empty_like(residual)
        dw = torch.empty((programs, n), dtype=torch.float32, device=x.device) if has_w else mean
        db = torch.empty((programs, n), dtype=torch.float32, device=x.device) if has_b else mean
        block = row_block(n)
        _dal_bwd[(programs,)](
            x, residual, weight if has_w else x, dy.contiguous(), dy if ds is None else ds.contiguous(), dx, dr, mean,
            rstd, dw, db, rows, n, triton.cdiv(rows, programs), p, scale, seed,
            HAS_W=has_w, HAS_B=has_b, DROPOUT=dropout, HAS_DS=ds is not None, BLOCK_N=block,
            num_warps=warps_for(block),
        )
        grad_w = dw.sum(0).to(weight.dtype).view_as(weight) if has_w else None
        grad_b = db.sum(0).to(bias_dtype) if has_b else None
        return dx, dr, grad_w, grad_b, None, None, None, None


def dropout_add_layer_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    p: float,
) -> torch.Tensor:
    """``layer_norm(dropout(x, p) + residual)`` over the last dim ``n`` (at most ``MAX_N``).

    ``x`` and ``residual``: contiguous, same shape and dtype; ``weight``/``bias``: ``None`` or 1-D of
    length ``n`` (callers flatten a multi-dim normalized_shape); ``p``: already 0 when not training.
    """
    return _DropoutAddLayerNorm.apply(x, residual, weight, bias, x.shape[-1], eps, p, False)


def dropout_add_layer_norm_residual(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    p: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(layer_norm(h), h)`` with ``h = dropout(x, p) + residual``; the same conditions as
    ``dropout_add_layer_norm``."""
    return _DropoutAddLayerNorm.apply(x, residual, weight, bias, x.shape[-1], eps, p, True)
