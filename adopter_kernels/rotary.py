"""ADP013 runtime: rotary position embedding ``(x * cos) + (rotate_half(x) * sin)`` as one kernel.

``rotary_embedding(x, cos, sin)`` replaces ``(x * cos) + (rotate_half(x) * sin)`` where ``rotate_half`` is Hugging
Face's (``x1, x2`` = first and second half of the last dim, ``cat((-x2, x1), dim=-1)``);
``rotary_embedding(x, cos, sin, interleaved=True)`` replaces ``(x * cos) + (rotate_every_two(x) * sin)`` with GPT-J's
``rotate_every_two`` (``x1, x2 = x[:, :, :, ::2], x[:, :, :, 1::2]``, ``stack((-x2, x1), dim=-1).flatten(-2)``). The
codemod checks the helper's body before it rewrites.

Reference path: exactly that expression (for an odd last dim too, as ``rotate_half`` computes it; GPT-J's indexing
accepts 4-D input only, and so does the reference).

Triton path (when forced): one elementwise kernel reading each element, its rotation partner and the
broadcast ``cos``/``sin`` (strides of the broadcast, nothing materialised), computing in float32 and rounding once
(the original rounds after each product and the sum in half precision). It runs for 4-D ``x`` with an even last
dim, ``cos``/``sin`` broadcasting to ``x``'s shape, all three of one float16/bfloat16/float32 dtype, and ``cos`` and
``sin`` not requiring grad (the backward kernel gives ``x``'s gradient only, as HF's cos/sin buffers need).
Dispatch: kernel ``rotary_embedding`` of ``_dispatch``: ``reference`` under ``auto`` (the Triton path measured
slower on an H200, docs/KERNEL_PERFORMANCE.md); ``triton`` when forced.
"""

from __future__ import annotations

import torch

from ._dispatch import TRITON, reference_only, register_kernel, select

__all__ = ["rotary_embedding"]

_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

register_kernel("rotary_embedding", TRITON, doc="ADP013 (x * cos) + (rotate_half(x) * sin); one Triton kernel")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def _fusable(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    if not (x.dim() == 4 and x.shape[-1] % 2 == 0 and x.numel() > 0 and x.dtype in _TRITON_DTYPES):
        return False
    if cos.dtype != x.dtype or sin.dtype != x.dtype or cos.requires_grad or sin.requires_grad:
        return False
    try:
        return torch.broadcast_shapes(x.shape, cos.shape, sin.shape) == x.shape
    except RuntimeError:
        return False


def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    """``(x * cos) + (rotate(x) * sin)`` with HF's ``rotate_half`` (GPT-J's ``rotate_every_two`` when
    ``interleaved``), one fused kernel on CUDA."""
    if (
        not reference_only("rotary_embedding")
        and all(isinstance(t, torch.Tensor) for t in (x, cos, sin))
        and select("rotary_embedding", x, cos, sin) == "triton"
        and _fusable(x, cos, sin)
    ):
        from .triton_kernels.rotary import rotary

        return rotary(x, cos, sin, interleaved)
    return (x * cos) + ((_rotate_every_two(x) if interleaved else _rotate_half(x)) * sin)
