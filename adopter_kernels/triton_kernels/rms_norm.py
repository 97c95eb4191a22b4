"""Triton RMSNorm forward over the last dim (inference: the reference path serves autograd).

One program per row, the whole row held in registers (hidden sizes of LLMs: a few thousand columns). Accumulation
in float32. With the weight in the input's dtype,
LLaMA's and T5's casting orders are both ``weight * round(x * rsqrt(mean(x^2) + eps))`` (the product rounded once
more), Gemma's is ``round(x * rsqrt(...) * (1 + weight))``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import row_block, warps_for


@triton.jit
def _rms_norm_fwd(X, W, Y, n_cols, eps, BLOCK: tl.constexpr, GEMMA: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / n_cols + eps)
    n = x * rstd
    if GEMMA:
        y = n * (1.0 + w)
    else:
        y = w * n.to(Y.dtype.element_ty).to(tl.float32)
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool) -> torch.Tensor:
    """RMSNorm of ``x`` (any shape, last dim = ``weight``'s length, same dtype); output in ``x``'s dtype."""
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols).contiguous()
    out = torch.empty_like(rows)
    block = row_block(n_cols)
    _rms_norm_fwd[(rows.shape[0],)](
        rows, weight.contiguous(), out, n_cols, eps, BLOCK=block, GEMMA=gemma, num_warps=warps_for(block)
    )
    return out.view(x.shape)
