"""Backend selection for adopter_kernels: decide per call whether a Triton fast path may run.

Every op has a pure-PyTorch *reference* path (exact semantics of the code the codemods replaced; the
oracle in tests) and, for some inputs, a Triton *fast* path. The choice is made here so that every op
follows the same rule:

* ``ADOPTER_KERNELS_BACKEND=auto`` (default): Triton when every tensor is on CUDA and ``triton`` imports.
* ``ADOPTER_KERNELS_BACKEND=reference``: always the PyTorch path.
* ``ADOPTER_KERNELS_BACKEND=triton``: Triton whatever the device (CPU tensors need ``TRITON_INTERPRET=1``;
  this is how the kernels are unit-tested without a GPU). Raises if triton is not importable.

``use_backend(name)`` overrides the environment variable inside a ``with`` block (tests, benchmarks).
Each op still checks its own eligibility (dtype, layout, dim) and uses the reference path otherwise.
The variable is read on every call (a dict lookup) so that changing it at run time takes effect.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from typing import Iterator, Optional, Type

import torch
from torch import nn

__all__ = [
    "BACKEND_ENV",
    "BACKENDS",
    "current_backend",
    "use_backend",
    "triton_available",
    "use_triton",
    "is_plain",
]

BACKEND_ENV = "ADOPTER_KERNELS_BACKEND"
BACKENDS = ("auto", "reference", "triton")

_override: Optional[str] = None


def _check(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV} must be one of {BACKENDS}, got {name!r}")
    return name


def current_backend() -> str:
    """The backend in force: the ``use_backend`` override, else the environment variable, else ``auto``."""
    if _override is not None:
        return _override
    return _check(os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto")


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force ``name`` (``auto``/``reference``/``triton``) for the duration of the ``with`` block."""
    global _override
    previous, _override = _override, _check(name)
    try:
        yield
    finally:
        _override = previous


@functools.cache
def triton_available() -> bool:
    """True when ``import triton`` works (cached; triton is imported only when first asked)."""
    try:
        importlib.import_module("triton")
    except Exception:  # ImportError, or a broken install that fails while initialising
        return False
    return True


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 only has the CUDA flag
        return device_type == "cuda" and torch.is_autocast_enabled()


def use_triton(*tensors: torch.Tensor) -> bool:
    """Whether the Triton path should run for these tensors under the backend in force.

    Autocast falls back to the reference path: autocast decides per op which dtype torch computes in
    (softmax and layer_norm run in float32), and the reference path reproduces that exactly.
    """
    backend = current_backend()
    if backend == "reference":
        return False
    if backend == "triton":
        if not triton_available():
            raise RuntimeError(f"{BACKEND_ENV}=triton but triton cannot be imported")
    elif not (triton_available() and all(t.is_cuda for t in tensors)):
        return False
    return not any(_autocast_on(t.device.type) for t in tensors)


def is_plain(module: nn.Module, cls: Type[nn.Module]) -> bool:
    """True when ``module`` computes exactly ``cls.forward`` and nothing observes the call.

    A fast path calls functional ops on the module's parameters instead of ``module(x)``; that is only
    equivalent when the forward is not overridden (LoRA/quantised subclasses) and no hooks would be skipped.
    """
    from torch.nn.modules import module as _module  # global hook registries live here

    return (
        isinstance(module, cls)
        and type(module).forward is cls.forward
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and not _module._global_forward_hooks
        and not _module._global_forward_pre_hooks
    )
