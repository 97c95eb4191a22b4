"""LibCST's parser without the node validation that guards hand-built trees.

Every LibCST node checks its fields when it is constructed (``CSTNode.__post_init__`` calls ``_validate``): that
parentheses pair up, that whitespace fields hold whitespace, that keywords have room around them. That protects
trees built by hand; the parser only builds what its grammar accepted, and LibCST's own comment in that method notes
that validation could move out of construction to spare parsing it. It costs about a tenth of a parse
(docs/PERFORMANCE.md). :func:`parse_module` skips it while LibCST's parser runs, in the calling thread only: nodes
built anywhere else (the rewriter's edits, another thread, LibCST's codemods and Fixit in the same process) are
validated as before. ``_validate`` has no side effect, so a tree it would accept is built the same either way
(``tests/test_unvalidated_parse.py`` parses real sources both ways and mutated lines, and compares).
"""

from __future__ import annotations

import threading
from typing import Union

import libcst as cst
from libcst._nodes.base import CSTNode

_VALIDATE = CSTNode.__post_init__
_STATE = threading.local()


def _post_init(self: CSTNode) -> None:
    if not getattr(_STATE, "parsing", False):
        _VALIDATE(self)


def parse_module(source: Union[str, bytes]) -> cst.Module:
    """``libcst.parse_module(source)``, its nodes not validated (they come from the grammar)."""
    if CSTNode.__post_init__ is not _post_init:  # installed once: it validates exactly as before elsewhere
        CSTNode.__post_init__ = _post_init  # type: ignore[method-assign]
    _STATE.parsing = True
    try:
        return cst.parse_module(source)
    finally:
        _STATE.parsing = False
