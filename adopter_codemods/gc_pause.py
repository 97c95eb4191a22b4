"""Pause Python's cyclic garbage collector around the analysis of one module.

The analysis allocates many short-lived objects (paths, events, bindings), so the collector runs often, and each
full collection traverses every object alive, the whole parsed module included: about 15% of the analysis time
on the transformers corpus (``benchmarks/bench_scan.py``). What is allocated while paused is collected as usual
afterwards; the pause lasts one module, so memory stays bounded.
"""

from __future__ import annotations

import functools
import gc
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable[..., object])


def collector_paused(fn: F) -> F:
    """Decorator: run `fn` with the collector disabled (nested calls keep it disabled until the outermost ends)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper  # type: ignore[return-value]
