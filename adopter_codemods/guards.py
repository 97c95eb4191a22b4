"""Semantic preconditions a rule file names with ``guard <name>`` where the DSL cannot say them.

A guard takes the candidate match and its placement (``matcher.Match``: what matched; ``matcher.Placement``: where
the rewrite would go) and returns True to allow the rewrite, or refuses it: with a :class:`Refused` (false, too),
holding the reason in words and the node that causes it, which ``scan --show-refused`` lists; or with a bare
False, which declines the site without a listed refusal (the site is not what the rule is about, as most layers
are no RMSNorm class). Keep each one small and pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Union

import libcst as cst

if TYPE_CHECKING:
    from .matcher import Match, Placement, Reason


@dataclass(frozen=True)
class Refused:
    """A guard's refusal: false like ``False``, with why (a sentence) and, if known, the node of the line causing it."""

    reason: str
    cause: Optional[cst.CSTNode] = None

    def __bool__(self) -> bool:
        return False


Guard = Callable[["Match", "Placement"], Union[bool, Refused]]
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


def reason(name: str, verdict: Union[bool, Refused]) -> "Reason":
    """The refusal reason of guard `name` that returned the false `verdict`. A bare False declines the site without
    a listed refusal (for a guard, that says the site is not what the rule is about: most classes are no RMSNorm)."""
    from .matcher import Reason, RefusalCategory

    if isinstance(verdict, Refused):
        return Reason(RefusalCategory.GUARD, f"guard {name}: {verdict.reason}", verdict.cause)
    return Reason(RefusalCategory.GUARD, f"guard {name} declined it", listed=False)
