"""Programmatic entry points: rewrite or scan source text with the built-in (or given) rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import libcst as cst

from .engine import Finding, RefusedSite, find_all, findings_for, refusals_for, rewrite_module
from .matcher import Refusal
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

    Raises ``libcst.ParserSyntaxError`` for source that does not parse, and
    :class:`adopter_codemods.files.SourceError` for nesting too deep for LibCST's parser (checked without crashing).
    """
    module = _parse(source, path)
    outcome = rewrite_module(module, _rules(rules, rule_files))
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
    """Findings of every selected rule, each judged on the unmodified source; raises as :func:`rewrite_source`."""
    module = _parse(source, path)
    matches = find_all(build_module_structure(module), _rules(rules, rule_files))
    return findings_for(module, matches, path, source=source.encode("utf-8"))


def refused_sites(
    source: str,
    rules: Optional[Iterable[str]] = None,
    *,
    path: str = "<string>",
    rule_files: Sequence[Path] = (),
) -> list[RefusedSite]:
    """The sites each selected rule matched structurally but refused, with the reason (what ``scan
    --show-refused`` lists); raises as :func:`rewrite_source`."""
    module = _parse(source, path)
    refusals: list[Refusal] = []
    find_all(build_module_structure(module), _rules(rules, rule_files), refusals)
    return refusals_for(module, refusals, path, source=source.encode("utf-8"))
