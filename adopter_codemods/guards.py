"""Semantic preconditions a rule file names with ``guard <name>`` where the DSL cannot say them.

A guard takes the candidate match and returns True to allow the rewrite. Keep each one small and pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .matcher import Match

Guard = Callable[["Match"], bool]
_GUARDS: dict[str, Guard] = {}


def guard(fn: Guard) -> Guard:
    """Register a guard under its function name."""
    _GUARDS[fn.__name__] = fn
    return fn


def get(name: str) -> Guard:
    try:
        return _GUARDS[name]
    except KeyError:
        raise KeyError(f"unknown guard {name!r}; known guards: {', '.join(sorted(_GUARDS)) or 'none'}") from None


def names() -> list[str]:
    return sorted(_GUARDS)
