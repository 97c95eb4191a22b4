"""ADP004 runtime: drop-ins for the three softmax APIs with a Triton last-dim kernel on CUDA.

The codemod rewrites, keeping the argument list as written,

* ``F.softmax(x, ...)`` to ``softmax(x, ...)`` (the signature of ``torch.nn.functional.softmax``),
* ``torch.softmax(x, ...)`` to ``torch_softmax(x, ...)`` (the signature of ``torch.softmax``),
* ``x.softmax(...)`` to ``tensor_softmax(x, ...)`` (the receiver first, then ``Tensor.softmax``'s arguments),

so every semantic detail (implicit-dim rule and its warning when ``dim=None``, ``dtype`` casting before the op,
errors) is the original API's: each falls back to calling exactly that API. The Triton row kernel (forward +
backward; when forced: on an H200 it measured 0.23-0.62x torch's softmax at BERT-base attention sizes and below,
1.03-1.45x over 8x16x1024x1024 scores, sizes between unmeasured, so ``auto`` never takes it and ADP004 stays out of
the default rules; ``ADOPTER_KERNELS_BACKEND=softmax=triton`` takes it where your shapes are that large) runs only
when the backend allows it, the input is a plain ``torch.Tensor`` (no ``__torch_function__`` override, and for the
method form no subclass ``softmax``), ``dim`` is an integer naming the last dim, and the (cast) input is contiguous,
non-empty and float16/bfloat16/float32; everything else calls torch.

The method form cannot be told from another library's ``softmax`` method statically (``arr.softmax(-1)`` on an
object that is not a tensor), so ``tensor_softmax`` computes ``x.softmax(dim)`` (``x.softmax(dim, dtype=dtype)``
when a dtype is given) on whatever ``x`` is: the same call on the same object.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ._dispatch import TRITON, reference_only, register_kernel, select

__all__ = ["softmax", "tensor_softmax", "torch_softmax"]

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


def torch_softmax(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``torch.softmax(input, dim, dtype=dtype)``; the same signature and result."""
    if not torch.jit.is_scripting():
        out = _fast_path(input, dim, dtype)
        if out is not None:
            return out
    # dtype passed only when given: the call is then torch.softmax exactly as written
    return torch.softmax(input, dim) if dtype is None else torch.softmax(input, dim, dtype=dtype)


def tensor_softmax(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``input.softmax(dim, dtype=dtype)``: the ``Tensor.softmax`` method with its receiver first.

    ``input`` may be any object with a ``softmax`` method (the codemod cannot tell a tensor from, say, another
    library's array): the fast path takes only a plain ``torch.Tensor``, everything else makes the original call.
    """
    if not torch.jit.is_scripting():
        out = _method_fast_path(input, dim, dtype)
        if out is not None:
            return out
    return input.softmax(dim) if dtype is None else input.softmax(dim, dtype=dtype)


@torch.jit.unused
def _method_fast_path(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> Optional[torch.Tensor]:
    """``_fast_path`` for a receiver whose ``softmax`` is torch's own (not another library's, not a subclass's)."""
    if getattr(type(input), "softmax", None) is not torch.Tensor.softmax:
        return None
    return _fast_path(input, dim, dtype)


@torch.jit.unused
def _fast_path(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> Optional[torch.Tensor]:
    """The Triton row kernel's result when dispatch picks it and the call fits it, else None."""
    if (
        not reference_only("softmax")
        and isinstance(input, torch.Tensor)
        and isinstance(dim, int)
        and input.dim() > 0
        and dim in (-1, input.dim() - 1)
        and select("softmax", input) == "triton"
        and not torch.overrides.has_torch_function((input,))  # a subclass's override must see the call
    ):
        x = input if dtype is None else input.to(dtype)
        if x.dtype in _TRITON_DTYPES and x.is_contiguous() and x.numel() > 0:
            from .triton_kernels.softmax import softmax_last_dim

            return softmax_last_dim(x)
    return None
