"""Per-site suppression comments, judged once in the core so that every front-end honours them alike.

Directives (codes and rule names are interchangeable, case-insensitive, several comma-separated):

* ``# noqa`` (every rule) and ``# noqa: ADP005, FuseQKV`` (ruff/flake8 style);
* ``# lint-ignore``, ``# lint-ignore: FuseDropoutLN`` and ``# lint-fixme: ...`` (Fixit style; a trailing ``Rule``
  in a name is ignored, as Fixit does).

Where they count, for a site (a match) of a rule:

* on any line of a statement the site reports: the matched ``forward`` statements, or the ``__init__`` statement
  of an instantiation or ``nn.Sequential`` site. A statement spanning several lines offers all of them: the
  first line (where the finding is reported, ``x = self.ln(  # noqa``), a line inside its brackets, and the last
  (``)  # noqa: ADP005``). Of a compound statement (a match in an ``if`` test) only the header counts, not its
  body;
* Fixit directives also in the comment lines directly above such a statement (Fixit attaches them there), and in
  the module's header comments, where they silence the rule in the whole file (as Fixit does).

Comments are CST nodes, so the answer needs no positions and no source text: the rewriter skips exactly the
sites the reports leave out.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Optional, Sequence

import libcst as cst

from . import cstwalk

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<keys>\w+(?:[\s,]+\w+)*))?", re.IGNORECASE)
# Fixit 2.2's own pattern (fixit.ftypes.LintIgnoreRegex), not imported: the core does not depend on Fixit.
_LINT_IGNORE = re.compile(r"#\s*lint-(?:ignore|fixme)(?:(?::\s*|\s+)(?P<keys>\w+(?:,\s*\w+)*))?")
# Fields of a compound statement that lie outside its header line(s).
_NOT_HEADER = frozenset({"body", "orelse", "handlers", "finalbody", "leading_lines", "decorators", "lines_after_decorators"})


def _names(keys: Optional[str], split: str) -> Optional[set[str]]:
    """The rule keys a directive lists, lower-cased; None for a bare directive (every rule)."""
    if keys is None:
        return None
    return {k.lower().removesuffix("rule") or k.lower() for k in re.split(split, keys) if k}


def _silences(comment: str, pattern: re.Pattern[str], split: str, keys: Sequence[str]) -> bool:
    for found in pattern.finditer(comment):
        names = _names(found.group("keys"), split)
        if names is None or any(k.lower() in names or k.lower().removesuffix("rule") in names for k in keys):
            return True
    return False


def _comments(node: cst.CSTNode, skip: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every comment inside `node`, leaving out the fields named in `skip` (of `node` itself only)."""
    stack: list[object] = [node]
    first = True
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is cst.Comment:
            yield item.value  # type: ignore[attr-defined]
            continue
        for name in cstwalk.all_fields(kind):
            if first and name in skip:
                continue
            value = getattr(item, name)
            value_kind = type(value)
            if value_kind is tuple or value_kind is list:
                stack.extend(v for v in value if cstwalk.is_node(type(v)))
            elif cstwalk.is_node(value_kind):
                stack.append(value)
        first = False


def _own_comments(statement: cst.CSTNode) -> list[str]:
    """Comments on the lines of a statement: all of a simple statement line, the header of a compound one."""
    if isinstance(statement, cst.BaseCompoundStatement):
        out = list(_comments(statement, _NOT_HEADER))
        body = getattr(statement, "body", None)
        if isinstance(body, cst.IndentedBlock) and body.header.comment is not None:
            out.append(body.header.comment.value)
        elif isinstance(body, cst.SimpleStatementSuite):
            out.extend(_comments(body))
        return out
    return list(_comments(statement, frozenset({"leading_lines"})))


def _above(statement: cst.CSTNode) -> list[str]:
    lines = getattr(statement, "leading_lines", ())
    return [line.comment.value for line in lines if line.comment is not None]


def suppressing_statement(statements: Iterable[cst.CSTNode], keys: Sequence[str]) -> Optional[cst.CSTNode]:
    """The first of `statements` that a directive for one of `keys` (a rule's code and name) sits on or above, if
    any (None: the site is not silenced)."""
    for statement in statements:
        for comment in _own_comments(statement):
            if _silences(comment, _NOQA, r"[\s,]+", keys) or _silences(comment, _LINT_IGNORE, r",\s*", keys):
                return statement
        if any(_silences(comment, _LINT_IGNORE, r",\s*", keys) for comment in _above(statement)):
            return statement
    return None


def file_suppressed(module: cst.Module, keys: Sequence[str]) -> bool:
    """Whether a Fixit directive for one of `keys` in the module's header comments silences the whole file."""
    return any(
        _silences(line.comment.value, _LINT_IGNORE, r",\s*", keys) for line in module.header if line.comment is not None
    )
