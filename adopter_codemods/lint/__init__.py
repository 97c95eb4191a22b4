"""Fixit 2 lint rules: one per Adopter rule, generated from the rule registry.

Enable them all with ``[tool.fixit] enable = ["adopter_codemods.lint"]``, or one with
``"adopter_codemods.lint:FuseDropoutLN"``. The rules linting a file share one state (keyed by the module): the model
structure is built once per file for all of them, matched once for all, and each rule reports its findings at
their first matched statement.

Autofix: a rewrite edits ``__init__`` and ``forward`` together and adds ``import adopter_kernels``, so the fix
replaces the whole ``Module``: the file rewritten by all Adopter rules enabled for it (computed once). Fixit
applies one replacement per node and run, and renders a diff of the whole module for every finding carrying one,
so the fix rides on the first finding of the file only (the others say "see the fix of line N"): ``fixit fix
--automatic`` applies every Adopter rewrite of a file in one run, and interactive ``fixit fix`` asks once per file.
A site silenced with ``# lint-ignore: <RuleName>`` (or ``# noqa: <CODE>``) on or above its reported statement is
neither reported nor rewritten by the fix: the engine leaves it out (:mod:`adopter_codemods.suppression`).

Speed (docs/PERFORMANCE.md, ``benchmarks/bench_fixit.py``): the rules declare no metadata dependency at all.
``LintRule`` declares ``PositionProvider`` (it renders the whole module; every report here passes its position,
computed by :func:`~adopter_codemods.positions.statement_positions`), Fixit adds ``ParentNodeProvider`` to every rule
(a full extra visit, for ``# lint-ignore`` look-ups above the reported node: every report here is on the ``Module``,
for which Fixit only reads the module header, and the engine judges suppression comments itself), and LibCST 1.9
resolves a non-batchable provider such as :class:`~adopter_codemods.provider.ModelStructureProvider` together with
an empty batched visit of the whole module: each of the three cost about half a parse per file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional, Union

import libcst as cst
from fixit import Invalid, LintRule, Valid
from libcst.metadata import CodePosition, CodeRange

from ..dsl import Rule
from ..engine import Finding, find_all, findings_for, rewrite_module
from ..provider import build_module_structure
from ..report import rule_doc
from ..rules import builtin_rules
from ..structure import ModuleStructure

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"  # source checkouts only


@dataclass
class _FileState:
    """What the Adopter rules linting one file share; dropped when the last of them leaves the module."""

    module: cst.Module
    structure: ModuleStructure
    linters: list[LintRule] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    pending: int = 0
    findings: Optional[list[list[Finding]]] = None  # per linter, silenced ones left out by the engine
    fix: Optional[cst.Module] = None
    fix_at: Optional[Finding] = None  # the finding carrying the fix

    def resolve(self) -> None:
        """Findings of every registered rule and the combined fix; runs once, after every rule has registered.
        Suppressed sites (``# noqa``, ``# lint-ignore``, see :mod:`adopter_codemods.suppression`) are left out of
        both by the engine, so the fix never rewrites a silenced site."""
        if self.findings is not None:
            return
        matches = find_all(self.structure, self.rules)
        found = findings_for(self.module, matches, "")  # one positions pass for all
        self.findings = [[f for f in found if f.code == rule.code] for rule in self.rules]
        fixable = [f for f in found if f.fixable]
        if fixable:
            outcome = rewrite_module(self.module, self.rules, self.structure, matches)
            if outcome.rounds:
                self.fix, self.fix_at = outcome.module, fixable[0]


# Keyed by id(module); the state holds the module, so the id stays valid until the entry is removed.
_FILES: dict[int, _FileState] = {}


def _cases(rule: Rule) -> tuple[list[Union[str, Valid]], list[Union[str, Invalid]]]:
    """Fixit test cases from the rule's fixtures: negatives are VALID, positives INVALID with the golden output."""
    valid: list[Union[str, Valid]] = []
    invalid: list[Union[str, Invalid]] = []
    for case in sorted(FIXTURES.glob(f"{rule.code}_*/*.py")):
        if case.name.endswith(".expected.py"):
            continue
        source = case.read_text(encoding="utf-8")
        expected = case.with_name(case.stem + ".expected.py")
        if case.name.startswith("neg_"):
            valid.append(Valid(source))
        elif expected.exists():
            invalid.append(Invalid(source, expected_replacement=expected.read_text(encoding="utf-8")))
    return valid, invalid


def _lint_rule(rule: Rule) -> type[LintRule]:
    valid, invalid = _cases(rule)

    class AdopterRule(LintRule):
        RULE: ClassVar[Rule] = rule
        METADATA_DEPENDENCIES = ()
        TAGS = {"performance", "adopter"}
        VALID = valid
        INVALID = invalid

        @classmethod
        def get_inherited_dependencies(cls) -> frozenset[type]:  # type: ignore[override]
            # Not LintRule's PositionProvider nor Fixit's ParentNodeProvider: see the module docstring.
            return frozenset()

        def visit_Module(self, node: cst.Module) -> None:
            state = _FILES.get(id(node))
            if state is None:
                state = _FILES[id(node)] = _FileState(node, build_module_structure(node))
            state.linters.append(self)
            state.rules.append(self.RULE)
            state.pending += 1

        def leave_Module(self, original_node: cst.Module) -> None:
            state = _FILES[id(original_node)]
            try:
                state.resolve()
                assert state.findings is not None
                for f in state.findings[state.linters.index(self)]:
                    carrier = state.fix_at
                    with_fix = state.fix is not None and f is carrier
                    shared = f" (autofix: the fix of line {carrier.line})" if f.fixable and carrier and not with_fix else ""
                    self.report(
                        original_node,
                        f"{f.code} {f.message}{shared}",
                        position=CodeRange(CodePosition(f.line, f.col - 1), CodePosition(f.end_line, f.end_col - 1)),
                        replacement=state.fix if with_fix else None,
                    )
            finally:
                state.pending -= 1
                if state.pending == 0:
                    del _FILES[id(original_node)]

    AdopterRule.METADATA_DEPENDENCIES = ()  # undo Fixit's __init_subclass__, which adds ParentNodeProvider
    AdopterRule.__name__ = AdopterRule.__qualname__ = rule.name
    AdopterRule.__module__ = __name__
    AdopterRule.__doc__ = rule_doc(rule) or f"{rule.code} {rule.name}: {rule.summary}"
    return AdopterRule


for _rule in builtin_rules():
    globals()[_rule.name] = _lint_rule(_rule)

__all__ = [r.name for r in builtin_rules()]
