"""Triton rotary embedding ``x * cos + rotate(x) * sin`` over a 4-D ``x`` (forward and backward for ``x``).

Elementwise over ``x`` made contiguous; ``cos``/``sin`` are read through the strides of their broadcast to ``x``'s
shape (stride 0 on broadcast dims), so they are never materialised. Column ``j`` has a partner ``p(j)``: ``j + h`` or
``j - h`` for HF's ``rotate_half`` (``h`` half the last dim), ``j + 1`` or ``j - 1`` for GPT-J's interleaved
``rotate_every_two``. ``y[j] = x[j] cos[j] + s(j) x[p(j)] sin[j]`` with ``s = -1`` on the first half (on even
columns when interleaved); the backward is ``dx[j] = dy[j] cos[j] - s(j) dy[p(j)] sin[p(j)]``.
"""

from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl

_BLOCK = 1024


@triton.jit
def _rotary(X, C, S, Y, numel, d1, d2, D, cs0, cs1, cs2, cs3, ss0, ss1, ss2, ss3,
            BACKWARD: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    j = offs % D
    rest = offs // D
    i2 = rest % d2
    rest = rest // d2
    i1 = rest % d1
    i0 = rest // d1
    if INTERLEAVED:
        first = j % 2 == 0
        p = tl.where(first, j + 1, j - 1)
    else:
        half = D // 2
        first = j < half
        p = tl.where(first, j + half, j - half)
    c_base = i0 * cs0 + i1 * cs1 + i2 * cs2
    s_base = i0 * ss0 + i1 * ss1 + i2 * ss2
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    xp = tl.load(X + offs - j + p, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(C + c_base + j * cs3, mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        sp = tl.load(S + s_base + p * ss3, mask=mask, other=0.0).to(tl.float32)
        y = x * c + tl.where(first, xp, -xp) * sp
    else:
        s = tl.load(S + s_base + j * ss3, mask=mask, other=0.0).to(tl.float32)
        y = x * c + tl.where(first, -xp, xp) * s
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool, interleaved: bool) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    cs: Tuple[int, ...] = cos.expand(x.shape).stride()
    ss: Tuple[int, ...] = sin.expand(x.shape).stride()
    _, d1, d2, d = x.shape
    _rotary[(triton.cdiv(x.numel(), _BLOCK),)](
        x, cos, sin, y, x.numel(), d1, d2, d, *cs, *ss, BACKWARD=backward, INTERLEAVED=interleaved, BLOCK=_BLOCK
    )
    return y


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
    ) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved
        return _launch(x, cos, sin, backward=False, interleaved=interleaved)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        return _launch(dy, cos, sin, backward=True, interleaved=ctx.interleaved), None, None, None


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    """``x * cos + rotate(x) * sin`` for 4-D ``x`` (even last dim), ``cos``/``sin`` broadcasting to it, one dtype."""
    return _Rotary.apply(x, cos, sin, interleaved)
