"""Fixit 2 lint rules: one per Adopter rule, generated from the rule registry.

Enable them all with ``[tool.fixit] enable = ["adopter_codemods.lint"]``, or one with
``"adopter_codemods.lint:FuseDropoutLN"``. Each rule depends on
:class:`~adopter_codemods.provider.ModelStructureProvider`, so the model structure is computed once per file for all
of them, and reports each finding at its first matched statement.

Autofix: a rewrite edits ``__init__`` and ``forward`` together and adds ``import adopter_kernels``, so the fix
replaces the whole ``Module``. Fixit applies one replacement per node and run, so every Adopter finding of a file
carries the *same* fix: the file rewritten by all Adopter rules enabled for it (computed once). ``fixit fix``
therefore applies every Adopter rewrite of a file in one run, and accepting any one finding's fix accepts them all.
A site silenced with ``# lint-ignore: <RuleName>`` (or ``# noqa: <CODE>``) on or above its reported statement is
neither reported nor rewritten by the fix: the engine leaves it out (:mod:`adopter_codemods.suppression`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional, Union

import libcst as cst
from fixit import Invalid, LintRule, Valid
from libcst.metadata import CodePosition, CodeRange, PositionProvider

from ..dsl import Rule
from ..engine import Finding, find_all, findings_for, rewrite_module
from ..provider import ModelStructureProvider
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
    findings: Optional[list[list[Finding]]] = None  # per linter, silenced ones removed
    fix: Optional[cst.Module] = None

    def resolve(self) -> None:
        """Findings of every registered rule and the combined fix; runs once, after every rule has registered.
        Suppressed sites (``# noqa``, ``# lint-ignore``, see :mod:`adopter_codemods.suppression`) are left out of
        both by the engine, so the fix never rewrites a silenced site."""
        if self.findings is not None:
            return
        positions = self.linters[0].metadata[PositionProvider]
        self.findings = [findings_for(self.module, find_all(self.structure, [rule]), "", positions) for rule in self.rules]
        if any(self.findings):
            rewritten = rewrite_module(self.module, self.rules, self.structure).module
            self.fix = rewritten if rewritten.code != self.module.code else None


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
        METADATA_DEPENDENCIES = (PositionProvider, ModelStructureProvider)
        TAGS = {"performance", "adopter"}
        VALID = valid
        INVALID = invalid

        def visit_Module(self, node: cst.Module) -> None:
            structure = self.get_metadata(ModelStructureProvider, node)
            state = _FILES.setdefault(id(node), _FileState(node, structure))
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
                        f"{f.code} {f.message}",
                        position=CodeRange(CodePosition(f.line, f.col - 1), CodePosition(f.end_line, f.end_col - 1)),
                        replacement=state.fix if f.fixable else None,
                    )
            finally:
                state.pending -= 1
                if state.pending == 0:
                    del _FILES[id(original_node)]

    AdopterRule.__name__ = AdopterRule.__qualname__ = rule.name
    AdopterRule.__module__ = __name__
    AdopterRule.__doc__ = rule_doc(rule) or f"{rule.code} {rule.name}: {rule.summary}"
    return AdopterRule


for _rule in builtin_rules():
    globals()[_rule.name] = _lint_rule(_rule)

__all__ = [r.name for r in builtin_rules()]
