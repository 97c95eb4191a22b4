"""ADP004 runtime: drop-in ``torch.nn.functional.softmax`` with a Triton last-dim kernel on CUDA.

The codemod rewrites every ``F.softmax(...)`` call to ``adopter_kernels.softmax(...)`` with the same
arguments, so the signature and every semantic detail (implicit-dim rule and its warning when
``dim=None``, ``dtype`` casting before the op) are torch's. The Triton row kernel (forward + backward)
runs only when the backend allows it, ``dim`` names the last dim, the (cast) input is contiguous,
non-empty and float16/bfloat16/float32; everything else calls torch.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ._dispatch import TRITON, register_kernel, select

__all__ = ["softmax"]

_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

register_kernel("softmax", TRITON, doc="ADP004 F.softmax; Triton row kernel for the last dim")


def softmax(
    input: torch.Tensor,
    dim: Optional[int] = None,
    _stacklevel: int = 3,
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Softmax along ``dim``; same signature and result as ``torch.nn.functional.softmax``."""
    # dim=None keeps torch's implicit-dim rule (and its deprecation warning, one frame further out).
    # TorchScript compiles only the torch call (the dispatch is Python; a scripted model runs the original op).
    if not torch.jit.is_scripting() and dim is not None:
        out = _fast_path(input, dim, dtype)
        if out is not None:
            return out
    return F.softmax(input, dim, _stacklevel + 1, dtype)


@torch.jit.unused
def _fast_path(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> Optional[torch.Tensor]:
    """The Triton row kernel's result when dispatch picks it and the call fits it, else None."""
    if input.dim() > 0 and dim in (-1, input.dim() - 1) and select("softmax", input) == "triton":
        x = input if dtype is None else input.to(dtype)
        if x.dtype in _TRITON_DTYPES and x.is_contiguous() and x.numel() > 0:
            from .triton_kernels.softmax import softmax_last_dim

            return softmax_last_dim(x)
    return None
