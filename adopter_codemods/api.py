"""Programmatic entry points: rewrite or scan source text with the built-in (or given) rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import libcst as cst

from .engine import Finding, find_all, findings_for, rewrite_module
from .files import ensure_parser_survives
from .provider import build_module_structure
from .rules import select_rules


@dataclass
class RewriteResult:
    code: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.findings)


def _rules(rules: Optional[Iterable[str]], rule_files: Sequence[Path]):  # type: ignore[no-untyped-def]
    return select_rules(list(rules) if rules is not None else None, rule_files)


def _parse(source: str, path: str) -> cst.Module:
    ensure_parser_survives(path, source.encode("utf-8"))
    return cst.parse_module(source)


def rewrite_source(
    source: str,
    rules: Optional[Iterable[str]] = None,
    *,
    path: str = "<string>",
    rule_files: Sequence[Path] = (),
) -> RewriteResult:
    """Apply rules (codes like ``ADP005`` or codemod names; None = all built-in rules) to source text.

    `path` names the source in findings; when it is an existing file, base classes imported from other files are
    resolved from there (docs/ENGINE.md, "Which classes are modules").

    Raises ``libcst.ParserSyntaxError`` for source that does not parse, and
    :class:`adopter_codemods.files.SourceError` for nesting too deep for LibCST's parser (checked without crashing).
    """
    module = _parse(source, path)
    outcome = rewrite_module(module, _rules(rules, rule_files), path=path)
    if not outcome.applied:
        return RewriteResult(source)  # byte-identical, also where LibCST's str round trip is not (a leading BOM)
    findings = findings_for(module, outcome.applied, path)
    # LibCST drops the BOM of str input (only bytes input keeps it, in `Module.bytes`): put the text's own back.
    bom = "\ufeff" if source.startswith("\ufeff") else ""
    return RewriteResult(bom + outcome.module.code, findings)


def scan_source(
    source: str,
    rules: Optional[Iterable[str]] = None,
    *,
    path: str = "<string>",
    rule_files: Sequence[Path] = (),
) -> list[Finding]:
    """Findings of every selected rule, each judged on the unmodified source; `path` and errors as for
    :func:`rewrite_source`."""
    module = _parse(source, path)
    matches = find_all(build_module_structure(module, path), _rules(rules, rule_files))
    return findings_for(module, matches, path, source=source.encode("utf-8"))
