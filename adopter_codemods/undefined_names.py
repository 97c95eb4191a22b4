"""The names each function of a module reads that nothing defines: the last check of every rewrite.

A rewrite writes the fused call's arguments where the call goes. Should the engine ever write there a name that
only exists somewhere else (a helper method's local), the rewritten function would raise NameError, or read another
variable of the same name. The matcher refuses those cases (`flow/checks.helper_refusal`); this check makes sure
no such bug reaches a user's file: `engine.rewrite_module` compares the rewritten module with the input and, where
a function reads a name the input did not leave undefined, raises an error naming it and leaves the file as it was.
"""

from __future__ import annotations

import builtins
import re
import symtable
from typing import Optional

# A star import defines names this check cannot know (also matched in a string: the check is then skipped).
_STAR_IMPORT = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]*\*", re.MULTILINE)
# Names a function may read without any definition in the file.
_ALWAYS = frozenset(dir(builtins)) | {"__file__", "__name__", "__class__", "__spec__", "__path__", "__builtins__"}


def undefined_names(code: str) -> Optional[tuple[dict[tuple[str, str], int], dict[str, int]]]:
    """(qualified function name, name) -> the function's first line, for each name a function reads that neither
    it, an enclosing function, the module nor the builtins define; and every function's first line. None when that
    cannot be told: the module has a star import, or CPython does not compile it."""
    if _STAR_IMPORT.search(code):
        return None
    try:
        top = symtable.symtable(code, "<rewrite>", "exec")
    except (SyntaxError, ValueError):
        return None
    symbols = top.get_symbols()
    defined = {s.get_name() for s in symbols if s.is_assigned() or s.is_imported() or s.is_namespace()} | _ALWAYS
    out: dict[tuple[str, str], int] = {}
    lines: dict[str, int] = {}
    tables = [(child, child.get_name()) for child in top.get_children()]
    while tables:
        table, name = tables.pop()
        if table.get_type() == "function":
            lines.setdefault(name, table.get_lineno())
            for symbol in table.get_symbols():
                read = symbol.get_name()
                implicit_global = symbol.is_global() and not symbol.is_declared_global()
                if symbol.is_referenced() and implicit_global and read not in defined:
                    out[(name, read)] = table.get_lineno()
        tables.extend((child, f"{name}.{child.get_name()}") for child in table.get_children())
    return out, lines


def new_undefined_names(before: str, after: str) -> list[tuple[str, str, Optional[int]]]:
    """(function, name, the function's line in `before`) for each name a function of `after` reads undefined that
    the same function of `before` did not; [] when either cannot be told."""
    old, new = undefined_names(before), undefined_names(after)
    if old is None or new is None:
        return []
    (old_reads, old_lines), (new_reads, _) = old, new
    added = sorted(read for read in new_reads if read not in old_reads)
    return [(function, name, old_lines.get(function)) for function, name in added]
