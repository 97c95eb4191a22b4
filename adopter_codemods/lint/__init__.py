"""Fixit 2 lint rules: one per Adopter rule, generated from the rule registry.

Enable them all with ``[tool.fixit] enable = ["adopter_codemods.lint"]``, or one with
``"adopter_codemods.lint:FuseDropoutLN"``. The rules linting a file share one state (keyed by the module): the model
structure is built once per file for all of them, matched once for all, and each rule reports its findings at
their first matched statement.

Autofix: a rewrite edits ``__init__`` and ``forward`` together and adds ``import adopter_kernels``, so the fix
replaces the whole ``Module``: the file rewritten by all Adopter rules enabled for it (computed once). Fixit
applies one replacement per node and run, and renders a diff of the whole module for every finding carrying one,
so the fix rides on the first finding of the file only (the others say "(autofix: the fix of line N)"): ``fixit
fix --automatic`` applies every Adopter rewrite of a file in one run, and interactive ``fixit fix`` asks once per
file. Under ``fixit lint`` without ``--diff``, which would only print "(has autofix)" for it, no fix is built: the
fixable findings say "(fixable: fixit fix)" instead (:func:`~adopter_codemods.lint.mode.lint_without_diff`).
A site silenced with ``# lint-ignore: <RuleName>`` (or ``# noqa: <CODE>``) on or above its reported statement is
neither reported nor rewritten by the fix: the engine leaves it out (:mod:`adopter_codemods.suppression`).

Speed (docs/PERFORMANCE.md, ``benchmarks/bench_fixit.py``): the rules declare no metadata dependency at all.
``LintRule`` declares ``PositionProvider`` (it renders the whole module; every report here passes its position,
computed by :func:`~adopter_codemods.positions.statement_positions`), Fixit adds ``ParentNodeProvider`` to every rule
(a full extra visit, for ``# lint-ignore`` look-ups above the reported node: every report here is on the ``Module``,
for which Fixit only reads the module header, and the engine judges suppression comments itself), and LibCST 1.9
resolves a non-batchable provider such as :class:`~adopter_codemods.provider.ModelStructureProvider` together with
an empty batched visit of the whole module: each of the three cost about half a parse per file. Positions use the
bytes Fixit parsed (as ``scan`` does), and under ``fixit lint`` the collector is paused during Fixit's walk.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import ClassVar, Optional, Union

import libcst as cst
from fixit import Invalid, LintRule, Valid
from fixit.engine import LintRunner
from libcst.metadata import CodePosition, CodeRange

from ..dsl import Rule
from ..engine import GUARDED_NOTE, Finding, analyse
from ..gc_pause import CollectorHold
from ..rules import builtin_rules, rule_doc
from .mode import lint_without_diff

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"  # source checkouts only


@dataclass
class _FileState:
    """What the Adopter rules linting one file share; dropped when the last of them leaves the module."""

    module: cst.Module
    lint_only: bool  # `fixit lint` without `--diff`: the fix would go unused, so it is not built
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
        runner = _runner(self.module)
        source = runner.source if runner is not None and isinstance(runner.source, bytes) else None
        # The linted file's path: bases imported from other files are resolved from it.
        analysis = analyse(self.module, self.rules, str(runner.path) if runner else None, source=source)
        found = analysis.findings()  # one positions pass for all
        self.findings = [[f for f in found if f.code == rule.code] for rule in self.rules]
        fixable = [f for f in found if f.fixable]
        if fixable and not self.lint_only:
            outcome = analysis.rewrite()
            if outcome.rounds:
                self.fix, self.fix_at = outcome.module, fixable[0]

    def suffix(self, finding: Finding) -> str:
        """What a finding's message says of the fix; the one carrying it gets Fixit's "(has autofix)"."""
        if not finding.fixable or finding is self.fix_at:
            return ""
        if self.lint_only:
            return " (fixable: fixit fix)"
        return f" (autofix: the fix of line {self.fix_at.line})" if self.fix_at else ""


def _runner(module: cst.Module) -> Optional[LintRunner]:
    """Fixit's ``LintRunner`` of `module`, for the bytes it parsed (which place the reported statements faster, as
    in ``scan``) and the file's path: Fixit hands a rule the tree only, so take it from up the stack, if it holds
    this very module."""
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _COLLECT_VIOLATIONS:
            runner = frame.f_locals.get("self")
            return runner if isinstance(runner, LintRunner) and runner.module is module else None
        frame = frame.f_back
    return None


_COLLECT_VIOLATIONS = LintRunner.collect_violations.__code__

# Keyed by id(module); the state holds the module, so the id stays valid until the entry is removed.
_FILES: dict[int, _FileState] = {}
# Under `fixit lint` the collector is paused from the first Adopter rule's visit of a module to the last one's
# leave: Fixit's walk in between builds a new node per node, and each full collection traverses the parsed module
# (docs/PERFORMANCE.md). Only there: that command exits when done, should a rule's exception skip the resume.
_COLLECTOR = CollectorHold()


def _cases(rule: Rule) -> tuple[list[Union[str, Valid]], list[Union[str, Invalid]]]:
    """Fixit test cases from the rule's fixtures: negatives are VALID, positives INVALID with the golden output.
    Fixit runs a case without its path, so a positive case that needs a package next to it (a layer factory in
    another file, ADP007's adp007_layers/) is left out: nothing would be found."""
    valid: list[Union[str, Valid]] = []
    invalid: list[Union[str, Invalid]] = []
    for case in sorted(FIXTURES.glob(f"{rule.code}_*/*.py")):
        if case.name.endswith(".expected.py"):
            continue
        source = case.read_text(encoding="utf-8")
        expected = case.with_name(case.stem + ".expected.py")
        neighbours = [p.parent.name for p in case.parent.glob("*/__init__.py")]
        if case.name.startswith("neg_"):
            valid.append(Valid(source))
        elif any(f"from {name} import" in source or f"import {name}" in source for name in neighbours):
            continue
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
                lint_only = lint_without_diff()
                if lint_only:
                    _COLLECTOR.begin(id(node))
                state = _FILES[id(node)] = _FileState(node, lint_only)
            state.linters.append(self)
            state.rules.append(self.RULE)
            state.pending += 1

        def leave_Module(self, original_node: cst.Module) -> None:
            state = _FILES[id(original_node)]
            try:
                state.resolve()
                assert state.findings is not None
                for f in state.findings[state.linters.index(self)]:
                    self.report(
                        original_node,
                        f"{f.code} {f.message}{' [' + GUARDED_NOTE + ']' if f.certainty == 'guarded' else ''}"
                        f"{state.suffix(f)}",
                        position=CodeRange(CodePosition(f.line, f.col - 1), CodePosition(f.end_line, f.end_col - 1)),
                        replacement=state.fix if f is state.fix_at else None,
                    )
            finally:
                state.pending -= 1
                if state.pending == 0:
                    del _FILES[id(original_node)]
                    _COLLECTOR.end(id(original_node))

    AdopterRule.METADATA_DEPENDENCIES = ()  # undo Fixit's __init_subclass__, which adds ParentNodeProvider
    AdopterRule.__name__ = AdopterRule.__qualname__ = rule.name
    AdopterRule.__module__ = __name__
    AdopterRule.__doc__ = rule_doc(rule) or f"{rule.code} {rule.name}: {rule.summary}"
    return AdopterRule


for _rule in builtin_rules():
    globals()[_rule.name] = _lint_rule(_rule)

__all__ = [r.name for r in builtin_rules()]
