"""Programmatic entry points: rewrite or scan source text with the built-in (or given) rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, Union

from .dsl import Rule
from .engine import Finding, RefusedSite, analyse_source
from .rules import select_rules


@dataclass
class RewriteResult:
    code: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.findings)


Rules = Union[str, Rule, Iterable[Union[str, Rule]], None]


def _rules(rules: Rules, rule_files: Sequence[Path]) -> list[Rule]:
    """The rules named (codes, codemod names, ``fast``, ``all``) or given (``Rule`` objects, e.g. from
    ``select_rules``), plus those of `rule_files`; one name or rule alone counts as a list of one."""
    if rules is None:
        return select_rules(None, rule_files)
    given = [rules] if isinstance(rules, (str, Rule)) else list(rules)
    keys = [r for r in given if isinstance(r, str)]
    objects = [r for r in given if isinstance(r, Rule)]
    if len(keys) + len(objects) != len(given):
        wrong = next(r for r in given if not isinstance(r, (str, Rule)))
        raise TypeError(f"rules must be rule codes or names (str) or Rule objects, got {type(wrong).__name__}")
    selected = select_rules(keys, rule_files) if keys or rule_files else []
    return objects + [r for r in selected if all(r is not o for o in objects)]


def rewrite_source(
    source: str,
    rules: Rules = None,
    *,
    path: str = "<string>",
    rule_files: Sequence[Path] = (),
) -> RewriteResult:
    """Apply rules (codes like ``ADP005`` or codemod names, ``"fast"`` or ``"all"``, or ``Rule`` objects such as
    ``select_rules`` returns; None = ``"fast"``, the built-in rules whose kernels are faster by default, as
    ``rewrite`` without ``--rules``) to source text.

    Raises ``libcst.ParserSyntaxError`` for source that does not parse, and
    :class:`adopter_codemods.files.SourceError` for nesting too deep for LibCST's parser (checked without crashing).
    """
    analysis = analyse_source(source, _rules(rules, rule_files), path)
    outcome = analysis.rewrite()
    if not outcome.applied:
        return RewriteResult(source)  # byte-identical, also where LibCST's str round trip is not (a leading BOM)
    findings = analysis.findings(outcome.applied)  # the first round's (positions in the input)
    # LibCST drops the BOM of str input (only bytes input keeps it, in `Module.bytes`): put the text's own back.
    bom = "\ufeff" if source.startswith("\ufeff") else ""
    return RewriteResult(bom + outcome.module.code, findings)


def scan_source(
    source: str,
    rules: Rules = None,
    *,
    path: str = "<string>",
    rule_files: Sequence[Path] = (),
) -> list[Finding]:
    """Findings of every selected rule, each judged on the unmodified source; raises as :func:`rewrite_source`."""
    return analyse_source(source, _rules(rules, rule_files), path).findings()


def refused_sites(
    source: str,
    rules: Rules = None,
    *,
    path: str = "<string>",
    rule_files: Sequence[Path] = (),
) -> list[RefusedSite]:
    """The sites each selected rule matched structurally but refused, with the reason (what ``scan
    --show-refused`` lists); raises as :func:`rewrite_source`."""
    return analyse_source(source, _rules(rules, rule_files), path, with_refusals=True).refused()
