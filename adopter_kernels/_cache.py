"""Cache of derived weights (BN-folded conv/linear weights, packed QKV weights) for inference.

Derived weights are recomputed only when a source tensor changes. "Changes" is read from what PyTorch
tracks cheaply: each tensor's identity (held through a weak reference, so a new Parameter that happens
to reuse a freed address is still a miss), its storage pointer (``p.data = ...``) and its version
counter (bumped by every in-place op: optimizer steps, ``load_state_dict``'s ``copy_``; BN's running statistics,
which its native kernel updates without bumping them, are read through ``num_batches_tracked``, which
``nn.BatchNorm``'s training forward increments). Writes through ``p.data`` bypass the version counter; call
``clear_weight_cache()`` after such writes, or turn the cache off for a model updated that way all the time (an EMA
teacher): ``set_weight_cache(False)``, and the weights are derived on every call.

Entries live in a ``WeakKeyDictionary`` keyed by the owning module, so modules stay picklable and
copyable and an entry dies with its module.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable, List, Optional, Sequence, Tuple, TypeVar

import torch
from torch import nn

__all__ = ["needs_grad", "cached", "clear_weight_cache", "set_weight_cache"]

T = TypeVar("T")

_Refs = Tuple[Optional["weakref.ref[torch.Tensor]"], ...]
_CACHE: weakref.WeakKeyDictionary[nn.Module, Tuple[_Refs, Hashable, Any]] = weakref.WeakKeyDictionary()


def needs_grad(tensors: Sequence[Optional[torch.Tensor]]) -> bool:
    """True when derived weights must stay differentiable (grad mode on and some source needs grad)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _key(tensors: Sequence[Optional[torch.Tensor]], extra: Hashable) -> Optional[Hashable]:
    parts: List[Optional[Tuple[int, int, torch.dtype, torch.device]]] = []
    for t in tensors:
        if t is None:
            parts.append(None)
            continue
        try:
            parts.append((t.data_ptr(), t._version, t.dtype, t.device))
        except RuntimeError:  # inference tensors have no version counter: never cache them
            return None
    # Tensors made under inference_mode cannot be saved for backward later: key on the mode.
    return (tuple(parts), extra, torch.is_inference_mode_enabled())


def cached(
    owner: nn.Module,
    tensors: Sequence[Optional[torch.Tensor]],
    extra: Hashable,
    compute: Callable[[], T],
) -> T:
    """``compute()``, reusing the previous result for ``owner`` while ``tensors`` and ``extra`` are unchanged.

    Callers must only use this when ``needs_grad(tensors)`` is False (derived weights are computed
    under ``no_grad`` and would otherwise cut the autograd graph).
    """
    # Compiled code: the compiler sees the folding/packing as ops on the weights; a Python-side cache of tensor
    # identities would be a graph break (and stale across recompiles).
    key = None if not _enabled or torch.compiler.is_compiling() else _key(tensors, extra)
    if key is None:
        with torch.no_grad():
            return compute()
    hit = _CACHE.get(owner)
    if (
        hit is not None
        and hit[1] == key
        and all((r is None and t is None) or (r is not None and r() is t) for r, t in zip(hit[0], tensors))
    ):
        return hit[2]
    with torch.no_grad():
        value = compute()
    refs = tuple(None if t is None else weakref.ref(t) for t in tensors)
    _CACHE[owner] = (refs, key, value)
    return value


def clear_weight_cache() -> None:
    """Drop every cached derived weight (needed only after writes through ``tensor.data``)."""
    _CACHE.clear()


_enabled = True


def set_weight_cache(enabled: bool) -> None:
    """Cache derived weights while grad is off (the default), or derive them on every call (``False``: for models
    whose weights are written through ``tensor.data``, which the cache cannot see). Turning it off drops the cache."""
    global _enabled
    _enabled = bool(enabled)
    if not _enabled:
        _CACHE.clear()
