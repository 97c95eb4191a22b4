"""Pause Python's cyclic garbage collector while one module is parsed and analysed.

LibCST's parser allocates a node object per token and the analysis many short-lived objects (paths, events,
bindings), so the collector runs often, and each collection of an older generation traverses every object alive
in it, the growing parsed module included: about 15% of the analysis time and 20% of the parse in a ``scan``
process on the transformers corpus (``benchmarks/bench_scan.py``). A pause that ends while the module is still
alive leaves its whole tree to the next collection; so ``scan`` and ``rewrite`` pause for a file's whole life,
from reading it to its last finding (``cli._scan_file``), and the engine's entry points pause for what they do.
What is allocated while paused is collected as usual afterwards; the pause lasts one module, so memory stays
bounded.
"""

from __future__ import annotations

import functools
import gc
from typing import Callable, Optional, TypeVar

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


class CollectorHold:
    """The collector paused across calls rather than around one: from a Fixit rule's visit of a module to its leave,
    so that Fixit's own walk of the tree in between is paused too. ``begin(key)`` pauses it unless someone else
    already has; ``end(key)`` resumes it if that `key` paused it. A key whose ``end`` never came (an exception in
    between) hands the pause over to the next ``begin``, so it lasts at most until the next module is done."""

    def __init__(self) -> None:
        self._key: Optional[int] = None

    def begin(self, key: int) -> None:
        if self._key is not None:
            self._key = key
        elif gc.isenabled():
            gc.disable()
            self._key = key

    def end(self, key: int) -> None:
        if self._key == key:
            self._key = None
            gc.enable()
