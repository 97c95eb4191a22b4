"""Imports a rewrite left unused: ``import torch.nn.functional as F`` once its only use, ``F.softmax(...)``, became
``adopter_kernels.softmax(...)`` (ADP004), or ``from torch.nn.functional import softmax``. A linter's unused-import
check (ruff/flake8 F401) would fail on the rewritten file, so the name goes, as LibCST's own codemods remove the
imports their edits leave unused.

Conservative by construction: a name is removed only where the original module read it and the rewritten one no
longer mentions it anywhere (any name node but an attribute's, keyword's or import's own; any string that holds it
as a word, docstrings aside: ``__all__``, string annotations, ``getattr(mod, "F")``), and only from an import
statement of the module's top level (not one under ``try``/``if``, which may choose between alternatives), and only
from the libraries whose calls the rules replace (`LIBRARIES`): importing a module of the project may register
something as it runs, so such an import stays. An import a name was only re-exported through was never read, and
stays.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

import libcst as cst

from . import cstwalk

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Top-level packages an import is removed from: importing them again elsewhere changes nothing.
LIBRARIES = frozenset({"torch", "math", "numpy", "einops"})


def remove_imports_left_unused(original: cst.Module, rewritten: cst.Module) -> cst.Module:
    """`rewritten` without the top-level import names it no longer mentions where `original` read them."""
    before = _mentions(original)
    after = _mentions(rewritten)
    unused = {name for name in before if after[name] == 0}
    if not unused:
        return rewritten
    body: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []  # a removed statement's comments and blank lines, for the next statement
    for statement in rewritten.body:
        kept = _without_names(statement, unused)
        if kept is None:
            assert isinstance(statement, cst.SimpleStatementLine)
            carried.extend(statement.leading_lines)
            continue
        if carried:
            assert isinstance(kept, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
            kept = kept.with_changes(leading_lines=[*carried, *kept.leading_lines])
            carried = []
        body.append(kept)
    if len(body) == len(rewritten.body) and all(a is b for a, b in zip(body, rewritten.body)):
        return rewritten
    return rewritten.with_changes(body=body, footer=[*carried, *rewritten.footer])


def _mentions(module: cst.Module) -> Counter[str]:
    """How often each name is mentioned outside import statements: name nodes (not an attribute's ``.attr``, a
    keyword argument's name or an import alias) and words of strings other than docstrings."""
    counts: Counter[str] = Counter()
    skipped: set[int] = set()
    for node in cstwalk.walk(module):
        kind = type(node)
        if kind in (cst.Import, cst.ImportFrom):
            skipped.update(id(n) for n in cstwalk.walk(node))
        elif kind is cst.Attribute:
            skipped.add(id(node.attr))  # type: ignore[attr-defined]
        elif kind is cst.Arg and node.keyword is not None:  # type: ignore[attr-defined]
            skipped.add(id(node.keyword))  # type: ignore[attr-defined]
        elif kind is cst.Expr and isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString)):  # type: ignore[attr-defined]
            skipped.update(id(n) for n in cstwalk.walk(node))  # a docstring (or any bare string statement)
        elif id(node) in skipped:
            continue
        elif kind is cst.Name:
            counts[node.value] += 1  # type: ignore[attr-defined]
        elif kind is cst.SimpleString:
            counts.update(_WORD.findall(node.value))  # type: ignore[attr-defined]
        elif kind is cst.FormattedStringText:
            counts.update(_WORD.findall(node.value))  # type: ignore[attr-defined]
    return counts


def _bound_name(alias: cst.ImportAlias) -> Optional[str]:
    """The name an import alias binds, where it binds one plain name (`import a.b` binds `a`, kept as it is)."""
    if alias.asname is not None:
        target = alias.asname.name
        return target.value if isinstance(target, cst.Name) else None
    return alias.name.value if isinstance(alias.name, cst.Name) else None


def _from_library(statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias) -> bool:
    """Whether the alias imports from one of `LIBRARIES` (absolutely)."""
    if isinstance(statement, cst.ImportFrom):
        if statement.relative or statement.module is None:
            return False
        dotted = statement.module
    else:
        dotted = alias.name
    while isinstance(dotted, cst.Attribute):
        dotted = dotted.value  # type: ignore[assignment]
    return isinstance(dotted, cst.Name) and dotted.value in LIBRARIES


def _without_names(statement: cst.BaseStatement, unused: set[str]) -> Optional[cst.BaseStatement]:
    """`statement` without the import aliases binding `unused` names (itself where it has none; None where nothing
    is left of it)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return statement
    smalls: list[cst.BaseSmallStatement] = []
    for small in statement.body:
        if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
            aliases = [a for a in small.names if _bound_name(a) not in unused or not _from_library(small, a)]
            if len(aliases) != len(small.names):
                if not aliases:
                    continue
                if aliases[-1] is not small.names[-1]:  # the last one went: its comma (and layout) ends the list
                    aliases[-1] = aliases[-1].with_changes(comma=small.names[-1].comma)
                small = small.with_changes(names=aliases)
        smalls.append(small)
    if len(smalls) == len(statement.body) and all(a is b for a, b in zip(smalls, statement.body)):
        return statement
    if not smalls:
        return None
    smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    return statement.with_changes(body=smalls)
